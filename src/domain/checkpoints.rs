//! Checkpoints: saved progress on a task (contract section 9.1): the body's rules,
//! the state hash, the unit of work and the reads, for `http::api::checkpoints` and
//! the MCP tools.

use actix_web::http::StatusCode;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

use crate::db::TxResult;
use crate::domain::auth::{Bearer, Caller};
use crate::domain::fence::{self, Guard};
use crate::domain::idempotency::{Gate, Operation};
use crate::domain::marks::Marks;
use crate::domain::revision::{Change, PENDING};
use crate::domain::tasks::task_member;
use crate::domain::write::{claim, public_read, Quick, Reply, Unit};
use crate::domain::Core;
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::model::canonical::canonical_json;
use crate::model::{verbatim, Page, PageParams, Validate};
use crate::perf::quick::QuickCall;
use crate::store::refs;
use crate::store::tasks::{self as store, Checkpoint};

/// The canonical form of `state` may be at most this long.
pub const MAX_STATE_BYTES: usize = 64 * 1024;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateCheckpoint {
    /// The version of the lease you hold.
    #[schema(minimum = 1)]
    pub lease_version: i64,
    #[schema(min_length = 1, max_length = 4000)]
    pub summary: String,
    /// Any JSON whose RFC 8785 canonical form is at most 64 KiB.
    #[schema(value_type = Value)]
    pub state: serde_json::Value,
    /// Artifacts of the same orbit.
    #[schema(max_items = 100)]
    pub artifact_ids: Option<Vec<i64>>,
    /// `state`'s canonical form, made once: by the size check, kept for the hash.
    #[serde(skip)]
    canonical_state: std::sync::OnceLock<String>,
}

impl CreateCheckpoint {
    fn canonical_state(&self) -> &str {
        self.canonical_state
            .get_or_init(|| canonical_json(&self.state))
    }
}

impl Validate for CreateCheckpoint {
    fn validate(&self, e: &mut FieldErrors) {
        if self.lease_version < 1 {
            e.add("lease_version", "must be at least 1");
        }
        e.text("summary", &self.summary, 1, 4000);
        if self.canonical_state().len() > MAX_STATE_BYTES {
            e.add("state", "its canonical JSON form must be at most 64 KiB");
        }
        if let Some(ids) = &self.artifact_ids {
            verbatim::ids(e, "artifact_ids", ids);
        }
    }
}

/// The canonical form of a body's `state` and its SHA-256 (hex).
fn state_hash(value: &CreateCheckpoint) -> (String, String) {
    let c = value.canonical_state();
    let h = hex::encode(Sha256::digest(c.as_bytes()));
    (c.to_owned(), h)
}

pub static CREATE_CHECKPOINT: Operation =
    Operation::required("POST", "/api/v1/tasks/{task}/checkpoints");

/// Checkpoint creation on task `task_id`, as its REST route and MCP tool run it:
/// the state's canonical form and hash computed once, outside the (retried)
/// transaction ([`state_hash`]), then [`create`], tried first as a quick write when
/// the body is valid and names no artifacts (the ordinary path checks those;
/// [`quick_create`]).
pub fn create_unit(task_id: i64, body: ApiResult<&CreateCheckpoint>) -> Unit<CreateCheckpoint> {
    let value = body.ok();
    let hashed = value.map(state_hash);
    let quick = value
        .filter(|v| v.artifact_ids.as_ref().is_none_or(Vec::is_empty))
        .zip(hashed.as_ref())
        .map(|(value, (state, hash))| quick_create(task_id, value, state, hash));
    Unit::new(quick, move |c, who, g, b| {
        create(c, who, g, task_id, b, &hashed)
    })
}

/// Checkpoint creation, inside `domain::write::run`'s transaction. `hashed` is
/// [`state_hash`] of a valid body.
fn create(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    task_id: i64,
    body: ApiResult<&CreateCheckpoint>,
    hashed: &Option<(String, String)>,
) -> TxResult<Reply> {
    let (orbit_id, _) = task_member(conn, task_id, caller.id())?;
    let value = body?;
    let (state_canonical, state_hash) = hashed.as_ref().ok_or(ApiError::internal())?;
    let artifact_ids = value.artifact_ids.clone().unwrap_or_default();
    if !refs::artifacts_in_orbit(conn, orbit_id, &artifact_ids)? {
        return Err(
            ApiError::field("artifact_ids", "every artifact must exist in this orbit").into(),
        );
    }
    claim!(gate, conn, &[task_id]);
    let version = value.lease_version;
    let (task, held) = fence::guard(conn, task_id, caller.id(), version, None, Guard::Checkpoint)?;
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
    checkpoint.orbit_revision = Some(gate.record(orbit_id, caller.id(), created(&checkpoint))?);
    Reply::created(&checkpoint, orbit_id)
}

/// Checkpoint creation without artifacts as a quick write (`perf::quick`):
/// answered as [`create`] answers it, with marks for what the statement chooses
/// (the checkpoint's id and sequence, its orbit, the time). `state` is the
/// canonical form of `value.state`, `hash` its SHA-256 (`state_hash`).
fn quick_create(task_id: i64, value: &CreateCheckpoint, state: &str, hash: &str) -> Quick {
    let lease_version = value.lease_version;
    let summary = value.summary.clone();
    let (state, hash) = (state.to_owned(), hash.to_owned());
    Quick {
        call: QuickCall::Checkpoint {
            task_id,
            lease_version,
            summary: summary.clone(),
            state: state.clone(),
            state_hash: hash.clone(),
        },
        render: Box::new(move |actor| {
            let mut marks = Marks::default();
            let checkpoint = Checkpoint {
                id: marks.number("id"),
                task_id,
                orbit_id: marks.number("orbit_id"),
                lease_version,
                sequence: marks.number("sequence"),
                author: actor.clone(),
                summary,
                state: serde_json::value::RawValue::from_string(state).ok()?,
                state_hash: hash,
                artifact_ids: Vec::new(),
                created_at: marks.time("created_at"),
                orbit_revision: Some(PENDING),
            };
            let reply = Reply::new(StatusCode::CREATED, &checkpoint, None).ok()?;
            marks.rendered(reply, created(&checkpoint))
        }),
    }
}

/// The change of a checkpoint's creation.
pub fn created(checkpoint: &Checkpoint) -> Change<'static> {
    Change {
        kind: "checkpoint.created",
        entity_type: "checkpoint",
        entity_id: checkpoint.id,
        task_id: Some(checkpoint.task_id),
        summary: format!(
            "checkpoint {} of task {} under lease v{}",
            checkpoint.sequence, checkpoint.task_id, checkpoint.lease_version
        ),
    }
}

/// A task's checkpoints, ascending (REST and MCP).
pub async fn list(
    core: &Core,
    params: PageParams,
    bearer: Bearer,
    task_id: i64,
) -> ApiResult<Page<Checkpoint>> {
    let cursor = params.checked()?;
    public_read(core, bearer, move |conn| {
        crate::domain::reads::checkpoints(conn, task_id, cursor)
    })
    .await
}

/// A checkpoint (REST and MCP).
pub async fn get(core: &Core, bearer: Bearer, id: i64) -> ApiResult<Checkpoint> {
    public_read(core, bearer, move |conn| read(conn, id)).await
}

/// A checkpoint.
fn read(conn: &mut diesel::PgConnection, id: i64) -> TxResult<Checkpoint> {
    store::checkpoint(conn, id)?.ok_or_else(|| ApiError::not_found("Checkpoint").into())
}
