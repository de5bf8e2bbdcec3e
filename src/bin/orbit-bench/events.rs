//! The `events` scenario (issue 21): N clients run the lease cycle in the hot orbit
//! while `--subscribers` SSE streams of that orbit (`GET /orbits/{o}/events`) are
//! open on the same instance, each read by its own task on a runtime of their own
//! (one thread beside the writers', so reading 1,000 streams does not slow the
//! writers' own requests, which share the bench's single runtime thread). Two
//! shapes: [`WITHOUT`] (the same lease cycle, no stream open) and [`WITH`]; the
//! row of [`WITH`] carries the write-to-event latency (from the instant the
//! write's response arrived at its client to the instant its event arrived at a
//! subscriber, for every subscriber and every write of the window), the events
//! missed, the reconnects, and the service's RSS sampled while the streams were
//! open. The rows' requests/s and latencies are the lease cycle's own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::watch;

use crate::client::{Api, Chunks, Conn, Fail, Resp};
use crate::report::memory_kib;
use crate::scenarios::clients::lease_cycle_client;
use crate::scenarios::measure::{measure_in, Rec, RunCfg, Window};
use crate::seed::World;

pub const WITHOUT: &str = "no-subscribers";
pub const WITH: &str = "subscribers";

/// Histogram of the write-to-event latency: 10 us buckets up to 100 ms, then 1 ms
/// buckets up to 60 s; later arrivals go to the overflow (reported as the maximum).
const FINE_US: u64 = 10;
const FINE_UNTIL_US: u64 = 100_000;
const COARSE_US: u64 = 1_000;
const COARSE_UNTIL_US: u64 = 60_000_000;
const FINE: usize = (FINE_UNTIL_US / FINE_US) as usize;
const BUCKETS: usize = FINE + ((COARSE_UNTIL_US - FINE_UNTIL_US) / COARSE_US) as usize;

/// What the `events` rows report beside the lease cycle's own figures.
#[derive(Debug, Clone, Serialize, Default)]
pub struct EventStats {
    pub subscribers: usize,
    /// Writes of the window whose response carried an `orbit_revision`.
    pub writes: u64,
    /// writes × subscribers.
    pub expected_events: u64,
    /// Events of those writes that arrived at a subscriber.
    pub delivered_events: u64,
    /// Expected events that never arrived (within the grace after the window).
    pub missing_events: u64,
    /// Events that arrived before their write's response reached the writer
    /// (counted as 0 ms).
    pub before_response: u64,
    pub latency_p50_ms: Option<f64>,
    pub latency_p99_ms: Option<f64>,
    pub latency_max_ms: Option<f64>,
    /// Streams that ended (the server dropped or ended them) and were reopened
    /// with `Last-Event-ID`.
    pub reconnects: u64,
    /// The service's VmRSS: the highest sample taken while the streams were open,
    /// and the last.
    pub rss_peak_kib: Option<u64>,
    pub rss_end_kib: Option<u64>,
    /// Lease-cycle requests/s of this row over the same client count's
    /// [`WITHOUT`] row (set once both rows exist).
    pub throughput_ratio: Option<f64>,
}

/// The writes of one run: revision → the instant its response arrived.
#[derive(Default)]
pub struct WriteLog {
    writes: Mutex<HashMap<i64, Instant>>,
}

impl WriteLog {
    /// Logs a successful write's `orbit_revision` with the instant `at` its
    /// response arrived.
    pub fn wrote(&self, resp: &Resp, at: Instant) {
        if let Some(rev) = resp.json()["data"]["orbit_revision"].as_i64() {
            lock(&self.writes).insert(rev, at);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The latency histogram, shared by every subscriber (one runtime thread: the
/// lock is never contended).
struct Histogram {
    buckets: Vec<u64>,
    overflow: u64,
    count: u64,
    max_us: u64,
}

impl Histogram {
    fn new() -> Histogram {
        Histogram {
            buckets: vec![0; BUCKETS],
            overflow: 0,
            count: 0,
            max_us: 0,
        }
    }

    fn add(&mut self, us: u64) {
        self.count += 1;
        self.max_us = self.max_us.max(us);
        let i = if us < FINE_UNTIL_US {
            (us / FINE_US) as usize
        } else {
            FINE + ((us - FINE_UNTIL_US) / COARSE_US) as usize
        };
        match self.buckets.get_mut(i) {
            Some(b) => *b += 1,
            None => self.overflow += 1,
        }
    }

    /// The bucket's upper edge of quantile `q`, in ms (the maximum when it falls
    /// in the overflow).
    fn quantile_ms(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let upper = if i < FINE {
                    (i as u64 + 1) * FINE_US
                } else {
                    FINE_UNTIL_US + ((i - FINE) as u64 + 1) * COARSE_US
                };
                return Some(upper.min(self.max_us) as f64 / 1000.0);
            }
        }
        Some(self.max_us as f64 / 1000.0)
    }
}

/// What the subscribers share.
struct Shared {
    log: Arc<WriteLog>,
    window: Window,
    hist: Mutex<Histogram>,
    before_response: AtomicU64,
    reconnects: AtomicU64,
    /// The last revision each subscriber received.
    last: Vec<AtomicI64>,
}

impl Shared {
    /// Events that arrived together at `at`: matched with their writes now, or
    /// kept in `pending` when the write's response has not arrived yet.
    fn arrived(&self, revisions: &[i64], at: Instant, pending: &mut Vec<(i64, Instant)>) {
        let writes = lock(&self.log.writes);
        let mut hist = lock(&self.hist);
        for rev in revisions {
            match writes.get(rev) {
                Some(w) if self.window.contains(*w) => {
                    hist.add(at.saturating_duration_since(*w).as_micros() as u64);
                }
                Some(_) => {}
                None => pending.push((*rev, at)),
            }
        }
    }

    /// Events that arrived before their write's response (or a write outside
    /// the log, which is skipped).
    fn settle(&self, pending: &[(i64, Instant)]) {
        let writes = lock(&self.log.writes);
        let mut hist = lock(&self.hist);
        for (rev, at) in pending {
            if let Some(w) = writes.get(rev).filter(|w| self.window.contains(**w)) {
                if at < w {
                    self.before_response.fetch_add(1, Relaxed);
                }
                hist.add(at.saturating_duration_since(*w).as_micros() as u64);
            }
        }
    }
}

/// The `id:` of every complete event in `buf` (consumed), and whether the server
/// said `retry:` (it is ending the stream). Only a block's first line is looked
/// at (the service writes `id:` first, and `retry:` or a comment alone): reading
/// 1,000 streams of a busy orbit is a million events a second, on the same two
/// cores as the service.
fn parse_events(buf: &mut Vec<u8>, ids: &mut Vec<i64>) -> bool {
    let mut ending = false;
    let mut at = 0;
    for end in memchr::memmem::find_iter(buf, b"\n\n") {
        if end < at {
            // The second newline of a "\n\n\n": not a block of its own.
            continue;
        }
        let block = &buf[at..end];
        if let Some(rest) = block.strip_prefix(b"id: ") {
            let digits = rest.iter().take_while(|b| b.is_ascii_digit());
            let mut rev: i64 = 0;
            let mut any = false;
            for d in digits {
                rev = rev.saturating_mul(10).saturating_add(i64::from(d - b'0'));
                any = true;
            }
            if any {
                ids.push(rev);
            }
        } else if block.starts_with(b"retry:") {
            ending = true;
        }
        at = end + 2;
    }
    buf.drain(..at);
    ending
}

/// An open stream: its connection, with the response's head already read.
struct Stream {
    conn: Conn,
    chunks: Chunks,
}

/// Opens the stream `path` on `addr` through the load generator's lean client,
/// as the writers use: reading 1,000 streams through reqwest cost the machine
/// about 15 % more CPU (docs/PERFORMANCE.md).
async fn open(addr: &str, path: &str, last: Option<i64>) -> Result<Stream, String> {
    use tokio::io::AsyncWriteExt as _;
    let mut conn = Conn::open(addr)
        .await
        .map_err(|e| format!("events: open: {e}"))?;
    let mut request =
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n");
    if let Some(id) = last {
        request.push_str(&format!("Last-Event-ID: {id}\r\n"));
    }
    request.push_str("\r\n");
    conn.stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("events: open: {e}"))?;
    let head = match conn.read_head().await {
        Ok(h) => h,
        Err(Fail::Broken(e) | Fail::Stale(e)) => return Err(format!("events: open: {e}")),
    };
    if head.status != 200 || !head.chunked {
        let body = String::from_utf8_lossy(&conn.buf[head.len..]).into_owned();
        return Err(format!("events: open: {}: {body}", head.status));
    }
    conn.buf.drain(..head.len);
    Ok(Stream {
        conn,
        chunks: Chunks::default(),
    })
}

impl Stream {
    /// Waits for more of the stream and appends its data to `out`; false when the
    /// stream ended.
    async fn read(&mut self, out: &mut Vec<u8>) -> Result<bool, String> {
        loop {
            let used = self.chunks.decode(&self.conn.buf, out)?;
            self.conn.buf.drain(..used);
            if self.chunks.ended() {
                return Ok(false);
            }
            if used > 0 {
                return Ok(true);
            }
            if !self.conn.fill().await? {
                return Ok(false);
            }
        }
    }
}

/// The readers' runtime, shut down without waiting when the row ends (a runtime
/// may not be dropped, which waits, inside the bench's own).
struct ReadersRuntime(Option<tokio::runtime::Runtime>);

impl ReadersRuntime {
    fn handle(&self) -> tokio::runtime::Handle {
        match &self.0 {
            Some(rt) => rt.handle().clone(),
            None => tokio::runtime::Handle::current(),
        }
    }
}

impl Drop for ReadersRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// One subscriber: reads its stream as it arrives until `stop`, reopening it
/// with `Last-Event-ID` when the server ends it.
async fn subscriber(
    i: usize,
    addr: String,
    path: String,
    mut stream: Stream,
    from: i64,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut ids = Vec::new();
    let mut pending = Vec::new();
    let mut last = Some(from);
    'streams: loop {
        loop {
            let read = tokio::select! {
                _ = stop.changed() => break 'streams,
                r = stream.read(&mut buf) => r,
            };
            let at = Instant::now();
            let Ok(true) = read else { break };
            ids.clear();
            let ending = parse_events(&mut buf, &mut ids);
            if let Some(rev) = ids.last() {
                last = Some(*rev);
                shared.last[i].store(*rev, Relaxed);
                shared.arrived(&ids, at, &mut pending);
            }
            if ending {
                break;
            }
        }
        // The stream ended: reopen where it stopped.
        buf.clear();
        loop {
            if *stop.borrow() {
                break 'streams;
            }
            shared.reconnects.fetch_add(1, Relaxed);
            match open(&addr, &path, last).await {
                Ok(s) => {
                    stream = s;
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
    shared.settle(&pending);
}

/// Raises this process's open-file limit to its hard limit (the service it starts
/// inherits it) and checks it leaves room for `streams` connections on each side.
pub fn raise_open_files(streams: usize) -> Result<(), String> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return Err("cannot read the open-file limit".into());
        }
        if lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err("cannot raise the open-file limit".into());
            }
        }
    }
    let need = streams as libc::rlim_t + 512;
    if lim.rlim_cur < need {
        return Err(format!(
            "the open-file limit ({}) is too low for {streams} event streams: raise it \
             (ulimit -n {need}) or pass fewer --subscribers",
            lim.rlim_cur
        ));
    }
    Ok(())
}

pub async fn run(
    api: &Api,
    world: &World,
    shape: &str,
    clients: usize,
    cfg: &RunCfg,
) -> Result<Rec, String> {
    let orbit = world.hot_orbit.ok_or("events: no hot orbit")?;
    let subscribers = if shape == WITH { cfg.subscribers } else { 0 };
    let path = format!("/api/v1/orbits/{orbit}/events");
    let addr = api.addr().to_owned();

    // Open every stream before the writers start, from the orbit's revision now:
    // a 200 means the stream has joined the orbit's tail, so it gets every later
    // change. A few at a time.
    let from = api
        .get(&format!("/api/v1/orbits/{orbit}"), None)
        .await?
        .json()["data"]["revision"]
        .as_i64()
        .ok_or("events: no orbit revision")?;
    let readers_rt = ReadersRuntime(Some(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("bench-readers")
            .enable_all()
            .build()
            .map_err(|e| format!("events: the readers' runtime: {e}"))?,
    ));
    let on_readers = readers_rt.handle();
    let mut opened = Vec::with_capacity(subscribers);
    let mut set = tokio::task::JoinSet::new();
    let mut next = 0;
    while next < subscribers || !set.is_empty() {
        while next < subscribers && set.len() < 32 {
            let (addr, path, i) = (addr.clone(), path.clone(), next);
            set.spawn_on(
                async move { (i, open(&addr, &path, Some(from)).await) },
                &on_readers,
            );
            next += 1;
        }
        if let Some(done) = set.join_next().await {
            let (i, r) = done.map_err(|e| e.to_string())?;
            opened.push((i, r?));
        }
    }

    let log = Arc::new(WriteLog::default());
    let window = Window::starting_now(cfg);
    let shared = Arc::new(Shared {
        log: log.clone(),
        window,
        hist: Mutex::new(Histogram::new()),
        before_response: AtomicU64::new(0),
        reconnects: AtomicU64::new(0),
        last: (0..subscribers).map(|_| AtomicI64::new(from)).collect(),
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let readers: Vec<_> = opened
        .into_iter()
        .map(|(i, resp)| {
            on_readers.spawn(subscriber(
                i,
                addr.clone(),
                path.clone(),
                resp,
                from,
                shared.clone(),
                stop_rx.clone(),
            ))
        })
        .collect();
    // The service's memory while the streams are open.
    let sampler = cfg.service_pid.map(|pid| {
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            let (mut peak, mut end) = (None::<u64>, None);
            loop {
                if let Some((rss, _)) = memory_kib(pid) {
                    peak = Some(peak.map_or(rss, |p| p.max(rss)));
                    end = Some(rss);
                }
                tokio::select! {
                    _ = stop.changed() => break,
                    _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                }
            }
            (peak, end)
        })
    });

    let states: Vec<_> = (0..clients)
        .map(|i| {
            (
                api.clone(),
                world.agents[i].clone(),
                world.hot_pools[i].clone(),
                Some(log.clone()),
            )
        })
        .collect();
    let (_, mut rec) = measure_in(window, states, lease_cycle_client).await;

    // The writes of the window, and a grace for their last events to arrive.
    let (writes, top) = {
        let w = lock(&log.writes);
        let inside = w.values().filter(|at| window.contains(**at)).count() as u64;
        (inside, w.keys().copied().max().unwrap_or(0))
    };
    let grace = Instant::now() + Duration::from_secs(5);
    while subscribers > 0
        && Instant::now() < grace
        && shared.last.iter().any(|l| l.load(Relaxed) < top)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stop_tx.send(true);
    for r in readers {
        let _ = r.await;
    }
    drop(readers_rt);
    let (rss_peak_kib, rss_end_kib) = match sampler {
        Some(s) => s.await.unwrap_or((None, None)),
        None => (None, None),
    };

    let hist = lock(&shared.hist);
    let expected = writes * subscribers as u64;
    let stats = EventStats {
        subscribers,
        writes,
        expected_events: expected,
        delivered_events: hist.count,
        missing_events: expected.saturating_sub(hist.count),
        before_response: shared.before_response.load(Relaxed),
        latency_p50_ms: hist.quantile_ms(0.50),
        latency_p99_ms: hist.quantile_ms(0.99),
        latency_max_ms: (hist.count > 0).then(|| hist.max_us as f64 / 1000.0),
        reconnects: shared.reconnects.load(Relaxed),
        rss_peak_kib,
        rss_end_kib,
        throughput_ratio: None,
    };
    if subscribers > 0 {
        eprintln!(
            "  events: {subscribers} subscriber(s), {writes} writes in the window, \
             {}/{expected} events delivered, write-to-event p50 {} ms, p99 {} ms, \
             {} reconnect(s)",
            stats.delivered_events,
            crate::report::fmt_opt(stats.latency_p50_ms, 2),
            crate::report::fmt_opt(stats.latency_p99_ms, 2),
            stats.reconnects
        );
        if writes > 0 && stats.delivered_events == 0 {
            return Err("events: no event reached any subscriber".into());
        }
    }
    drop(hist);
    rec.events = Some(stats);
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_complete_events_and_keeps_the_rest() {
        let mut buf =
            b": ok\n\nid: 7\nevent: task.leased\ndata: {}\n\nid: 8\nevent: x\nda".to_vec();
        let mut ids = Vec::new();
        assert!(!parse_events(&mut buf, &mut ids));
        assert_eq!(ids, vec![7]);
        assert_eq!(buf, b"id: 8\nevent: x\nda".to_vec());
        buf.extend_from_slice(b"ta: {}\n\nretry: 1000\n\n");
        ids.clear();
        assert!(parse_events(&mut buf, &mut ids));
        assert_eq!(ids, vec![8]);
        assert!(buf.is_empty());
    }

    #[test]
    fn histogram_quantiles() {
        let mut h = Histogram::new();
        assert_eq!(h.quantile_ms(0.5), None);
        for us in 1..=100u64 {
            h.add(us * 1000);
        }
        // The upper edge of the 10 us bucket.
        let near = |h: &Histogram, q: f64, ms: f64| (h.quantile_ms(q).unwrap() - ms).abs() < 1e-9;
        assert!(near(&h, 0.50, 50.01));
        assert!(near(&h, 0.99, 99.01));
        for _ in 0..100 {
            h.add(2_500_400);
        }
        // The upper edge of the 1 ms bucket, capped by the maximum.
        assert!(near(&h, 0.75, 2500.4));
        h.add(61_000_000);
        assert_eq!(h.quantile_ms(1.0), Some(61_000.0));
    }
}
