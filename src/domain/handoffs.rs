//! Handoffs: offer, accept, decline, withdraw, and the mailboxes (contract 9.2–9.4):
//! the units of work and reads behind `http::api::handoffs` and the MCP tools.
//!
//! A handoff fences its giver while PENDING (see `fence`), reserves nothing, and is
//! superseded by a newer offer, by anyone's acquire, by cancellation or by the
//! removal of the giver or the named recipient.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::{IntoParams, ToSchema};

use crate::db::{self, TxResult};
use crate::domain::access;
use crate::domain::auth::{Bearer, Caller};
use crate::domain::fence::{self, lease_conflict, task_closed, Guard, LockMode, LockedTask};
use crate::domain::idempotency::{Gate, Operation};
use crate::domain::leases::duration;
use crate::domain::orbits::Empty;
use crate::domain::revision::Change;
use crate::domain::tasks::task_member;
use crate::domain::write::{claim, public_page, public_read, Reply};
use crate::domain::Core;
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::model::{page_problems, query_cursor, Limits, Page, PageParams, Validate, MAX_PAGE};
use crate::store::handoffs::{self as store, Handoff, HandoffLock, HandoffStatus};
use crate::store::orbits as orbit_store;
use crate::store::tasks::{self as task_store, Lease};

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OfferHandoff {
    /// The version of the lease you hold.
    #[schema(minimum = 1)]
    pub lease_version: i64,
    /// A checkpoint of this task to resume from.
    #[schema(minimum = 1)]
    pub checkpoint_id: i64,
    /// Another member of the orbit; absent = an open handoff any other member may accept.
    #[schema(minimum = 1)]
    pub to_contributor_id: Option<i64>,
    #[schema(min_length = 1, max_length = 4000)]
    pub message: String,
    /// 60..86400 seconds, default 3600.
    #[schema(minimum = 60, maximum = 86400, default = 3600)]
    pub expires_in_seconds: Option<i64>,
}

impl Validate for OfferHandoff {
    fn validate(&self, e: &mut FieldErrors) {
        if self.lease_version < 1 {
            e.add("lease_version", "must be at least 1");
        }
        e.text("message", &self.message, 1, 4000);
    }

    fn validate_within(&self, limits: &Limits, e: &mut FieldErrors) {
        if let Err(problem) = expiry(limits.min_seconds, self.expires_in_seconds) {
            e.add("expires_in_seconds", problem);
        }
    }
}

/// An offer's `expires_in_seconds` when it gives none.
pub const DEFAULT_EXPIRY: i64 = 3600;

/// The one rule of an offer's optional `expires_in_seconds` ([`DEFAULT_EXPIRY`];
/// `min` is `leases::min_duration`): the seconds, or the problem in words.
fn expiry(min: i64, requested: Option<i64>) -> Result<i64, String> {
    let expires_in = requested.unwrap_or(DEFAULT_EXPIRY);
    if expires_in < min || expires_in > 86400 {
        return Err(format!("must be between {min} and 86400"));
    }
    Ok(expires_in)
}

fn written_handoff(
    conn: &mut diesel::PgConnection,
    id: i64,
    rev: Option<i64>,
) -> TxResult<Handoff> {
    let mut h = store::handoff(conn, id)?.ok_or(ApiError::internal())?;
    h.orbit_revision = rev;
    Ok(h)
}

pub static OFFER_HANDOFF: Operation = Operation::required("POST", "/api/v1/tasks/{task}/handoffs");

/// The offer, inside `domain::write::run`'s transaction (REST and MCP). `min` is the
/// smallest `expires_in_seconds` (`leases::min_duration`).
pub fn offer(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    min: i64,
    task_id: i64,
    body: ApiResult<&OfferHandoff>,
) -> TxResult<Reply> {
    let (orbit_id, _) = task_member(conn, task_id, caller.id())?;
    let value = body?;
    let mut errors = FieldErrors::default();
    let expires_in = expiry(min, value.expires_in_seconds).unwrap_or_else(|problem| {
        errors.add("expires_in_seconds", problem);
        0
    });
    if !store::checkpoint_of_task(conn, value.checkpoint_id, task_id)? {
        errors.add("checkpoint_id", "must be a checkpoint of this task");
    }
    // Whether the recipient is a member is the orbit's state, which moves on: a
    // replay answers what the first request was told even after they left (contract
    // section 5), so alone this problem is judged after the key. Beside another
    // problem it is reported with it (every problem at once): a request with any
    // other problem was never done, so it has nothing to replay. The recipient's
    // membership is held (`held_role`): a removal of the recipient comes wholly
    // before the offer, or after it and supersedes it.
    let mut stranger = false;
    if let Some(to) = value.to_contributor_id {
        if to == caller.id() {
            errors.add("to_contributor_id", "must be another member, not yourself");
        } else {
            stranger = orbit_store::held_role(conn, orbit_id, to)?.is_none();
        }
    }
    const NOT_A_MEMBER: &str = "must be a member of this orbit";
    if stranger && !errors.is_empty() {
        errors.add("to_contributor_id", NOT_A_MEMBER);
    }
    errors.finish()?;
    claim!(gate, conn, &[task_id]);
    if stranger {
        return Err(ApiError::field("to_contributor_id", NOT_A_MEMBER).into());
    }
    let (task, held) = fence::guard(
        conn,
        task_id,
        caller.id(),
        value.lease_version,
        None,
        Guard::ReleaseOrOffer,
    )?;
    let superseded = task.supersede_pending(conn)?;
    let id = store::insert(
        conn,
        orbit_id,
        task_id,
        value.checkpoint_id,
        held.lease_version,
        &value.message,
        caller.id(),
        value.to_contributor_id,
        task.now,
        expires_in,
    )?;
    let mut summary = match value.to_contributor_id {
        Some(to) => format!("handoff {id} of task {task_id} offered to contributor {to}"),
        None => format!("open handoff {id} of task {task_id} offered"),
    };
    for h in superseded {
        summary.push_str(&format!("; handoff {h} superseded"));
    }
    let rev = gate.record(
        orbit_id,
        caller.id(),
        Change {
            kind: "handoff.offered",
            entity_type: "handoff",
            entity_id: id,
            task_id: Some(task_id),
            summary,
        },
    )?;
    let mut out = written_handoff(conn, id, None)?;
    out.orbit_revision = Some(rev);
    Reply::created(&out, orbit_id)
}

/// Body of an accept: all optional, no other fields.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcceptHandoff {
    #[schema(value_type = i64, required = false, minimum = 60, maximum = 3600, default = 900)]
    #[serde(default, deserialize_with = "crate::domain::leases::present_seconds")]
    pub duration_seconds: Option<i64>,
}

impl Validate for AcceptHandoff {
    fn validate(&self, _: &mut FieldErrors) {}

    fn validate_within(&self, limits: &Limits, e: &mut FieldErrors) {
        crate::domain::leases::check_duration(limits, self.duration_seconds, e);
    }
}

/// The result of an accept: the handoff, your new lease, and the revision.
#[derive(Debug, Serialize, ToSchema)]
pub struct AcceptedHandoff {
    pub handoff: Handoff,
    pub lease: Lease,
    #[schema(minimum = 1)]
    pub task_id: i64,
    pub orbit_revision: i64,
}

/// 409 `handoff_not_pending`. When ACCEPTED, `details.accepted_by`. When the caller
/// holds the task's active lease, unfenced (`LockedTask::workable_by`), also that
/// lease (`details.lease_id`, `lease_version`), so it learns it has the task: the
/// one who accepted (it lost the accept's answer) and the accept's lease is still
/// active, or anyone else holding it ([`holds`]: the giver, when the handoff was
/// declined, superseded, withdrawn or ran out). A lease that has ended since
/// (completed, released, run out) or that a newer handoff of the caller's fences is
/// no lease to continue with: the answer is then the plain one.
pub fn not_pending(h: &HandoffLock, task: &LockedTask, caller: i64) -> ApiError {
    let mut details = json!({ "current_status": h.status });
    let accepted = h.accepted_by == Some(caller)
        && h.accepted_lease_id.is_some()
        && task.workable_by(caller).map(|l| l.id) == h.accepted_lease_id;
    if h.status == HandoffStatus::Accepted.as_str() {
        details["accepted_by"] = json!(h.accepted_by);
        if accepted {
            details["lease_id"] = json!(h.accepted_lease_id);
            details["lease_version"] = json!(h.accepted_lease_version);
        }
    }
    let message = if accepted {
        "You already accepted this handoff: the task's lease in details (lease_id, \
         lease_version) was issued to you. Continue the task with it."
    } else if holds(task, caller, &mut details) {
        HOLDS
    } else {
        "This handoff is no longer pending. Choose other work."
    };
    ApiError::conflict("handoff_not_pending", message).with_details(details)
}

/// Whether `caller` holds the task's active lease, unfenced
/// (`LockedTask::workable_by`): then the lease goes into `details` (`lease_id`,
/// `lease_version`; `recover: continue`), since its one reaction is to go on with
/// it ([`HOLDS`]), not to leave a task its lease keeps from everyone else. The
/// giver still holding it (the handoff was declined, withdrawn or ran out), or the
/// recipient that acquired the task itself once the handoff was over.
fn holds(task: &LockedTask, caller: i64, details: &mut Value) -> bool {
    let Some(lease) = task.workable_by(caller) else {
        return false;
    };
    details["lease_id"] = json!(lease.id);
    details["lease_version"] = json!(lease.lease_version);
    true
}

/// The words of [`holds`].
const HOLDS: &str = "This handoff is no longer pending, and you hold the task's lease \
     (details: lease_id, lease_version): continue the task with it.";

/// Resolves a handoff named in a path and checks the caller belongs to its orbit.
fn handoff_member(conn: &mut diesel::PgConnection, id: i64, caller: i64) -> TxResult<HandoffLock> {
    let h = store::peek(conn, id)?.ok_or_else(|| ApiError::not_found("Handoff"))?;
    access::require_member(conn, h.orbit_id, caller)?;
    Ok(h)
}

/// Under the task and handoff locks: the handoff must still be PENDING and unexpired
/// (`live`, as `store::lock` read it at the task lock's instant). `caller` is who
/// asks: one that holds the task's lease learns it ([`holds`], [`not_pending`]).
fn still_pending(h: &HandoffLock, live: bool, task: &LockedTask, caller: i64) -> TxResult<()> {
    let (pending, expired) = (
        HandoffStatus::Pending.as_str(),
        HandoffStatus::Expired.as_str(),
    );
    if h.status != pending && h.status != expired {
        return Err(not_pending(h, task, caller).into());
    }
    if !live {
        let mut details = json!({ "current_status": expired });
        let message = if holds(task, caller, &mut details) {
            HOLDS
        } else {
            "This handoff has expired. Choose other work."
        };
        return Err(ApiError::conflict("handoff_expired", message)
            .with_details(details)
            .into());
    }
    Ok(())
}

pub static ACCEPT_HANDOFF: Operation =
    Operation::required("POST", "/api/v1/handoffs/{handoff}/accept");

/// The accept, inside `domain::write::run`'s transaction (REST and MCP).
pub fn accept(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    min: i64,
    handoff_id: i64,
    body: ApiResult<&AcceptHandoff>,
) -> TxResult<Reply> {
    let h = handoff_member(conn, handoff_id, caller.id())?;
    if h.from_contributor == caller.id() {
        return Err(ApiError::forbidden(
            "own_handoff",
            "You cannot accept your own handoff; withdraw it instead while it is pending.",
        )
        .into());
    }
    if h.to_contributor.is_some_and(|to| to != caller.id()) {
        return Err(ApiError::forbidden(
            "not_recipient",
            "This handoff is offered to another contributor.",
        )
        .into());
    }
    let seconds = duration(min, body?.duration_seconds)?;
    claim!(gate, conn, &[handoff_id]);
    let task = fence::lock(conn, h.task_id, LockMode::Update)?;
    let (h, live) = store::lock(conn, handoff_id, task.now)?;
    still_pending(&h, live, &task, caller.id())?;
    if !task.is_open() {
        return Err(task_closed(&task.status).into());
    }
    let mut summary = format!("handoff {handoff_id} accepted");
    if let Some(open) = &task.open_lease {
        if open.active {
            if open.contributor_id != h.from_contributor {
                return Err(lease_conflict(&open.expires_at).into());
            }
            task_store::end_lease(conn, open.id, task.now, "HANDED_OFF")?;
            summary.push_str(&format!(
                "; giver's lease v{} ended (HANDED_OFF)",
                open.lease_version
            ));
        } else {
            task_store::end_lease(conn, open.id, task.now, "EXPIRED")?;
            summary.push_str(&format!(
                "; giver's lease v{} had expired",
                open.lease_version
            ));
        }
    }
    let version = task.lease_version + 1;
    let lease = task_store::insert_lease(
        conn,
        h.task_id,
        h.orbit_id,
        caller.id(),
        version,
        task.now,
        seconds,
    )?;
    let lease_id = lease.id;
    store::finish(
        conn,
        handoff_id,
        HandoffStatus::Accepted,
        task.now,
        Some(caller.id()),
        Some(lease_id),
        None,
    )?;
    summary.push_str(&format!(
        "; lease v{version} issued to contributor {}",
        caller.id()
    ));
    let handoff = written_handoff(conn, handoff_id, None)?;
    let rev = gate.record(
        h.orbit_id,
        caller.id(),
        Change {
            kind: "handoff.accepted",
            entity_type: "handoff",
            entity_id: handoff_id,
            task_id: Some(h.task_id),
            summary,
        },
    )?;
    let accepted = AcceptedHandoff {
        handoff,
        lease,
        task_id: h.task_id,
        orbit_revision: rev,
    };
    Reply::ok(&accepted, h.orbit_id)
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeclineHandoff {
    #[schema(max_length = 4000)]
    pub reason: Option<String>,
}

impl Validate for DeclineHandoff {
    fn validate(&self, e: &mut FieldErrors) {
        if let Some(r) = &self.reason {
            e.text("reason", r, 0, 4000);
        }
    }
}

/// Shared by decline and withdraw, after their checks: claims the key, then ends a
/// PENDING handoff under the locks.
fn end_pending(
    conn: &mut diesel::PgConnection,
    gate: &mut Gate,
    handoff_id: i64,
    caller: i64,
    status: HandoffStatus,
    reason: Option<&str>,
) -> TxResult<Reply> {
    claim!(gate, conn, &[handoff_id]);
    let h = store::peek(conn, handoff_id)?.ok_or(ApiError::internal())?;
    let task = fence::lock(conn, h.task_id, LockMode::Update)?;
    let (h, live) = store::lock(conn, handoff_id, task.now)?;
    still_pending(&h, live, &task, caller)?;
    store::finish(conn, handoff_id, status, task.now, None, None, reason)?;
    let (kind, verb) = match status {
        HandoffStatus::Declined => ("handoff.declined", "declined"),
        _ => ("handoff.withdrawn", "withdrawn"),
    };
    let rev = gate.record(
        h.orbit_id,
        caller,
        Change {
            kind,
            entity_type: "handoff",
            entity_id: handoff_id,
            task_id: Some(h.task_id),
            summary: format!("handoff {handoff_id} {verb}; giver unfenced"),
        },
    )?;
    Reply::ok(&written_handoff(conn, handoff_id, Some(rev))?, h.orbit_id)
}

pub static DECLINE_HANDOFF: Operation =
    Operation::required("POST", "/api/v1/handoffs/{handoff}/decline");

/// The decline, inside `domain::write::run`'s transaction (REST and MCP).
pub fn decline(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    handoff_id: i64,
    body: ApiResult<&DeclineHandoff>,
) -> TxResult<Reply> {
    let h = handoff_member(conn, handoff_id, caller.id())?;
    // The giver is told what frees it (a withdraw), as on accept; anyone else is
    // told to leave a handoff that is not theirs to decline.
    if h.from_contributor == caller.id() {
        return Err(ApiError::forbidden(
            "own_handoff",
            "You cannot decline your own handoff; withdraw it instead while it is pending.",
        )
        .into());
    }
    if h.to_contributor != Some(caller.id()) {
        let message = match h.to_contributor {
            Some(_) => "This handoff is offered to another contributor: only they may decline it.",
            None => {
                "This handoff is open to every member, so nobody declines it: accept it or \
                 leave it."
            }
        };
        return Err(ApiError::forbidden("not_recipient", message).into());
    }
    let value = body?;
    end_pending(
        conn,
        gate,
        handoff_id,
        caller.id(),
        HandoffStatus::Declined,
        value.reason.as_deref(),
    )
}

pub static WITHDRAW_HANDOFF: Operation =
    Operation::required("POST", "/api/v1/handoffs/{handoff}/withdraw");

/// The withdrawal, inside `domain::write::run`'s transaction (REST and MCP).
pub fn withdraw(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    handoff_id: i64,
    body: ApiResult<&Empty>,
) -> TxResult<Reply> {
    let h = handoff_member(conn, handoff_id, caller.id())?;
    if h.from_contributor != caller.id() {
        return Err(ApiError::forbidden(
            "not_giver",
            "Only the contributor who offered a handoff may withdraw it.",
        )
        .into());
    }
    body?;
    end_pending(
        conn,
        gate,
        handoff_id,
        caller.id(),
        HandoffStatus::Withdrawn,
        None,
    )
}

#[derive(Debug, Clone, Copy, Deserialize, ToSchema, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum MailBox {
    #[default]
    Inbox,
    Outbox,
}

/// The query of `GET /api/v1/handoffs`: which mailbox, which status, which page.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct MailboxQuery {
    /// `inbox` (default): targeted at you, plus open handoffs in your orbits that you
    /// did not give. `outbox`: given by you.
    #[serde(rename = "box")]
    #[param(rename = "box", inline)]
    pub mailbox: Option<MailBox>,
    /// Only handoffs with this (effective) status.
    pub status: Option<HandoffStatus>,
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<i64>,
    #[param(minimum = 0)]
    pub after: Option<i64>,
}

impl Validate for MailboxQuery {
    fn validate(&self, e: &mut FieldErrors) {
        page_problems(e, self.limit, self.after, MAX_PAGE);
    }
}

/// The caller's inbox or outbox page (REST and MCP).
pub async fn mailbox(core: &Core, q: MailboxQuery, bearer: Bearer) -> ApiResult<Page<Handoff>> {
    let cursor = query_cursor(&q, q.limit, q.after)?;
    let outbox = q.mailbox.unwrap_or_default() == MailBox::Outbox;
    let status = q.status.map(HandoffStatus::as_str);
    let tokens = core.tokens.clone();
    let rows = db::read(&core.pool, move |conn| {
        let caller = bearer.require(conn, &tokens)?;
        Ok(store::mailbox(conn, caller.id(), outbox, status, cursor)?)
    })
    .await?;
    Ok(cursor.page(rows, |h| h.id))
}

/// A handoff (REST and MCP).
pub async fn get(core: &Core, bearer: Bearer, id: i64) -> ApiResult<Handoff> {
    public_read(core, bearer, move |conn| {
        store::handoff(conn, id)?.ok_or_else(|| ApiError::not_found("Handoff").into())
    })
    .await
}

/// A task's handoffs, ascending (REST and MCP).
pub async fn of_task(
    core: &Core,
    params: PageParams,
    bearer: Bearer,
    task_id: i64,
) -> ApiResult<Page<Handoff>> {
    let cursor = params.checked()?;
    public_page(
        core,
        bearer,
        cursor,
        |h: &Handoff| h.id,
        move |conn, cursor| {
            task_store::task_orbit(conn, task_id)?.ok_or_else(|| ApiError::not_found("Task"))?;
            Ok(store::handoffs_of_task(conn, task_id, cursor)?)
        },
    )
    .await
}
