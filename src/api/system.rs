//! Around the API: health, readiness, the OpenAPI document, docs, the agents guide.

use actix_web::{get, HttpResponse};
use serde::Serialize;
use utoipa::ToSchema;

use crate::api::State;
use crate::db;
use crate::error::{ApiError, ApiResult, ErrorBody};

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
        .body(include_str!("../../agents.md"))
}
