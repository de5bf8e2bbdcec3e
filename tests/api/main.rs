//! One integration-test binary: real HTTP against real PostgreSQL.

mod harness;
mod leases;
mod smoke;
mod work;
