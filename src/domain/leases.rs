//! Leases and the fence check (contract section 8): acquire, renew, release, the
//! duration rule, and the lease reads, for `http::api::leases` and the MCP tools.
//! The lease decision itself is `domain::fence`.

use actix_web::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::config::Config;
use crate::db::{self, TxResult};
use crate::domain::access::member_or_forbidden;
use crate::domain::auth::{Bearer, Caller};
use crate::domain::fence::{self, Guard, LockMode};
use crate::domain::idempotency::{Gate, Operation};
use crate::domain::marks::Marks;
use crate::domain::revision::{Change, PENDING};
use crate::domain::tasks::task_member;
use crate::domain::write::{claim, public_page, public_read, Quick, Reply, Unit};
use crate::domain::Core;
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::model::{ts, Cursor, Limits, Page, PageParams, Role, Validate};
use crate::perf::quick::QuickCall;
use crate::store::tasks::{self as store, Lease};

pub const DEFAULT_DURATION: i64 = 900;

pub const MAX_DURATION: i64 = 3600;

/// The smallest lease duration: 60 s, or 1 s under the test-only flag.
pub fn min_duration(config: &Config) -> i64 {
    if config.test_short_durations {
        1
    } else {
        60
    }
}

/// The settings a body's own checks depend on (`Validate::validate_within`).
pub fn limits(config: &Config) -> Limits {
    Limits {
        min_seconds: min_duration(config),
    }
}

/// The one rule of an optional `duration_seconds` (default 900; `min` is
/// [`min_duration`]): the seconds, or the problem in words.
fn duration_rule(min: i64, requested: Option<i64>) -> Result<i64, String> {
    let d = requested.unwrap_or(DEFAULT_DURATION);
    if d < min || d > MAX_DURATION {
        return Err(format!("must be between {min} and {MAX_DURATION}"));
    }
    Ok(d)
}

/// Validates an optional `duration_seconds` (default 900); `min` is
/// [`min_duration`].
pub fn duration(min: i64, requested: Option<i64>) -> ApiResult<i64> {
    duration_rule(min, requested).map_err(|problem| ApiError::field("duration_seconds", problem))
}

/// Reads an optional `duration_seconds` that is present only as a number: the
/// schemas (ours and the fixed accept contract) type it as an integer, so `null` is
/// refused like any other non-integer ("must be a whole number"); absent is the
/// default. `#[serde(default, deserialize_with = "...")]` on each body's field.
pub fn present_seconds<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    <i64 as serde::Deserialize>::deserialize(d).map(Some)
}

/// [`duration`]'s problem beside a body's others (`Validate::validate_within`).
pub fn check_duration(limits: &Limits, requested: Option<i64>, errors: &mut FieldErrors) {
    if let Err(problem) = duration_rule(limits.min_seconds, requested) {
        errors.add("duration_seconds", problem);
    }
}

/// Body of an acquire: all optional.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcquireLease {
    /// 60..3600 seconds, default 900.
    #[schema(value_type = i64, required = false, minimum = 60, maximum = 3600, default = 900)]
    #[serde(default, deserialize_with = "present_seconds")]
    pub duration_seconds: Option<i64>,
}

impl Validate for AcquireLease {
    fn validate(&self, _: &mut FieldErrors) {}

    fn validate_within(&self, limits: &Limits, e: &mut FieldErrors) {
        check_duration(limits, self.duration_seconds, e);
    }
}

pub static ACQUIRE_LEASE: Operation = Operation::required("POST", "/api/v1/tasks/{task}/leases");

/// The acquire, inside `domain::write::run`'s transaction (REST and MCP).
fn acquire(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    min: i64,
    task_id: i64,
    body: ApiResult<&AcquireLease>,
) -> TxResult<Reply> {
    let (orbit_id, _) = task_member(conn, task_id, caller.id())?;
    let seconds = duration(min, body?.duration_seconds)?;
    claim!(gate, conn, &[task_id]);
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
    let mut change = acquired(&out);
    change.summary.push_str(&summary);
    out.orbit_revision = Some(gate.record(orbit_id, caller.id(), change)?);
    Reply::created(&out, orbit_id)
}

/// The acquire of task `task_id`, as its REST route and MCP tool run it:
/// [`acquire`], tried first as a quick write when the body is valid and its
/// duration in range (`min`, [`duration`]; [`quick_acquire`]).
pub fn acquire_unit(task_id: i64, min: i64, body: ApiResult<&AcquireLease>) -> Unit<AcquireLease> {
    let quick = body
        .ok()
        .and_then(|value| duration(min, value.duration_seconds).ok())
        .map(|seconds| quick_acquire(task_id, seconds));
    Unit::new(quick, move |c, who, g, b| {
        acquire(c, who, g, min, task_id, b)
    })
}

/// The acquire as a quick write (`perf::quick`): its success answered as
/// [`acquire`] answers it, with marks for what the statement chooses (the lease's
/// id, version and times). A new lease is active and has not ended.
fn quick_acquire(task_id: i64, seconds: i64) -> Quick {
    Quick {
        call: QuickCall::Acquire { task_id, seconds },
        render: Box::new(move |actor| {
            let mut marks = Marks::default();
            let lease = Lease {
                id: marks.number("id"),
                task_id,
                contributor: actor.clone(),
                lease_version: marks.number("lease_version"),
                acquired_at: marks.time("acquired_at"),
                expires_at: marks.time("expires_at"),
                renewed_at: None,
                released_at: None,
                is_active: true,
                end_reason: None,
                orbit_revision: Some(PENDING),
            };
            marks.rendered(
                Reply::new(StatusCode::CREATED, &lease, None).ok()?,
                acquired(&lease),
            )
        }),
    }
}

/// The release of lease `lease_id`, as its REST route and MCP tool run it:
/// [`release`], tried first as a quick write when the body is valid
/// ([`quick_release`]).
pub fn release_unit(lease_id: i64, body: ApiResult<&LeaseVersionBody>) -> Unit<LeaseVersionBody> {
    let quick = body
        .ok()
        .map(|value| quick_release(lease_id, value.lease_version));
    Unit::new(quick, move |c, who, g, b| release(c, who, g, lease_id, b))
}

/// The release as a quick write: answered as [`release`] answers it, with marks
/// for what only the lease's row tells (its task and times).
fn quick_release(lease_id: i64, lease_version: i64) -> Quick {
    Quick {
        call: QuickCall::Release {
            lease_id,
            lease_version,
        },
        render: Box::new(move |actor| {
            let mut marks = Marks::default();
            let lease = Lease {
                id: lease_id,
                task_id: marks.number("task_id"),
                contributor: actor.clone(),
                lease_version,
                acquired_at: marks.time("acquired_at"),
                expires_at: marks.time("expires_at"),
                renewed_at: Some(marks.time("renewed_at")),
                released_at: Some(marks.time("released_at")),
                is_active: false,
                end_reason: Some(RELEASED.into()),
                orbit_revision: Some(PENDING),
            };
            marks.rendered(
                Reply::new(StatusCode::OK, &lease, None).ok()?,
                released(&lease),
            )
        }),
    }
}

/// The end reason of a released lease.
const RELEASED: &str = "RELEASED";

/// The change of an acquire, by the lease it issued; the acquire adds to its
/// summary what it ended.
pub fn acquired(lease: &Lease) -> Change<'static> {
    Change {
        kind: "lease.acquired",
        entity_type: "lease",
        entity_id: lease.id,
        task_id: Some(lease.task_id),
        summary: format!(
            "lease v{} acquired on task {}",
            lease.lease_version, lease.task_id
        ),
    }
}

/// The change of a release, by the lease it ended.
pub fn released(lease: &Lease) -> Change<'static> {
    Change {
        kind: "lease.released",
        entity_type: "lease",
        entity_id: lease.id,
        task_id: Some(lease.task_id),
        summary: format!("lease v{} released", lease.lease_version),
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RenewLease {
    /// The version of the lease you hold.
    #[schema(minimum = 1)]
    pub lease_version: i64,
    /// 60..3600 seconds from now, default 900.
    #[schema(value_type = i64, required = false, minimum = 60, maximum = 3600, default = 900)]
    #[serde(default, deserialize_with = "present_seconds")]
    pub duration_seconds: Option<i64>,
}

impl Validate for RenewLease {
    fn validate(&self, e: &mut FieldErrors) {
        if self.lease_version < 1 {
            e.add("lease_version", "must be at least 1");
        }
    }

    fn validate_within(&self, limits: &Limits, e: &mut FieldErrors) {
        check_duration(limits, self.duration_seconds, e);
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

/// The lease named in a path, with its task's orbit membership checked: its task,
/// its orbit, and its version as `fence::guard` takes the version a path names.
fn lease_task(
    conn: &mut diesel::PgConnection,
    lease_id: i64,
    caller: i64,
) -> TxResult<(i64, i64, Option<i64>)> {
    let found = store::lease_orbit_role(conn, lease_id, caller)?
        .ok_or_else(|| ApiError::not_found("Lease"))?;
    member_or_forbidden(found.role.and_then(|r| Role::parse(&r)))?;
    Ok((found.task_id, found.orbit_id, Some(found.lease_version)))
}

pub static RENEW_LEASE: Operation = Operation::required("POST", "/api/v1/leases/{lease}/renew");

/// The renewal, inside `domain::write::run`'s transaction (REST and MCP).
pub fn renew(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    min: i64,
    lease_id: i64,
    body: ApiResult<&RenewLease>,
) -> TxResult<Reply> {
    let (task_id, orbit_id, named) = lease_task(conn, lease_id, caller.id())?;
    let value = body?;
    let seconds = duration(min, value.duration_seconds)?;
    claim!(gate, conn, &[lease_id]);
    let version = value.lease_version;
    let (task, held) = fence::guard(conn, task_id, caller.id(), version, named, Guard::Work)?;
    let mut out = store::renew_lease(conn, held.lease_id, task.now, seconds)?;
    out.orbit_revision = Some(gate.record(
        orbit_id,
        caller.id(),
        Change {
            kind: "lease.renewed",
            entity_type: "lease",
            entity_id: lease_id,
            task_id: Some(task_id),
            summary: format!("lease v{} renewed for {seconds} s", held.lease_version),
        },
    )?);
    Reply::ok(&out, orbit_id)
}

pub static RELEASE_LEASE: Operation = Operation::required("POST", "/api/v1/leases/{lease}/release");

/// The release, inside `domain::write::run`'s transaction (REST and MCP).
fn release(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    lease_id: i64,
    body: ApiResult<&LeaseVersionBody>,
) -> TxResult<Reply> {
    let (task_id, orbit_id, named) = lease_task(conn, lease_id, caller.id())?;
    let value = body?;
    claim!(gate, conn, &[lease_id]);
    let version = value.lease_version;
    let (task, held) = fence::guard(
        conn,
        task_id,
        caller.id(),
        version,
        named,
        Guard::ReleaseOrOffer,
    )?;
    let mut out = store::end_lease_returning(conn, held.lease_id, task.now, RELEASED)?;
    out.orbit_revision = Some(gate.record(orbit_id, caller.id(), released(&out))?);
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

/// The fence check (REST and MCP): authentication and [`fence_verdict`] in one
/// transaction of their own.
pub async fn check_fence(
    core: &Core,
    bearer: Bearer,
    task_id: i64,
    body: ApiResult<LeaseVersionBody>,
) -> ApiResult<FenceVerdict> {
    let tokens = core.tokens.clone();
    db::transact(&core.pool, move |conn| {
        let caller = bearer.require(conn, &tokens)?;
        fence_verdict(conn, &caller, task_id, body.as_ref().map_err(Clone::clone))
    })
    .await
}

/// The fence check after authentication.
pub fn fence_verdict(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    task_id: i64,
    body: ApiResult<&LeaseVersionBody>,
) -> TxResult<FenceVerdict> {
    task_member(conn, task_id, caller.id())?;
    let version = body?.lease_version;
    let task = fence::lock_for(conn, task_id, LockMode::Share, caller.id(), version)?;
    let held = fence::check(&task, caller.id(), version, Guard::Work)?;
    Ok(FenceVerdict {
        verdict: "PROCEED".into(),
        lease_id: held.lease_id,
        expires_at: held.expires_at,
    })
}

/// A task's lease history, ascending (REST and MCP).
pub async fn list(
    core: &Core,
    params: PageParams,
    bearer: Bearer,
    task_id: i64,
) -> ApiResult<Page<Lease>> {
    let cursor = params.checked()?;
    public_page(
        core,
        bearer,
        cursor,
        |l: &Lease| l.id,
        move |conn, cursor| page(conn, task_id, cursor),
    )
    .await
}

/// A lease (REST and MCP).
pub async fn get(core: &Core, bearer: Bearer, id: i64) -> ApiResult<Lease> {
    public_read(core, bearer, move |conn| read(conn, id)).await
}

/// A page of a task's leases, its history.
fn page(conn: &mut diesel::PgConnection, task_id: i64, cursor: Cursor) -> TxResult<Vec<Lease>> {
    store::task_orbit(conn, task_id)?.ok_or_else(|| ApiError::not_found("Task"))?;
    Ok(store::leases_of_task(conn, task_id, cursor)?)
}

/// A lease as it is now (REST and MCP): what a replayed acquire's caller reads to
/// learn whether that lease is still active.
pub fn read(conn: &mut diesel::PgConnection, id: i64) -> TxResult<Lease> {
    store::lease(conn, id)?.ok_or_else(|| ApiError::not_found("Lease").into())
}
