//! Checkpoints: saved progress on a task (contract section 9.1).

use actix_web::{get, post, web, HttpResponse};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

use crate::db::TxResult;
use crate::domain::auth::{Bearer, Caller};
use crate::domain::fence::{self, Guard};
use crate::domain::idempotency::{Gate, IdemHeader, IdempotencyKeyRequired, Operation};
use crate::domain::revision::Change;
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::http::api::public_read;
use crate::http::api::responses::{ReadErrors, WriteErrors};
use crate::http::api::tasks::task_member;
use crate::http::api::{ok_json, page_json, write_quick, Reply, State};
use crate::http::json::{canonical_json, Body, Validate};
use crate::model::{PageMeta, PageParams};
use crate::perf::quick::QuickCall;
use crate::store::refs;
use crate::store::tasks::{self as store, Checkpoint};

/// The canonical form of `state` may be at most this long.
pub const MAX_STATE_BYTES: usize = 64 * 1024;

#[derive(Serialize, ToSchema)]
pub struct CheckpointData {
    pub data: Checkpoint,
}

#[derive(Serialize, ToSchema)]
pub struct CheckpointPage {
    pub data: Vec<Checkpoint>,
    pub meta: PageMeta,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateCheckpoint {
    /// The version of the lease you hold.
    #[schema(minimum = 1)]
    pub lease_version: i64,
    #[schema(min_length = 1, max_length = 4000)]
    pub summary: String,
    /// Any JSON whose RFC 8785 canonical form is at most 64 KiB.
    #[schema(value_type = Object)]
    pub state: serde_json::Value,
    /// Artifacts of the same orbit.
    pub artifact_ids: Option<Vec<i64>>,
}

impl Validate for CreateCheckpoint {
    fn validate(&self, e: &mut FieldErrors) {
        if self.lease_version < 1 {
            e.add("lease_version", "must be at least 1");
        }
        e.len("summary", &self.summary, 1, 4000);
        if canonical_json(&self.state).len() > MAX_STATE_BYTES {
            e.add("state", "its canonical JSON form must be at most 64 KiB");
        }
        if let Some(ids) = &self.artifact_ids {
            if ids.len() > 100 {
                e.add("artifact_ids", "at most 100 artifacts");
            }
        }
    }
}

pub static CREATE_CHECKPOINT: Operation =
    Operation::required("POST", "/api/v1/tasks/{task}/checkpoints");

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
    path: web::Path<i64>,
    body: Body<CreateCheckpoint>,
) -> ApiResult<HttpResponse> {
    let task_id = path.into_inner();
    let canonical = body.canonical.clone();
    // Hashed once, outside the transaction (which may be retried).
    let hashed = state_hash(&body);
    // Artifacts are checked by the ordinary path only.
    let quick = body
        .check()
        .ok()
        .filter(|v| v.artifact_ids.as_ref().is_none_or(Vec::is_empty))
        .zip(hashed.as_ref())
        .map(|(v, (state, hash))| QuickCall::Checkpoint {
            task_id,
            lease_version: v.lease_version,
            summary: v.summary.clone(),
            state: state.clone(),
            state_hash: hash.clone(),
        });
    write_quick(
        &state,
        bearer,
        key,
        &CREATE_CHECKPOINT,
        canonical,
        quick,
        move |conn, caller, gate| create(conn, caller, gate, task_id, &body, &hashed),
    )
    .await
}

/// The canonical form of a valid body's `state` and its SHA-256 (hex).
pub fn state_hash(body: &Body<CreateCheckpoint>) -> Option<(String, String)> {
    body.check().ok().map(|v| {
        let c = canonical_json(&v.state);
        let h = hex::encode(Sha256::digest(c.as_bytes()));
        (c, h)
    })
}

/// Checkpoint creation, inside `domain::write::run`'s transaction (REST and MCP). `hashed` is
/// `state_hash(body)`, computed once outside the (retried) transaction.
pub fn create(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    task_id: i64,
    body: &Body<CreateCheckpoint>,
    hashed: &Option<(String, String)>,
) -> TxResult<Reply> {
    let (orbit_id, _) = task_member(conn, task_id, caller.id())?;
    let value = body.check()?;
    let (state_canonical, state_hash) = hashed.as_ref().ok_or(ApiError::internal())?;
    let artifact_ids = value.artifact_ids.clone().unwrap_or_default();
    if !refs::artifacts_in_orbit(conn, orbit_id, &artifact_ids)? {
        return Err(
            ApiError::field("artifact_ids", "every artifact must exist in this orbit").into(),
        );
    }
    if let Some(stored) = gate.claim(conn, &[task_id])? {
        return Ok(Reply::replayed(stored));
    }
    let (task, held) = fence::guard(
        conn,
        task_id,
        caller.id(),
        value.lease_version,
        None,
        Guard::Checkpoint,
    )?;
    let mut checkpoint = store::insert_checkpoint(
        conn,
        task_id,
        orbit_id,
        held.lease_version,
        caller.id(),
        &value.summary,
        state_canonical,
        state_hash,
        &artifact_ids,
        task.now,
    )?;
    let id = checkpoint.id;
    let rev = gate.record(
        orbit_id,
        caller.id(),
        Change {
            kind: "checkpoint.created",
            entity_type: "checkpoint",
            entity_id: id,
            task_id: Some(task_id),
            summary: format!(
                "checkpoint {} of task {task_id} under lease v{}",
                checkpoint.sequence, held.lease_version
            ),
        },
    )?;
    checkpoint.orbit_revision = Some(rev);
    Reply::created(&checkpoint, orbit_id)
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
    path: web::Path<i64>,
    query: crate::http::json::Query<PageParams>,
) -> ApiResult<HttpResponse> {
    let cursor = query.into_inner().checked()?;
    let task_id = path.into_inner();
    let page = public_read(&state, bearer, move |conn| {
        crate::domain::reads::checkpoints(conn, task_id, cursor)
    })
    .await?;
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
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let id = path.into_inner();
    let checkpoint = public_read(&state, bearer, move |conn| read(conn, id)).await?;
    ok_json(&checkpoint)
}

/// A checkpoint (REST and MCP).
pub fn read(conn: &mut diesel::PgConnection, id: i64) -> TxResult<Checkpoint> {
    store::checkpoint(conn, id)?.ok_or_else(|| ApiError::not_found("Checkpoint").into())
}
