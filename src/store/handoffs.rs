//! Handoffs: the queries of the handoff verbs and of the handoff reads (REST, MCP
//! and the pages): a handoff by id, a task's handoffs, a caller's mailbox, an
//! orbit's PENDING ones (the orbit page's, `pending_of_orbit`), the row a verb
//! decides on (`peek`, `lock`), its insert and its ending, and the superseding of a
//! task's PENDING handoff (`supersede_pending`, by a write holding the task's lock:
//! an acquire, an offer, a completion, a cancellation). Elsewhere: the fence reads
//! the PENDING handoff in its lock statement (`domain::fence`), a member's removal
//! ends its handoffs (`store::tasks::release_member_work`), and
//! `store::problems::pending_handoff_ids` lists a problem's.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text, Timestamptz};

/// Ends the task's PENDING handoff (`handoff_supersede` in functions.sql):
/// SUPERSEDED when still live at `now`, EXPIRED when past its expiry. Returns the
/// ids that were superseded (live ones). Called through
/// `LockedTask::supersede_pending`, which skips it when the lock saw none.
pub fn supersede_pending(
    conn: &mut PgConnection,
    task_id: i64,
    now: DateTime<Utc>,
) -> QueryResult<Vec<i64>> {
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = BigInt)]
        id: i64,
        #[diesel(sql_type = diesel::sql_types::Bool)]
        live: bool,
    }
    let rows: Vec<Row> = crate::db::sql(
        "SELECT e.id, (e.status = 'SUPERSEDED') AS live \
         FROM handoffs h, LATERAL handoff_supersede(h.id, $2) e \
         WHERE h.task_id = $1 AND h.status = 'PENDING'",
    )
    .bind::<BigInt, _>(task_id)
    .bind::<Timestamptz, _>(now)
    .load(conn)?;
    Ok(rows.into_iter().filter(|r| r.live).map(|r| r.id).collect())
}

// ---------------------------------------------------------------------------
// Reads and writes of the handoff resource.

use serde::Serialize;
use utoipa::ToSchema;

use crate::db::BindNext;
use crate::model::Cursor;
use crate::model::{ts, ts_opt, ContributorActor};
use crate::store::rows::{all, by_id, Id};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum HandoffStatus {
    Pending,
    Accepted,
    Superseded,
    Declined,
    Withdrawn,
    Expired,
}

impl HandoffStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            HandoffStatus::Pending => "PENDING",
            HandoffStatus::Accepted => "ACCEPTED",
            HandoffStatus::Superseded => "SUPERSEDED",
            HandoffStatus::Declined => "DECLINED",
            HandoffStatus::Withdrawn => "WITHDRAWN",
            HandoffStatus::Expired => "EXPIRED",
        }
    }
}

/// An offer to pass a task on, with the checkpoint to resume from.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Handoff {
    #[schema(minimum = 1)]
    pub id: i64,
    #[schema(minimum = 1)]
    pub orbit_id: i64,
    #[schema(minimum = 1)]
    pub task_id: i64,
    #[schema(minimum = 1)]
    pub checkpoint_id: i64,
    /// The giver's lease version when it offered.
    #[schema(minimum = 1)]
    pub lease_version: i64,
    /// A PENDING handoff past `expires_at` reads as EXPIRED.
    #[schema(value_type = HandoffStatus)]
    pub status: String,
    pub message: String,
    pub from_contributor: ContributorActor,
    /// Null for an open handoff any other member may accept.
    #[schema(required = true)]
    pub to_contributor: Option<ContributorActor>,
    #[schema(required = true)]
    pub accepted_by: Option<ContributorActor>,
    #[serde(with = "ts")]
    pub expires_at: DateTime<Utc>,
    #[serde(serialize_with = "ts_opt::serialize")]
    #[schema(required = true, value_type = Option<String>, format = DateTime)]
    pub accepted_at: Option<DateTime<Utc>>,
    #[serde(with = "ts")]
    pub created_at: DateTime<Utc>,
    /// Present on mutation response; omitted on nested read objects.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = i64, required = false)]
    pub orbit_revision: Option<i64>,
}

#[derive(QueryableByName)]
struct HandoffRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = BigInt)]
    orbit_id: i64,
    #[diesel(sql_type = BigInt)]
    task_id: i64,
    #[diesel(sql_type = BigInt)]
    checkpoint_id: i64,
    #[diesel(sql_type = BigInt)]
    lease_version: i64,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = Text)]
    message: String,
    #[diesel(sql_type = Timestamptz)]
    expires_at: DateTime<Utc>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    accepted_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Timestamptz)]
    created_at: DateTime<Utc>,
    #[diesel(sql_type = BigInt)]
    f_id: i64,
    #[diesel(sql_type = Text)]
    f_type: String,
    #[diesel(sql_type = Text)]
    f_name: String,
    #[diesel(sql_type = Nullable<Text>)]
    f_model_claim: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    t_id: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    t_type: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    t_name: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    t_model_claim: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    a_id: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    a_type: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    a_name: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    a_model_claim: Option<String>,
}

fn opt_actor(
    id: Option<i64>,
    kind: Option<String>,
    name: Option<String>,
    model_claim: Option<String>,
) -> Option<ContributorActor> {
    id.map(|id| ContributorActor {
        id,
        kind: kind.unwrap_or_default(),
        name: name.unwrap_or_default(),
        model_claim,
    })
}

impl From<HandoffRow> for Handoff {
    fn from(r: HandoffRow) -> Handoff {
        Handoff {
            id: r.id,
            orbit_id: r.orbit_id,
            task_id: r.task_id,
            checkpoint_id: r.checkpoint_id,
            lease_version: r.lease_version,
            status: r.status,
            message: r.message,
            from_contributor: ContributorActor {
                id: r.f_id,
                kind: r.f_type,
                name: r.f_name,
                model_claim: r.f_model_claim,
            },
            to_contributor: opt_actor(r.t_id, r.t_type, r.t_name, r.t_model_claim),
            accepted_by: opt_actor(r.a_id, r.a_type, r.a_name, r.a_model_claim),
            expires_at: r.expires_at,
            accepted_at: r.accepted_at,
            created_at: r.created_at,
            orbit_revision: None,
        }
    }
}

/// The effective status: PENDING past its expiry reads as EXPIRED.
const STATUS_EXPR: &str = "handoff_status(h.status, h.expires_at, clock_timestamp())";

fn select() -> String {
    format!(
        "SELECT h.id, h.orbit_id, h.task_id, h.checkpoint_id, h.lease_version, \
            {STATUS_EXPR} AS status, h.message, h.expires_at, h.accepted_at, h.created_at, \
            f.id AS f_id, f.type AS f_type, f.name AS f_name, f.model_claim AS f_model_claim, \
            t.id AS t_id, t.type AS t_type, t.name AS t_name, t.model_claim AS t_model_claim, \
            a.id AS a_id, a.type AS a_type, a.name AS a_name, a.model_claim AS a_model_claim \
         FROM handoffs h \
         JOIN contributors f ON f.id = h.from_contributor \
         LEFT JOIN contributors t ON t.id = h.to_contributor \
         LEFT JOIN contributors a ON a.id = h.accepted_by"
    )
}

pub fn handoff(conn: &mut PgConnection, id: i64) -> QueryResult<Option<Handoff>> {
    by_id::<HandoffRow, _>(conn, format!("{} WHERE h.id = $1", select()), id)
}

pub fn handoffs_of_task(
    conn: &mut PgConnection,
    task_id: i64,
    page: Cursor,
) -> QueryResult<Vec<Handoff>> {
    crate::db::sql(format!(
        "{} WHERE h.task_id = $1 AND h.id > $2 ORDER BY h.id LIMIT $3",
        select()
    ))
    .bind::<BigInt, _>(task_id)
    .bind::<BigInt, _>(page.after)
    .bind::<BigInt, _>(page.fetch())
    .load::<HandoffRow>(conn)
    .map(all)
}

/// The caller's inbox (targeted at it, plus open handoffs in its orbits that it
/// did not give) or outbox (given by it), optionally by effective status.
pub fn mailbox(
    conn: &mut PgConnection,
    caller: i64,
    outbox: bool,
    status: Option<&str>,
    page: Cursor,
) -> QueryResult<Vec<Handoff>> {
    let who = if outbox {
        "h.from_contributor = $1"
    } else {
        "(h.to_contributor = $1 OR (h.to_contributor IS NULL AND h.from_contributor <> $1 \
           AND EXISTS (SELECT 1 FROM memberships m WHERE m.orbit_id = h.orbit_id \
                       AND m.contributor_id = $1)))"
    };
    crate::db::sql(format!(
        "{} WHERE {who} AND h.id > $2 AND ($3::text IS NULL OR {STATUS_EXPR} = $3) \
         ORDER BY h.id LIMIT $4",
        select()
    ))
    .bind::<BigInt, _>(caller)
    .bind::<BigInt, _>(page.after)
    .bind::<Nullable<Text>, _>(status)
    .bind::<BigInt, _>(page.fetch())
    .load::<HandoffRow>(conn)
    .map(all)
}

/// The raw facts a handoff verb decides on, read under the row lock.
#[derive(Debug, Clone, QueryableByName)]
pub struct HandoffLock {
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    #[diesel(sql_type = BigInt)]
    pub orbit_id: i64,
    #[diesel(sql_type = BigInt)]
    pub task_id: i64,
    #[diesel(sql_type = Text)]
    pub status: String,
    #[diesel(sql_type = BigInt)]
    pub from_contributor: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub to_contributor: Option<i64>,
    #[diesel(sql_type = Timestamptz)]
    pub expires_at: DateTime<Utc>,
    /// Who accepted it (ACCEPTED only).
    #[diesel(sql_type = Nullable<BigInt>)]
    pub accepted_by: Option<i64>,
    /// The lease the accept issued, and its version (ACCEPTED only).
    #[diesel(sql_type = Nullable<BigInt>)]
    pub accepted_lease_id: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub accepted_lease_version: Option<i64>,
}

/// The columns of a `HandoffLock` (`h` the handoff, `l` its accepted lease).
const LOCK_COLUMNS: &str = "h.id, h.orbit_id, h.task_id, h.status, h.from_contributor, \
     h.to_contributor, h.expires_at, h.accepted_by, h.accepted_lease_id, \
     (SELECT l.lease_version FROM leases l WHERE l.id = h.accepted_lease_id) \
     AS accepted_lease_version";

pub fn peek(conn: &mut PgConnection, id: i64) -> QueryResult<Option<HandoffLock>> {
    crate::db::sql(format!(
        "SELECT {LOCK_COLUMNS} FROM handoffs h WHERE h.id = $1"
    ))
    .bind::<BigInt, _>(id)
    .get_result(conn)
    .optional()
}

/// Locks a handoff row (after its task's row: see the lock order in `fence`), and
/// whether it is live (`handoff_is_live`) at `now`, the task lock's instant.
pub fn lock(
    conn: &mut PgConnection,
    id: i64,
    now: DateTime<Utc>,
) -> QueryResult<(HandoffLock, bool)> {
    #[derive(QueryableByName)]
    struct Locked {
        #[diesel(embed)]
        handoff: HandoffLock,
        #[diesel(sql_type = diesel::sql_types::Bool)]
        live: bool,
    }
    let row: Locked = crate::db::sql(format!(
        "SELECT {LOCK_COLUMNS}, handoff_is_live(h.status, h.expires_at, $2) AS live \
         FROM handoffs h WHERE h.id = $1 FOR UPDATE OF h"
    ))
    .bind::<BigInt, _>(id)
    .bind::<Timestamptz, _>(now)
    .get_result(conn)?;
    Ok((row.handoff, row.live))
}

#[allow(clippy::too_many_arguments)]
pub fn insert(
    conn: &mut PgConnection,
    orbit_id: i64,
    task_id: i64,
    checkpoint_id: i64,
    lease_version: i64,
    message: &str,
    from: i64,
    to: Option<i64>,
    now: DateTime<Utc>,
    expires_in_seconds: i64,
) -> QueryResult<i64> {
    crate::db::sql(
        "INSERT INTO handoffs (orbit_id, task_id, checkpoint_id, lease_version, message, \
                               from_contributor, to_contributor, created_at, expires_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8 + make_interval(secs => $9)) RETURNING id",
    )
    .bind::<BigInt, _>(orbit_id)
    .bind::<BigInt, _>(task_id)
    .bind::<BigInt, _>(checkpoint_id)
    .bind::<BigInt, _>(lease_version)
    .bind::<Text, _>(message)
    .bind::<BigInt, _>(from)
    .bind::<Nullable<BigInt>, _>(to)
    .bind::<Timestamptz, _>(now)
    .bind::<BigInt, _>(expires_in_seconds)
    .get_result::<Id>(conn)
    .map(|r| r.id)
}

/// Moves a PENDING handoff to a final status.
pub fn finish(
    conn: &mut PgConnection,
    id: i64,
    status: HandoffStatus,
    now: DateTime<Utc>,
    accepted_by: Option<i64>,
    accepted_lease_id: Option<i64>,
    decline_reason: Option<&str>,
) -> QueryResult<()> {
    crate::db::sql(
        "UPDATE handoffs SET status = $2, ended_at = $3, accepted_by = $4, \
             accepted_at = CASE WHEN $4::bigint IS NULL THEN NULL ELSE $3 END, \
             accepted_lease_id = $5, decline_reason = $6 \
         WHERE id = $1 AND status = 'PENDING'",
    )
    .bind::<BigInt, _>(id)
    .bind::<Text, _>(status.as_str())
    .bind::<Timestamptz, _>(now)
    .bind::<Nullable<BigInt>, _>(accepted_by)
    .bind::<Nullable<BigInt>, _>(accepted_lease_id)
    .bind::<Nullable<Text>, _>(decline_reason)
    .execute(conn)?;
    Ok(())
}

/// True when the checkpoint belongs to the task.
pub fn checkpoint_of_task(
    conn: &mut PgConnection,
    checkpoint_id: i64,
    task_id: i64,
) -> QueryResult<bool> {
    #[derive(QueryableByName)]
    struct B {
        #[diesel(sql_type = diesel::sql_types::Bool)]
        ok: bool,
    }
    crate::db::sql("SELECT EXISTS (SELECT 1 FROM checkpoints WHERE id = $1 AND task_id = $2) AS ok")
        .bind::<BigInt, _>(checkpoint_id)
        .bind::<BigInt, _>(task_id)
        .get_result::<B>(conn)
        .map(|b| b.ok)
}

/// An orbit's PENDING, unexpired handoffs, ascending by id (`page.fetch()` rows), by
/// `handoffs_orbit_pending_idx`.
pub fn pending_of_orbit(
    conn: &mut PgConnection,
    orbit_id: i64,
    page: Cursor,
) -> QueryResult<Vec<Handoff>> {
    crate::db::sql(format!(
        "{} WHERE h.orbit_id = $1 AND handoff_is_live(h.status, h.expires_at, clock_timestamp()) \
           AND h.id > $2 ORDER BY h.id LIMIT $3",
        select()
    ))
    .bind::<BigInt, _>(orbit_id)
    .bind::<BigInt, _>(page.after)
    .bind::<BigInt, _>(page.fetch())
    .load::<HandoffRow>(conn)
    .map(all)
}
