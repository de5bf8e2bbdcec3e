//! Prometheus metrics at `/metrics`, kept by hand in memory (per instance).
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

use actix_web::{get, HttpResponse};

use crate::api::State;

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
    /// Lease-cycle writes done in one statement (`src/quick.rs`), and those tried
    /// that way and then run through the ordinary path.
    pub quick_writes: AtomicU64,
    pub quick_declined: AtomicU64,
    /// Groups of quick writes run (each one statement and one commit).
    pub quick_groups: AtomicU64,
    pub rate_limited: [AtomicU64; 3],
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
            let mut e = self.errors.lock().unwrap_or_else(|p| p.into_inner());
            let code = if e.len() >= MAX_SERIES && !e.contains_key(code) {
                "other"
            } else {
                code
            };
            *e.entry(code.to_owned()).or_default() += 1;
        }
    }

    fn error_count(&self, code: &str) -> u64 {
        let e = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        e.get(code).copied().unwrap_or(0)
    }

    /// The Prometheus text exposition.
    pub fn render(&self, state: &crate::state::AppState) -> String {
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
        let pool = state.pool.state();
        let _ = writeln!(
            out,
            "# HELP orbit_db_pool_connections Database pool connections by state."
        );
        let _ = writeln!(out, "# TYPE orbit_db_pool_connections gauge");
        let _ = writeln!(
            out,
            "orbit_db_pool_connections{{state=\"in_use\"}} {}",
            pool.connections.saturating_sub(pool.idle_connections)
        );
        let _ = writeln!(
            out,
            "orbit_db_pool_connections{{state=\"idle\"}} {}",
            pool.idle_connections
        );
        let _ = writeln!(
            out,
            "orbit_db_pool_connections{{state=\"waiting\"}} {}",
            crate::db::POOL_WAITING.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP orbit_db_pool_max_connections Configured pool size."
        );
        let _ = writeln!(out, "# TYPE orbit_db_pool_max_connections gauge");
        let _ = writeln!(
            out,
            "orbit_db_pool_max_connections {}",
            state.pool.max_size()
        );
        let _ = writeln!(
            out,
            "# HELP orbit_quick_writes_waiting Lease-cycle writes queued for their next group."
        );
        let _ = writeln!(out, "# TYPE orbit_quick_writes_waiting gauge");
        let _ = writeln!(out, "orbit_quick_writes_waiting {}", state.quick.waiting());
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
            "Lease-cycle writes done in one statement (docs/ARCHITECTURE.md, quick writes).",
            self.quick_writes.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "orbit_quick_writes_declined_total",
            "Lease-cycle writes tried in one statement that ran through the ordinary path.",
            self.quick_declined.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "orbit_quick_write_groups_total",
            "Groups of lease-cycle writes run, each one statement and one commit.",
            self.quick_groups.load(Ordering::Relaxed),
        );
        let (groups, reads, waiting) = state.reads.as_ref().map_or((0, 0, 0), |r| r.counts());
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
            state.tokens.hits.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "orbit_token_cache_misses_total",
            "Token verifications that ran argon2.",
            state.tokens.misses.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "orbit_list_cache_hits_total",
            "Public list pages answered from the list cache after one statement showed them current.",
            state.list_cache.hits.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "orbit_list_cache_misses_total",
            "Public list pages read from the database (not cached, or no longer current).",
            state.list_cache.misses.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            "orbit_long_polls_waiting",
            "Change-feed long polls waiting for a change.",
            state.feed_reads.waiting.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "orbit_feed_shared_reads_total",
            "Change-feed reads run once per orbit and wake-up for all its waiting long polls.",
            state.feed_reads.shared_reads.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "orbit_feed_own_reads_total",
            "Change-feed reads a woken long poll ran alone (the shared read did not cover it).",
            state.feed_reads.own_reads.load(Ordering::Relaxed),
        );
        let (bytes, entries) = state.list_cache.usage();
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

/// The address `/metrics` is served on when `ORBIT_METRICS_BIND` is set (as
/// bound, so port 0 works in tests).
#[derive(Clone, Copy, Debug)]
pub struct MetricsListener(pub std::net::SocketAddr);

/// Who may read `/metrics` (issue 26, finding 8): with `ORBIT_METRICS_BIND`, only
/// requests on that listener, which serves nothing else; with
/// `ORBIT_METRICS_TOKEN`, only requests with that bearer token. `None` lets the
/// request through; otherwise the refusal (404 or 401, in the envelope).
pub fn gate(req: &actix_web::HttpRequest, state: &crate::state::AppState) -> Option<HttpResponse> {
    use crate::error::ApiError;
    use actix_web::http::StatusCode;
    let is_metrics = req.path() == "/metrics";
    if let Some(listener) = req.app_data::<actix_web::web::Data<MetricsListener>>() {
        let on_metrics_listener = req.app_config().local_addr() == listener.0;
        if is_metrics != on_metrics_listener {
            return Some(ApiError::from_status(StatusCode::NOT_FOUND).to_response());
        }
    }
    let expected = state.config.metrics_token.as_deref()?;
    if !is_metrics {
        return None;
    }
    use sha2::Digest;
    use subtle::ConstantTimeEq;
    let presented = req
        .headers()
        .get(actix_web::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .unwrap_or("");
    // Compared as digests, in constant time, so neither content nor length leaks.
    let same: bool = sha2::Sha256::digest(presented.as_bytes())
        .ct_eq(&sha2::Sha256::digest(expected.as_bytes()))
        .into();
    (!same).then(|| {
        ApiError::unauthorized("`/metrics` needs `Authorization: Bearer <ORBIT_METRICS_TOKEN>`.")
            .to_response()
    })
}

/// Prometheus metrics of this instance (text format 0.0.4).
///
/// Public by default. With `ORBIT_METRICS_TOKEN` set it needs that bearer value
/// (401 otherwise); with `ORBIT_METRICS_BIND` set it is served only on that address
/// (404 here).
#[utoipa::path(
    tag = "System",
    responses(
        (status = 200, description = "Prometheus text format.", content_type = "text/plain"),
        (status = 401, description = "`ORBIT_METRICS_TOKEN` is set and was not presented.", body = crate::error::ErrorBody),
        (status = 404, description = "`ORBIT_METRICS_BIND` is set: served on that address only.", body = crate::error::ErrorBody),
    )
)]
#[get("/metrics")]
pub async fn metrics(state: State) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(state.metrics.render(&state))
}
