//! Reads run in groups: the requests for one kind of read that arrive while an
//! earlier group is in the database share the next group's statement.
//!
//! A single-row read costs the service far more than the row: a hop to a blocking
//! thread, a round trip to its backend and the backend's executor set-up, each with
//! its context switches. Under concurrency, reads of the same kind queue here
//! instead, and a lane (a blocking thread with one pooled connection) reads
//! everything that queued with one statement over an array of keys. An idle lane
//! runs a read at once, alone: grouping adds no wait, it only shares the round trip
//! among the reads that would otherwise have waited for a thread and a connection.
//! A read's answer comes from a statement that started after the request arrived,
//! as the ordinary path's would.

use std::sync::Arc;
use std::time::Duration;

use diesel::PgConnection;

use crate::db::PgPool;
use crate::error::ApiResult;
use crate::perf::lanes::{Lanes, Shape};

/// The most reads in one group (one statement over an array of this many keys).
pub const MAX_GROUP: usize = 64;

/// Reads one group on a connection: one answer per key, in the keys' order.
pub type Load<K, V> = dyn Fn(&mut PgConnection, &[K]) -> ApiResult<Vec<ApiResult<V>>> + Send + Sync;

/// The queue of one kind of read: one route of [`Lanes`], its groups read by one
/// statement on a connection taken for each group.
pub struct ReadGroups<K, V> {
    lanes: Arc<Lanes<(), K, V>>,
}

impl<K: Send + 'static, V: Send + 'static> ReadGroups<K, V> {
    /// Groups read by `load` on a connection of `pool`, taken for each group.
    pub fn on_pool(
        lanes: usize,
        deadline: Duration,
        pool: PgPool,
        load: Box<Load<K, V>>,
    ) -> ReadGroups<K, V> {
        let shape = Shape {
            per_route: lanes,
            borrow: 0,
            budget: 0,
            max_group: MAX_GROUP,
            deadline,
            skip_abandoned: true,
            what: "grouped read",
        };
        let run = move |_: &(), keys: &mut [K]| {
            let answers = crate::db::checkout(&pool).and_then(|mut conn| load(&mut conn, keys));
            match answers {
                Ok(answers) => answers,
                Err(e) => keys.iter().map(|_| Err(e.clone())).collect(),
            }
        };
        ReadGroups {
            lanes: Arc::new(Lanes::new(shape, Box::new(run))),
        }
    }

    /// `(groups run, reads answered, reads waiting)`.
    pub fn counts(&self) -> (u64, u64, u64) {
        self.lanes.counts()
    }

    /// Reads `key` in the next group and waits for its answer.
    pub async fn read(&self, key: K) -> ApiResult<V> {
        self.lanes.submit((), key).await
    }
}

/// A group load from a store function that reads rows by id (every answer found
/// or not; a failed statement fails the group).
pub fn by_ids<V: Send + 'static>(
    load: fn(&mut PgConnection, &[i64]) -> diesel::QueryResult<Vec<V>>,
) -> Box<Load<i64, V>> {
    Box::new(move |conn, ids| Ok(load(conn, ids)?.into_iter().map(Ok).collect()))
}
