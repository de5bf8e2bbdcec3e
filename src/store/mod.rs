//! Queries, one module per table or aggregate. Every function takes
//! `&mut PgConnection`, so it runs alone or inside the caller's transaction.

pub mod artifacts;
pub mod changes;
pub mod contributions;
pub mod contributors;
pub mod handoffs;
pub mod memory;
pub mod orbits;
pub mod problems;
pub mod refs;
pub mod rows;
pub mod search;
pub mod search_access;
pub mod stamp;
pub mod tasks;
pub mod webhooks;
