//! The fence: the one lease check every lease-protected write calls.
//!
//! `lock` takes the task row's lock and then reads the database clock, so a lock
//! wait can never make a decision in the past. `check` then decides, in the order
//! of the contract (section 8), the first failing rule:
//! 1. `stale_lease_version` — the task's current version is not the request's;
//! 2. `lease_not_held` — that lease is someone else's;
//! 3. `lease_released` / `lease_expired` — it has ended or run out;
//! 4. `handed_off` — the caller has a PENDING handoff on the task (checkpoint,
//!    completion, renewal and the fence check only).
//!
//! Lock order everywhere: task row, then handoffs, then leases, then the orbit's
//! revision (last, in `revision::record`).

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text, Timestamptz};
use serde_json::json;

use crate::api::types::format_ts;
use crate::db::TxResult;
use crate::error::ApiError;
use crate::store::handoffs;

/// A task row held under `FOR UPDATE` (or `FOR SHARE` for the read-only fence
/// check), with the database time read after the lock was granted.
#[derive(Debug, Clone)]
pub struct LockedTask {
    pub id: i64,
    pub orbit_id: i64,
    pub status: String,
    pub lease_version: i64,
    pub now: DateTime<Utc>,
    /// The lease that has not ended (it may have run out: see `active`).
    pub open_lease: Option<OpenLease>,
}

#[derive(Debug, Clone, QueryableByName)]
pub struct OpenLease {
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    #[diesel(sql_type = BigInt)]
    pub contributor_id: i64,
    #[diesel(sql_type = BigInt)]
    pub lease_version: i64,
    #[diesel(sql_type = Timestamptz)]
    pub expires_at: DateTime<Utc>,
}

impl LockedTask {
    pub fn is_open(&self) -> bool {
        self.status == "OPEN"
    }

    /// The open lease if it is still active at `now`.
    pub fn active_lease(&self) -> Option<&OpenLease> {
        self.open_lease.as_ref().filter(|l| l.expires_at > self.now)
    }
}

#[derive(QueryableByName)]
struct TaskLockRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = BigInt)]
    orbit_id: i64,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = BigInt)]
    lease_version: i64,
}

#[derive(QueryableByName)]
struct NowAndLease {
    #[diesel(sql_type = Timestamptz)]
    now: DateTime<Utc>,
    #[diesel(sql_type = Nullable<BigInt>)]
    id: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    contributor_id: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    lease_version: Option<i64>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    expires_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Copy)]
pub enum LockMode {
    /// Writers.
    Update,
    /// The fence check, which writes nothing.
    Share,
}

/// Locks the task row (404 when it does not exist) and reads the clock after it.
pub fn lock(conn: &mut PgConnection, task_id: i64, mode: LockMode) -> TxResult<LockedTask> {
    let clause = match mode {
        LockMode::Update => "FOR UPDATE",
        LockMode::Share => "FOR SHARE",
    };
    let row: Option<TaskLockRow> = diesel::sql_query(format!(
        "SELECT id, orbit_id, status, lease_version FROM tasks WHERE id = $1 {clause}"
    ))
    .bind::<BigInt, _>(task_id)
    .get_result(conn)
    .optional()?;
    let row = row.ok_or_else(|| ApiError::not_found("Task"))?;
    // Read after the lock statement returned: a wait for the lock cannot make this
    // decision in the past.
    let lease: NowAndLease = diesel::sql_query(
        "SELECT clock_timestamp() AS now, l.id, l.contributor_id, l.lease_version, l.expires_at \
         FROM (SELECT 1) AS one \
         LEFT JOIN leases l ON l.task_id = $1 AND l.end_reason IS NULL",
    )
    .bind::<BigInt, _>(task_id)
    .get_result(conn)?;
    let open_lease = match (
        lease.id,
        lease.contributor_id,
        lease.lease_version,
        lease.expires_at,
    ) {
        (Some(id), Some(contributor_id), Some(lease_version), Some(expires_at)) => {
            Some(OpenLease {
                id,
                contributor_id,
                lease_version,
                expires_at,
            })
        }
        _ => None,
    };
    Ok(LockedTask {
        id: row.id,
        orbit_id: row.orbit_id,
        status: row.status,
        lease_version: row.lease_version,
        now: lease.now,
        open_lease,
    })
}

/// Which writes rule 4 (`handed_off`) applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// Checkpoint, completion, renewal, the fence check: a pending handoff fences.
    Work,
    /// Release and a new offer: allowed while a handoff is pending.
    ReleaseOrOffer,
}

#[derive(QueryableByName)]
struct VersionLease {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = BigInt)]
    contributor_id: i64,
    #[diesel(sql_type = Nullable<Text>)]
    end_reason: Option<String>,
    #[diesel(sql_type = Timestamptz)]
    expires_at: DateTime<Utc>,
}

/// The lease a passing check vouches for.
#[derive(Debug, Clone)]
pub struct Held {
    pub lease_id: i64,
    pub lease_version: i64,
    pub expires_at: DateTime<Utc>,
}

pub fn stale(task: &LockedTask) -> ApiError {
    ApiError::conflict(
        "stale_lease_version",
        "Your lease_version is not the task's current one: someone else holds or held the task \
         since. Stop writing and report; do not retry with a version you did not acquire.",
    )
    .with_details(json!({ "current_lease_version": task.lease_version }))
}

/// Runs the lease checks for `caller` presenting `lease_version` on a locked task.
pub fn check(
    conn: &mut PgConnection,
    task: &LockedTask,
    caller: i64,
    lease_version: i64,
    guard: Guard,
) -> TxResult<Held> {
    if task.lease_version != lease_version {
        return Err(stale(task).into());
    }
    let lease: Option<VersionLease> = diesel::sql_query(
        "SELECT id, contributor_id, end_reason, expires_at FROM leases \
         WHERE task_id = $1 AND lease_version = $2",
    )
    .bind::<BigInt, _>(task.id)
    .bind::<BigInt, _>(lease_version)
    .get_result(conn)
    .optional()?;
    let Some(lease) = lease else {
        return Err(stale(task).into());
    };
    if lease.contributor_id != caller {
        return Err(ApiError::conflict(
            "lease_not_held",
            "This lease belongs to someone else. Stop writing and report.",
        )
        .into());
    }
    match lease.end_reason.as_deref() {
        Some("EXPIRED") => return Err(expired(&lease.expires_at).into()),
        Some(reason) => {
            return Err(ApiError::conflict(
                "lease_released",
                "This lease has ended. Stop writing and report.",
            )
            .with_details(json!({ "end_reason": reason }))
            .into())
        }
        None if lease.expires_at <= task.now => return Err(expired(&lease.expires_at).into()),
        None => {}
    }
    if guard == Guard::Work {
        if let Some(h) = handoffs::pending_from(conn, task.id, caller, task.now)? {
            return Err(handed_off(h.id, h.to_contributor).into());
        }
    }
    Ok(Held {
        lease_id: lease.id,
        lease_version,
        expires_at: lease.expires_at,
    })
}

fn expired(at: &DateTime<Utc>) -> ApiError {
    ApiError::conflict(
        "lease_expired",
        "This lease has run out. Stop writing and report; acquire a new lease only if the task \
         is still yours to do.",
    )
    .with_details(json!({ "expired_at": format_ts(at) }))
}

pub fn handed_off(handoff_id: i64, to: Option<i64>) -> ApiError {
    ApiError::conflict(
        "handed_off",
        "You handed this task off and the handoff is pending: your writes to it are fenced. \
         Stop and report.",
    )
    .with_details(json!({ "handoff_id": handoff_id, "to_contributor_id": to }))
}
