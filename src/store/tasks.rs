//! Tasks, leases and checkpoints: rows, reads, and the writes the fence allows.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Bool, Nullable, Text, Timestamptz};
use serde::Serialize;
use utoipa::ToSchema;

use crate::db::BindNext;
use crate::model::Cursor;
use crate::model::{ts, ts_opt, ContributorActor};
use crate::store::rows::{by_id, by_ids, Id};
use crate::store::stamp::{split, Stamp, Stamped};

fn actor(id: i64, kind: String, name: String, model_claim: Option<String>) -> ContributorActor {
    crate::store::contributors::actor((id, kind, name, model_claim))
}

/// A fenced lease on a task.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Lease {
    #[schema(minimum = 1)]
    pub id: i64,
    #[schema(minimum = 1)]
    pub task_id: i64,
    pub contributor: ContributorActor,
    /// The fencing token: strictly increasing per task.
    #[schema(minimum = 1)]
    pub lease_version: i64,
    #[serde(with = "ts")]
    pub acquired_at: DateTime<Utc>,
    #[serde(with = "ts")]
    pub expires_at: DateTime<Utc>,
    #[serde(serialize_with = "ts_opt::serialize")]
    #[schema(required = true, value_type = Option<String>, format = DateTime)]
    pub renewed_at: Option<DateTime<Utc>>,
    #[serde(serialize_with = "ts_opt::serialize")]
    #[schema(required = true, value_type = Option<String>, format = DateTime)]
    pub released_at: Option<DateTime<Utc>>,
    /// Not ended and not expired, by the database clock at read time.
    pub is_active: bool,
    /// Why the lease ended: RELEASED, EXPIRED, HANDED_OFF, COMPLETED, CANCELLED or
    /// MEMBER_REMOVED; null while it has not.
    #[schema(required = true, value_type = Option<LeaseEndReason>)]
    pub end_reason: Option<String>,
    /// Present on mutation response; omitted on nested read objects.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = i64, required = false)]
    pub orbit_revision: Option<i64>,
}

#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum LeaseEndReason {
    Released,
    Expired,
    HandedOff,
    Completed,
    Cancelled,
    MemberRemoved,
}

#[derive(Debug, Clone, Copy, Serialize, serde::Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TaskStatus {
    Open,
    Completed,
    Cancelled,
}

impl TaskStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Open => "OPEN",
            TaskStatus::Completed => "COMPLETED",
            TaskStatus::Cancelled => "CANCELLED",
        }
    }
}

/// A unit of work in an orbit, worked under a fenced lease.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Task {
    #[schema(minimum = 1)]
    pub id: i64,
    #[schema(minimum = 1)]
    pub orbit_id: i64,
    #[schema(required = true)]
    pub problem_id: Option<i64>,
    pub title: String,
    pub description: String,
    #[schema(value_type = TaskStatus)]
    pub status: String,
    /// The highest lease version ever issued (0 before the first lease).
    pub lease_version: i64,
    #[schema(required = true)]
    pub active_lease: Option<Lease>,
    /// The completion summary, when COMPLETED with one.
    #[schema(required = true)]
    pub completion_summary: Option<String>,
    #[schema(required = true)]
    pub result_contribution_id: Option<i64>,
    /// The cancellation reason, when CANCELLED with one.
    #[schema(required = true)]
    pub cancel_reason: Option<String>,
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

/// Saved progress on a task, readable by whoever continues it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Checkpoint {
    #[schema(minimum = 1)]
    pub id: i64,
    #[schema(minimum = 1)]
    pub task_id: i64,
    #[schema(minimum = 1)]
    pub orbit_id: i64,
    #[schema(minimum = 1)]
    pub lease_version: i64,
    /// 1, 2, 3… per task, without gaps.
    #[schema(minimum = 1)]
    pub sequence: i64,
    pub author: ContributorActor,
    pub summary: String,
    /// Any JSON, returned in its RFC 8785 canonical form.
    #[schema(value_type = Value)]
    pub state: Box<serde_json::value::RawValue>,
    /// Lowercase hex SHA-256 of the canonical form of `state`.
    pub state_hash: String,
    pub artifact_ids: Vec<i64>,
    #[serde(with = "ts")]
    pub created_at: DateTime<Utc>,
    /// Present on mutation response; omitted on nested read objects.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = i64, required = false)]
    pub orbit_revision: Option<i64>,
}

// ---------------------------------------------------------------------------
// Reads

#[derive(QueryableByName)]
struct LeaseRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = BigInt)]
    task_id: i64,
    #[diesel(sql_type = BigInt)]
    lease_version: i64,
    #[diesel(sql_type = Timestamptz)]
    acquired_at: DateTime<Utc>,
    #[diesel(sql_type = Timestamptz)]
    expires_at: DateTime<Utc>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    renewed_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    released_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Text>)]
    end_reason: Option<String>,
    #[diesel(sql_type = Bool)]
    is_active: bool,
    #[diesel(sql_type = BigInt)]
    c_id: i64,
    #[diesel(sql_type = Text)]
    c_type: String,
    #[diesel(sql_type = Text)]
    c_name: String,
    #[diesel(sql_type = Nullable<Text>)]
    c_model_claim: Option<String>,
}

impl From<LeaseRow> for Lease {
    fn from(r: LeaseRow) -> Lease {
        Lease {
            id: r.id,
            task_id: r.task_id,
            contributor: actor(r.c_id, r.c_type, r.c_name, r.c_model_claim),
            lease_version: r.lease_version,
            acquired_at: r.acquired_at,
            expires_at: r.expires_at,
            renewed_at: r.renewed_at,
            released_at: r.released_at,
            is_active: r.is_active,
            end_reason: r.end_reason,
            orbit_revision: None,
        }
    }
}

/// A lease as the API shows it (`l` the lease, `c` its holder), read at `k.now`: one
/// clock reading for the statement, so `end_reason` and `is_active` never disagree.
/// Every statement that selects these columns has `clock!()` in its `WITH` and `k`
/// in its `FROM`.
macro_rules! lease_columns {
    () => {
        "l.id, l.task_id, l.lease_version, l.acquired_at, l.expires_at, \
        l.renewed_at, l.released_at, \
        lease_end_reason(l.end_reason, l.expires_at, k.now) AS end_reason, \
        lease_is_active(l.end_reason, l.expires_at, k.now) AS is_active, \
        c.id AS c_id, c.type AS c_type, c.name AS c_name, c.model_claim AS c_model_claim"
    };
}

/// The CTE `k` of [`lease_columns`]: the clock read once for the statement (a
/// `FROM (SELECT clock_timestamp())` subquery may be evaluated again for every row;
/// a CTE is not, and MATERIALIZED says so).
macro_rules! clock {
    () => {
        "k AS MATERIALIZED (SELECT clock_timestamp() AS now)"
    };
}

const LEASE_SELECT: &str = concat!(
    "WITH ",
    clock!(),
    " SELECT ",
    lease_columns!(),
    " FROM k CROSS JOIN leases l JOIN contributors c ON c.id = l.contributor_id"
);

pub fn lease(conn: &mut PgConnection, id: i64) -> QueryResult<Option<Lease>> {
    crate::db::sql(format!("{LEASE_SELECT} WHERE l.id = $1"))
        .bind::<BigInt, _>(id)
        .get_result::<LeaseRow>(conn)
        .optional()
        .map(|o| o.map(Lease::from))
}

pub fn leases_of_task(
    conn: &mut PgConnection,
    task_id: i64,
    page: Cursor,
) -> QueryResult<Vec<Lease>> {
    crate::db::sql(format!(
        "{LEASE_SELECT} WHERE l.task_id = $1 AND l.id > $2 ORDER BY l.id LIMIT $3"
    ))
    .bind::<BigInt, _>(task_id)
    .bind::<BigInt, _>(page.after)
    .bind::<BigInt, _>(page.fetch())
    .load::<LeaseRow>(conn)
    .map(|rows| rows.into_iter().map(Lease::from).collect())
}

#[derive(QueryableByName)]
struct TaskRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = BigInt)]
    orbit_id: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    problem_id: Option<i64>,
    #[diesel(sql_type = Text)]
    title: String,
    #[diesel(sql_type = Text)]
    description: String,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = BigInt)]
    lease_version: i64,
    #[diesel(sql_type = Nullable<Text>)]
    completion_summary: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    result_contribution_id: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    cancel_reason: Option<String>,
    #[diesel(sql_type = Timestamptz)]
    created_at: DateTime<Utc>,
    #[diesel(sql_type = Timestamptz)]
    updated_at: DateTime<Utc>,
    #[diesel(sql_type = BigInt)]
    cb_id: i64,
    #[diesel(sql_type = Text)]
    cb_type: String,
    #[diesel(sql_type = Text)]
    cb_name: String,
    #[diesel(sql_type = Nullable<Text>)]
    cb_model_claim: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    l_id: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    l_version: Option<i64>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    l_acquired_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    l_expires_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    l_renewed_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<BigInt>)]
    lc_id: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    lc_type: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    lc_name: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    lc_model_claim: Option<String>,
}

impl From<TaskRow> for Task {
    fn from(r: TaskRow) -> Task {
        let active_lease = match (
            r.l_id,
            r.l_version,
            r.l_acquired_at,
            r.l_expires_at,
            r.lc_id,
        ) {
            (Some(id), Some(v), Some(a), Some(e), Some(cid)) => Some(Lease {
                id,
                task_id: r.id,
                contributor: actor(
                    cid,
                    r.lc_type.unwrap_or_default(),
                    r.lc_name.unwrap_or_default(),
                    r.lc_model_claim,
                ),
                lease_version: v,
                acquired_at: a,
                expires_at: e,
                renewed_at: r.l_renewed_at,
                released_at: None,
                is_active: true,
                end_reason: None,
                orbit_revision: None,
            }),
            _ => None,
        };
        Task {
            id: r.id,
            orbit_id: r.orbit_id,
            problem_id: r.problem_id,
            title: r.title,
            description: r.description,
            status: r.status,
            lease_version: r.lease_version,
            active_lease,
            completion_summary: r.completion_summary,
            result_contribution_id: r.result_contribution_id,
            cancel_reason: r.cancel_reason,
            created_by: actor(r.cb_id, r.cb_type, r.cb_name, r.cb_model_claim),
            created_at: r.created_at,
            updated_at: r.updated_at,
            orbit_revision: None,
        }
    }
}

// The active lease is a LATERAL probe of the unique (task_id, lease_version) index:
// one lookup per task returned, whatever statistics the cached plan was made with.
// A task's open lease, if any, is always its newest (`lease_version`): a version is
// issued only after the previous lease ended (src/domain/fence.rs).
// Each related row is probed per task by its own key, whatever the table sizes: a
// lateral subquery with `OFFSET 0` keeps the planner from joining the creators
// another way (a merge join over the whole contributors index, seen on small
// tables) and from reaching the active lease through a partial index filtered by
// task (`end_reason IS NULL` would make `leases_active_orbit_idx` eligible). The
// lease is found by `(task_id, lease_version)`, the unique key, and then checked.
// `$clock` is the instant a lease must outlast to be active: `clock_timestamp()` for
// one task; one reading shared by every row for a page (`tasks_page`).
macro_rules! task_select {
    ($clock:literal) => {
        concat!(
    "SELECT t.id, t.orbit_id, t.problem_id, t.title, t.description, t.status, \
        t.lease_version, t.completion_summary, t.result_contribution_id, t.cancel_reason, \
        t.created_at, t.updated_at, \
        cb.id AS cb_id, cb.type AS cb_type, cb.name AS cb_name, cb.model_claim AS cb_model_claim, \
        l.id AS l_id, l.lease_version AS l_version, l.acquired_at AS l_acquired_at, \
        l.expires_at AS l_expires_at, l.renewed_at AS l_renewed_at, \
        lc.id AS lc_id, lc.type AS lc_type, lc.name AS lc_name, lc.model_claim AS lc_model_claim \
    FROM tasks t \
    JOIN LATERAL ( \
        SELECT c.id, c.type, c.name, c.model_claim FROM contributors c \
        WHERE c.id = t.created_by OFFSET 0 \
    ) cb ON true \
    LEFT JOIN LATERAL ( \
        SELECT v.* FROM ( \
            SELECT l.id, l.lease_version, l.acquired_at, l.expires_at, l.renewed_at, \
                   l.contributor_id, l.end_reason \
            FROM leases l \
            WHERE l.task_id = t.id AND l.lease_version = t.lease_version \
            OFFSET 0 \
        ) v \
        WHERE lease_is_active(v.end_reason, v.expires_at, ", $clock, ") \
    ) l ON true \
    LEFT JOIN contributors lc ON lc.id = l.contributor_id"
        )
    };
}

const TASK_SELECT: &str = task_select!("clock_timestamp()");

/// [`task`] for several ids in one statement (a group of reads,
/// `src/perf/readgroup.rs`): one answer per id, in order.
pub fn tasks_by_ids(conn: &mut PgConnection, ids: &[i64]) -> QueryResult<Vec<Option<Task>>> {
    by_ids::<TaskRow, _>(
        conn,
        crate::group_over_ids!(concat!(
            task_select!("clock_timestamp()"),
            " WHERE t.id = q.id"
        )),
        ids,
    )
}

pub fn task(conn: &mut PgConnection, id: i64) -> QueryResult<Option<Task>> {
    by_id::<TaskRow, _>(conn, format!("{TASK_SELECT} WHERE t.id = $1"), id)
}

/// An orbit's tasks, ascending by id, optionally filtered (`page.fetch()` rows), with
/// the page's [`Stamp`], in one statement (so one snapshot): every
/// row decides its active lease at the same clock reading, and `valid_until` is the
/// first `expires_at` after it among the orbit's leases that have not ended (any of
/// them, not only the page's: a `leased=false` page gains a task when one runs out).
/// `None` when the orbit does not exist.
pub fn tasks_page(
    conn: &mut PgConnection,
    orbit_id: i64,
    status: Option<&str>,
    leased: Option<bool>,
    page: Cursor,
) -> QueryResult<Option<(Vec<Task>, Stamp)>> {
    crate::db::sql(concat!(
        "WITH ",
        clock!(),
        " SELECT p.*, o.revision AS m_revision, k.now AS m_now, h.until AS m_valid_until \
         FROM k CROSS JOIN orbits o CROSS JOIN LATERAL ( \
             SELECT min(x.expires_at) AS until FROM leases x \
             WHERE x.orbit_id = o.id AND lease_is_active(x.end_reason, x.expires_at, k.now) \
         ) h LEFT JOIN LATERAL (",
        task_select!("k.now"),
        " WHERE (t.orbit_id, t.id) > ($1, $2) AND t.orbit_id = $1 \
               AND ($3::text IS NULL OR t.status = $3) \
               AND ($4::bool IS NULL OR (l.id IS NOT NULL) = $4) \
             ORDER BY t.orbit_id, t.id LIMIT $5 \
         ) p ON true \
         WHERE o.id = $1 ORDER BY p.id"
    ))
    .bind::<BigInt, _>(orbit_id)
    .bind::<BigInt, _>(page.after)
    .bind::<Nullable<Text>, _>(status)
    .bind::<Nullable<Bool>, _>(leased)
    .bind::<BigInt, _>(page.fetch())
    .load::<Stamped<TaskRow>>(conn)
    .map(split)
}

/// A task's orbit and the contributor's role there (`None`: not a member), in one
/// statement; `None` when the task does not exist.
pub fn task_orbit_role(
    conn: &mut PgConnection,
    task_id: i64,
    contributor_id: i64,
) -> QueryResult<Option<(i64, Option<String>)>> {
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = BigInt)]
        orbit_id: i64,
        #[diesel(sql_type = Nullable<Text>)]
        role: Option<String>,
    }
    crate::db::sql(
        "SELECT t.orbit_id, member_role(t.orbit_id, $2) AS role FROM tasks t WHERE t.id = $1",
    )
    .bind::<BigInt, _>(task_id)
    .bind::<BigInt, _>(contributor_id)
    .get_result::<Row>(conn)
    .optional()
    .map(|o| o.map(|r| (r.orbit_id, r.role)))
}

/// A lease's task and version, the task's orbit, and a contributor's role there.
#[derive(QueryableByName)]
pub struct LeaseRef {
    #[diesel(sql_type = BigInt)]
    pub task_id: i64,
    #[diesel(sql_type = BigInt)]
    pub lease_version: i64,
    #[diesel(sql_type = BigInt)]
    pub orbit_id: i64,
    /// `None`: not a member.
    #[diesel(sql_type = Nullable<Text>)]
    pub role: Option<String>,
}

/// `LeaseRef` of a lease for `contributor_id`, in one statement; `None` when the
/// lease does not exist.
pub fn lease_orbit_role(
    conn: &mut PgConnection,
    lease_id: i64,
    contributor_id: i64,
) -> QueryResult<Option<LeaseRef>> {
    crate::db::sql(
        "SELECT l.task_id, l.lease_version, t.orbit_id, member_role(t.orbit_id, $2) AS role \
         FROM leases l JOIN tasks t ON t.id = l.task_id WHERE l.id = $1",
    )
    .bind::<BigInt, _>(lease_id)
    .bind::<BigInt, _>(contributor_id)
    .get_result::<LeaseRef>(conn)
    .optional()
}

/// The orbit a task belongs to (for permission checks), without locking.
pub fn task_orbit(conn: &mut PgConnection, task_id: i64) -> QueryResult<Option<i64>> {
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = BigInt)]
        orbit_id: i64,
    }
    crate::db::sql("SELECT orbit_id FROM tasks WHERE id = $1")
        .bind::<BigInt, _>(task_id)
        .get_result::<Row>(conn)
        .optional()
        .map(|o| o.map(|r| r.orbit_id))
}

#[derive(QueryableByName)]
struct CheckpointRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = BigInt)]
    task_id: i64,
    #[diesel(sql_type = BigInt)]
    orbit_id: i64,
    #[diesel(sql_type = BigInt)]
    lease_version: i64,
    #[diesel(sql_type = BigInt)]
    sequence: i64,
    #[diesel(sql_type = Text)]
    summary: String,
    #[diesel(sql_type = Text)]
    state: String,
    #[diesel(sql_type = Text)]
    state_hash: String,
    #[diesel(sql_type = Array<BigInt>)]
    artifact_ids: Vec<i64>,
    #[diesel(sql_type = Timestamptz)]
    created_at: DateTime<Utc>,
    #[diesel(sql_type = BigInt)]
    a_id: i64,
    #[diesel(sql_type = Text)]
    a_type: String,
    #[diesel(sql_type = Text)]
    a_name: String,
    #[diesel(sql_type = Nullable<Text>)]
    a_model_claim: Option<String>,
}

impl CheckpointRow {
    fn into_checkpoint(self) -> QueryResult<Checkpoint> {
        let state = serde_json::value::RawValue::from_string(self.state)
            .map_err(|e| diesel::result::Error::DeserializationError(Box::new(e)))?;
        Ok(Checkpoint {
            id: self.id,
            task_id: self.task_id,
            orbit_id: self.orbit_id,
            lease_version: self.lease_version,
            sequence: self.sequence,
            author: actor(self.a_id, self.a_type, self.a_name, self.a_model_claim),
            summary: self.summary,
            state,
            state_hash: self.state_hash,
            artifact_ids: self.artifact_ids,
            created_at: self.created_at,
            orbit_revision: None,
        })
    }
}

macro_rules! checkpoint_columns {
    () => {
        "k.id, k.task_id, k.orbit_id, k.lease_version, k.sequence, \
        k.summary, k.state, k.state_hash, k.artifact_ids, k.created_at, \
        a.id AS a_id, a.type AS a_type, a.name AS a_name, a.model_claim AS a_model_claim"
    };
}

const CHECKPOINT_SELECT: &str = concat!(
    "SELECT ",
    checkpoint_columns!(),
    " FROM checkpoints k JOIN contributors a ON a.id = k.author_id"
);

pub fn checkpoint(conn: &mut PgConnection, id: i64) -> QueryResult<Option<Checkpoint>> {
    crate::db::sql(format!("{CHECKPOINT_SELECT} WHERE k.id = $1"))
        .bind::<BigInt, _>(id)
        .get_result::<CheckpointRow>(conn)
        .optional()?
        .map(CheckpointRow::into_checkpoint)
        .transpose()
}

pub fn checkpoints_of_task(
    conn: &mut PgConnection,
    task_id: i64,
    page: Cursor,
) -> QueryResult<Vec<Checkpoint>> {
    crate::db::sql(format!(
        "{CHECKPOINT_SELECT} WHERE k.task_id = $1 AND k.id > $2 ORDER BY k.id LIMIT $3"
    ))
    .bind::<BigInt, _>(task_id)
    .bind::<BigInt, _>(page.after)
    .bind::<BigInt, _>(page.fetch())
    .load::<CheckpointRow>(conn)?
    .into_iter()
    .map(CheckpointRow::into_checkpoint)
    .collect()
}

// ---------------------------------------------------------------------------
// Writes (callers hold the task row lock; see `fence`)

/// Inserts an OPEN task by `task_insert` (src/db/functions.sql), the insert the
/// quick task creation runs too. Returns its id.
pub fn insert_task(
    conn: &mut PgConnection,
    orbit_id: i64,
    problem_id: Option<i64>,
    title: &str,
    description: &str,
    created_by: i64,
) -> QueryResult<i64> {
    crate::db::sql("SELECT (task_insert($1, $2, $3, $4, $5)).id")
        .bind::<BigInt, _>(orbit_id)
        .bind::<Nullable<BigInt>, _>(problem_id)
        .bind::<Text, _>(title)
        .bind::<Text, _>(description)
        .bind::<BigInt, _>(created_by)
        .get_result::<Id>(conn)
        .map(|r| r.id)
}

/// `titles.len()` OPEN tasks in one orbit by one creator, one statement (bulk
/// loads: the bench's million-task orbit); their ids, in the order of `titles`.
pub fn insert_many(
    conn: &mut PgConnection,
    orbit_id: i64,
    created_by: i64,
    titles: &[String],
    description: &str,
) -> QueryResult<Vec<i64>> {
    crate::db::sql(
        "INSERT INTO tasks (orbit_id, title, description, created_by) \
         SELECT $1, t.title, $3, $4 FROM unnest($2::text[]) WITH ORDINALITY AS t (title, n) \
         ORDER BY t.n RETURNING id",
    )
    .bind::<BigInt, _>(orbit_id)
    .bind::<Array<Text>, _>(titles)
    .bind::<Text, _>(description)
    .bind::<BigInt, _>(created_by)
    .load::<Id>(conn)
    .map(|rows| {
        let mut ids: Vec<i64> = rows.into_iter().map(|r| r.id).collect();
        ids.sort_unstable();
        ids
    })
}

/// Issues lease `version` on a locked task by `lease_issue` (src/db/functions.sql,
/// the issue the quick acquire makes too): bumps the task's `lease_version` and
/// inserts the lease, in one statement that returns the lease as the API shows it.
pub fn insert_lease(
    conn: &mut PgConnection,
    task_id: i64,
    orbit_id: i64,
    contributor: i64,
    version: i64,
    now: DateTime<Utc>,
    duration_seconds: i64,
) -> QueryResult<Lease> {
    crate::db::sql(concat!(
        "WITH l AS (SELECT * FROM lease_issue($1, $2, $3, $4, $5, $6)), ",
        clock!(),
        " SELECT ",
        lease_columns!(),
        " FROM k CROSS JOIN l JOIN contributors c ON c.id = l.contributor_id"
    ))
    .bind::<BigInt, _>(task_id)
    .bind::<BigInt, _>(orbit_id)
    .bind::<BigInt, _>(contributor)
    .bind::<BigInt, _>(version)
    .bind::<Timestamptz, _>(now)
    .bind::<BigInt, _>(duration_seconds)
    .get_result::<LeaseRow>(conn)
    .map(Lease::from)
}

/// Ends a lease by `lease_end` (src/db/functions.sql, the ending the quick release
/// makes too). An active lease ends now with `reason`; one already past its expiry
/// is recorded as EXPIRED (its interval ended at `expires_at`).
pub fn end_lease(
    conn: &mut PgConnection,
    lease_id: i64,
    now: DateTime<Utc>,
    reason: &str,
) -> QueryResult<()> {
    crate::db::sql("SELECT 1 FROM lease_end($1, $2, $3)")
        .bind::<BigInt, _>(lease_id)
        .bind::<Timestamptz, _>(now)
        .bind::<Text, _>(reason)
        .execute(conn)?;
    Ok(())
}

/// Renews a lease and returns it as the API shows it.
pub fn renew_lease(
    conn: &mut PgConnection,
    lease_id: i64,
    now: DateTime<Utc>,
    duration_seconds: i64,
) -> QueryResult<Lease> {
    crate::db::sql(concat!(
        "WITH l AS ( \
             UPDATE leases SET renewed_at = $2, expires_at = $2 + make_interval(secs => $3) \
             WHERE id = $1 RETURNING * \
         ), ",
        clock!(),
        " SELECT ",
        lease_columns!(),
        " FROM k CROSS JOIN l JOIN contributors c ON c.id = l.contributor_id"
    ))
    .bind::<BigInt, _>(lease_id)
    .bind::<Timestamptz, _>(now)
    .bind::<BigInt, _>(duration_seconds)
    .get_result::<LeaseRow>(conn)
    .map(Lease::from)
}

/// `end_lease` for the lease a request presented: returns it as the API shows it.
pub fn end_lease_returning(
    conn: &mut PgConnection,
    lease_id: i64,
    now: DateTime<Utc>,
    reason: &str,
) -> QueryResult<Lease> {
    crate::db::sql(concat!(
        "WITH l AS (SELECT * FROM lease_end($1, $2, $3)), ",
        clock!(),
        " SELECT ",
        lease_columns!(),
        " FROM k CROSS JOIN l JOIN contributors c ON c.id = l.contributor_id"
    ))
    .bind::<BigInt, _>(lease_id)
    .bind::<Timestamptz, _>(now)
    .bind::<Text, _>(reason)
    .get_result::<LeaseRow>(conn)
    .map(Lease::from)
}

pub fn close_task(
    conn: &mut PgConnection,
    task_id: i64,
    status: TaskStatus,
    now: DateTime<Utc>,
    summary: Option<&str>,
    result_contribution_id: Option<i64>,
    cancel_reason: Option<&str>,
) -> QueryResult<()> {
    crate::db::sql(
        "UPDATE tasks SET status = $2, updated_at = $3, completion_summary = $4, \
             result_contribution_id = $5, cancel_reason = $6 WHERE id = $1",
    )
    .bind::<BigInt, _>(task_id)
    .bind::<Text, _>(status.as_str())
    .bind::<Timestamptz, _>(now)
    .bind::<Nullable<Text>, _>(summary)
    .bind::<Nullable<BigInt>, _>(result_contribution_id)
    .bind::<Nullable<Text>, _>(cancel_reason)
    .execute(conn)?;
    Ok(())
}

/// Inserts a checkpoint by `checkpoint_insert` (src/db/functions.sql, the insert the
/// quick checkpoint makes too) and returns it as the API shows it.
#[allow(clippy::too_many_arguments)]
pub fn insert_checkpoint(
    conn: &mut PgConnection,
    task_id: i64,
    orbit_id: i64,
    lease_version: i64,
    author: i64,
    summary: &str,
    state: &str,
    state_hash: &str,
    artifact_ids: &[i64],
    now: DateTime<Utc>,
) -> QueryResult<Checkpoint> {
    crate::db::sql(concat!(
        "WITH k AS (SELECT * FROM checkpoint_insert($1, $2, $3, $4, $5, $6, $7, $8, $9)) \
         SELECT ",
        checkpoint_columns!(),
        " FROM k JOIN contributors a ON a.id = k.author_id"
    ))
    .bind::<BigInt, _>(task_id)
    .bind::<BigInt, _>(orbit_id)
    .bind::<BigInt, _>(lease_version)
    .bind::<BigInt, _>(author)
    .bind::<Text, _>(summary)
    .bind::<Text, _>(state)
    .bind::<Text, _>(state_hash)
    .bind::<Array<BigInt>, _>(artifact_ids)
    .bind::<Timestamptz, _>(now)
    .get_result::<CheckpointRow>(conn)
    .and_then(CheckpointRow::into_checkpoint)
}

/// Removing a member ends its leases (`MEMBER_REMOVED`, by `lease_end`) and
/// supersedes the PENDING handoffs it gave or was named in (`handoff_supersede`),
/// in the removal's transaction. Locks the tasks
/// concerned first (in id order), then reads the clock once, after the locks (every
/// ending is at that instant), then ends handoffs, then leases. Returns summary parts.
pub fn release_member_work(
    conn: &mut PgConnection,
    orbit_id: i64,
    contributor_id: i64,
) -> QueryResult<Vec<String>> {
    #[derive(QueryableByName)]
    struct TaskId {
        #[diesel(sql_type = BigInt)]
        #[expect(dead_code, reason = "the rows are loaded only to take their locks")]
        id: i64,
    }
    let locked: Vec<TaskId> = crate::db::sql(
        "SELECT id FROM tasks WHERE id IN ( \
             SELECT task_id FROM leases WHERE orbit_id = $1 AND contributor_id = $2 \
                 AND end_reason IS NULL \
             UNION \
             SELECT task_id FROM handoffs WHERE orbit_id = $1 AND status = 'PENDING' \
                 AND (from_contributor = $2 OR to_contributor = $2)) \
         ORDER BY id FOR UPDATE",
    )
    .bind::<BigInt, _>(orbit_id)
    .bind::<BigInt, _>(contributor_id)
    .load(conn)?;
    if locked.is_empty() {
        return Ok(Vec::new());
    }
    #[derive(QueryableByName)]
    struct Clock {
        #[diesel(sql_type = Timestamptz)]
        now: DateTime<Utc>,
    }
    let now = crate::db::sql("SELECT clock_timestamp() AS now")
        .get_result::<Clock>(conn)?
        .now;
    #[derive(QueryableByName)]
    struct Ended {
        #[diesel(sql_type = BigInt)]
        id: i64,
        #[diesel(sql_type = Text)]
        what: String,
    }
    let handoffs: Vec<Ended> = crate::db::sql(
        "SELECT e.id, e.status AS what \
         FROM handoffs h, LATERAL handoff_supersede(h.id, $3) e \
         WHERE h.orbit_id = $1 AND h.status = 'PENDING' \
           AND (h.from_contributor = $2 OR h.to_contributor = $2) \
         ORDER BY e.id",
    )
    .bind::<BigInt, _>(orbit_id)
    .bind::<BigInt, _>(contributor_id)
    .bind::<Timestamptz, _>(now)
    .load(conn)?;
    let leases: Vec<Ended> = crate::db::sql(
        "SELECT e.task_id AS id, 'v' || e.lease_version || ' ' || e.end_reason AS what \
         FROM leases l, LATERAL lease_end(l.id, $3, 'MEMBER_REMOVED') e \
         WHERE l.orbit_id = $1 AND l.contributor_id = $2 AND l.end_reason IS NULL \
         ORDER BY e.task_id",
    )
    .bind::<BigInt, _>(orbit_id)
    .bind::<BigInt, _>(contributor_id)
    .bind::<Timestamptz, _>(now)
    .load(conn)?;
    let mut parts = Vec::new();
    for h in handoffs.iter().filter(|h| h.what == "SUPERSEDED") {
        parts.push(format!("handoff {} superseded", h.id));
    }
    for l in leases {
        parts.push(format!("lease {} on task {}", l.what, l.id));
    }
    Ok(parts)
}
