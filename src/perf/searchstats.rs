//! The searched tables' statistics (`store::search_access::statistics`), read from
//! `pg_stats` at most once a minute per instance and shared by every search: how
//! the ranking statement finds each kind's matches is decided from them, without a
//! statement of its own per search.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diesel::PgConnection;

use crate::store::search_access::{self, Statistics};

/// How long a reading serves. `ANALYZE` (autovacuum's included) changes them
/// seldom, and a stale reading only makes a search slower, never wrong.
pub const REFRESH: Duration = Duration::from_secs(60);

#[derive(Default)]
pub struct SearchStats {
    last: Mutex<Option<(Instant, Arc<Statistics>)>>,
}

impl SearchStats {
    /// The statistics, read again on `conn` when the last reading is older than
    /// [`REFRESH`] (two searches at that moment may both read; either result is
    /// kept).
    pub fn get(&self, conn: &mut PgConnection) -> diesel::QueryResult<Arc<Statistics>> {
        if let Some((at, s)) = &*self.last.lock().unwrap_or_else(|e| e.into_inner()) {
            if at.elapsed() < REFRESH {
                return Ok(s.clone());
            }
        }
        let fresh = Arc::new(search_access::statistics(conn)?);
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((Instant::now(), fresh.clone()));
        Ok(fresh)
    }
}
