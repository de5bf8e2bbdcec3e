//! Memory records (contract section 10): the original, non-idempotent behaviour.

use actix_web::{get, post, web, HttpResponse};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::db::TxResult;
use crate::domain::access;
use crate::domain::auth::{Bearer, Caller};
use crate::domain::idempotency::{Gate, IdemHeader, Operation};
use crate::domain::revision::Change;
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::http::api::public_read;
use crate::http::api::responses::{ReadErrors, WriteErrors};
use crate::http::api::{page_json, write, Reply, State};
use crate::http::json::{Body, Validate};
use crate::model::page_bounds;
use crate::model::verbatim;
use crate::model::PageMeta;
use crate::store::memory::{self as store, MemoryRecord};

pub const MAX_TAGS: usize = 32;
pub const MAX_TAG_CHARS: usize = 64;

#[derive(Serialize, ToSchema)]
pub struct MemoryRecordData {
    pub data: MemoryRecord,
}

#[derive(Serialize, ToSchema)]
pub struct MemoryRecordPage {
    pub data: Vec<MemoryRecord>,
    pub meta: PageMeta,
}

/// Body of `POST /api/v1/orbits/{orbit}/memory`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateMemoryRecord {
    /// Stored and returned verbatim.
    #[schema(min_length = 1, max_length = 65536)]
    pub content: String,
    /// At most 32 tags of 1..64 characters, kept as sent.
    #[schema(max_items = 32)]
    pub tags: Option<Vec<String>>,
}

impl Validate for CreateMemoryRecord {
    fn validate(&self, e: &mut FieldErrors) {
        verbatim::text(e, "content", &self.content, 1, 65536);
        if let Some(tags) = &self.tags {
            if tags.len() > MAX_TAGS {
                e.add("tags", format!("at most {MAX_TAGS} tags"));
            }
            for (i, tag) in tags.iter().enumerate() {
                verbatim::text(e, &format!("tags[{i}]"), tag, 1, MAX_TAG_CHARS);
            }
        }
    }
}

/// Memory records ignore `Idempotency-Key` (contract sections 5 and 10).
pub static CREATE_MEMORY_RECORD: Operation =
    Operation::ignored("POST", "/api/v1/orbits/{orbit}/memory");

/// Create a memory record (members only).
///
/// Not idempotent, by design (the original behaviour): the `Idempotency-Key` header
/// is ignored and every request creates a new record, so a retried request creates
/// a second one. Each record is one orbit revision (`memory.created`).
#[utoipa::path(
    tag = "Memory",
    params(
        ("orbit" = String, Path, description = "Orbit id or slug."),
        ("Idempotency-Key" = Option<String>, Header,
            description = "Ignored on this route: every request creates a record."),
    ),
    request_body = CreateMemoryRecord,
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 201, body = MemoryRecordData), WriteErrors),
)]
#[post("/orbits/{orbit}/memory")]
pub async fn create_memory_record(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    path: web::Path<String>,
    body: Body<CreateMemoryRecord>,
) -> ApiResult<HttpResponse> {
    let reference = path.into_inner();
    let canonical = body.canonical.clone();
    write(
        &state,
        bearer,
        key,
        &CREATE_MEMORY_RECORD,
        canonical,
        move |conn, caller, gate| create(conn, caller, gate, &reference, &body),
    )
    .await
}

/// Memory record creation, inside `domain::write::run`'s transaction (REST and MCP).
/// `reference` is the orbit id or slug.
pub fn create(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    reference: &str,
    body: &Body<CreateMemoryRecord>,
) -> TxResult<Reply> {
    let orbit = access::resolve(conn, reference)?;
    access::require_member(conn, orbit.id, caller.id())?;
    let value = body.check()?;
    // A no-op for an ignored key; kept so every write reads the same way.
    if let Some(stored) = gate.claim(conn, &[orbit.id])? {
        return Ok(Reply::replayed(stored));
    }
    let id = store::insert(
        conn,
        orbit.id,
        caller.id(),
        &value.content,
        value.tags.as_deref().unwrap_or_default(),
    )?;
    let mut out = store::record(conn, id)?.ok_or(ApiError::internal())?;
    let rev = gate.record(
        orbit.id,
        caller.id(),
        Change {
            kind: "memory.created",
            entity_type: "memory",
            entity_id: id,
            task_id: None,
            summary: format!("memory record {id} created"),
        },
    )?;
    out.orbit_revision = Some(rev);
    Reply::created(&out, orbit.id)
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct MemoryQuery {
    /// Only records carrying this tag (exact match).
    #[param(min_length = 1, max_length = 64)]
    pub tag: Option<String>,
    /// Page size, 1..100 (default 50).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<i64>,
    /// Return records with an id greater than this.
    #[param(minimum = 0)]
    pub after: Option<i64>,
}

/// List an orbit's memory records, ascending by id.
#[utoipa::path(
    tag = "Memory",
    params(("orbit" = String, Path, description = "Orbit id or slug."), MemoryQuery),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = MemoryRecordPage), ReadErrors),
)]
#[get("/orbits/{orbit}/memory")]
pub async fn list_memory_records(
    state: State,
    bearer: Bearer,
    path: web::Path<String>,
    query: crate::http::json::Query<MemoryQuery>,
) -> ApiResult<HttpResponse> {
    let q = query.into_inner();
    let cursor = page_bounds(q.limit, q.after)?;
    check_tag(q.tag.as_deref())?;
    let reference = path.into_inner();
    let rows = public_read(&state, bearer, move |conn| {
        page(conn, &reference, q.tag.as_deref(), cursor)
    })
    .await?;
    page_json(&cursor.page(rows, |m| m.id))
}

/// The `tag` filter of the memory list (REST and MCP).
pub fn check_tag(tag: Option<&str>) -> ApiResult<()> {
    if let Some(tag) = tag {
        let mut e = FieldErrors::default();
        verbatim::text(&mut e, "tag", tag, 1, MAX_TAG_CHARS);
        e.finish()?;
    }
    Ok(())
}

/// A page of an orbit's memory records (REST and MCP).
pub fn page(
    conn: &mut diesel::PgConnection,
    reference: &str,
    tag: Option<&str>,
    cursor: crate::model::Cursor,
) -> TxResult<Vec<MemoryRecord>> {
    let orbit = access::resolve(conn, reference)?;
    Ok(store::records_of_orbit(conn, orbit.id, tag, cursor)?)
}
