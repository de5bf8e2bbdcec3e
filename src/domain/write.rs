//! The one write path: every write inside an orbit, REST or MCP, runs here as one
//! unit of work — authenticate → the operation's `work` (lookups, permission checks,
//! `gate.claim`, fence, effect, `gate.record`) → the stored response → commit —
//! first as a quick write when the operation has one (`perf::quick`). Also the one
//! public read (one pool checkout, an optional token checked first) and the one
//! way a page of an orbit goes through the list cache (`cached_page`: the API's
//! lists by `public_list`, the orbit page for people).

use std::sync::atomic::Ordering;

use actix_web::http::StatusCode;
use actix_web::web::Bytes;
use diesel::{PgConnection, QueryResult};
use serde::Serialize;

use crate::db::{self, TxResult};
use crate::domain::auth::{Bearer, Caller};
use crate::domain::idempotency::{Gate, IdemHeader, Operation, Stored};
use crate::domain::Core;
use crate::error::{ApiError, ApiResult};
use crate::model::ContributorActor;
use crate::perf::commits::Work;
use crate::perf::listcache::{self, ListKey, ListRoute, Stamp};
use crate::perf::quick::{QuickCall, QuickKey, Rendered};

/// Claims the write's Idempotency-Key (`Gate::claim`, after the write's own checks
/// and before its effect) and, for a key that already completed with the same
/// request, returns its stored response from the unit of work, replayed.
macro_rules! claim {
    ($gate:expr, $conn:expr, $params:expr) => {
        if let Some(stored) = $gate.claim($conn, $params)? {
            return Ok($crate::domain::write::Reply::replayed(stored));
        }
    };
}
pub(crate) use claim;

/// A write's result before it is stored and sent.
pub struct Reply {
    pub status: StatusCode,
    pub body: Vec<u8>,
    /// The orbit whose change feed this write advanced (wakes local long polls).
    pub orbit_id: Option<i64>,
    /// The stored response of an earlier request with the same key, replayed.
    replayed: bool,
}

impl Reply {
    pub fn new<T: Serialize>(
        status: StatusCode,
        data: &T,
        orbit_id: Option<i64>,
    ) -> TxResult<Reply> {
        let body = crate::model::data_bytes(data)?;
        Ok(Reply {
            status,
            body,
            orbit_id,
            replayed: false,
        })
    }

    /// The answer of a key that already completed with the same request
    /// (`Gate::claim`): its stored response, replayed as is, with nothing done.
    pub fn replayed(stored: Stored) -> Reply {
        Reply {
            status: stored.status,
            body: stored.body,
            orbit_id: None,
            replayed: true,
        }
    }

    pub fn created<T: Serialize>(data: &T, orbit_id: i64) -> TxResult<Reply> {
        Reply::new(StatusCode::CREATED, data, Some(orbit_id))
    }

    pub fn ok<T: Serialize>(data: &T, orbit_id: i64) -> TxResult<Reply> {
        Reply::new(StatusCode::OK, data, Some(orbit_id))
    }
}

/// A public read: one pool checkout (`db::read`); no token is fine, but a presented
/// token must be valid (401 otherwise), checked before `work` runs.
pub async fn public_read<T, F>(core: &Core, bearer: Bearer, work: F) -> ApiResult<T>
where
    T: Send + 'static,
    F: FnOnce(&mut PgConnection) -> TxResult<T> + Send + 'static,
{
    let tokens = core.tokens.clone();
    db::read(&core.pool, move |conn| {
        bearer.optional(conn, &tokens)?;
        work(conn)
    })
    .await
}

/// A public list: [`public_read`] of `rows` (the store's `cursor.fetch()` rows), cut
/// to one page by `cursor`, `next_after` being `key_of` the last row kept.
pub async fn public_page<T, F>(
    core: &Core,
    bearer: Bearer,
    cursor: crate::model::Cursor,
    key_of: fn(&T) -> i64,
    rows: F,
) -> ApiResult<crate::model::Page<T>>
where
    T: Send + 'static,
    F: FnOnce(&mut PgConnection, crate::model::Cursor) -> TxResult<Vec<T>> + Send + 'static,
{
    let rows = public_read(core, bearer, move |conn| rows(conn, cursor)).await?;
    Ok(cursor.page(rows, key_of))
}

/// A public list page of one orbit, through the list cache ([`cached_page`]): the
/// presented token is checked as in [`public_read`]; on a miss, `page` reads the
/// page with its stamp in one statement, and the body is its JSON. `params` are the
/// list's query parameters with defaults applied.
pub async fn public_list<T, F>(
    core: &Core,
    bearer: Bearer,
    reference: String,
    route: ListRoute,
    params: String,
    page: F,
) -> ApiResult<Bytes>
where
    T: Serialize + Send + 'static,
    F: FnOnce(&mut PgConnection, i64) -> QueryResult<Option<(crate::model::Page<T>, Stamp)>>
        + Send
        + 'static,
{
    let read = move |conn: &mut PgConnection, orbit: &listcache::Probe| -> TxResult<_> {
        Ok(page(conn, orbit.id)?.ok_or(ApiError::not_found("Orbit"))?)
    };
    cached_page(core, Some(bearer), reference, route, params, read, |rows| {
        Ok(Bytes::from(crate::model::json_bytes(&rows)?))
    })
    .await
}

/// One orbit's page through the list cache (`src/perf/listcache.rs`), the one
/// protocol of every cached body (the API's lists, the orbit page for people): on
/// one pool checkout, `bearer` (if the route reads one) is checked as in
/// [`public_read`], then one statement reads the orbit (404 if absent), its
/// revision and the clock; a body kept for `route` and `params` whose stamp holds
/// at them is answered as is. Otherwise `read` reads what the page shows and its
/// stamp, `render` makes the body (after the checkout), and the body is kept for
/// the next reads.
pub async fn cached_page<T, F, R>(
    core: &Core,
    bearer: Option<Bearer>,
    reference: String,
    route: ListRoute,
    params: String,
    read: F,
    render: R,
) -> ApiResult<Bytes>
where
    T: Send + 'static,
    F: FnOnce(&mut PgConnection, &listcache::Probe) -> TxResult<(T, Stamp)> + Send + 'static,
    R: FnOnce(T) -> ApiResult<Bytes>,
{
    enum Read<T> {
        Hit(Bytes),
        Miss(ListKey, T, Stamp),
    }
    let tokens = core.tokens.clone();
    let cache = core.list_cache.clone();
    let found = db::read(&core.pool, move |conn| {
        if let Some(bearer) = bearer {
            bearer.optional(conn, &tokens)?;
        }
        let orbit = listcache::probe(conn, &reference)?.ok_or(ApiError::not_found("Orbit"))?;
        let key = ListKey {
            route,
            orbit_id: orbit.id,
            params,
        };
        if let Some(body) = cache.get(&key, orbit.revision, orbit.now) {
            return Ok(Read::Hit(body));
        }
        let (value, stamp) = read(conn, &orbit)?;
        Ok(Read::Miss(key, value, stamp))
    })
    .await?;
    match found {
        Read::Hit(body) => Ok(body),
        Read::Miss(key, value, stamp) => {
            let body = render(value)?;
            core.list_cache.put(key, stamp, body.clone());
            Ok(body)
        }
    }
}

/// What a write's unit of work ended with: a reply to store and send, or the
/// stored response of its key, replayed.
pub enum Outcome {
    Done(Reply),
    Replayed(Stored),
}

/// Renders a quick write's success for its caller (`domain::marks`); `None`: the
/// write takes the ordinary path.
pub type Render = Box<dyn FnOnce(&ContributorActor) -> Option<Rendered> + Send>;

/// A write's quick form (`perf::quick`): the call, and its success's response and
/// change, rendered by the operation's own types and functions once the caller is
/// known (e.g. `leases::quick_acquire`).
pub struct Quick {
    pub call: QuickCall,
    pub render: Render,
}

/// A write's unit of work as [`run`] runs it, given the parsed body or its 422
/// (raised after the work's own 401/404/403 checks).
pub type BodyWork<T> =
    Box<dyn FnMut(&mut PgConnection, &Caller, &mut Gate, ApiResult<&T>) -> TxResult<Reply> + Send>;

/// One write as its REST route and its MCP tool both hand it to [`run`]: the unit
/// of work and, when the write has one for this body, its quick form. A write
/// that prepares something from its body once, outside the (retried)
/// transaction (a checkpoint's hash, an artifact's decoded bytes, a quick form),
/// has a `*_unit` function in its domain module that builds this, so the two
/// surfaces prepare it the same way.
pub struct Unit<T> {
    pub quick: Option<Quick>,
    pub work: BodyWork<T>,
}

impl<T> Unit<T> {
    pub fn new(
        quick: Option<Quick>,
        work: impl FnMut(&mut PgConnection, &Caller, &mut Gate, ApiResult<&T>) -> TxResult<Reply>
            + Send
            + 'static,
    ) -> Self {
        Unit {
            quick,
            work: Box::new(work),
        }
    }

    /// A write with nothing to prepare and no quick form.
    pub fn plain(
        work: impl FnMut(&mut PgConnection, &Caller, &mut Gate, ApiResult<&T>) -> TxResult<Reply>
            + Send
            + 'static,
    ) -> Self {
        Self::new(None, work)
    }
}

/// A committed (or replayed) write: the status and exact body bytes that were
/// stored under the key, and whether they were replayed from it.
pub struct Written {
    pub status: StatusCode,
    pub body: Vec<u8>,
    pub replayed: bool,
}

/// Runs an authenticated write (see the module doc) and returns what was committed
/// or replayed. `key` is the idempotency key as the caller sent it, in the header's
/// form; `quick`, when given, runs first in the next group of quick writes and, when
/// it declines, `work` runs as an ordinary write (`Commits::transact`: in the write
/// group of the orbit the token last wrote to, or alone).
pub async fn run<F>(
    state: &Core,
    bearer: Bearer,
    key: IdemHeader,
    op: &'static Operation,
    body_canonical: String,
    quick: Option<Quick>,
    mut work: F,
) -> ApiResult<Written>
where
    F: FnMut(&mut PgConnection, &Caller, &mut Gate) -> TxResult<Reply> + Send + 'static,
{
    // One deadline for the whole write (`db::deadline`): a quick attempt that
    // declined leaves the ordinary path what it did not spend, so no write waits
    // for the database longer than that, whichever paths it took.
    let until = std::time::Instant::now() + crate::db::deadline(&state.pool);
    let tokens = state.tokens.clone();
    let retention = state.config.idempotency_retention_hours;
    // A verified token's id routes the write to its orbit's group (`perf::commits`).
    let verified = bearer.cached(&tokens);
    let token_id = verified.as_ref().map(|v| v.token_id);
    // A write with a quick form always tries it first. (Until 2026-12-03 it joined
    // its orbit's ordinary write group while one ran, from when such a group held
    // the orbit's row throughout; a group takes that row only to apply its changes
    // now, and a hot mix of writes kept the quick-able ones in the ordinary groups,
    // at four to seven statements each: PERFORMANCE.md, issue 25.)
    let quick = quick.filter(|_| state.config.quick_writes);
    // The quick form needs a verified token (its id and contributor), a key to
    // claim, and a rendering whose marks are its own.
    let quick = match (quick, verified, &key.0) {
        (Some(quick), Some(verified), Some(Ok(k))) => (quick.render)(&verified.actor).map(|r| {
            let claim = QuickKey {
                scope: op.scope(),
                key: k.clone(),
                fingerprint: op.fingerprint(&quick.call.params(), &body_canonical),
                retention_hours: retention as i32,
            };
            (quick.call, r, verified, claim)
        }),
        _ => None,
    };
    let mut quick_done = None;
    if let Some((call, rendered, verified, claim)) = quick {
        let status = rendered.status;
        match state
            .quick
            .run(call, rendered, verified.token_id, claim, until)
            .await?
        {
            Some(row) => {
                state.metrics.quick_writes.fetch_add(1, Ordering::Relaxed);
                tokens.confirm(&verified);
                // The body as `apply_change` filled and stored it.
                let reply = Reply {
                    status,
                    body: row.out_body.into_bytes(),
                    orbit_id: Some(row.out_orbit),
                    replayed: false,
                };
                quick_done = Some((Outcome::Done(reply), None));
            }
            None => {
                state.metrics.quick_declined.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    let (outcome, applied) = match quick_done {
        Some(done) => done,
        None => {
            let work: Work<Outcome> = Box::new(move |conn, token_row| {
                let caller = bearer.require_read(conn, &tokens, token_row)?;
                let mut gate = Gate::new(
                    op,
                    key.clone(),
                    caller.id(),
                    body_canonical.clone(),
                    retention,
                );
                let reply = work(conn, &caller, &mut gate)?;
                if reply.replayed {
                    let stored = Stored {
                        status: reply.status,
                        body: reply.body,
                    };
                    return Ok((Outcome::Replayed(stored), None));
                }
                let closing = gate.finish(conn, reply.status, &reply.body)?;
                Ok((Outcome::Done(reply), closing))
            });
            state
                .commits
                .transact(&state.pool, token_id, until, work)
                .await?
        }
    };
    Ok(match outcome {
        Outcome::Done(mut reply) => {
            // The body with its revision filled in, the bytes stored under the key.
            if let Some(applied) = applied {
                reply.body = applied.body.into_bytes();
            }
            if let Some(orbit_id) = reply.orbit_id {
                state.hub.publish(orbit_id);
                if let Some(token_id) = token_id {
                    state.hints.learn(token_id, orbit_id);
                }
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
