//! Memory records (contract section 10): the original, non-idempotent behaviour. The
//! body's and the tag filter's rules, the unit of work and the list, for
//! `http::api::memory` and the MCP tools.

use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use crate::db::TxResult;
use crate::domain::access;
use crate::domain::auth::{Bearer, Caller};
use crate::domain::idempotency::{Gate, Operation};
use crate::domain::revision::Change;
use crate::domain::write::{claim, public_page, Reply};
use crate::domain::Core;
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::model::{page_problems, query_cursor, Page, Validate, MAX_PAGE};
use crate::store::memory::{self as store, MemoryRecord};

pub const MAX_TAGS: usize = 32;

pub const MAX_TAG_CHARS: usize = 64;

/// Body of `POST /api/v1/orbits/{orbit}/memory`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateMemoryRecord {
    /// Stored and returned verbatim.
    #[schema(min_length = 1, max_length = 65536)]
    pub content: String,
    /// At most 32 tags of 1..64 characters, kept as sent.
    #[schema(max_items = 32, value_type = Option<Vec<MemoryTag>>)]
    pub tags: Option<Vec<String>>,
}

/// The schema of one tag of a memory record (`tags`' items): 1..64 characters.
pub struct MemoryTag;

impl utoipa::PartialSchema for MemoryTag {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::Type::String)
            .min_length(Some(1))
            .max_length(Some(MAX_TAG_CHARS))
            .into()
    }
}

impl ToSchema for MemoryTag {}

impl Validate for CreateMemoryRecord {
    fn validate(&self, e: &mut FieldErrors) {
        e.text("content", &self.content, 1, 65536);
        if let Some(tags) = &self.tags {
            for (i, tag) in e.bounded("tags", tags, MAX_TAGS, "tags").iter().enumerate() {
                e.text(&format!("tags[{i}]"), tag, 1, MAX_TAG_CHARS);
            }
        }
    }
}

/// Memory records ignore `Idempotency-Key` (contract sections 5 and 10).
pub static CREATE_MEMORY_RECORD: Operation =
    Operation::ignored("POST", "/api/v1/orbits/{orbit}/memory");

/// Memory record creation, inside `domain::write::run`'s transaction (REST and MCP);
/// `reference` names the orbit (id or slug). Never replayed: the key is ignored.
pub fn create(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    reference: &str,
    body: ApiResult<&CreateMemoryRecord>,
) -> TxResult<Reply> {
    let orbit = access::member_orbit(conn, reference, caller.id())?;
    let value = body?;
    // A no-op for an ignored key; kept so every write reads the same way.
    claim!(gate, conn, &[orbit.id]);
    let id = store::insert(
        conn,
        orbit.id,
        caller.id(),
        &value.content,
        value.tags.as_deref().unwrap_or_default(),
    )?;
    let mut memory = store::record(conn, id)?.ok_or(ApiError::internal())?;
    memory.orbit_revision = Some(gate.record(
        orbit.id,
        caller.id(),
        Change {
            kind: "memory.created",
            entity_type: "memory",
            entity_id: id,
            task_id: None,
            summary: format!("memory record {id} created"),
        },
    )?);
    Reply::created(&memory, orbit.id)
}

/// The query of `GET /api/v1/orbits/{orbit}/memory` (and of `list_memory`).
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

impl Validate for MemoryQuery {
    fn validate(&self, e: &mut FieldErrors) {
        page_problems(e, self.limit, self.after, MAX_PAGE);
        if let Some(tag) = &self.tag {
            e.text("tag", tag, 1, MAX_TAG_CHARS);
        }
    }
}

/// An orbit's memory records, ascending by id, `tag` keeping those that carry it
/// (REST and MCP).
pub async fn list(
    core: &Core,
    q: MemoryQuery,
    bearer: Bearer,
    reference: String,
) -> ApiResult<Page<MemoryRecord>> {
    let cursor = query_cursor(&q, q.limit, q.after)?;
    public_page(
        core,
        bearer,
        cursor,
        |m: &MemoryRecord| m.id,
        move |conn, cursor| {
            let orbit = access::resolve(conn, &reference)?;
            Ok(store::records_of_orbit(
                conn,
                orbit.id,
                q.tag.as_deref(),
                cursor,
            )?)
        },
    )
    .await
}
