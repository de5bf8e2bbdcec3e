//! REST handlers, one module per resource, and the response helpers they share.
//! Handlers are thin: parse, call the domain (`domain::write::run` for a write,
//! `domain::write::public_read` for a read), shape the response.

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

use actix_web::body::MessageBody;
use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::web::Bytes;
use actix_web::{web, HttpResponse};
use diesel::{PgConnection, QueryResult};
use serde::Serialize;

use crate::db::{self, TxResult};
use crate::domain::auth::{Bearer, Caller};
use crate::domain::idempotency::{Gate, IdemHeader, Operation, REPLAYED_HEADER};
pub use crate::domain::write::{public_read, Reply};
use crate::error::{ApiError, ApiResult};
use crate::http::state::AppState;
use crate::perf::listcache::{self, ListKey, ListRoute, Stamp};
use crate::perf::quick::QuickCall;

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
    let body = serde_json::to_vec(&crate::model::Data { data }).map_err(|e| {
        tracing::error!(error = %e, "cannot serialize a response");
        ApiError::internal()
    })?;
    Ok(json_response(StatusCode::OK, body))
}

/// A list page with 200.
pub fn page_json<T: Serialize>(page: &crate::model::Page<T>) -> ApiResult<HttpResponse> {
    Ok(json_response(StatusCode::OK, page_bytes(page)?))
}

/// A list page's body.
fn page_bytes<T: Serialize>(page: &crate::model::Page<T>) -> ApiResult<Vec<u8>> {
    serde_json::to_vec(page).map_err(|e| {
        tracing::error!(error = %e, "cannot serialize a response");
        ApiError::internal()
    })
}

/// A public list page of one orbit, through the list cache (`src/perf/listcache.rs`): on
/// one pool checkout, the presented token is checked as in [`public_read`], then
/// one statement reads the orbit (404 if absent), its revision and the clock; a
/// cached page whose stamp holds at them is answered as is. Otherwise `page` reads
/// the page with its stamp in one statement, and the body is kept for the next
/// reads. `params` are the list's query parameters with defaults applied.
pub async fn public_list<T, F>(
    state: &AppState,
    bearer: Bearer,
    reference: String,
    route: ListRoute,
    params: String,
    page: F,
) -> ApiResult<HttpResponse>
where
    T: Serialize + Send + 'static,
    F: FnOnce(&mut PgConnection, i64) -> QueryResult<Option<(crate::model::Page<T>, Stamp)>>
        + Send
        + 'static,
{
    enum Read<T> {
        Hit(Bytes),
        Miss(ListKey, crate::model::Page<T>, Stamp),
    }
    let tokens = state.tokens.clone();
    let cache = state.list_cache.clone();
    let read = db::read(&state.pool, move |conn| {
        bearer.optional(conn, &tokens)?;
        let orbit = listcache::probe(conn, &reference)?.ok_or(ApiError::not_found("Orbit"))?;
        let key = ListKey {
            route,
            orbit_id: orbit.id,
            params,
        };
        if let Some(body) = cache.get(&key, orbit.revision, orbit.now) {
            return Ok(Read::Hit(body));
        }
        let (rows, stamp) = page(conn, orbit.id)?.ok_or(ApiError::not_found("Orbit"))?;
        Ok(Read::Miss(key, rows, stamp))
    })
    .await?;
    match read {
        Read::Hit(body) => Ok(json_response(StatusCode::OK, body)),
        Read::Miss(key, rows, stamp) => {
            let body = Bytes::from(page_bytes(&rows)?);
            state.list_cache.put(key, stamp, body.clone());
            Ok(json_response(StatusCode::OK, body))
        }
    }
}

/// Runs an authenticated write as one transaction:
/// authenticate → `work` (lookups, permission checks, `gate.claim`, effect,
/// revision) → store the response under the key → commit.
pub async fn write<F>(
    state: &AppState,
    bearer: Bearer,
    key: IdemHeader,
    op: &'static Operation,
    body_canonical: String,
    work: F,
) -> ApiResult<HttpResponse>
where
    F: FnMut(&mut PgConnection, &Caller, &mut Gate) -> TxResult<Reply> + Send + 'static,
{
    write_quick(state, bearer, key, op, body_canonical, None, work).await
}

/// [`write`] for a lease-cycle write that may run as a quick write (`src/perf/quick.rs`):
/// with a token this instance has verified and a key, `quick` runs first, in the
/// next group of quick writes; when it declines, `work` runs exactly as in
/// [`write`], as its own unit of work (one `web::block`, one pool checkout).
pub async fn write_quick<F>(
    state: &AppState,
    bearer: Bearer,
    key: IdemHeader,
    op: &'static Operation,
    body_canonical: String,
    quick: Option<QuickCall>,
    work: F,
) -> ApiResult<HttpResponse>
where
    F: FnMut(&mut PgConnection, &Caller, &mut Gate) -> TxResult<Reply> + Send + 'static,
{
    let written =
        crate::domain::write::run(state, bearer, key, op, body_canonical, quick, work).await?;
    let mut resp = json_response(written.status, written.body);
    if written.replayed {
        resp.headers_mut().insert(
            header::HeaderName::from_static(REPLAYED_HEADER),
            HeaderValue::from_static("true"),
        );
    }
    Ok(resp)
}
