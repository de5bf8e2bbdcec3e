//! Measurement: each virtual client's record of one row, and running N of them for
//! warm-up + duration.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use diesel::{Connection, PgConnection, QueryableByName, RunQueryDsl};

use crate::client::Resp;

#[derive(Clone, Copy)]
pub struct Window {
    pub from: Instant,
    pub until: Instant,
}

impl Window {
    /// Warm-up from now, then the measured duration.
    pub fn starting_now(cfg: &RunCfg) -> Window {
        let start = Instant::now();
        Window {
            from: start + cfg.warmup,
            until: start + cfg.warmup + cfg.duration,
        }
    }

    pub fn contains(&self, at: Instant) -> bool {
        at >= self.from && at < self.until
    }
}

/// One virtual client's record of one measurement.
pub struct Rec {
    pub window: Window,
    pub latencies_us: Vec<u32>,
    pub errors: u64,
    pub kinds: BTreeMap<String, u64>,
    /// Every completed request, warm-up included (for CPU per request).
    pub all: u64,
    /// The `events` scenario's figures (subscribers, write-to-event latency, RSS).
    pub events: Option<crate::events::EventStats>,
}

impl Rec {
    pub fn new(window: Window) -> Rec {
        Rec {
            window,
            latencies_us: Vec::with_capacity(4096),
            errors: 0,
            kinds: BTreeMap::new(),
            all: 0,
            events: None,
        }
    }

    pub fn running(&self) -> bool {
        Instant::now() < self.window.until
    }

    /// Records a request that started at `t0`; only completions inside the window count.
    pub fn done(&mut self, t0: Instant, outcome: Result<(), String>) {
        let now = Instant::now();
        self.all += 1;
        if now < self.window.from || now >= self.window.until {
            return;
        }
        match outcome {
            Ok(()) => {
                let us = now.duration_since(t0).as_micros().min(u32::MAX as u128) as u32;
                self.latencies_us.push(us);
            }
            Err(kind) => {
                self.errors += 1;
                *self.kinds.entry(kind).or_default() += 1;
            }
        }
    }

    /// Checks `r` answered `expect` (and was a replay when `replay`), records it, and
    /// returns the response when it did.
    pub fn check(
        &mut self,
        t0: Instant,
        r: Result<Resp, String>,
        expect: u16,
        replay: bool,
    ) -> Option<Resp> {
        match r {
            Ok(resp) if resp.status == expect && (!replay || resp.replayed) => {
                self.done(t0, Ok(()));
                Some(resp)
            }
            Ok(resp) if resp.status == expect => {
                self.done(t0, Err("not replayed".into()));
                None
            }
            Ok(resp) => {
                self.done(t0, Err(resp.label()));
                None
            }
            Err(e) => {
                let kind = if e.contains("timed out") {
                    "timeout".to_owned()
                } else {
                    "transport error".to_owned()
                };
                self.done(t0, Err(kind));
                None
            }
        }
    }
}

pub fn percentile(sorted: &[u32], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1] as f64 / 1000.0)
}

/// Waits (at most 30 s) until no autovacuum worker runs on the server, then asks
/// for a checkpoint (ignored where the role may not). Best effort: errors are
/// ignored.
pub fn settle(admin_url: &str) {
    #[derive(QueryableByName)]
    struct Busy {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let Ok(mut conn) = PgConnection::establish(admin_url) else {
        return;
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let busy: Result<Busy, _> = diesel::sql_query(
            "SELECT count(*) AS n FROM pg_stat_activity \
             WHERE backend_type = 'autovacuum worker'",
        )
        .get_result(&mut conn);
        match busy {
            Ok(b) if b.n > 0 => std::thread::sleep(Duration::from_millis(200)),
            _ => break,
        }
    }
    let _ = diesel::sql_query("CHECKPOINT").execute(&mut conn);
}

/// Runs `clients` virtual clients concurrently for warm-up + duration. Each client
/// gets its state from `states` and returns it (so the next run continues from it).
pub async fn measure<S, F, Fut>(cfg: &RunCfg, states: Vec<S>, client: F) -> (Vec<S>, Rec)
where
    S: Send + 'static,
    F: Fn(S, Rec) -> Fut,
    Fut: std::future::Future<Output = (S, Rec)> + Send + 'static,
{
    measure_in(Window::starting_now(cfg), states, client).await
}

/// [`measure`] in a window the caller chose (and may share with other tasks).
pub async fn measure_in<S, F, Fut>(window: Window, states: Vec<S>, client: F) -> (Vec<S>, Rec)
where
    S: Send + 'static,
    F: Fn(S, Rec) -> Fut,
    Fut: std::future::Future<Output = (S, Rec)> + Send + 'static,
{
    let handles: Vec<_> = states
        .into_iter()
        .map(|s| tokio::spawn(client(s, Rec::new(window))))
        .collect();
    let mut out_states = Vec::with_capacity(handles.len());
    let mut total = Rec::new(window);
    for h in handles {
        match h.await {
            Ok((s, rec)) => {
                out_states.push(s);
                total.latencies_us.extend(rec.latencies_us);
                total.errors += rec.errors;
                total.all += rec.all;
                for (k, v) in rec.kinds {
                    *total.kinds.entry(k).or_default() += v;
                }
            }
            Err(e) => {
                total.errors += 1;
                *total
                    .kinds
                    .entry(format!("client panicked: {e}"))
                    .or_default() += 1;
            }
        }
    }
    (out_states, total)
}

pub struct RunCfg {
    pub warmup: Duration,
    pub duration: Duration,
    /// The `events` scenario's subscribers.
    pub subscribers: usize,
    /// The service's process, for its memory (the `events` scenario).
    pub service_pid: Option<u32>,
}
