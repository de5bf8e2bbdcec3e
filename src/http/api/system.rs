//! Around the API: health, readiness, the agents guide and the Prometheus metrics.

use actix_web::{get, HttpResponse};
use serde::Serialize;
use utoipa::ToSchema;

use crate::db;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::http::api::State;
use crate::http::state::AppState;
use crate::metrics::Gauges;

#[derive(Serialize, ToSchema)]
pub struct Health {
    /// `ok`.
    pub status: String,
}

/// Process liveness: answers while the process runs, without touching the database.
#[utoipa::path(tag = "System", responses((status = 200, body = Health)))]
#[get("/healthz")]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(Health {
        status: "ok".into(),
    })
}

/// Readiness: the database is reachable and every migration is applied.
#[utoipa::path(
    tag = "System",
    responses(
        (status = 200, body = Health),
        (status = 503, description = "Database unreachable or not migrated.", body = ErrorBody)
    )
)]
#[get("/readyz")]
pub async fn readyz(state: State) -> ApiResult<HttpResponse> {
    let migrated = db::read(&state.pool, |conn| {
        db::is_migrated(conn).map_err(|e| {
            tracing::warn!(error = %e, "readiness check failed");
            ApiError::unavailable().into()
        })
    })
    .await?;
    if !migrated {
        return Err(ApiError::new(
            actix_web::http::StatusCode::SERVICE_UNAVAILABLE,
            "not_migrated",
            "The database schema is not up to date.",
        ));
    }
    Ok(HttpResponse::Ok().json(Health {
        status: "ok".into(),
    }))
}

/// The guide for agents (the repository's `agents.md`).
#[utoipa::path(
    tag = "System",
    responses((status = 200, description = "Markdown guide.", content_type = "text/markdown"))
)]
#[get("/agents.md")]
pub async fn agents_md() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/markdown; charset=utf-8")
        .body(include_str!("../../../agents.md"))
}

/// The address `/metrics` is served on when `ORBIT_METRICS_BIND` is set (as
/// bound, so port 0 works in tests).
#[derive(Clone, Copy, Debug)]
pub struct MetricsListener(pub std::net::SocketAddr);

/// Who may read `/metrics` (issue 26, finding 8): with `ORBIT_METRICS_BIND`, only
/// requests on that listener, which serves nothing else; with
/// `ORBIT_METRICS_TOKEN`, only requests with that bearer token. `None` lets the
/// request through; otherwise the refusal (404 or 401, in the envelope).
pub fn gate(req: &actix_web::HttpRequest, state: &AppState) -> Option<HttpResponse> {
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
    // Two `Authorization` lines present no one token (as on the API: 401).
    let mut lines = req
        .headers()
        .get_all(actix_web::http::header::AUTHORIZATION);
    let presented = lines
        .next()
        .filter(|_| lines.next().is_none())
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
        .body(state.metrics.render(&gauges(&state)))
}

/// The gauges `/metrics` shows, read from the instance now.
fn gauges(state: &AppState) -> Gauges {
    use std::sync::atomic::Ordering::Relaxed;
    let core = &state.core;
    let pool = core.pool.state();
    Gauges {
        pool_in_use: pool.connections.saturating_sub(pool.idle_connections),
        pool_idle: pool.idle_connections,
        pool_waiting: db::POOL_WAITING.load(Relaxed),
        pool_max: core.pool.max_size(),
        quick_waiting: core.quick.waiting(),
        read_groups: core.reads.as_ref().map_or((0, 0, 0), |r| r.counts()),
        write_groups: core.commits.counts(),
        token_cache_hits: core.tokens.hits.load(Relaxed),
        token_cache_misses: core.tokens.misses.load(Relaxed),
        list_cache_hits: core.list_cache.hits.load(Relaxed),
        list_cache_misses: core.list_cache.misses.load(Relaxed),
        list_cache_usage: core.list_cache.usage(),
        long_polls_waiting: state.feed_reads.waiting.load(Relaxed),
        feed_shared_reads: state.feed_reads.shared_reads.load(Relaxed),
        feed_own_reads: state.feed_reads.own_reads.load(Relaxed),
        event_streams: (
            core.events.open.load(Relaxed),
            core.events.dropped.load(Relaxed),
            core.events.tail_reads.load(Relaxed),
            core.events.own_reads.load(Relaxed),
        ),
    }
}
