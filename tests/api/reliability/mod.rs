//! Reliability (issue 10): several `orbit-commons serve` processes on one database,
//! a SIGKILLed instance, a PostgreSQL restart and slow clients. Nothing a client was
//! told succeeded is lost or applied twice, and no two agents ever hold one task at
//! once. Every check is made afterwards from the database itself.
//!
//! Each test prints one `RELIABILITY ...` line with its figures (run with
//! `--nocapture` to see them); docs/RELIABILITY.md records the last ones.
//!
//! The tests, one story each: [`many_instances`], [`crash`], [`database_restart`],
//! [`slow_client`], [`hostile_input`], [`webhooks`]. What they stand on: [`fleet`] (instances
//! started and killed through `orbit_commons::testkit`, and one load test's
//! setting), [`load`] (the agents and their seeding) and [`audit`] (the invariants,
//! read from the database).

mod audit;
pub(crate) mod fleet;
mod load;

mod crash;
mod database_restart;
mod hostile_input;
mod many_instances;
mod slow_client;
mod webhooks;
