//! The counters and histogram of this instance, kept by hand in memory, and their
//! Prometheus text (served at `/metrics` by `http::api::system`).
//!
//! Labels are route templates, methods, statuses and error codes only: never a
//! token, a hash or a path with ids in it. Every label comes from a fixed set
//! (the route table, [`method_label`], status codes, our own error codes), and each
//! labelled family is capped at [`MAX_SERIES`] series besides, so no request can
//! make this module grow (issue 26, finding 1).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// At most this many series per labelled family; past it a new label set is
/// counted under `route="<other>"`, `method="OTHER"` (or `code="other"`). The route
/// table gives well under a thousand real combinations.
pub const MAX_SERIES: usize = 4096;

/// The longest method the service reads at all: longer ones are refused with 405
/// before any bookkeeping (`telemetry::RequestSpan`). The longest registered
/// method (`UPDATEREDIRECTREF`, RFC 4437) has 17 characters.
pub const MAX_METHOD_LEN: usize = 20;

/// The method as a label: one of the standard methods, or `OTHER`.
pub fn method_label(method: &actix_web::http::Method) -> &'static str {
    use actix_web::http::Method;
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "OTHER",
    }
}

/// Upper bounds (seconds) of the latency histogram buckets.
const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
    latency: Mutex<BTreeMap<String, Histogram>>,
    errors: Mutex<BTreeMap<String, u64>>,
    pub idempotency_replays: AtomicU64,
    /// Quick writes done in one statement (`src/perf/quick.rs`), and those tried
    /// that way and then run through the ordinary path.
    pub quick_writes: AtomicU64,
    pub quick_declined: AtomicU64,
    /// Groups of quick writes run (each one statement and one commit).
    pub quick_groups: AtomicU64,
    /// Claim passes of the webhook delivery engine (`domain::webhooks::deliver`).
    pub webhook_claim_passes: AtomicU64,
    pub rate_limited: [AtomicU64; 3],
}

/// What `/metrics` shows of the other parts of the instance, read when it is asked.
pub struct Gauges {
    pub pool_in_use: u32,
    pub pool_idle: u32,
    pub pool_waiting: u64,
    pub pool_max: u32,
    pub quick_waiting: usize,
    /// `(groups run, reads answered, reads waiting)` of the read groups.
    pub read_groups: (u64, u64, u64),
    /// `(groups run, writes answered, writes waiting)` of the grouped ordinary
    /// writes (`perf::commits`).
    pub write_groups: (u64, u64, u64),
    pub token_cache_hits: u64,
    pub token_cache_misses: u64,
    pub list_cache_hits: u64,
    pub list_cache_misses: u64,
    /// `(bytes, entries)` of the list cache.
    pub list_cache_usage: (usize, usize),
    pub long_polls_waiting: u64,
    pub feed_shared_reads: u64,
    pub feed_own_reads: u64,
    /// `(open, dropped, tail reads, own reads)` of the live event streams
    /// (`domain::events`).
    pub event_streams: (u64, u64, u64, u64),
}

/// Which limiter refused a request (index into `rate_limited`).
pub const LIMIT_TOKEN: usize = 0;
pub const LIMIT_ANON: usize = 1;
pub const LIMIT_REGISTER: usize = 2;

impl Metrics {
    pub fn observe(
        &self,
        route: &str,
        method: &str,
        status: u16,
        seconds: f64,
        error_code: Option<&str>,
    ) {
        {
            let mut r = self.requests.lock().unwrap_or_else(|p| p.into_inner());
            let mut key = (route.to_owned(), method.to_owned(), status);
            if r.len() >= MAX_SERIES && !r.contains_key(&key) {
                key = ("<other>".to_owned(), "OTHER".to_owned(), status);
            }
            *r.entry(key).or_default() += 1;
        }
        {
            let mut l = self.latency.lock().unwrap_or_else(|p| p.into_inner());
            let route = if l.len() >= MAX_SERIES && !l.contains_key(route) {
                "<other>"
            } else {
                route
            };
            let h = l.entry(route.to_owned()).or_default();
            for (i, b) in BUCKETS.iter().enumerate() {
                if seconds <= *b {
                    h.counts[i] += 1;
                }
            }
            h.sum += seconds;
            h.count += 1;
        }
        if let Some(code) = error_code {
            self.count_error(code);
        }
    }

    /// One refusal with `code`: an error response ([`Metrics::observe`]), or an MCP
    /// tool's refusal, which travels in a 200 (`http::mcp`), so a conflict counts
    /// the same whichever surface refused it.
    pub fn count_error(&self, code: &str) {
        let mut e = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        let code = if e.len() >= MAX_SERIES && !e.contains_key(code) {
            "other"
        } else {
            code
        };
        *e.entry(code.to_owned()).or_default() += 1;
    }

    fn error_count(&self, code: &str) -> u64 {
        let e = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        e.get(code).copied().unwrap_or(0)
    }

    /// The Prometheus text exposition.
    pub fn render(&self, g: &Gauges) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP orbit_http_requests_total HTTP requests by route template, method and status."
        );
        let _ = writeln!(out, "# TYPE orbit_http_requests_total counter");
        for ((route, method, status), n) in self
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "orbit_http_requests_total{{route=\"{}\",method=\"{method}\",status=\"{status}\"}} {n}",
                escape(route)
            );
        }
        let _ = writeln!(
            out,
            "# HELP orbit_http_request_duration_seconds Request latency by route template."
        );
        let _ = writeln!(out, "# TYPE orbit_http_request_duration_seconds histogram");
        for (route, h) in self
            .latency
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let route = escape(route);
            for (i, b) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "orbit_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"{b}\"}} {}",
                    h.counts[i]
                );
            }
            let _ = writeln!(
                out,
                "orbit_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(
                out,
                "orbit_http_request_duration_seconds_sum{{route=\"{route}\"}} {}",
                h.sum
            );
            let _ = writeln!(
                out,
                "orbit_http_request_duration_seconds_count{{route=\"{route}\"}} {}",
                h.count
            );
        }
        let _ = writeln!(out, "# HELP orbit_errors_total Error responses by code.");
        let _ = writeln!(out, "# TYPE orbit_errors_total counter");
        for (code, n) in self.errors.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = writeln!(out, "orbit_errors_total{{code=\"{}\"}} {n}", escape(code));
        }
        let _ = writeln!(
            out,
            "# HELP orbit_db_pool_connections Database pool connections by state."
        );
        let _ = writeln!(out, "# TYPE orbit_db_pool_connections gauge");
        let _ = writeln!(
            out,
            "orbit_db_pool_connections{{state=\"in_use\"}} {}",
            g.pool_in_use
        );
        let _ = writeln!(
            out,
            "orbit_db_pool_connections{{state=\"idle\"}} {}",
            g.pool_idle
        );
        let _ = writeln!(
            out,
            "orbit_db_pool_connections{{state=\"waiting\"}} {}",
            g.pool_waiting
        );
        let _ = writeln!(
            out,
            "# HELP orbit_db_pool_max_connections Configured pool size."
        );
        let _ = writeln!(out, "# TYPE orbit_db_pool_max_connections gauge");
        let _ = writeln!(out, "orbit_db_pool_max_connections {}", g.pool_max);
        let _ = writeln!(
            out,
            "# HELP orbit_quick_writes_waiting Quick writes queued for their next group."
        );
        let _ = writeln!(out, "# TYPE orbit_quick_writes_waiting gauge");
        let _ = writeln!(out, "orbit_quick_writes_waiting {}", g.quick_waiting);
        counter(
            &mut out,
            "orbit_lease_conflicts_total",
            "Lease acquisitions refused with 409 lease_conflict.",
            self.error_count("lease_conflict"),
        );
        counter(
            &mut out,
            "orbit_idempotency_conflicts_total",
            "Requests refused with idempotency_key_reused or idempotency_key_in_flight.",
            self.error_count("idempotency_key_reused")
                + self.error_count("idempotency_key_in_flight"),
        );
        counter(
            &mut out,
            "orbit_idempotency_replays_total",
            "Keyed writes answered from a stored response.",
            self.idempotency_replays.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "orbit_quick_writes_total",
            "Quick writes (the lease cycle, plain creations, revisions) done in one statement (docs/MECHANISMS.md).",
            self.quick_writes.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "orbit_quick_writes_declined_total",
            "Quick writes tried in one statement that ran through the ordinary path.",
            self.quick_declined.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "orbit_quick_write_groups_total",
            "Groups of quick writes run, each one statement and one commit.",
            self.quick_groups.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "orbit_webhook_claim_passes_total",
            "Claim passes of the webhook delivery engine: one per sweep, and one per burst of changes in an orbit with an ACTIVE subscription.",
            self.webhook_claim_passes.load(Ordering::Relaxed),
        );
        let (groups, writes, waiting) = g.write_groups;
        let _ = writeln!(
            out,
            "# HELP orbit_grouped_writes_waiting Ordinary-path writes queued for their orbit's next group."
        );
        let _ = writeln!(out, "# TYPE orbit_grouped_writes_waiting gauge");
        let _ = writeln!(out, "orbit_grouped_writes_waiting {waiting}");
        counter(
            &mut out,
            "orbit_write_groups_total",
            "Groups of ordinary-path writes run, each one transaction and one commit.",
            groups,
        );
        counter(
            &mut out,
            "orbit_grouped_writes_total",
            "Ordinary-path writes answered by a group.",
            writes,
        );
        let (groups, reads, waiting) = g.read_groups;
        let _ = writeln!(
            out,
            "# HELP orbit_grouped_reads_waiting Single-row reads queued for their next group."
        );
        let _ = writeln!(out, "# TYPE orbit_grouped_reads_waiting gauge");
        let _ = writeln!(out, "orbit_grouped_reads_waiting {waiting}");
        counter(
            &mut out,
            "orbit_read_groups_total",
            "Groups of single-row reads run (GET /me, anonymous task and contribution GETs), each one statement.",
            groups,
        );
        counter(
            &mut out,
            "orbit_grouped_reads_total",
            "Single-row reads answered by a group.",
            reads,
        );
        let _ = writeln!(
            out,
            "# HELP orbit_rate_limited_total Requests refused with 429, by limiter."
        );
        let _ = writeln!(out, "# TYPE orbit_rate_limited_total counter");
        for (i, scope) in ["token", "anon", "register"].iter().enumerate() {
            let _ = writeln!(
                out,
                "orbit_rate_limited_total{{limiter=\"{scope}\"}} {}",
                self.rate_limited[i].load(Ordering::Relaxed)
            );
        }
        counter(
            &mut out,
            "orbit_token_cache_hits_total",
            "Token verifications answered by the in-memory cache (no argon2).",
            g.token_cache_hits,
        );
        counter(
            &mut out,
            "orbit_token_cache_misses_total",
            "Token verifications that ran argon2.",
            g.token_cache_misses,
        );
        counter(
            &mut out,
            "orbit_list_cache_hits_total",
            "Public list pages answered from the list cache after one statement showed them current.",
            g.list_cache_hits,
        );
        counter(
            &mut out,
            "orbit_list_cache_misses_total",
            "Public list pages read from the database (not cached, or no longer current).",
            g.list_cache_misses,
        );
        gauge(
            &mut out,
            "orbit_long_polls_waiting",
            "Change-feed long polls waiting for a change.",
            g.long_polls_waiting,
        );
        counter(
            &mut out,
            "orbit_feed_shared_reads_total",
            "Change-feed reads run once per orbit and wake-up for all its waiting long polls.",
            g.feed_shared_reads,
        );
        counter(
            &mut out,
            "orbit_feed_own_reads_total",
            "Change-feed reads a woken long poll ran alone (the shared read did not cover it).",
            g.feed_own_reads,
        );
        let (open, dropped, tail_reads, own_reads) = g.event_streams;
        gauge(
            &mut out,
            "orbit_event_streams_open",
            "Live event streams open on this instance.",
            open,
        );
        counter(
            &mut out,
            "orbit_event_streams_dropped_total",
            "Event streams dropped because their client stopped reading (a full queue).",
            dropped,
        );
        counter(
            &mut out,
            "orbit_event_tail_reads_total",
            "Change-feed reads of the event tails: one per orbit and wake-up, for all its streams.",
            tail_reads,
        );
        counter(
            &mut out,
            "orbit_event_own_reads_total",
            "Change-feed reads of one event stream (its replay, or a hole it filled).",
            own_reads,
        );
        let (bytes, entries) = g.list_cache_usage;
        gauge(
            &mut out,
            "orbit_list_cache_bytes",
            "Bytes of the list cache's budget in use.",
            bytes as u64,
        );
        gauge(
            &mut out,
            "orbit_list_cache_entries",
            "Pages kept in the list cache.",
            entries as u64,
        );
        out
    }
}

fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    sample(out, name, "counter", help, value);
}

fn gauge(out: &mut String, name: &str, help: &str, value: u64) {
    sample(out, name, "gauge", help, value);
}

/// One unlabelled metric with its HELP and TYPE lines.
fn sample(out: &mut String, name: &str, kind: &str, help: &str, value: u64) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    let _ = writeln!(out, "{name} {value}");
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
