//! Problems, their counters, and the overview.
//!
//! The overview must cost the same for a problem with ten contributions and one
//! with a hundred thousand, so nothing in it loads or aggregates contribution or
//! assessment rows:
//! - `contribution_counts` and `verdict_counts` are read from the problem's row in
//!   `problem_counters`, kept exact by every contribution, revision and assessment
//!   write in its own transaction;
//! - `task_counts`: tasks by status come from the same row (kept by triggers on
//!   `tasks`); which OPEN tasks are LEASED depends on the database clock, so that is
//!   counted at read time over the orbit's *active* leases only (an index range on
//!   `expires_at`), which is bounded by the work in progress, not by history;
//! - the five latest contributions are an index scan of five rows;
//! - pending handoffs are at most one per task (a unique index): the orbit's PENDING
//!   handoffs by their partial index, each probing its task by primary key, capped.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::db::BindNext;
use crate::model::Cursor;
use crate::model::{ts, ContributorActor};
use crate::store::contributions::{Contribution, ContributionKind, VerdictCounts};
use crate::store::handoffs::Handoff;
use crate::store::rows::{all, by_id, ActorC, Id};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ProblemStatus {
    Open,
    Resolved,
}

impl ProblemStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ProblemStatus::Open => "OPEN",
            ProblemStatus::Resolved => "RESOLVED",
        }
    }
}

/// A question or goal that groups tasks and contributions.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Problem {
    #[schema(minimum = 1)]
    pub id: i64,
    #[schema(minimum = 1)]
    pub orbit_id: i64,
    pub title: String,
    /// Untrusted evidence, stored and returned verbatim.
    pub statement: String,
    #[schema(value_type = ProblemStatus)]
    pub status: String,
    pub created_by: ContributorActor,
    #[serde(with = "ts")]
    pub created_at: DateTime<Utc>,
    #[serde(with = "ts")]
    pub updated_at: DateTime<Utc>,
    /// Present on mutation response; omitted on nested read objects.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = i64, required = false)]
    pub orbit_revision: Option<i64>,
}

/// The problem's tasks by state. OPEN: open without an active lease; LEASED: open
/// with one (by the database clock at read time).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct TaskCounts {
    #[serde(rename = "OPEN")]
    pub open: i64,
    #[serde(rename = "LEASED")]
    pub leased: i64,
    #[serde(rename = "COMPLETED")]
    pub completed: i64,
    #[serde(rename = "CANCELLED")]
    pub cancelled: i64,
}

/// The problem's contributions by kind, every kind present (zeros included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, ToSchema, QueryableByName)]
pub struct ContributionCounts {
    #[serde(rename = "ATTEMPT")]
    #[diesel(sql_type = BigInt)]
    pub attempt: i64,
    #[serde(rename = "OBSERVATION")]
    #[diesel(sql_type = BigInt)]
    pub observation: i64,
    #[serde(rename = "CLAIM")]
    #[diesel(sql_type = BigInt)]
    pub claim: i64,
    #[serde(rename = "QUESTION")]
    #[diesel(sql_type = BigInt)]
    pub question: i64,
    #[serde(rename = "NOTE")]
    #[diesel(sql_type = BigInt)]
    pub note: i64,
}

/// Everything about a problem in one read, at one orbit revision.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProblemOverview {
    pub problem: Problem,
    pub task_counts: TaskCounts,
    pub contribution_counts: ContributionCounts,
    /// Assessments of each contribution's current revision only, summed by verdict.
    pub verdict_counts: VerdictCounts,
    /// The five newest contributions of the problem, newest first.
    pub latest_contributions: Vec<Contribution>,
    /// PENDING, unexpired handoffs of the problem's tasks, ascending by id (at most
    /// 100; `GET /api/v1/tasks/{task}/handoffs` lists a task's handoffs in full).
    pub pending_handoffs: Vec<Handoff>,
    /// The orbit revision this overview was read at.
    pub orbit_revision: i64,
}

/// How many contributions `latest_contributions` shows.
pub const LATEST: i64 = 5;
/// The most pending handoffs an overview lists.
pub const MAX_PENDING: i64 = 100;

#[derive(QueryableByName)]
struct ProblemRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = BigInt)]
    orbit_id: i64,
    #[diesel(sql_type = Text)]
    title: String,
    #[diesel(sql_type = Text)]
    statement: String,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = diesel::sql_types::Timestamptz)]
    created_at: DateTime<Utc>,
    #[diesel(sql_type = diesel::sql_types::Timestamptz)]
    updated_at: DateTime<Utc>,
    #[diesel(embed)]
    creator: ActorC,
}

impl From<ProblemRow> for Problem {
    fn from(r: ProblemRow) -> Problem {
        Problem {
            id: r.id,
            orbit_id: r.orbit_id,
            title: r.title,
            statement: r.statement,
            status: r.status,
            created_by: r.creator.into(),
            created_at: r.created_at,
            updated_at: r.updated_at,
            orbit_revision: None,
        }
    }
}

const PROBLEM_SELECT: &str = "SELECT p.id, p.orbit_id, p.title, p.statement, p.status, \
        p.created_at, p.updated_at, \
        c.id AS c_id, c.type AS c_type, c.name AS c_name, c.model_claim AS c_model_claim \
    FROM problems p JOIN contributors c ON c.id = p.created_by";

pub fn problem(conn: &mut PgConnection, id: i64) -> QueryResult<Option<Problem>> {
    by_id::<ProblemRow, _>(conn, format!("{PROBLEM_SELECT} WHERE p.id = $1"), id)
}

pub fn problems_of_orbit(
    conn: &mut PgConnection,
    orbit_id: i64,
    status: Option<&str>,
    page: Cursor,
) -> QueryResult<Vec<Problem>> {
    crate::db::sql(format!(
        "{PROBLEM_SELECT} WHERE (p.orbit_id, p.id) > ($1, $2) AND p.orbit_id = $1 \
           AND ($3::text IS NULL OR p.status = $3) \
         ORDER BY p.orbit_id, p.id LIMIT $4"
    ))
    .bind::<BigInt, _>(orbit_id)
    .bind::<BigInt, _>(page.after)
    .bind::<Nullable<Text>, _>(status)
    .bind::<BigInt, _>(page.fetch())
    .load::<ProblemRow>(conn)
    .map(all)
}

/// The orbit a problem belongs to (for permission checks), without locking.
pub fn problem_orbit(conn: &mut PgConnection, id: i64) -> QueryResult<Option<i64>> {
    crate::db::sql("SELECT orbit_id AS id FROM problems WHERE id = $1")
        .bind::<BigInt, _>(id)
        .get_result::<Id>(conn)
        .optional()
        .map(|o| o.map(|r| r.id))
}

/// Inserts a problem (OPEN) with its zeroed counters. Returns its id.
pub fn insert(
    conn: &mut PgConnection,
    orbit_id: i64,
    title: &str,
    statement: &str,
    creator: i64,
) -> QueryResult<i64> {
    crate::db::sql(
        "WITH t AS (SELECT clock_timestamp() AS now), \
         p AS ( \
             INSERT INTO problems (orbit_id, title, statement, created_by, created_at, updated_at) \
             SELECT $1, $2, $3, $4, t.now, t.now FROM t RETURNING id \
         ) \
         INSERT INTO problem_counters (problem_id) SELECT id FROM p RETURNING problem_id AS id",
    )
    .bind::<BigInt, _>(orbit_id)
    .bind::<Text, _>(title)
    .bind::<Text, _>(statement)
    .bind::<BigInt, _>(creator)
    .get_result::<Id>(conn)
    .map(|r| r.id)
}

/// Sets the status under the problem's row lock. Returns the previous status.
pub fn set_status(conn: &mut PgConnection, id: i64, status: ProblemStatus) -> QueryResult<String> {
    #[derive(QueryableByName)]
    struct Old {
        #[diesel(sql_type = Text)]
        status: String,
    }
    let old: Old = crate::db::sql("SELECT status FROM problems WHERE id = $1 FOR NO KEY UPDATE")
        .bind::<BigInt, _>(id)
        .get_result(conn)?;
    crate::db::sql("UPDATE problems SET status = $2, updated_at = clock_timestamp() WHERE id = $1")
        .bind::<BigInt, _>(id)
        .bind::<Text, _>(status.as_str())
        .execute(conn)?;
    Ok(old.status)
}

// ---------------------------------------------------------------------------
// Counters (row lock order: contribution, then counters, then the orbit)

/// One more contribution of `kind` in the problem.
pub fn count_contribution(
    conn: &mut PgConnection,
    problem_id: i64,
    kind: ContributionKind,
) -> QueryResult<()> {
    count_one(conn, problem_id, kind.column())
}

/// One more assessment of a current revision in the problem.
pub fn count_verdict(
    conn: &mut PgConnection,
    problem_id: i64,
    verdict: crate::store::contributions::Verdict,
) -> QueryResult<()> {
    count_one(conn, problem_id, verdict.column())
}

/// One more in the problem's counter `column` (a column name from an enum).
fn count_one(conn: &mut PgConnection, problem_id: i64, column: &str) -> QueryResult<()> {
    crate::db::sql(format!(
        "UPDATE problem_counters SET {column} = {column} + 1 WHERE problem_id = $1"
    ))
    .bind::<BigInt, _>(problem_id)
    .execute(conn)?;
    Ok(())
}

/// A revision replaced a current revision that had these verdicts: they leave the
/// problem's current counts.
pub fn uncount_verdicts(
    conn: &mut PgConnection,
    problem_id: i64,
    old: &VerdictCounts,
) -> QueryResult<()> {
    if *old == VerdictCounts::default() {
        return Ok(());
    }
    crate::db::sql(
        "UPDATE problem_counters SET supports = supports - $2, disputes = disputes - $3, \
             inconclusive = inconclusive - $4, needs_work = needs_work - $5 \
         WHERE problem_id = $1",
    )
    .bind::<BigInt, _>(problem_id)
    .bind::<BigInt, _>(old.supports)
    .bind::<BigInt, _>(old.disputes)
    .bind::<BigInt, _>(old.inconclusive)
    .bind::<BigInt, _>(old.needs_work)
    .execute(conn)?;
    Ok(())
}

// ---------------------------------------------------------------------------
// The overview's parts (run them in one snapshot: see `api::problems`)

/// The problem's counters: tasks by state (by the database clock), contributions by
/// kind, verdicts over current revisions.
pub fn counters(
    conn: &mut PgConnection,
    orbit_id: i64,
    problem_id: i64,
) -> QueryResult<(TaskCounts, ContributionCounts, VerdictCounts)> {
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = BigInt)]
        tasks_open: i64,
        #[diesel(sql_type = BigInt)]
        tasks_leased: i64,
        #[diesel(sql_type = BigInt)]
        tasks_completed: i64,
        #[diesel(sql_type = BigInt)]
        tasks_cancelled: i64,
        #[diesel(embed)]
        kinds: ContributionCounts,
        #[diesel(embed)]
        verdicts: VerdictCounts,
    }
    // LEASED: the orbit's active leases, by an index range on `expires_at` (the
    // clock is read once, as an init plan, so it can bound the range), each probing
    // its task by primary key. The per-row subquery keeps the planner from scanning
    // the problem's tasks instead. An unended lease only exists on an OPEN task, so
    // LEASED is a part of the OPEN counter.
    let row: Option<Row> = crate::db::sql(
        "SELECT pc.tasks_open, pc.tasks_completed, pc.tasks_cancelled, \
                (SELECT count(*) FROM leases l \
                 WHERE l.orbit_id = $1 \
                   AND lease_is_active(l.end_reason, l.expires_at, (SELECT clock_timestamp())) \
                   AND (SELECT t.problem_id = $2 AND t.status = 'OPEN' \
                        FROM tasks t WHERE t.id = l.task_id)) AS tasks_leased, \
                pc.attempt, pc.observation, pc.claim, pc.question, pc.note, \
                pc.supports, pc.disputes, pc.inconclusive, pc.needs_work \
         FROM problem_counters pc WHERE pc.problem_id = $2",
    )
    .bind::<BigInt, _>(orbit_id)
    .bind::<BigInt, _>(problem_id)
    .get_result(conn)
    .optional()?;
    Ok(row
        .map(|r| {
            let leased = r.tasks_leased.min(r.tasks_open);
            (
                TaskCounts {
                    open: r.tasks_open - leased,
                    leased,
                    completed: r.tasks_completed,
                    cancelled: r.tasks_cancelled,
                },
                r.kinds,
                r.verdicts,
            )
        })
        .unwrap_or_default())
}

/// Ids of the PENDING, unexpired handoffs of the problem's tasks, ascending, capped.
pub fn pending_handoff_ids(
    conn: &mut PgConnection,
    orbit_id: i64,
    problem_id: i64,
) -> QueryResult<Vec<i64>> {
    crate::db::sql(
        "SELECT h.id FROM handoffs h \
         WHERE h.orbit_id = $1 AND handoff_is_live(h.status, h.expires_at, clock_timestamp()) \
           AND (SELECT t.problem_id FROM tasks t WHERE t.id = h.task_id) = $2 \
         ORDER BY h.id LIMIT $3",
    )
    .bind::<BigInt, _>(orbit_id)
    .bind::<BigInt, _>(problem_id)
    .bind::<BigInt, _>(MAX_PENDING)
    .load::<Id>(conn)
    .map(|rows| rows.into_iter().map(|r| r.id).collect())
}

/// The orbit's revision as this connection's snapshot sees it.
pub fn orbit_revision(conn: &mut PgConnection, orbit_id: i64) -> QueryResult<i64> {
    crate::db::sql("SELECT revision AS id FROM orbits WHERE id = $1")
        .bind::<BigInt, _>(orbit_id)
        .get_result::<Id>(conn)
        .map(|r| r.id)
}
