//! Memory records (contract section 10): the original, non-idempotent behaviour. The
//! unit of work and the list are `domain::memory`.

use crate::http::params::Path;
use actix_web::{get, post, HttpResponse};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::auth::Bearer;
use crate::domain::idempotency::IdemHeader;
use crate::domain::memory::{self, CreateMemoryRecord, MemoryQuery};
use crate::error::ApiResult;
use crate::http::api::responses::{ReadErrors, WriteErrors};
use crate::http::api::{page_json, write, State};
use crate::http::json::Body;
use crate::model::PageMeta;
use crate::store::memory::MemoryRecord;

#[derive(Serialize, ToSchema)]
pub struct MemoryRecordData {
    pub data: MemoryRecord,
}

#[derive(Serialize, ToSchema)]
pub struct MemoryRecordPage {
    pub data: Vec<MemoryRecord>,
    pub meta: PageMeta,
}

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
    path: Path<String>,
    body: Body<CreateMemoryRecord>,
) -> ApiResult<HttpResponse> {
    let reference = path.into_inner();
    write(
        &memory::CREATE_MEMORY_RECORD,
        &state,
        bearer,
        key,
        body,
        move |c, who, g, b| memory::create(c, who, g, &reference, b),
    )
    .await
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
    path: Path<String>,
    query: crate::http::params::Query<MemoryQuery>,
) -> ApiResult<HttpResponse> {
    let q = query.into_inner();
    page_json(&memory::list(&state, q, bearer, path.into_inner()).await?)
}
