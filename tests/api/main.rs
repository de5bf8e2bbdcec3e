//! One integration-test binary: real HTTP against real PostgreSQL.

mod auth;
mod changes;
mod embedded;
mod errors;
mod handoffs;
mod harness;
mod idempotency;
mod knowledge;
mod leases;
mod list_cache;
mod matrix;
mod mcp;
mod members;
mod openapi;
mod orbits;
mod protection;
mod quick;
mod read_groups;
mod reliability;
mod revisions;
mod search;
mod smoke;
mod spec;
mod work;
