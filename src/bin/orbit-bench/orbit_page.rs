//! The `orbit-page` scenario (issue 23): `GET /o/page-bench`, the HTML orbit page of
//! an orbit with 1,000 tasks and 10,000 changes, read by anonymous clients. The
//! load is `get_client` on that one path; the reference is `pgbench -S`
//! (`RefKind::SelectOnly`) in the same run. Target: ≥ 0.1 × `pgbench -S` at 8
//! clients, p99 < 30 ms.
//!
//! Data set (`src/bin/orbit-bench/orbit_page_seed.sql`, loaded straight into the
//! service's database like the search seed): see the file's header. A page read
//! runs the board's four columns, the pending handoffs, problems, latest
//! contributions, members and the feed on one pool checkout.

use diesel::connection::SimpleConnection;
use diesel::PgConnection;

/// The data set's SQL (also runnable with psql).
pub const SEED_SQL: &str = include_str!("orbit_page_seed.sql");

/// The page the scenario reads.
pub const PATH: &str = "/o/page-bench";

/// Loads the data set (a few seconds).
pub fn seed(conn: &mut PgConnection) -> Result<(), String> {
    conn.batch_execute(SEED_SQL)
        .map_err(|e| format!("orbit-page seed: {e}"))
}
