//! The fence: the one lease check every lease-protected write calls.
//!
//! `guard` (a write presenting a lease), `lock_to_acquire` (an acquire), `lock_for`
//! (the read-only fence check, under `FOR SHARE`) and `lock` take the task row's
//! lock and then, in one statement, read the database clock with the task's open
//! lease, the presented lease and the PENDING handoff, and ask the lease decision
//! of the database: `lease_verdict` or `acquire_verdict` (src/db/functions.sql),
//! the one definition both write paths execute (the quick writes ask the same
//! functions). A lock wait can never make a decision in the past. `check` and
//! `admit` only word the refusal the verdict names, from what the statement read;
//! whether a refused caller may go on with the task's current lease
//! (`LockedTask::workable_by`, `recover: continue`) is `lease_verdict`'s answer for
//! that lease, read in the same statement. The rules, in the contract's order
//! (section 8):
//! 1. `lease_version_not_issued` — the request names a version never issued;
//! 2. `stale_lease_version` — the task's current version is not the request's;
//! 3. `lease_not_held` — that lease is someone else's;
//! 4. `lease_released` / `lease_expired` — it has ended or run out;
//! 5. `handed_off` — the caller has a PENDING handoff on the task (checkpoint,
//!    completion, renewal and the fence check only).
//!
//! Lock order everywhere: task row, then handoffs, then leases, then the orbit's
//! revision (last: in `orbit_apply`, sent with the COMMIT, for a write alone; in
//! `db::apply_all`, after every write's work, for a write group; in the apply phase
//! of a quick statement; `domain::revision`).

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text, Timestamptz};
use serde_json::json;

use crate::db::BindNext;
use crate::db::TxResult;
use crate::error::ApiError;
use crate::model::format_ts;

/// A task row held under `FOR UPDATE` (or `FOR SHARE` for the read-only fence
/// check), with the database time read after the lock was granted, and what the
/// checks need, read in the same statement as the time.
#[derive(Debug, Clone)]
pub struct LockedTask {
    pub id: i64,
    pub orbit_id: i64,
    pub status: String,
    pub lease_version: i64,
    pub now: DateTime<Utc>,
    /// The lease that has not ended (it may have run out: see `active`).
    pub open_lease: Option<OpenLease>,
    /// The task's PENDING handoff, if any (it may have run out).
    pub pending_handoff: Option<PendingHandoff>,
    /// Who the lock was taken for, and the lease they presented (`lock_for`).
    caller: Option<i64>,
    presented: Option<PresentedLease>,
    /// The decision the lock statement asked for, and the database's answer: the
    /// code of the refusal, `None` when the write may go on.
    asked: Ask,
    verdict: Option<String>,
    /// Whether `lease_verdict` lets the open lease's holder go on with it for the
    /// write the lock was taken for (a plain `lock`: `Guard::Work`): asked by a
    /// plain lock and after a refusal of a lease write, else `None` (not asked).
    open_workable: Option<bool>,
}

impl LockedTask {
    /// Ends the task's PENDING handoff, if the lock read one (superseded when live,
    /// expired otherwise); returns the ids superseded.
    pub fn supersede_pending(&self, conn: &mut PgConnection) -> diesel::QueryResult<Vec<i64>> {
        if self.pending_handoff.is_none() {
            return Ok(Vec::new());
        }
        crate::store::handoffs::supersede_pending(conn, self.id, self.now)
    }
}

/// The task's lease that has not ended.
#[derive(Debug, Clone)]
pub struct OpenLease {
    pub id: i64,
    pub contributor_id: i64,
    pub lease_version: i64,
    pub expires_at: DateTime<Utc>,
    /// Active at the lock's `now` (`lease_is_active`): false once it has run out.
    pub active: bool,
}

/// The task's PENDING handoff.
#[derive(Debug, Clone)]
pub struct PendingHandoff {
    pub id: i64,
    pub from_contributor: i64,
    pub to_contributor: Option<i64>,
    /// Live at the lock's `now` (`handoff_is_live`): false once it has run out.
    pub live: bool,
}

/// The lease whose version a request presented.
#[derive(Debug, Clone)]
struct PresentedLease {
    id: i64,
    end_reason: Option<String>,
    expires_at: DateTime<Utc>,
}

impl LockedTask {
    pub fn is_open(&self) -> bool {
        self.status == crate::store::tasks::TaskStatus::Open.as_str()
    }

    /// The open lease if it is still active at `now`.
    pub fn active_lease(&self) -> Option<&OpenLease> {
        self.open_lease.as_ref().filter(|l| l.active)
    }

    /// The live PENDING handoff `giver` offered on this task: it fences the giver.
    pub fn pending_from(&self, giver: i64) -> Option<&PendingHandoff> {
        self.pending_handoff
            .as_ref()
            .filter(|h| h.from_contributor == giver && h.live)
    }

    /// The active lease `caller` may go on with for the write this lock was taken
    /// for: its own, and one `lease_verdict` (the one owner of the lease decision)
    /// passes for it, so not fenced by a pending handoff of its own (which fences
    /// all but a release or a new offer). A refusal offers it (`details.lease_id`,
    /// `recover: continue`) only then, since continuing with a lease the verdict
    /// refuses is one more refusal (`handed_off`). Not asked by the lock: none.
    pub fn workable_by(&self, caller: i64) -> Option<&OpenLease> {
        self.active_lease()
            .filter(|l| l.contributor_id == caller && self.open_workable == Some(true))
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
struct AfterLock {
    #[diesel(sql_type = Timestamptz)]
    now: DateTime<Utc>,
    #[diesel(sql_type = Nullable<BigInt>)]
    o_id: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    o_contributor: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    o_version: Option<i64>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    o_expires: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<diesel::sql_types::Bool>)]
    o_active: Option<bool>,
    #[diesel(sql_type = Nullable<BigInt>)]
    v_id: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    v_end_reason: Option<String>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    v_expires: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<BigInt>)]
    h_id: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    h_from: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    h_to: Option<i64>,
    #[diesel(sql_type = Nullable<diesel::sql_types::Bool>)]
    h_live: Option<bool>,
    #[diesel(sql_type = Nullable<Text>)]
    verdict: Option<String>,
    #[diesel(sql_type = Nullable<diesel::sql_types::Bool>)]
    o_workable: Option<bool>,
}

/// Which lease decision a lock statement asks the database for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ask {
    Nothing,
    /// `lease_verdict`: `caller` presents `version` for a write of kind `guard`.
    Lease {
        caller: i64,
        version: i64,
        path_version: Option<i64>,
        guard: Guard,
    },
    /// `acquire_verdict`: may `caller` acquire the task.
    Acquire {
        caller: i64,
    },
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
    lock_inner(conn, task_id, mode, Ask::Nothing)
}

/// `lock` for the fence check (`Guard::Work`, no lease in the path): also reads the
/// lease of `lease_version` and the verdict on it, so `check` needs no statement of
/// its own.
pub fn lock_for(
    conn: &mut PgConnection,
    task_id: i64,
    mode: LockMode,
    caller: i64,
    lease_version: i64,
) -> TxResult<LockedTask> {
    let ask = Ask::Lease {
        caller,
        version: lease_version,
        path_version: None,
        guard: Guard::Work,
    };
    lock_inner(conn, task_id, mode, ask)
}

/// `lock` (for update) for an acquire: also asks `acquire_verdict`, which `admit`
/// words.
pub fn lock_to_acquire(conn: &mut PgConnection, task_id: i64, caller: i64) -> TxResult<LockedTask> {
    lock_inner(conn, task_id, LockMode::Update, Ask::Acquire { caller })
}

/// The whole fence of a lease-protected write: locks the task for `caller`, then
/// runs `check`. With `path_version` (renew and release name the lease in the path),
/// a path that names another version than the body is `stale_lease_version` first.
pub fn guard(
    conn: &mut PgConnection,
    task_id: i64,
    caller: i64,
    lease_version: i64,
    path_version: Option<i64>,
    guard: Guard,
) -> TxResult<(LockedTask, Held)> {
    let ask = Ask::Lease {
        caller,
        version: lease_version,
        path_version,
        guard,
    };
    let task = lock_inner(conn, task_id, LockMode::Update, ask)?;
    let held = verdict(&task, ask)?;
    Ok((task, held))
}

fn lock_inner(
    conn: &mut PgConnection,
    task_id: i64,
    mode: LockMode,
    ask: Ask,
) -> TxResult<LockedTask> {
    let (caller, lease_version) = match ask {
        Ask::Nothing => (None, None),
        Ask::Lease {
            caller, version, ..
        } => (Some(caller), Some(version)),
        Ask::Acquire { caller } => (Some(caller), None),
    };
    // `$4`: 0 asks nothing, 1 `lease_verdict`, 2 `acquire_verdict`. `$7`, the
    // write's kind, also for the open lease's own verdict (`o_workable`).
    let (which, path_version, write) = match ask {
        Ask::Nothing => (0i16, None, Guard::Work.as_sql()),
        Ask::Lease {
            path_version,
            guard,
            ..
        } => (1, path_version, guard.as_sql()),
        Ask::Acquire { .. } => (2, None, ""),
    };
    let statement = match mode {
        LockMode::Update => {
            "SELECT id, orbit_id, status, lease_version FROM tasks WHERE id = $1 FOR UPDATE"
        }
        LockMode::Share => {
            "SELECT id, orbit_id, status, lease_version FROM tasks WHERE id = $1 FOR SHARE"
        }
    };
    let row: Option<TaskLockRow> = crate::db::sql(statement)
        .bind::<BigInt, _>(task_id)
        .get_result(conn)
        .optional()?;
    let row = row.ok_or_else(|| ApiError::not_found("Task"))?;
    // Read after the lock statement returned: a wait for the lock cannot make this
    // decision in the past. The partial unique indexes allow at most one open lease
    // and one PENDING handoff per task, so this is one row. The open lease, if any,
    // is the task's newest: a version is issued (acquire, accept) only after the
    // open lease ended, so it is looked up by the unique (task_id, lease_version)
    // index. Were that ever violated, the database still refuses a second open
    // lease (`leases_one_open_per_task`) and overlapping ones (the exclusion
    // constraint). Whether the open lease's holder may go on with it
    // (`LockedTask::workable_by`) is asked of `lease_verdict` too, for a plain lock
    // and after a lease write's refusal only (`OFFSET 0` keeps the inner query
    // one, so its verdict is computed once).
    let after: AfterLock = crate::db::sql(
        "SELECT s.*, \
                CASE WHEN s.o_id IS NOT NULL AND ($4 = 0 OR ($4 = 1 AND s.verdict IS NOT NULL)) \
                     THEN lease_verdict($1, s.o_contributor, s.o_version, NULL, $7, s.now) IS NULL \
                END AS o_workable \
         FROM (WITH clock AS (SELECT clock_timestamp() AS now) \
         SELECT clock.now, \
                o.id AS o_id, o.contributor_id AS o_contributor, \
                o.lease_version AS o_version, o.expires_at AS o_expires, \
                lease_is_active(o.end_reason, o.expires_at, clock.now) AS o_active, \
                v.id AS v_id, \
                v.end_reason AS v_end_reason, v.expires_at AS v_expires, \
                h.id AS h_id, h.from_contributor AS h_from, h.to_contributor AS h_to, \
                handoff_is_live(h.status, h.expires_at, clock.now) AS h_live, \
                CASE $4 WHEN 1 THEN lease_verdict($1, $5, $2, $6, $7, clock.now) \
                        WHEN 2 THEN acquire_verdict($1, $5, clock.now) END AS verdict \
         FROM clock \
         LEFT JOIN leases o ON o.task_id = $1 AND o.lease_version = $3 \
                           AND o.end_reason IS NULL \
         LEFT JOIN leases v ON v.task_id = $1 AND v.lease_version = $2 \
         LEFT JOIN handoffs h ON h.task_id = $1 AND h.status = 'PENDING' \
         OFFSET 0) s",
    )
    .bind::<BigInt, _>(task_id)
    .bind::<Nullable<BigInt>, _>(lease_version)
    .bind::<BigInt, _>(row.lease_version)
    .bind::<diesel::sql_types::SmallInt, _>(which)
    .bind::<Nullable<BigInt>, _>(caller)
    .bind::<Nullable<BigInt>, _>(path_version)
    .bind::<Text, _>(write)
    .get_result(conn)?;
    let open_lease = match (
        after.o_id,
        after.o_contributor,
        after.o_version,
        after.o_expires,
        after.o_active,
    ) {
        (Some(id), Some(contributor_id), Some(lease_version), Some(expires_at), Some(active)) => {
            Some(OpenLease {
                id,
                contributor_id,
                lease_version,
                expires_at,
                active,
            })
        }
        _ => None,
    };
    let presented = match (after.v_id, after.v_expires) {
        (Some(id), Some(expires_at)) => Some(PresentedLease {
            id,
            end_reason: after.v_end_reason,
            expires_at,
        }),
        _ => None,
    };
    let pending_handoff = match (after.h_id, after.h_from, after.h_live) {
        (Some(id), Some(from_contributor), Some(live)) => Some(PendingHandoff {
            id,
            from_contributor,
            to_contributor: after.h_to,
            live,
        }),
        _ => None,
    };
    Ok(LockedTask {
        id: row.id,
        orbit_id: row.orbit_id,
        status: row.status,
        lease_version: row.lease_version,
        now: after.now,
        open_lease,
        pending_handoff,
        caller,
        presented,
        asked: ask,
        verdict: after.verdict,
        open_workable: after.o_workable,
    })
}

/// Which kind of lease-protected write asks (`lease_verdict`'s `p_write`): rule 5
/// (`handed_off`) fences all but `ReleaseOrOffer`, and a rule of one kind of write
/// is a `WHEN` on its name there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// Completion, renewal, the fence check: a pending handoff fences.
    Work,
    /// A checkpoint: fenced like `Work`.
    Checkpoint,
    /// Release and a new offer: allowed while a handoff is pending.
    ReleaseOrOffer,
}

impl Guard {
    fn as_sql(self) -> &'static str {
        match self {
            Guard::Work => "work",
            Guard::Checkpoint => "checkpoint",
            Guard::ReleaseOrOffer => "release_or_offer",
        }
    }
}

/// The lease a passing check vouches for.
#[derive(Debug, Clone)]
pub struct Held {
    pub lease_id: i64,
    pub lease_version: i64,
    pub expires_at: DateTime<Utc>,
}

/// 409 `stale_lease_version`. `details.yours` (contract section 17: "the current lease
/// is the caller's own") is true while the task's active lease is the caller's.
/// `details.lease_id` names it only when the caller may go on with it for this kind
/// of write ([`LockedTask::workable_by`]): the one case whose reaction is to
/// continue (`ApiError::recover`). A lease the caller's own pending handoff fences
/// (for all but a release or a new offer) is yours but no lease to continue with:
/// `details.handoff_id` names that handoff. An ended lease is no current one.
/// `mismatch` is `(sent, named)` when the lease a path names has another version
/// than the one the body sent: then the message says so (the version sent may well
/// be the task's current one).
pub fn stale(task: &LockedTask, mismatch: Option<(i64, i64)>) -> ApiError {
    let own = task
        .active_lease()
        .filter(|l| Some(l.contributor_id) == task.caller);
    let workable = task.caller.and_then(|caller| task.workable_by(caller));
    let fenced = match (own, workable) {
        (Some(l), None) => task.pending_from(l.contributor_id),
        _ => None,
    };
    let names = mismatch.map(|(sent, named)| {
        format!(
            "The lease in the path has lease_version {named}, not {sent}: they name two \
             different leases."
        )
    });
    let reaction = if workable.is_some() {
        match names {
            Some(_) => {
                "The task's current lease is yours: continue with the lease in details \
                 (lease_id, current_lease_version)."
            }
            None => {
                "Your lease_version is not the task's current one, but the current lease \
                 is yours: you acquired or accepted the task again since. Continue with the \
                 lease in details (lease_id, current_lease_version); stop using the old \
                 version."
            }
        }
    } else if fenced.is_some() {
        match names {
            Some(_) => {
                "The task's current lease is yours, and your pending handoff \
                 (details.handoff_id) fences it. Stop writing and report; withdraw the handoff \
                 first only if you mean to take the task back."
            }
            None => {
                "Your lease_version is not the task's current one, and the current lease, \
                 yours, is fenced by your pending handoff (details.handoff_id). Stop writing and \
                 report; withdraw the handoff first only if you mean to take the task back."
            }
        }
    } else {
        match names {
            Some(_) => {
                "Stop writing and report; do not retry with a version you did not \
                 acquire."
            }
            None => {
                "Your lease_version is not the task's current one: the task was leased \
                 again, or its lease ended, since. Stop writing and report; do not retry with a \
                 version you did not acquire."
            }
        }
    };
    let message = match names {
        Some(names) => format!("{names} {reaction}"),
        None => reaction.to_owned(),
    };
    let mut details = json!({
        "current_lease_version": task.lease_version,
        "yours": own.is_some(),
    });
    if let Some(lease) = workable {
        details["lease_id"] = json!(lease.id);
    }
    if let Some(h) = fenced {
        details["handoff_id"] = json!(h.id);
    }
    ApiError::conflict("stale_lease_version", message).with_details(details)
}

/// 422 `lease_version_not_issued`: the request names a version above any the task
/// has issued, so it cannot be a lease anyone holds or held.
pub fn not_issued(task: &LockedTask, lease_version: i64) -> ApiError {
    ApiError::invalid(
        "lease_version_not_issued",
        format!(
            "lease_version {lease_version} was never issued for this task (its highest is {}). \
             Send the lease_version your acquire or accept returned.",
            task.lease_version
        ),
    )
    .with_details(json!({ "current_lease_version": task.lease_version }))
}

/// Words the verdict of `lock_for(caller, lease_version)` (the fence check, a
/// `Guard::Work`): the lease it vouches for, or the refusal. Reads nothing.
pub fn check(task: &LockedTask, caller: i64, lease_version: i64, guard: Guard) -> TxResult<Held> {
    let ask = Ask::Lease {
        caller,
        version: lease_version,
        path_version: None,
        guard,
    };
    verdict(task, ask)
}

/// The lease a passing verdict vouches for, or the refusal it names, worded with
/// what the lock statement read. `ask` must be what the statement asked.
fn verdict(task: &LockedTask, ask: Ask) -> TxResult<Held> {
    let Ask::Lease {
        caller,
        version,
        path_version,
        ..
    } = ask
    else {
        return Err(not_asked(task));
    };
    if task.asked != ask {
        return Err(not_asked(task));
    }
    let presented = task.presented.as_ref();
    match (task.verdict.as_deref(), presented) {
        (None, Some(lease)) => Ok(Held {
            lease_id: lease.id,
            lease_version: version,
            expires_at: lease.expires_at,
        }),
        (Some("lease_version_not_issued"), _) => Err(not_issued(task, version).into()),
        (Some("stale_lease_version"), _) => {
            // The version sent is the task's current one, but the path names
            // another lease: say so (else the version is what is stale).
            let mismatch = path_version
                .filter(|named| *named != version && version == task.lease_version)
                .map(|named| (version, named));
            Err(stale(task, mismatch).into())
        }
        (Some("lease_not_held"), _) => Err(ApiError::conflict(
            "lease_not_held",
            "This lease belongs to someone else. Stop writing and report.",
        )
        .with_details(json!({ "current_lease_version": task.lease_version }))
        .into()),
        (Some("lease_expired"), Some(lease)) => Err(expired(&lease.expires_at).into()),
        (Some("lease_released"), Some(lease)) => Err(ApiError::conflict(
            "lease_released",
            "This lease has ended. Stop writing and report.",
        )
        .with_details(json!({ "end_reason": lease.end_reason }))
        .into()),
        (Some("handed_off"), _) => match task.pending_from(caller) {
            Some(h) => Err(handed_off(h.id, h.to_contributor).into()),
            None => Err(unworded(task)),
        },
        _ => Err(unworded(task)),
    }
}

/// Words the verdict of `lock_to_acquire(caller)`: `Ok` when the caller may
/// acquire (the caller still ends a run-out open lease and supersedes a pending
/// handoff), else the refusal.
pub fn admit(task: &LockedTask, caller: i64) -> TxResult<()> {
    if task.asked != (Ask::Acquire { caller }) {
        return Err(not_asked(task));
    }
    match task.verdict.as_deref() {
        None => Ok(()),
        Some("task_closed") => Err(task_closed(&task.status).into()),
        Some("handed_off") => match task.pending_from(caller) {
            Some(h) => Err(handed_off(h.id, h.to_contributor).into()),
            None => Err(unworded(task)),
        },
        Some("lease_already_held") => match &task.open_lease {
            Some(open) => Err(ApiError::conflict(
                "lease_already_held",
                "You already hold the active lease on this task (details: lease_id, \
                 lease_version): renew it instead.",
            )
            .with_details(json!({ "lease_id": open.id, "lease_version": open.lease_version }))
            .into()),
            None => Err(unworded(task)),
        },
        Some("lease_conflict") => match &task.open_lease {
            Some(open) => Err(lease_conflict(&open.expires_at).into()),
            None => Err(unworded(task)),
        },
        Some(_) => Err(unworded(task)),
    }
}

/// A verdict read for another question than the one worded: a bug.
fn not_asked(task: &LockedTask) -> crate::db::TxError {
    tracing::error!(task = task.id, asked = ?task.asked, "fence verdict asked for something else");
    ApiError::internal().into()
}

/// A verdict this module cannot word (or one its reads contradict): a bug.
fn unworded(task: &LockedTask) -> crate::db::TxError {
    tracing::error!(task = task.id, verdict = ?task.verdict, "fence verdict not worded");
    ApiError::internal().into()
}

/// 409 `task_closed`: the task is COMPLETED or CANCELLED.
pub fn task_closed(status: &str) -> ApiError {
    ApiError::conflict(
        "task_closed",
        "This task is closed (COMPLETED or CANCELLED). Stop writing and report.",
    )
    .with_details(json!({ "status": status }))
}

/// 409 `lease_conflict`: someone else holds the task's active lease.
pub fn lease_conflict(expires_at: &DateTime<Utc>) -> ApiError {
    ApiError::conflict(
        "lease_conflict",
        "Someone else holds an active lease on this task. Choose other work \
         (details.expires_at says when that lease runs out).",
    )
    .with_details(json!({ "expires_at": format_ts(expires_at) }))
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
        "You handed this task off and the handoff (details.handoff_id) is pending: your writes \
         to it are fenced. Stop writing and report; withdraw the handoff first only if you \
         mean to take the task back.",
    )
    .with_details(json!({ "handoff_id": handoff_id, "to_contributor_id": to }))
}

#[cfg(test)]
mod tests {
    /// The code of a source file as one line: comments dropped (whole comment lines,
    /// a trailing ` // `, SQL's `--`), string continuations and line breaks joined,
    /// and the unit-test module cut off.
    fn code_of(text: &str, sql: bool) -> String {
        let mut code = String::new();
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            if line.trim() == "#[cfg(test)]" {
                // The test module, whatever attributes stand between.
                let mut rest = lines.clone();
                let module = loop {
                    match rest.next().map(str::trim) {
                        Some(l) if l.starts_with("#[") => continue,
                        Some(l) => break l.starts_with("mod "),
                        None => break false,
                    }
                };
                if module {
                    break;
                }
            }
            let line = match (sql, line.find("--"), line.find(" // ")) {
                (true, Some(at), _) | (false, _, Some(at)) => &line[..at],
                _ => line,
            };
            if line.trim_start().starts_with("//") {
                continue;
            }
            code.push_str(line.trim().trim_end_matches('\\'));
            code.push(' ');
        }
        code
    }

    /// Every place in `code` that compares an expiry (a name ending in `expires` or
    /// `expires_at`): an operator on either side (through parentheses, a cast, `*`
    /// or `&`), a comparison method on it or with it as the argument, or a range
    /// test (`BETWEEN ... AND`, `@>`, `<@`, `GREATEST`, `LEAST`).
    fn comparisons(code: &str) -> Vec<String> {
        let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
        let methods = ["gt(", "lt(", "ge(", "le(", "cmp(", "partial_cmp("];
        let mut found = Vec::new();
        for (at, _) in code.match_indices("expires") {
            let start = code[..at].trim_end_matches(word).len();
            let end = at
                + code[at..]
                    .find(|c: char| !word(c))
                    .unwrap_or(code.len() - at);
            let name = &code[start..end];
            if !(name.ends_with("expires_at") || name.ends_with("expires")) {
                continue; // a duration (`expires_in_seconds`) or a longer word
            }
            let after = code[end..].trim_start_matches([')', ' ']);
            let after = after.strip_prefix("::").map_or(after, |cast| {
                cast.trim_start_matches(|c: char| word(c) || c == ' ')
            });
            // Left of the name: its receiver (`l.`, `self.open.`), `*`, `&`.
            let receiver = code[..start]
                .trim_end_matches(|c: char| word(c) || c == '.' || c == '*' || c == '&')
                .trim_end_matches(' ');
            let before = receiver.trim_end_matches(['(', ' ']);
            // The 60 bytes before, for `BETWEEN` and `GREATEST(`/`LEAST(`.
            let near = (receiver.len().saturating_sub(60)..=receiver.len())
                .find(|i| receiver.is_char_boundary(*i))
                .map_or("", |i| &receiver[i..]);
            let operator_after = after.starts_with(['<', '>']) || after.starts_with("@>");
            let operator_before = ["<=", ">=", "<", ">", "@>", "<@"].iter().any(|op| {
                before.strip_suffix(op).is_some_and(|rest| {
                    // Not `=>`, `->`, nor the `>` closing a generic call
                    // (`bind::<BigInt, _>(expires_in)`, where `(` follows it).
                    !rest.ends_with(['=', '-'])
                        && (!receiver.ends_with(">(") || rest.ends_with(' '))
                })
            });
            let method = methods.iter().any(|m| {
                after.starts_with(&format!(".{m}")) || receiver.ends_with(&format!(".{m}"))
            });
            let upper = near.to_ascii_uppercase();
            let range = after.starts_with("<@")
                || (before.to_ascii_uppercase().ends_with(" AND") && upper.contains("BETWEEN"))
                || ["GREATEST(", "LEAST("]
                    .iter()
                    .any(|f| upper.rfind(f).is_some_and(|i| !upper[i..].contains(')')));
            if operator_after || operator_before || method || range {
                let from = code[..start]
                    .char_indices()
                    .rev()
                    .nth(40)
                    .map_or(0, |(i, _)| i);
                let to = (end + 40..=code.len())
                    .find(|i| code.is_char_boundary(*i))
                    .unwrap_or(code.len());
                found.push(code[from..to].to_owned());
            }
        }
        found
    }

    /// The scanner itself: each way of comparing an expiry is found, each
    /// look-alike is not.
    #[test]
    fn the_expiry_scanner_finds_each_form() {
        let compares = [
            "WHERE $2 >= l.expires_at",
            "WHERE $2>=l.expires_at",
            "WHERE l.expires_at>$2",
            "if now >= lease.expires_at {}",
            "if (l.expires_at) > now {}",
            "WHERE l.expires_at::timestamptz < now()",
            "if o_expires.gt(&now) {}",
            "now.cmp(&l.expires_at)",
            "if now >= *expires_at {}",
            "WHERE $2 BETWEEN acquired_at AND expires_at",
            "WHERE tstzrange(acquired_at, expires_at) @> $2",
            "WHERE GREATEST(expires_at, $2) = expires_at",
            "WHERE least($2, h.expires_at) = $2",
            "UPDATE leases SET x = 1 WHERE expires_at \\\n             > $2",
        ];
        for text in compares {
            assert!(
                !comparisons(&code_of(text, false)).is_empty(),
                "missed: {text}"
            );
        }
        let fine = [
            "x.bind::<BigInt, _>(expires_in_seconds)",
            "match x { Some(expires_at) => 1, _ => 2 }",
            "expires_at: Option<DateTime<Utc>>,",
            "// expires_at > now, in a comment",
            "let x = h.expires_at; // the expiry > none",
            "SELECT expires_at, released_at FROM leases",
            "let é = \"日本語 — ünïcode before and after\"; let x = h.expires_at; // ß",
            "#[cfg(test)]\nmod tests { fn f() { assert!(a.expires_at > now); } }",
        ];
        for text in fine {
            let found = comparisons(&code_of(text, false));
            assert!(found.is_empty(), "flagged: {text}: {found:?}");
        }
        let sql = "-- expires_at > now\nSELECT 1 -- p_expires <= p_now";
        assert!(comparisons(&code_of(sql, true)).is_empty());
    }

    /// Whether a lease is active, and a handoff live, is decided in one place each
    /// (`lease_is_active` and `handoff_is_live`, src/db/functions.sql): no other
    /// query or Rust code of the service (src/ but the bench) compares an expiry.
    /// Only an Idempotency-Key's retention, a rule of its own, does, in two places.
    #[test]
    fn no_code_compares_an_expiry_itself() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = crate::error::source_files();
        files.push(root.join("src/db/functions.sql"));
        let allowed = [
            (
                "src/db/functions.sql",
                "WHERE k.expires_at <= clock_timestamp()",
            ),
            (
                "src/domain/idempotency.rs",
                "idempotency_keys WHERE expires_at <= statement_timestamp()",
            ),
        ];
        let rules = [
            "lease_is_active",
            "lease_end_reason",
            "handoff_is_live",
            "handoff_status",
        ];
        let mut found = Vec::new();
        for file in files
            .iter()
            .filter(|f| !f.starts_with(root.join("src/bin")))
        {
            let text = std::fs::read_to_string(file).expect("read");
            let mut code = code_of(&text, file.extension().is_some_and(|e| e == "sql"));
            // The rules' own definitions compare, and nothing else may.
            for rule in rules {
                let start = format!("CREATE OR REPLACE FUNCTION {rule}(");
                if let Some(at) = code.find(&start) {
                    let end = code[at..].find("$$;").map_or(code.len(), |e| at + e);
                    code.replace_range(at..end, "");
                }
            }
            for (owner, snippet) in allowed {
                if file.ends_with(owner) {
                    assert!(code.contains(snippet), "{owner} no longer says {snippet}");
                    code = code.replacen(snippet, "", 1);
                }
            }
            for place in comparisons(&code) {
                found.push(format!("{}: …{place}…", file.display()));
            }
        }
        assert!(
            found.is_empty(),
            "compare through lease_is_active / handoff_is_live instead:\n{}",
            found.join("\n")
        );
    }
}
