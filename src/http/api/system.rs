//! Around the API: health, readiness, the agents guide and the Prometheus metrics.

use actix_web::{get, HttpResponse};
use serde::Serialize;
use utoipa::ToSchema;

use crate::db;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::http::api::State;
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

/// Prometheus metrics of this instance (text format 0.0.4).
#[utoipa::path(
    tag = "System",
    responses((status = 200, description = "Prometheus text format.", content_type = "text/plain"))
)]
#[get("/metrics")]
pub async fn metrics(state: State) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(state.metrics.render(&gauges(&state)))
}

/// The gauges `/metrics` shows, read from the instance now.
fn gauges(core: &crate::domain::Core) -> Gauges {
    use std::sync::atomic::Ordering::Relaxed;
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
    }
}
