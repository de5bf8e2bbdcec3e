//! Hardening (issue 26): what a hostile-input probe and a chaos run found, each
//! finding with the test that shows it fixed. docs/SECURITY.md ("Hardening") and
//! docs/RELIABILITY.md list them.
//!
//! One file per topic.

mod input;
mod long_polls;
mod lost_connections;
mod quick_declines;
mod surface;
mod tokens;
