//! Wake-ups for long polls of the change feed.
//!
//! Waiters subscribe to an in-process broadcast of orbit ids and hold neither a
//! database connection nor a blocking thread while they wait. A single listener
//! thread per instance runs `LISTEN orbit_changes` on its own connection and
//! forwards every notification, so a write on any instance wakes waiters on all of
//! them. Writes on this instance also wake local waiters directly after commit.
//!
//! The `NOTIFY` is sent after the write commits, by one notifier thread per instance
//! on its own connection ([`ChangeHub::publish`]), never inside the write's
//! transaction: PostgreSQL serializes the commits of all notifying transactions of a
//! database under one lock, which would make every orbit's writes wait for each
//! other. A notification lost to a crash between commit and send only delays remote
//! long polls until their timeout; the change itself is committed and in the feed.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::sql_types::{Array, BigInt};
use diesel::{Connection, PgConnection, RunQueryDsl};
use tokio::sync::broadcast;

use crate::db::BindNext;
use crate::domain::revision::NOTIFY_CHANNEL;

/// Orbit id 0 means "every orbit" (sent after the listener reconnects, since
/// notifications may have been missed while it was away).
pub const ALL_ORBITS: i64 = 0;

/// The least time between two `NOTIFY` batches of one instance.
const NOTIFY_LINGER: Duration = Duration::from_millis(10);

#[derive(Clone)]
pub struct ChangeHub {
    tx: broadcast::Sender<i64>,
    stop: Arc<AtomicBool>,
    /// Orbits whose changes committed here and still need a `NOTIFY`.
    outbox: Arc<(Mutex<BTreeSet<i64>>, Condvar)>,
}

impl Default for ChangeHub {
    fn default() -> Self {
        let (tx, _) = broadcast::channel(1024);
        ChangeHub {
            tx,
            stop: Arc::new(AtomicBool::new(false)),
            outbox: Arc::new((Mutex::new(BTreeSet::new()), Condvar::new())),
        }
    }
}

impl ChangeHub {
    pub fn subscribe(&self) -> broadcast::Receiver<i64> {
        self.tx.subscribe()
    }

    /// Wakes this instance's waiters on `orbit_id`.
    pub fn notify(&self, orbit_id: i64) {
        let _ = self.tx.send(orbit_id);
    }

    /// After a write committed: wakes local waiters now and queues the `NOTIFY` that
    /// wakes the other instances' waiters.
    pub fn publish(&self, orbit_id: i64) {
        self.notify(orbit_id);
        let (queue, ready) = &*self.outbox;
        queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(orbit_id);
        ready.notify_one();
    }

    /// Starts the thread that sends queued notifications, coalesced, in one statement
    /// per batch.
    pub fn start_notifier(&self, database_url: String) {
        let hub = self.clone();
        std::thread::Builder::new()
            .name("orbit-notify".into())
            .spawn(move || hub.notify_loop(&database_url))
            .expect("spawn notifier thread");
    }

    fn next_batch(&self) -> Vec<i64> {
        let (queue, ready) = &*self.outbox;
        let mut q = queue.lock().unwrap_or_else(|p| p.into_inner());
        if q.is_empty() {
            q = ready
                .wait_timeout(q, Duration::from_millis(500))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        std::mem::take(&mut *q).into_iter().collect()
    }

    fn notify_loop(&self, url: &str) {
        let mut conn: Option<PgConnection> = None;
        while !self.stop.load(Ordering::Relaxed) {
            let batch = self.next_batch();
            if batch.is_empty() {
                continue;
            }
            // One reconnect per batch; a batch that still fails is dropped (remote
            // long polls then wake at their timeout).
            for _ in 0..2 {
                if conn.is_none() {
                    conn = PgConnection::establish(url).ok();
                }
                let Some(c) = conn.as_mut() else {
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                };
                let sent = crate::db::sql(
                    "SELECT pg_notify('orbit_changes', o::text) FROM unnest($1::bigint[]) AS o",
                )
                .bind::<Array<BigInt>, _>(&batch)
                .execute(c);
                match sent {
                    Ok(_) => {
                        // Under load, let the next batch gather for a moment: each
                        // batch is a transaction with its own commit (and every
                        // instance's listener wakes for it), so one per write cost
                        // a busy instance a few percent of its CPU. Remote long
                        // polls wake at most this much later; local ones are woken
                        // directly by `publish`.
                        std::thread::sleep(NOTIFY_LINGER);
                        break;
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "change notifier lost its connection");
                        conn = None;
                    }
                }
            }
        }
    }

    /// Starts the LISTEN thread for this instance.
    pub fn start_listener(&self, database_url: String) {
        let hub = self.clone();
        std::thread::Builder::new()
            .name("orbit-listen".into())
            .spawn(move || hub.listen_loop(&database_url))
            .expect("spawn listener thread");
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    fn listen_loop(&self, url: &str) {
        let mut backoff = Duration::from_millis(100);
        while !self.stop.load(Ordering::Relaxed) {
            let mut conn = match PgConnection::establish(url).and_then(|mut c| {
                c.batch_execute(&format!("LISTEN {NOTIFY_CHANNEL}"))
                    .map(|_| c)
                    .map_err(|e| diesel::ConnectionError::BadConnection(e.to_string()))
            }) {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!(error = %e, "change listener cannot connect; retrying");
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                    continue;
                }
            };
            backoff = Duration::from_millis(100);
            self.notify(ALL_ORBITS);
            let mut ticks = 0u32;
            'poll: while !self.stop.load(Ordering::Relaxed) {
                ticks = ticks.wrapping_add(1);
                // A silent network failure is only seen when we talk: ping now and then.
                if ticks.is_multiple_of(250) && conn.batch_execute("SELECT 1").is_err() {
                    break 'poll;
                }
                for item in conn.notifications_iter() {
                    match item {
                        Ok(n) => {
                            if let Ok(orbit_id) = n.payload.parse::<i64>() {
                                self.notify(orbit_id);
                            }
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, "change listener lost its connection");
                            break 'poll;
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}
