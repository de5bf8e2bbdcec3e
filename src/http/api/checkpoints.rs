//! Checkpoints: saved progress on a task (contract section 9.1). The unit of work
//! and the reads are `domain::checkpoints`.

use crate::http::params::Path;
use actix_web::{get, post, HttpResponse};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::auth::Bearer;
use crate::domain::checkpoints::{self, CreateCheckpoint};
use crate::domain::idempotency::{IdemHeader, IdempotencyKeyRequired};
use crate::error::ApiResult;
use crate::http::api::responses::{ReadErrors, WriteErrors};
use crate::http::api::{ok_json, page_json, write_unit, State};
use crate::http::json::Body;
use crate::model::{PageMeta, PageParams};
use crate::store::tasks::Checkpoint;

#[derive(Serialize, ToSchema)]
pub struct CheckpointData {
    pub data: Checkpoint,
}

#[derive(Serialize, ToSchema)]
pub struct CheckpointPage {
    pub data: Vec<Checkpoint>,
    pub meta: PageMeta,
}

/// Save a checkpoint (lease-protected). `sequence` counts 1, 2, 3… per task;
/// `state_hash` is the SHA-256 of the RFC 8785 canonical form of `state`.
#[utoipa::path(
    tag = "Checkpoints",
    params(("task" = i64, Path, minimum = 1), IdempotencyKeyRequired),
    request_body = CreateCheckpoint,
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 201, body = CheckpointData), WriteErrors),
)]
#[post("/tasks/{task}/checkpoints")]
pub async fn create_checkpoint(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    path: Path<i64>,
    body: Body<CreateCheckpoint>,
) -> ApiResult<HttpResponse> {
    let task_id = path.into_inner();
    let unit = checkpoints::create_unit(task_id, body.check());
    write_unit(
        &checkpoints::CREATE_CHECKPOINT,
        &state,
        bearer,
        key,
        body,
        unit,
    )
    .await
}

/// A task's checkpoints, ascending.
#[utoipa::path(
    tag = "Checkpoints",
    params(("task" = i64, Path, minimum = 1), PageParams),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = CheckpointPage), ReadErrors),
)]
#[get("/tasks/{task}/checkpoints")]
pub async fn list_checkpoints(
    state: State,
    bearer: Bearer,
    path: Path<i64>,
    query: crate::http::params::Query<PageParams>,
) -> ApiResult<HttpResponse> {
    let page = checkpoints::list(&state, query.into_inner(), bearer, path.into_inner()).await?;
    page_json(&page)
}

/// Read a checkpoint.
#[utoipa::path(
    tag = "Checkpoints",
    params(("checkpoint" = i64, Path, minimum = 1)),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = CheckpointData), ReadErrors),
)]
#[get("/checkpoints/{checkpoint}")]
pub async fn get_checkpoint(
    state: State,
    bearer: Bearer,
    path: Path<i64>,
) -> ApiResult<HttpResponse> {
    let id = path.into_inner();
    ok_json(&checkpoints::get(&state, bearer, id).await?)
}
