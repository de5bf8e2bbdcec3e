//! The test kit: what the integration tests (`tests/api/harness.rs`), the
//! reliability tests (`tests/api/reliability/`) and the bench (`orbit-bench`) need
//! to stand up the service around real PostgreSQL, written once.
//!
//! It owns:
//! - [`pg`]: where the databases live — the server at `DATABASE_URL`, or a private
//!   cluster of this process (built on [`crate::db::embedded::Cluster`]) under the
//!   temporary directory, removed when dropped; clusters left by processes that died
//!   are removed by the next run;
//! - [`database`]: databases on that server — a migrated template, a fresh database
//!   per test cloned from it, dropping, and dropping those left by dead processes;
//! - [`process`]: spawned `orbit-commons serve` instances (spawn, wait until ready,
//!   SIGKILL, SIGTERM and wait), their logs, a free port, scratch directories;
//! - [`receiver`]: a local webhook receiver that records what arrives and answers
//!   as told (the webhook tests and the bench's `webhooks` scenario);
//! - [`Agent`]: a registered contributor as a client holds it.
//!
//! It holds no test framework (no HTTP client library, no assertions): errors are
//! returned as `String`s for the caller to `expect` or report. It is compiled into the
//! library only so that both the tests and the bench binary can use it; the service
//! itself never calls it.

pub mod database;
pub mod pg;
pub mod process;
pub mod receiver;

pub use database::Template;
pub use pg::{PgServer, PrivateCluster};
pub use process::{free_port, Scratch, Service};

/// A registered contributor as a client holds it: its id and bearer token (the
/// tests' and the bench's agents).
#[derive(Debug, Clone)]
pub struct Agent {
    pub id: i64,
    pub token: String,
}

/// A short random name part (10 hex digits), for databases, directories and keys.
pub fn short_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..10].to_owned()
}

/// Whether a process with this id runs on this machine (owners of leftovers are
/// named by pid).
pub(crate) fn process_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}
