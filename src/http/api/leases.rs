//! Leases and the fence check (contract section 8).

use actix_web::{get, post, web, HttpResponse};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::db::{self, TxResult};
use crate::domain::access::member_or_forbidden;
use crate::domain::auth::{Bearer, Caller};
use crate::domain::fence::{self, Guard, LockMode};
use crate::domain::idempotency::{Gate, IdemHeader, IdempotencyKeyRequired, Operation};
use crate::domain::revision::Change;
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::http::api::public_read;
use crate::http::api::responses::{ReadErrors, WriteErrors};
use crate::http::api::tasks::task_member;
use crate::http::api::{ok_json, page_json, write, write_quick, Reply, State};
use crate::http::json::{Body, Validate};
use crate::model::Role;
use crate::model::{ts, PageMeta, PageParams};
use crate::perf::quick::QuickCall;
use crate::store::tasks::{self as store, Lease};

pub const DEFAULT_DURATION: i64 = 900;
pub const MAX_DURATION: i64 = 3600;

/// The smallest lease duration: 60 s, or 1 s under the test-only flag.
pub fn min_duration(state: &State) -> i64 {
    if state.config.test_short_durations {
        1
    } else {
        60
    }
}

/// Validates an optional `duration_seconds` (default 900).
pub fn duration(state: &State, requested: Option<i64>) -> ApiResult<i64> {
    let d = requested.unwrap_or(DEFAULT_DURATION);
    let min = min_duration(state);
    if d < min || d > MAX_DURATION {
        return Err(ApiError::field(
            "duration_seconds",
            format!("must be between {min} and {MAX_DURATION}"),
        ));
    }
    Ok(d)
}

#[derive(Serialize, ToSchema)]
pub struct LeaseData {
    pub data: Lease,
}

#[derive(Serialize, ToSchema)]
pub struct LeasePage {
    pub data: Vec<Lease>,
    pub meta: PageMeta,
}

/// Body of an acquire: all optional.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcquireLease {
    /// 60..3600 seconds, default 900.
    #[schema(value_type = i64, required = false, minimum = 60, maximum = 3600, default = 900)]
    pub duration_seconds: Option<i64>,
}

impl Validate for AcquireLease {
    fn validate(&self, _: &mut FieldErrors) {}
}

pub static ACQUIRE_LEASE: Operation = Operation::required("POST", "/api/v1/tasks/{task}/leases");

/// Acquire a lease on a task: `lease_version = task.lease_version + 1`.
///
/// 409 `lease_conflict` (someone else holds it; only `details.expires_at` is
/// revealed), `lease_already_held` (`details.lease_id`: renew it instead),
/// `handed_off` (you have a pending handoff on the task: withdraw it first),
/// `task_closed`. Acquiring supersedes the task's pending handoffs.
#[utoipa::path(
    tag = "Leases",
    params(("task" = i64, Path, minimum = 1), IdempotencyKeyRequired),
    request_body(content = AcquireLease, description = "Optional: no body, an empty body and `{}` are the same."),
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 201, body = LeaseData), WriteErrors),
)]
#[post("/tasks/{task}/leases")]
pub async fn acquire_lease(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    path: web::Path<i64>,
    body: Body<AcquireLease>,
) -> ApiResult<HttpResponse> {
    let task_id = path.into_inner();
    let canonical = body.canonical.clone();
    let quick = body
        .check()
        .ok()
        .and_then(|b| duration(&state, b.duration_seconds).ok())
        .map(|seconds| QuickCall::Acquire { task_id, seconds });
    let state2 = state.clone();
    write_quick(
        &state,
        bearer,
        key,
        &ACQUIRE_LEASE,
        canonical,
        quick,
        move |conn, caller, gate| acquire(conn, caller, gate, &state2, task_id, &body),
    )
    .await
}

/// The acquire, inside `domain::write::run`'s transaction (REST and MCP).
pub fn acquire(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    state: &State,
    task_id: i64,
    body: &Body<AcquireLease>,
) -> TxResult<Reply> {
    let (orbit_id, _) = task_member(conn, task_id, caller.id())?;
    let seconds = duration(state, body.check()?.duration_seconds)?;
    if let Some(stored) = gate.claim(conn, &[task_id])? {
        return Ok(Reply::replayed(stored));
    }
    let task = fence::lock_to_acquire(conn, task_id, caller.id())?;
    fence::admit(&task, caller.id())?;
    let mut summary = String::new();
    if let Some(open) = &task.open_lease {
        // Admitted with an open lease: it has run out.
        store::end_lease(conn, open.id, task.now, "EXPIRED")?;
        summary.push_str(&format!("; lease v{} expired", open.lease_version));
    }
    for h in task.supersede_pending(conn)? {
        summary.push_str(&format!("; handoff {h} superseded"));
    }
    let version = task.lease_version + 1;
    let mut out = store::insert_lease(
        conn,
        task_id,
        orbit_id,
        caller.id(),
        version,
        task.now,
        seconds,
    )?;
    let lease_id = out.id;
    let rev = gate.record(
        orbit_id,
        caller.id(),
        Change {
            kind: "lease.acquired",
            entity_type: "lease",
            entity_id: lease_id,
            task_id: Some(task_id),
            summary: format!("lease v{version} acquired on task {task_id}{summary}"),
        },
    )?;
    out.orbit_revision = Some(rev);
    Reply::created(&out, orbit_id)
}

pub use crate::domain::fence::lease_conflict;

/// A task's lease history, ascending.
#[utoipa::path(
    tag = "Leases",
    params(("task" = i64, Path, minimum = 1), PageParams),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = LeasePage), ReadErrors),
)]
#[get("/tasks/{task}/leases")]
pub async fn list_leases(
    state: State,
    bearer: Bearer,
    path: web::Path<i64>,
    query: crate::http::json::Query<PageParams>,
) -> ApiResult<HttpResponse> {
    let cursor = query.into_inner().checked()?;
    let task_id = path.into_inner();
    let rows = public_read(&state, bearer, move |conn| page(conn, task_id, cursor)).await?;
    page_json(&cursor.page(rows, |l| l.id))
}

/// Read a lease.
#[utoipa::path(
    tag = "Leases",
    params(("lease" = i64, Path, minimum = 1)),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = LeaseData), ReadErrors),
)]
#[get("/leases/{lease}")]
pub async fn get_lease(
    state: State,
    bearer: Bearer,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let id = path.into_inner();
    let lease = public_read(&state, bearer, move |conn| read(conn, id)).await?;
    ok_json(&lease)
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RenewLease {
    /// The version of the lease you hold.
    #[schema(minimum = 1)]
    pub lease_version: i64,
    /// 60..3600 seconds from now, default 900.
    #[schema(value_type = i64, required = false, minimum = 60, maximum = 3600, default = 900)]
    pub duration_seconds: Option<i64>,
}

impl Validate for RenewLease {
    fn validate(&self, e: &mut FieldErrors) {
        if self.lease_version < 1 {
            e.add("lease_version", "must be at least 1");
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LeaseVersionBody {
    /// The version of the lease you hold.
    #[schema(minimum = 1)]
    pub lease_version: i64,
}

impl Validate for LeaseVersionBody {
    fn validate(&self, e: &mut FieldErrors) {
        if self.lease_version < 1 {
            e.add("lease_version", "must be at least 1");
        }
    }
}

/// The lease named in a path, with its task's orbit membership checked.
fn lease_task(
    conn: &mut diesel::PgConnection,
    lease_id: i64,
    caller: i64,
) -> TxResult<(i64, i64, i64)> {
    let found = store::lease_orbit_role(conn, lease_id, caller)?
        .ok_or_else(|| ApiError::not_found("Lease"))?;
    member_or_forbidden(found.role.and_then(|r| Role::parse(&r)))?;
    Ok((found.task_id, found.orbit_id, found.lease_version))
}

pub static RENEW_LEASE: Operation = Operation::required("POST", "/api/v1/leases/{lease}/renew");

/// Renew a lease you hold (lease-protected): same version, `expires_at = now + duration`.
#[utoipa::path(
    tag = "Leases",
    params(("lease" = i64, Path, minimum = 1), IdempotencyKeyRequired),
    request_body = RenewLease,
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = LeaseData), WriteErrors),
)]
#[post("/leases/{lease}/renew")]
pub async fn renew_lease(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    path: web::Path<i64>,
    body: Body<RenewLease>,
) -> ApiResult<HttpResponse> {
    let lease_id = path.into_inner();
    let canonical = body.canonical.clone();
    let state2 = state.clone();
    write(
        &state,
        bearer,
        key,
        &RENEW_LEASE,
        canonical,
        move |conn, caller, gate| renew(conn, caller, gate, &state2, lease_id, &body),
    )
    .await
}

/// The renewal, inside `domain::write::run`'s transaction (REST and MCP).
pub fn renew(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    state: &State,
    lease_id: i64,
    body: &Body<RenewLease>,
) -> TxResult<Reply> {
    let (task_id, orbit_id, path_version) = lease_task(conn, lease_id, caller.id())?;
    let value = body.check()?;
    let seconds = duration(state, value.duration_seconds)?;
    if let Some(stored) = gate.claim(conn, &[lease_id])? {
        return Ok(Reply::replayed(stored));
    }
    let (task, held) = fence::guard(
        conn,
        task_id,
        caller.id(),
        value.lease_version,
        Some(path_version),
        Guard::Work,
    )?;
    let mut out = store::renew_lease(conn, held.lease_id, task.now, seconds)?;
    let rev = gate.record(
        orbit_id,
        caller.id(),
        Change {
            kind: "lease.renewed",
            entity_type: "lease",
            entity_id: lease_id,
            task_id: Some(task_id),
            summary: format!("lease v{} renewed for {seconds} s", held.lease_version),
        },
    )?;
    out.orbit_revision = Some(rev);
    Reply::ok(&out, orbit_id)
}

pub static RELEASE_LEASE: Operation = Operation::required("POST", "/api/v1/leases/{lease}/release");

/// Release a lease you hold (lease-protected). Allowed while your handoff is pending.
#[utoipa::path(
    tag = "Leases",
    params(("lease" = i64, Path, minimum = 1), IdempotencyKeyRequired),
    request_body = LeaseVersionBody,
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = LeaseData), WriteErrors),
)]
#[post("/leases/{lease}/release")]
pub async fn release_lease(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    path: web::Path<i64>,
    body: Body<LeaseVersionBody>,
) -> ApiResult<HttpResponse> {
    let lease_id = path.into_inner();
    let canonical = body.canonical.clone();
    let quick = body.check().ok().map(|b| QuickCall::Release {
        lease_id,
        lease_version: b.lease_version,
    });
    write_quick(
        &state,
        bearer,
        key,
        &RELEASE_LEASE,
        canonical,
        quick,
        move |conn, caller, gate| release(conn, caller, gate, lease_id, &body),
    )
    .await
}

/// The release, inside `domain::write::run`'s transaction (REST and MCP).
pub fn release(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    lease_id: i64,
    body: &Body<LeaseVersionBody>,
) -> TxResult<Reply> {
    let (task_id, orbit_id, path_version) = lease_task(conn, lease_id, caller.id())?;
    let value = body.check()?;
    if let Some(stored) = gate.claim(conn, &[lease_id])? {
        return Ok(Reply::replayed(stored));
    }
    let (task, held) = fence::guard(
        conn,
        task_id,
        caller.id(),
        value.lease_version,
        Some(path_version),
        Guard::ReleaseOrOffer,
    )?;
    let mut out = store::end_lease_returning(conn, held.lease_id, task.now, "RELEASED")?;
    let rev = gate.record(
        orbit_id,
        caller.id(),
        Change {
            kind: "lease.released",
            entity_type: "lease",
            entity_id: lease_id,
            task_id: Some(task_id),
            summary: format!("lease v{} released", held.lease_version),
        },
    )?;
    out.orbit_revision = Some(rev);
    Reply::ok(&out, orbit_id)
}

/// `PROCEED`: the caller's lease is the task's current active lease.
#[derive(Debug, Serialize, ToSchema)]
pub struct FenceVerdict {
    /// Always `PROCEED` (a refusal is a 409).
    pub verdict: String,
    pub lease_id: i64,
    #[serde(with = "ts")]
    #[schema(value_type = String, format = DateTime)]
    pub expires_at: DateTime<Utc>,
}

#[derive(Serialize, ToSchema)]
pub struct FenceData {
    pub data: FenceVerdict,
}

/// Check the fence right before an irreversible outside effect.
///
/// 200 `PROCEED` when your lease is the task's current active lease and you have no
/// pending handoff on it; otherwise 409 with the lease codes. Writes nothing, advances
/// no revision, and is never replayed: the `Idempotency-Key` header is ignored.
#[utoipa::path(
    tag = "Leases",
    params(("task" = i64, Path, minimum = 1)),
    request_body = LeaseVersionBody,
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = FenceData), WriteErrors),
)]
#[post("/tasks/{task}/fence")]
pub async fn check_fence(
    state: State,
    bearer: Bearer,
    path: web::Path<i64>,
    body: Body<LeaseVersionBody>,
) -> ApiResult<HttpResponse> {
    let task_id = path.into_inner();
    let tokens = state.tokens.clone();
    let verdict = db::transact(&state.pool, move |conn| {
        let caller = bearer.require(conn, &tokens)?;
        fence_verdict(conn, &caller, task_id, &body)
    })
    .await?;
    ok_json(&verdict)
}

/// The fence check after authentication, in its own transaction (REST and MCP).
pub fn fence_verdict(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    task_id: i64,
    body: &Body<LeaseVersionBody>,
) -> TxResult<FenceVerdict> {
    task_member(conn, task_id, caller.id())?;
    let version = body.check()?.lease_version;
    let task = fence::lock_for(conn, task_id, LockMode::Share, caller.id(), version)?;
    let held = fence::check(&task, caller.id(), version, Guard::Work)?;
    Ok(FenceVerdict {
        verdict: "PROCEED".into(),
        lease_id: held.lease_id,
        expires_at: held.expires_at,
    })
}

/// A page of a task's leases, its history (REST and MCP).
pub fn page(
    conn: &mut diesel::PgConnection,
    task_id: i64,
    cursor: crate::model::Cursor,
) -> TxResult<Vec<Lease>> {
    store::task_orbit(conn, task_id)?.ok_or_else(|| ApiError::not_found("Task"))?;
    Ok(store::leases_of_task(conn, task_id, cursor)?)
}

/// A lease as it is now (REST and MCP): what a replayed acquire's caller reads to
/// learn whether that lease is still active.
pub fn read(conn: &mut diesel::PgConnection, id: i64) -> TxResult<Lease> {
    store::lease(conn, id)?.ok_or_else(|| ApiError::not_found("Lease").into())
}
