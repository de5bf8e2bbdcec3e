//! REST handlers, one module per resource, and the helpers they share. Handlers are
//! thin: extract, call one function of `domain::<resource>` (a write's unit of work
//! through [`write`], a read directly), shape the response. The MCP tools call the
//! same domain functions (`http::mcp::tools`), writes through [`written`].

pub mod artifacts;
pub mod assessments;
pub mod changes;
pub mod checkpoints;
pub mod contributions;
pub mod contributors;
pub mod events;
pub mod handoffs;
pub mod leases;
pub mod members;
pub mod memory;
pub mod orbits;
pub mod problems;
pub mod responses;
pub mod search;
pub mod system;
pub mod tasks;
pub mod webhooks;

use actix_web::body::MessageBody;
use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use diesel::PgConnection;
use serde::Serialize;

use crate::db::TxResult;
use crate::domain::auth::{Bearer, Caller};
use crate::domain::idempotency::{Gate, IdemHeader, Operation, REPLAYED_HEADER};
pub use crate::domain::write::{public_read, Reply};
use crate::domain::write::{Unit, Written};
use crate::domain::Core;
use crate::error::ApiResult;
use crate::http::json::Body;
use crate::http::state::AppState;

pub type State = web::Data<AppState>;

pub fn json_response(status: StatusCode, body: impl MessageBody + 'static) -> HttpResponse {
    HttpResponse::build(status)
        .insert_header((
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        ))
        .body(body)
}

/// `{"data": ...}` with 200.
pub fn ok_json<T: Serialize>(data: &T) -> ApiResult<HttpResponse> {
    Ok(json_response(
        StatusCode::OK,
        crate::model::data_bytes(data)?,
    ))
}

/// A list page with 200.
pub fn page_json<T: Serialize>(page: &crate::model::Page<T>) -> ApiResult<HttpResponse> {
    Ok(json_response(
        StatusCode::OK,
        crate::model::json_bytes(page)?,
    ))
}

/// A body read through the list cache (`domain::write::public_list`), with 200.
pub fn list_json(body: web::Bytes) -> HttpResponse {
    json_response(StatusCode::OK, body)
}

/// Runs a write through `domain::write::run` (REST handlers and MCP tools alike):
/// the body's canonical form goes into the key's fingerprint, and the unit's work
/// gets the parsed body or its 422 to raise after its own 401/404/403 checks. The
/// unit's quick form, when it has one (`src/perf/quick.rs`), runs first with a
/// token this instance has verified and a key, in the next group of quick writes;
/// when it declines, the work runs as its own unit of work.
pub async fn written<T: Send + 'static>(
    op: &'static Operation,
    core: &Core,
    bearer: Bearer,
    key: IdemHeader,
    body: Body<T>,
    unit: Unit<T>,
) -> ApiResult<Written> {
    let canonical = body.canonical.clone();
    let Unit { quick, mut work } = unit;
    crate::domain::write::run(
        core,
        bearer,
        key,
        op,
        canonical,
        quick,
        move |conn, who, gate| work(conn, who, gate, body.check()),
    )
    .await
}

/// A write's answer: the stored status and body; a replay carries
/// `Idempotency-Replayed: true`.
pub fn respond(written: Written) -> HttpResponse {
    let mut resp = json_response(written.status, written.body);
    if written.replayed {
        resp.headers_mut().insert(
            header::HeaderName::from_static(REPLAYED_HEADER),
            HeaderValue::from_static("true"),
        );
    }
    resp
}

/// A REST write: [`written`], answered by [`respond`]. `unit` is built by the
/// write's `*_unit` function in its domain module (the MCP tool builds it too).
pub async fn write_unit<T: Send + 'static>(
    op: &'static Operation,
    state: &AppState,
    bearer: Bearer,
    key: IdemHeader,
    body: Body<T>,
    unit: Unit<T>,
) -> ApiResult<HttpResponse> {
    Ok(respond(written(op, state, bearer, key, body, unit).await?))
}

/// A REST write with nothing to prepare from its body and no quick form:
/// [`write_unit`] of `work`.
pub async fn write<T: Send + 'static>(
    op: &'static Operation,
    state: &AppState,
    bearer: Bearer,
    key: IdemHeader,
    body: Body<T>,
    work: impl FnMut(&mut PgConnection, &Caller, &mut Gate, ApiResult<&T>) -> TxResult<Reply>
        + Send
        + 'static,
) -> ApiResult<HttpResponse> {
    write_unit(op, state, bearer, key, body, Unit::plain(work)).await
}
