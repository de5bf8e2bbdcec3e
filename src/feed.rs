//! Wake-ups for long polls of the change feed.
//!
//! Waiters subscribe to an in-process broadcast of orbit ids and hold neither a
//! database connection nor a blocking thread while they wait. A single listener
//! thread per instance runs `LISTEN orbit_changes` on its own connection and
//! forwards every notification, so a write on any instance wakes waiters on all of
//! them. Writes on this instance also wake local waiters directly after commit.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection};
use tokio::sync::broadcast;

use crate::revision::NOTIFY_CHANNEL;

/// Orbit id 0 means "every orbit" (sent after the listener reconnects, since
/// notifications may have been missed while it was away).
pub const ALL_ORBITS: i64 = 0;

#[derive(Clone)]
pub struct ChangeHub {
    tx: broadcast::Sender<i64>,
    stop: Arc<AtomicBool>,
}

impl Default for ChangeHub {
    fn default() -> Self {
        let (tx, _) = broadcast::channel(1024);
        ChangeHub {
            tx,
            stop: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl ChangeHub {
    pub fn subscribe(&self) -> broadcast::Receiver<i64> {
        self.tx.subscribe()
    }

    pub fn notify(&self, orbit_id: i64) {
        let _ = self.tx.send(orbit_id);
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
