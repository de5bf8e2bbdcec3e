//! HTTP handlers, one module per resource. Handlers are thin: parse, call the
//! store inside one unit of work, shape the response.

pub mod artifacts;
pub mod assessments;
pub mod changes;
pub mod checkpoints;
pub mod contributions;
pub mod contributors;
pub mod handoffs;
pub mod leases;
pub mod members;
pub mod memory;
pub mod orbits;
pub mod problems;
pub mod responses;
pub mod system;
pub mod tasks;
pub mod types;
pub mod verbatim;

use std::sync::atomic::Ordering;

use actix_web::body::MessageBody;
use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::web::Bytes;
use actix_web::{web, HttpResponse};
use diesel::{PgConnection, QueryResult};
use serde::Serialize;

use crate::auth::{Bearer, Caller};
use crate::db::{self, TxError, TxResult};
use crate::error::{ApiError, ApiResult};
use crate::idempotency::{Gate, IdemHeader, Operation, Stored, REPLAYED_HEADER};
use crate::listcache::{self, ListKey, ListRoute, Stamp};
use crate::quick::{QuickCall, QuickKey};
use crate::state::AppState;

pub type State = web::Data<AppState>;

/// A write's result before it is stored and sent.
pub struct Reply {
    pub status: StatusCode,
    pub body: Vec<u8>,
    /// The orbit whose change feed this write advanced (wakes local long polls).
    pub orbit_id: Option<i64>,
}

impl Reply {
    pub fn new<T: Serialize>(
        status: StatusCode,
        data: &T,
        orbit_id: Option<i64>,
    ) -> TxResult<Reply> {
        let body = serde_json::to_vec(&types::Data { data }).map_err(|e| {
            tracing::error!(error = %e, "cannot serialize a response");
            TxError::Api(ApiError::internal())
        })?;
        Ok(Reply {
            status,
            body,
            orbit_id,
        })
    }

    pub fn created<T: Serialize>(data: &T, orbit_id: i64) -> TxResult<Reply> {
        Reply::new(StatusCode::CREATED, data, Some(orbit_id))
    }

    pub fn ok<T: Serialize>(data: &T, orbit_id: i64) -> TxResult<Reply> {
        Reply::new(StatusCode::OK, data, Some(orbit_id))
    }
}

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
    let body = serde_json::to_vec(&types::Data { data }).map_err(|e| {
        tracing::error!(error = %e, "cannot serialize a response");
        ApiError::internal()
    })?;
    Ok(json_response(StatusCode::OK, body))
}

/// A list page with 200.
pub fn page_json<T: Serialize>(page: &types::Page<T>) -> ApiResult<HttpResponse> {
    Ok(json_response(StatusCode::OK, page_bytes(page)?))
}

/// A list page's body.
fn page_bytes<T: Serialize>(page: &types::Page<T>) -> ApiResult<Vec<u8>> {
    serde_json::to_vec(page).map_err(|e| {
        tracing::error!(error = %e, "cannot serialize a response");
        ApiError::internal()
    })
}

/// A public read: one pool checkout (`db::read`); no token is fine, but a presented
/// token must be valid (401 otherwise), checked before `work` runs.
pub async fn public_read<T, F>(state: &AppState, bearer: Bearer, work: F) -> ApiResult<T>
where
    T: Send + 'static,
    F: FnOnce(&mut PgConnection) -> TxResult<T> + Send + 'static,
{
    let tokens = state.tokens.clone();
    db::read(&state.pool, move |conn| {
        bearer.optional(conn, &tokens)?;
        work(conn)
    })
    .await
}

/// A public list page of one orbit, through the list cache (`src/listcache.rs`): on
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
    F: FnOnce(&mut PgConnection, i64) -> QueryResult<Option<(types::Page<T>, Stamp)>>
        + Send
        + 'static,
{
    enum Read<T> {
        Hit(Bytes),
        Miss(ListKey, types::Page<T>, Stamp),
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

enum Outcome {
    Done(Reply),
    Replayed(Stored),
}

/// A committed (or replayed) write: the status and exact body bytes that were
/// stored under the key, and whether they were replayed from it.
pub struct Written {
    pub status: StatusCode,
    pub body: Vec<u8>,
    pub replayed: bool,
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

/// [`write`] for a lease-cycle write that may run as a quick write (`src/quick.rs`):
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
    let written = run_write(state, bearer, key, op, body_canonical, quick, work).await?;
    let mut resp = json_response(written.status, written.body);
    if written.replayed {
        resp.headers_mut().insert(
            header::HeaderName::from_static(REPLAYED_HEADER),
            HeaderValue::from_static("true"),
        );
    }
    Ok(resp)
}

/// `write` without the HTTP response: the same transaction, key handling, wake-ups
/// and metrics, for callers that are not REST handlers (the MCP tools). `key` is the
/// idempotency key as the caller sent it, in the header's form.
pub async fn write_value<F>(
    state: &AppState,
    bearer: Bearer,
    key: IdemHeader,
    op: &'static Operation,
    body_canonical: String,
    work: F,
) -> ApiResult<Written>
where
    F: FnMut(&mut PgConnection, &Caller, &mut Gate) -> TxResult<Reply> + Send + 'static,
{
    run_write(state, bearer, key, op, body_canonical, None, work).await
}

async fn run_write<F>(
    state: &AppState,
    bearer: Bearer,
    key: IdemHeader,
    op: &'static Operation,
    body_canonical: String,
    quick: Option<QuickCall>,
    mut work: F,
) -> ApiResult<Written>
where
    F: FnMut(&mut PgConnection, &Caller, &mut Gate) -> TxResult<Reply> + Send + 'static,
{
    let tokens = state.tokens.clone();
    let retention = state.config.idempotency_retention_hours;
    // The quick form needs a verified token (its id) and a key to claim.
    let quick = match (quick, bearer.cached(&tokens), &key.0) {
        (Some(call), Some((cache_key, token_id)), Some(Ok(k))) => {
            let claim = QuickKey {
                scope: op.scope(),
                key: k.clone(),
                fingerprint: op.fingerprint(&call.params(), &body_canonical),
                retention_hours: retention as i32,
            };
            Some((call, cache_key, token_id, claim))
        }
        _ => None,
    };
    let mut quick_done = None;
    if let Some((call, cache_key, token_id, claim)) = quick {
        let status = call.status();
        match state.quick.run(&state.pool, call, token_id, claim).await? {
            Some(row) => {
                state.metrics.quick_writes.fetch_add(1, Ordering::Relaxed);
                tokens.confirm(cache_key, token_id);
                let reply = Reply {
                    status,
                    body: row.out_body.into_bytes(),
                    orbit_id: Some(row.out_orbit),
                };
                quick_done = Some((Outcome::Done(reply), Some(row.out_revision)));
            }
            None => {
                state.metrics.quick_declined.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    let (outcome, revision) = match quick_done {
        Some(done) => done,
        None => {
            db::transact_closing(&state.pool, move |conn| {
                let caller = bearer.require(conn, &tokens)?;
                let mut gate = Gate::new(
                    op,
                    key.clone(),
                    caller.id(),
                    body_canonical.clone(),
                    retention,
                );
                match work(conn, &caller, &mut gate) {
                    Ok(reply) => {
                        let closing = gate.finish(conn, reply.status, &reply.body)?;
                        Ok((Outcome::Done(reply), closing))
                    }
                    Err(TxError::Replay(stored)) => Ok((Outcome::Replayed(stored), None)),
                    Err(e) => Err(e),
                }
            })
            .await?
        }
    };
    Ok(match outcome {
        Outcome::Done(mut reply) => {
            if let Some(revision) = revision {
                reply.body = crate::revision::fill(&reply.body, revision);
            }
            if let Some(orbit_id) = reply.orbit_id {
                state.hub.publish(orbit_id);
            }
            Written {
                status: reply.status,
                body: reply.body,
                replayed: false,
            }
        }
        Outcome::Replayed(stored) => {
            state
                .metrics
                .idempotency_replays
                .fetch_add(1, Ordering::Relaxed);
            Written {
                status: stored.status,
                body: stored.body,
                replayed: true,
            }
        }
    })
}
