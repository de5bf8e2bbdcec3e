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

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diesel::PgConnection;
use tokio::sync::oneshot;

use crate::db::PgPool;
use crate::error::{ApiError, ApiResult};

/// The most reads in one group (one statement over an array of this many keys).
pub const MAX_GROUP: usize = 64;

/// Reads one group on a connection: one answer per key, in the keys' order.
pub type Load<K, V> = dyn Fn(&mut PgConnection, &[K]) -> ApiResult<Vec<ApiResult<V>>> + Send + Sync;

/// Runs one group, from taking a connection to the answers ([`ReadGroups::on_pool`]).
pub type Run<K, V> = dyn Fn(&[K]) -> ApiResult<Vec<ApiResult<V>>> + Send + Sync;

/// The queue of one kind of read.
pub struct ReadGroups<K, V> {
    lanes: usize,
    /// How long a read waits for its group's answer before it is answered 503.
    deadline: Duration,
    run: Box<Run<K, V>>,
    /// Groups whose statement ran, and the reads they answered.
    pub groups: AtomicU64,
    pub reads: AtomicU64,
    state: Mutex<State<K, V>>,
}

struct State<K, V> {
    waiting: VecDeque<(K, oneshot::Sender<ApiResult<V>>)>,
    /// The lanes that count as running, by id, with when each started its current
    /// group (or started at all).
    lanes: HashMap<u64, Instant>,
    next_lane: u64,
}

impl<K: Send + 'static, V: Send + 'static> ReadGroups<K, V> {
    /// Groups read by `load` on a connection of `pool`, taken for each group.
    pub fn on_pool(
        lanes: usize,
        deadline: Duration,
        pool: PgPool,
        load: Box<Load<K, V>>,
    ) -> ReadGroups<K, V> {
        let run = move |keys: &[K]| {
            let mut conn = crate::db::checkout(&pool)?;
            load(&mut conn, keys)
        };
        ReadGroups::new(lanes, deadline, Box::new(run))
    }

    pub fn new(lanes: usize, deadline: Duration, run: Box<Run<K, V>>) -> ReadGroups<K, V> {
        ReadGroups {
            lanes: lanes.max(1),
            deadline,
            run,
            groups: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            state: Mutex::new(State {
                waiting: VecDeque::new(),
                lanes: HashMap::new(),
                next_lane: 0,
            }),
        }
    }

    /// `(groups run, reads answered, reads waiting)`.
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.groups.load(Ordering::Relaxed),
            self.reads.load(Ordering::Relaxed),
            self.state().waiting.len() as u64,
        )
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State<K, V>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads `key` in the next group and waits for its answer.
    pub async fn read(self: &Arc<Self>, key: K) -> ApiResult<V> {
        let (done, answer) = oneshot::channel();
        let start = {
            let mut state = self.state();
            state.waiting.push_back((key, done));
            // A lane busy with one group for longer than half of what a read may
            // wait no longer counts: its connection presumably hangs (a half-open TCP
            // connection, say, which no timeout of the server ends), since a group
            // takes at most a checkout and a statement, each bounded by
            // `ORBIT_DB_TIMEOUT_MS`, a quarter of the deadline. A new lane takes the
            // queue, and the stuck one leaves when it wakes, without taking another
            // group.
            let now = Instant::now();
            let stuck = self.deadline / 2;
            state
                .lanes
                .retain(|_, since| now.duration_since(*since) < stuck);
            (state.lanes.len() < self.lanes).then(|| {
                let id = state.next_lane;
                state.next_lane += 1;
                state.lanes.insert(id, now);
                id
            })
        };
        if let Some(id) = start {
            let groups = self.clone();
            actix_web::rt::task::spawn_blocking(move || groups.lane(id));
        }
        group_answer(self.deadline, answer, "grouped read").await
    }

    /// Lane `id`: runs groups until nothing waits, or until it no longer counts.
    fn lane(&self, id: u64) {
        loop {
            let group: Vec<(K, oneshot::Sender<ApiResult<V>>)> = {
                let mut state = self.state();
                if !state.lanes.contains_key(&id) {
                    // Presumed stuck, and replaced meanwhile.
                    return;
                }
                // Reads whose request has gone (past its deadline, or its client hung
                // up) are not read.
                state.waiting.retain(|(_, done)| !done.is_closed());
                if state.waiting.is_empty() {
                    state.lanes.remove(&id);
                    return;
                }
                state.lanes.insert(id, Instant::now());
                let n = state.waiting.len().min(MAX_GROUP);
                state.waiting.drain(..n).collect()
            };
            let (keys, senders): (Vec<K>, Vec<_>) = group.into_iter().unzip();
            // A panic answers the group's reads with 500 (their senders drop) and
            // leaves the lane running for the rest.
            let answers =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.run_group(&keys)));
            let Ok(answers) = answers else {
                tracing::error!("a read group panicked");
                continue;
            };
            for (done, answer) in senders.into_iter().zip(answers) {
                // The request may have gone (its client hung up).
                let _ = done.send(answer);
            }
        }
    }

    fn run_group(&self, keys: &[K]) -> Vec<ApiResult<V>> {
        let every = |e: ApiError| keys.iter().map(|_| Err(e.clone())).collect();
        match (self.run)(keys) {
            Ok(answers) if answers.len() == keys.len() => {
                self.groups.fetch_add(1, Ordering::Relaxed);
                self.reads.fetch_add(keys.len() as u64, Ordering::Relaxed);
                answers
            }
            Ok(_) => {
                tracing::error!("a read group answered a different number of reads");
                every(ApiError::internal())
            }
            Err(e) => every(e),
        }
    }
}

/// Waits for the answer a lane sends for one request of its group (a read here, a
/// quick write in `src/quick.rs`): 503 past `deadline` (the lane may be stuck on a
/// hung connection), 500 if the lane dropped the request (it panicked).
pub async fn group_answer<T>(
    deadline: Duration,
    answer: oneshot::Receiver<ApiResult<T>>,
    what: &str,
) -> ApiResult<T> {
    match tokio::time::timeout(deadline, answer).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(_)) => {
            tracing::error!("a {what}'s group ended without an answer");
            Err(ApiError::internal())
        }
        Err(_) => {
            tracing::warn!("a {what} waited past its deadline for its group");
            Err(ApiError::unavailable())
        }
    }
}

/// A group load from a store function that reads rows by id (every answer found
/// or not; a failed statement fails the group).
pub fn by_ids<V: Send + 'static>(
    load: fn(&mut PgConnection, &[i64]) -> diesel::QueryResult<Vec<V>>,
) -> Box<Load<i64, V>> {
    Box::new(move |conn, ids| Ok(load(conn, ids)?.into_iter().map(Ok).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group whose run hangs (a connection that never answers, which no server
    /// timeout ends) stops counting as a lane once it has run for longer than a read
    /// may wait: the next read starts a new lane instead of waiting behind it.
    #[actix_web::test]
    async fn a_lane_stuck_past_the_deadline_is_replaced() {
        let (release, hang) = std::sync::mpsc::channel::<()>();
        let hang = Mutex::new(hang);
        let run = move |keys: &[u32]| {
            if keys.contains(&0) {
                let _ = hang.lock().unwrap().recv();
            }
            Ok(keys.iter().map(|k| Ok(k * 10)).collect())
        };
        let groups = Arc::new(ReadGroups::new(
            1,
            Duration::from_millis(300),
            Box::new(run),
        ));
        let stuck = actix_web::rt::spawn({
            let groups = groups.clone();
            async move { groups.read(0).await }
        });
        let stuck = stuck.await.expect("the stuck read's task");
        assert_eq!(
            stuck.unwrap_err().status,
            actix_web::http::StatusCode::SERVICE_UNAVAILABLE
        );
        // Past the deadline, the stuck lane no longer counts.
        assert_eq!(groups.read(7).await.unwrap(), 70);
        assert_eq!(groups.read(8).await.unwrap(), 80);
        release.send(()).unwrap();
        // The stuck lane, once it wakes, finishes its group (its read has gone) and
        // leaves without taking another; the new one has left too, nothing queued.
        let deadline = Instant::now() + Duration::from_secs(10);
        while groups.counts().0 < 3 || !groups.state().lanes.is_empty() {
            assert!(Instant::now() < deadline, "lanes left running");
            actix_web::rt::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(groups.counts(), (3, 3, 0));
    }
}
