//! Contributions, their immutable revisions, and the assessments bound to one exact
//! revision each.
//!
//! Every revision ever written is a row of `contribution_revisions` that is never
//! updated (a trigger refuses it). The `contributions` row is the contribution at
//! its current revision, content included, so reads never join. Its verdict columns
//! count the assessments of the current revision only: an assessment of the current
//! revision adds one, a new revision starts from zero. The same numbers are kept per
//! problem in `problem_counters` (see `store::problems`), in the same transaction.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Nullable, Text, Timestamptz};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::db::BindNext;
use crate::model::{ts, ContributorActor};
use crate::model::{Cursor, Role};
use crate::store::rows::{all, by_id, by_ids, ActorA, Id};
use crate::store::stamp::{split, Stamp, Stamped};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ContributionKind {
    Attempt,
    Observation,
    Claim,
    Question,
    Note,
}

impl ContributionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ContributionKind::Attempt => "ATTEMPT",
            ContributionKind::Observation => "OBSERVATION",
            ContributionKind::Claim => "CLAIM",
            ContributionKind::Question => "QUESTION",
            ContributionKind::Note => "NOTE",
        }
    }

    /// Its counter column in `problem_counters`.
    pub fn column(self) -> &'static str {
        match self {
            ContributionKind::Attempt => "attempt",
            ContributionKind::Observation => "observation",
            ContributionKind::Claim => "claim",
            ContributionKind::Question => "question",
            ContributionKind::Note => "note",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Verdict {
    Supports,
    Disputes,
    Inconclusive,
    NeedsWork,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Supports => "SUPPORTS",
            Verdict::Disputes => "DISPUTES",
            Verdict::Inconclusive => "INCONCLUSIVE",
            Verdict::NeedsWork => "NEEDS_WORK",
        }
    }

    /// Its counter column in `contributions` and `problem_counters`.
    pub fn column(self) -> &'static str {
        match self {
            Verdict::Supports => "supports",
            Verdict::Disputes => "disputes",
            Verdict::Inconclusive => "inconclusive",
            Verdict::NeedsWork => "needs_work",
        }
    }
}

/// Assessments by verdict, every verdict present (zeros included). Counts, never an
/// average: each assessment stays its assessor's own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, ToSchema, QueryableByName)]
pub struct VerdictCounts {
    #[serde(rename = "SUPPORTS")]
    #[diesel(sql_type = BigInt)]
    pub supports: i64,
    #[serde(rename = "DISPUTES")]
    #[diesel(sql_type = BigInt)]
    pub disputes: i64,
    #[serde(rename = "INCONCLUSIVE")]
    #[diesel(sql_type = BigInt)]
    pub inconclusive: i64,
    #[serde(rename = "NEEDS_WORK")]
    #[diesel(sql_type = BigInt)]
    pub needs_work: i64,
}

/// A revisioned piece of knowledge. Its content is that of its current revision;
/// every earlier revision stays readable and unchanged.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Contribution {
    #[schema(minimum = 1)]
    pub id: i64,
    #[schema(minimum = 1)]
    pub orbit_id: i64,
    #[schema(value_type = ContributionKind)]
    pub kind: String,
    /// The current revision: 1 at creation, +1 per revision.
    #[schema(minimum = 1)]
    pub revision: i64,
    pub title: String,
    /// Untrusted evidence, stored and returned verbatim.
    pub body: String,
    pub author: ContributorActor,
    #[schema(required = true)]
    pub problem_id: Option<i64>,
    #[schema(required = true)]
    pub task_id: Option<i64>,
    pub artifact_ids: Vec<i64>,
    /// Assessments of the current revision only.
    pub verdict_counts: VerdictCounts,
    #[serde(with = "ts")]
    pub created_at: DateTime<Utc>,
    /// When the current revision was written.
    #[serde(with = "ts")]
    pub updated_at: DateTime<Utc>,
    /// Present on mutation response; omitted on nested read objects.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = i64, required = false)]
    pub orbit_revision: Option<i64>,
}

/// One revision of a contribution, as written. Immutable: reading it again always
/// gives the same content.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ContributionRevision {
    #[schema(minimum = 1)]
    pub contribution_id: i64,
    #[schema(minimum = 1)]
    pub revision: i64,
    pub title: String,
    pub body: String,
    pub artifact_ids: Vec<i64>,
    pub author: ContributorActor,
    #[serde(with = "ts")]
    pub created_at: DateTime<Utc>,
}

/// A verdict on one exact revision of a contribution, bound to it forever.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Assessment {
    #[schema(minimum = 1)]
    pub id: i64,
    #[schema(minimum = 1)]
    pub contribution_id: i64,
    #[schema(minimum = 1)]
    pub contribution_revision: i64,
    #[schema(value_type = Verdict)]
    pub verdict: String,
    pub rationale: String,
    /// Contributions of the same orbit offered as evidence.
    pub evidence_contribution_ids: Vec<i64>,
    pub assessor: ContributorActor,
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
struct ContributionRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = BigInt)]
    orbit_id: i64,
    #[diesel(sql_type = Text)]
    kind: String,
    #[diesel(sql_type = BigInt)]
    revision: i64,
    #[diesel(sql_type = Text)]
    title: String,
    #[diesel(sql_type = Text)]
    body: String,
    #[diesel(sql_type = Array<BigInt>)]
    artifact_ids: Vec<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    problem_id: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    task_id: Option<i64>,
    #[diesel(embed)]
    verdicts: VerdictCounts,
    #[diesel(sql_type = Timestamptz)]
    created_at: DateTime<Utc>,
    #[diesel(sql_type = Timestamptz)]
    updated_at: DateTime<Utc>,
    #[diesel(embed)]
    author: ActorA,
}

impl From<ContributionRow> for Contribution {
    fn from(r: ContributionRow) -> Contribution {
        Contribution {
            id: r.id,
            orbit_id: r.orbit_id,
            kind: r.kind,
            revision: r.revision,
            title: r.title,
            body: r.body,
            author: r.author.into(),
            problem_id: r.problem_id,
            task_id: r.task_id,
            artifact_ids: r.artifact_ids,
            verdict_counts: r.verdicts,
            created_at: r.created_at,
            updated_at: r.updated_at,
            orbit_revision: None,
        }
    }
}

macro_rules! contribution_select {
    () => {
        "SELECT c.id, c.orbit_id, c.kind, c.revision, \
            c.title, c.body, c.artifact_ids, c.problem_id, c.task_id, \
            c.supports, c.disputes, c.inconclusive, c.needs_work, c.created_at, c.updated_at, \
            a.id AS a_id, a.type AS a_type, a.name AS a_name, a.model_claim AS a_model_claim \
        FROM contributions c JOIN contributors a ON a.id = c.author_id"
    };
}
const CONTRIBUTION_SELECT: &str = contribution_select!();

/// [`contribution`] for several ids in one statement (a group of reads,
/// `src/perf/readgroup.rs`): one answer per id, in order.
pub fn contributions_by_ids(
    conn: &mut PgConnection,
    ids: &[i64],
) -> QueryResult<Vec<Option<Contribution>>> {
    by_ids::<ContributionRow, _>(
        conn,
        crate::group_over_ids!(concat!(contribution_select!(), " WHERE c.id = q.id")),
        ids,
    )
}

pub fn contribution(conn: &mut PgConnection, id: i64) -> QueryResult<Option<Contribution>> {
    by_id::<ContributionRow, _>(conn, format!("{CONTRIBUTION_SELECT} WHERE c.id = $1"), id)
}

/// An orbit's contributions, ascending by id, optionally filtered (`page.fetch()`
/// rows), with the page's [`Stamp`] from the same statement (so one snapshot).
/// Nothing in a contribution changes with time alone: `valid_until` is null. `None`
/// when the orbit does not exist.
pub fn contributions_page(
    conn: &mut PgConnection,
    orbit_id: i64,
    kind: Option<&str>,
    problem_id: Option<i64>,
    task_id: Option<i64>,
    page: Cursor,
) -> QueryResult<Option<(Vec<Contribution>, Stamp)>> {
    crate::db::sql(format!(
        "WITH k AS MATERIALIZED (SELECT clock_timestamp() AS now) \
         SELECT p.*, o.revision AS m_revision, k.now AS m_now, \
             NULL::timestamptz AS m_valid_until \
         FROM k CROSS JOIN orbits o LEFT JOIN LATERAL ( \
             {CONTRIBUTION_SELECT} WHERE (c.orbit_id, c.id) > ($1, $2) AND c.orbit_id = $1 \
               AND ($3::text IS NULL OR c.kind = $3) \
               AND ($4::bigint IS NULL OR c.problem_id = $4) \
               AND ($5::bigint IS NULL OR c.task_id = $5) \
             ORDER BY c.orbit_id, c.id LIMIT $6 \
         ) p ON true \
         WHERE o.id = $1 ORDER BY p.id"
    ))
    .bind::<BigInt, _>(orbit_id)
    .bind::<BigInt, _>(page.after)
    .bind::<Nullable<Text>, _>(kind)
    .bind::<Nullable<BigInt>, _>(problem_id)
    .bind::<Nullable<BigInt>, _>(task_id)
    .bind::<BigInt, _>(page.fetch())
    .load::<Stamped<ContributionRow>>(conn)
    .map(split)
}

/// A problem's newest contributions, newest first (an index scan of `n` rows).
pub fn latest_of_problem(
    conn: &mut PgConnection,
    problem_id: i64,
    n: i64,
) -> QueryResult<Vec<Contribution>> {
    crate::db::sql(format!(
        "{CONTRIBUTION_SELECT} WHERE c.problem_id = $1 ORDER BY c.id DESC LIMIT $2"
    ))
    .bind::<BigInt, _>(problem_id)
    .bind::<BigInt, _>(n)
    .load::<ContributionRow>(conn)
    .map(all)
}

#[derive(QueryableByName)]
struct RevisionRow {
    #[diesel(sql_type = BigInt)]
    contribution_id: i64,
    #[diesel(sql_type = BigInt)]
    revision: i64,
    #[diesel(sql_type = Text)]
    title: String,
    #[diesel(sql_type = Text)]
    body: String,
    #[diesel(sql_type = Array<BigInt>)]
    artifact_ids: Vec<i64>,
    #[diesel(sql_type = Timestamptz)]
    created_at: DateTime<Utc>,
    #[diesel(embed)]
    author: ActorA,
}

impl From<RevisionRow> for ContributionRevision {
    fn from(r: RevisionRow) -> ContributionRevision {
        ContributionRevision {
            contribution_id: r.contribution_id,
            revision: r.revision,
            title: r.title,
            body: r.body,
            artifact_ids: r.artifact_ids,
            author: r.author.into(),
            created_at: r.created_at,
        }
    }
}

const REVISION_SELECT: &str = "SELECT r.contribution_id, r.revision, r.title, r.body, \
        r.artifact_ids, r.created_at, \
        a.id AS a_id, a.type AS a_type, a.name AS a_name, a.model_claim AS a_model_claim \
    FROM contribution_revisions r \
    JOIN contributions c ON c.id = r.contribution_id \
    JOIN contributors a ON a.id = c.author_id";

pub fn revision(
    conn: &mut PgConnection,
    contribution_id: i64,
    revision: i64,
) -> QueryResult<Option<ContributionRevision>> {
    crate::db::sql(format!(
        "{REVISION_SELECT} WHERE r.contribution_id = $1 AND r.revision = $2"
    ))
    .bind::<BigInt, _>(contribution_id)
    .bind::<BigInt, _>(revision)
    .get_result::<RevisionRow>(conn)
    .optional()
    .map(|o| o.map(ContributionRevision::from))
}

/// A contribution's revisions, ascending; `after` is a revision number.
pub fn revisions(
    conn: &mut PgConnection,
    contribution_id: i64,
    page: Cursor,
) -> QueryResult<Vec<ContributionRevision>> {
    crate::db::sql(format!(
        "{REVISION_SELECT} WHERE r.contribution_id = $1 AND r.revision > $2 \
         ORDER BY r.revision LIMIT $3"
    ))
    .bind::<BigInt, _>(contribution_id)
    .bind::<BigInt, _>(page.after)
    .bind::<BigInt, _>(page.fetch())
    .load::<RevisionRow>(conn)
    .map(all)
}

#[derive(QueryableByName)]
struct AssessmentRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = BigInt)]
    contribution_id: i64,
    #[diesel(sql_type = BigInt)]
    contribution_revision: i64,
    #[diesel(sql_type = Text)]
    verdict: String,
    #[diesel(sql_type = Text)]
    rationale: String,
    #[diesel(sql_type = Array<BigInt>)]
    evidence_contribution_ids: Vec<i64>,
    #[diesel(sql_type = Timestamptz)]
    created_at: DateTime<Utc>,
    #[diesel(embed)]
    author: ActorA,
}

impl From<AssessmentRow> for Assessment {
    fn from(r: AssessmentRow) -> Assessment {
        Assessment {
            id: r.id,
            contribution_id: r.contribution_id,
            contribution_revision: r.contribution_revision,
            verdict: r.verdict,
            rationale: r.rationale,
            evidence_contribution_ids: r.evidence_contribution_ids,
            assessor: r.author.into(),
            created_at: r.created_at,
            orbit_revision: None,
        }
    }
}

const ASSESSMENT_SELECT: &str = "SELECT s.id, s.contribution_id, s.contribution_revision, \
        s.verdict, s.rationale, s.evidence_contribution_ids, s.created_at, \
        a.id AS a_id, a.type AS a_type, a.name AS a_name, a.model_claim AS a_model_claim \
    FROM assessments s JOIN contributors a ON a.id = s.assessor_id";

pub fn assessment(conn: &mut PgConnection, id: i64) -> QueryResult<Option<Assessment>> {
    by_id::<AssessmentRow, _>(conn, format!("{ASSESSMENT_SELECT} WHERE s.id = $1"), id)
}

/// A contribution's assessments, ascending by id, optionally of one revision.
pub fn assessments(
    conn: &mut PgConnection,
    contribution_id: i64,
    revision: Option<i64>,
    page: Cursor,
) -> QueryResult<Vec<Assessment>> {
    crate::db::sql(format!(
        "{ASSESSMENT_SELECT} WHERE s.contribution_id = $1 \
           AND ($2::bigint IS NULL OR s.contribution_revision = $2) AND s.id > $3 \
         ORDER BY s.id LIMIT $4"
    ))
    .bind::<BigInt, _>(contribution_id)
    .bind::<Nullable<BigInt>, _>(revision)
    .bind::<BigInt, _>(page.after)
    .bind::<BigInt, _>(page.fetch())
    .load::<AssessmentRow>(conn)
    .map(all)
}

/// The facts a write on a contribution decides on.
#[derive(Debug, Clone, QueryableByName)]
pub struct ContributionHead {
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    #[diesel(sql_type = BigInt)]
    pub orbit_id: i64,
    #[diesel(sql_type = BigInt)]
    pub author_id: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub problem_id: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub task_id: Option<i64>,
    #[diesel(sql_type = BigInt)]
    pub revision: i64,
    #[diesel(embed)]
    pub verdicts: VerdictCounts,
}

/// The columns of a [`ContributionHead`].
macro_rules! head_columns {
    () => {
        "id, orbit_id, author_id, problem_id, task_id, revision, \
         supports, disputes, inconclusive, needs_work"
    };
}

const HEAD_SELECT: &str = concat!(
    "SELECT ",
    head_columns!(),
    " FROM contributions WHERE id = $1"
);

/// Reads the head without locking (for the 404 and 403 checks before the key claim).
pub fn peek(conn: &mut PgConnection, id: i64) -> QueryResult<Option<ContributionHead>> {
    crate::db::sql(HEAD_SELECT)
        .bind::<BigInt, _>(id)
        .get_result(conn)
        .optional()
}

/// [`peek`] with `contributor_id`'s role in the contribution's orbit (`None`: not a
/// member), in one statement.
pub fn peek_as(
    conn: &mut PgConnection,
    id: i64,
    contributor_id: i64,
) -> QueryResult<Option<(ContributionHead, Option<Role>)>> {
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(embed)]
        head: ContributionHead,
        #[diesel(sql_type = Nullable<Text>)]
        role: Option<String>,
    }
    crate::db::sql(concat!(
        "SELECT ",
        head_columns!(),
        ", member_role(orbit_id, $2) AS role FROM contributions WHERE id = $1"
    ))
    .bind::<BigInt, _>(id)
    .bind::<BigInt, _>(contributor_id)
    .get_result::<Row>(conn)
    .optional()
    .map(|row| row.map(|r| (r.head, r.role.as_deref().and_then(Role::parse))))
}

/// Locks the contribution row (`FOR NO KEY UPDATE`: foreign-key checks of other
/// writers that name it are not blocked) and reads its current state. Revisions and
/// assessments of one contribution are ordered by this lock.
pub fn lock(conn: &mut PgConnection, id: i64) -> QueryResult<ContributionHead> {
    crate::db::sql(format!("{HEAD_SELECT} FOR NO KEY UPDATE"))
        .bind::<BigInt, _>(id)
        .get_result(conn)
}

// ---------------------------------------------------------------------------
// Writes

/// Inserts a contribution at revision 1, with its first revision, by
/// `contribution_insert` (src/db/functions.sql), the insert the quick contribution
/// creation runs too. Returns its id.
#[expect(clippy::too_many_arguments, reason = "one column per argument")]
pub fn insert(
    conn: &mut PgConnection,
    orbit_id: i64,
    kind: ContributionKind,
    author: i64,
    problem_id: Option<i64>,
    task_id: Option<i64>,
    title: &str,
    body: &str,
    artifact_ids: &[i64],
) -> QueryResult<i64> {
    crate::db::sql("SELECT (contribution_insert($1, $2, $3, $4, $5, $6, $7, $8)).id")
        .bind::<BigInt, _>(orbit_id)
        .bind::<Text, _>(kind.as_str())
        .bind::<BigInt, _>(author)
        .bind::<Nullable<BigInt>, _>(problem_id)
        .bind::<Nullable<BigInt>, _>(task_id)
        .bind::<Text, _>(title)
        .bind::<Text, _>(body)
        .bind::<Array<BigInt>, _>(artifact_ids)
        .get_result::<Id>(conn)
        .map(|r| r.id)
}

/// One row of [`insert_many`].
pub struct NewContribution<'a> {
    pub orbit_id: i64,
    pub kind: ContributionKind,
    pub author: i64,
    pub problem_id: Option<i64>,
    pub title: &'a str,
    pub body: &'a str,
}

/// A row [`insert_many`] wrote: what its change names.
#[derive(QueryableByName)]
pub struct Inserted {
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    #[diesel(sql_type = BigInt)]
    pub orbit_id: i64,
    #[diesel(sql_type = Text)]
    pub kind: String,
    #[diesel(sql_type = BigInt)]
    pub author_id: i64,
}

/// [`insert`] for many rows in one statement (the bench's bulk loads): each at
/// revision 1 with its revision row, no task and no artifacts. Returns the rows in
/// id order, which is the order of `rows`. It writes no change and no
/// `problem_counters`: the caller applies each row's change, and gives no row with a
/// problem (the bench's `Bulk::contributions_many` refuses one).
pub fn insert_many(
    conn: &mut PgConnection,
    rows: &[NewContribution<'_>],
) -> QueryResult<Vec<Inserted>> {
    let orbit_ids: Vec<i64> = rows.iter().map(|r| r.orbit_id).collect();
    let kinds: Vec<&str> = rows.iter().map(|r| r.kind.as_str()).collect();
    let authors: Vec<i64> = rows.iter().map(|r| r.author).collect();
    let problem_ids: Vec<Option<i64>> = rows.iter().map(|r| r.problem_id).collect();
    let titles: Vec<&str> = rows.iter().map(|r| r.title).collect();
    let bodies: Vec<&str> = rows.iter().map(|r| r.body).collect();
    crate::db::sql(
        "WITH t AS (SELECT clock_timestamp() AS now), \
         c AS ( \
             INSERT INTO contributions (orbit_id, kind, author_id, problem_id, title, body, \
                                        created_at, updated_at) \
             SELECT r.orbit_id, r.kind, r.author_id, r.problem_id, r.title, r.body, \
                    t.now, t.now \
             FROM unnest($1, $2, $3, $4, $5, $6) WITH ORDINALITY \
                      AS r (orbit_id, kind, author_id, problem_id, title, body, n), t \
             ORDER BY r.n \
             RETURNING id, orbit_id, kind, author_id, title, body, artifact_ids, created_at \
         ), v AS ( \
             INSERT INTO contribution_revisions (contribution_id, revision, title, body, \
                                                 artifact_ids, created_at) \
             SELECT c.id, 1, c.title, c.body, c.artifact_ids, c.created_at FROM c \
         ) \
         SELECT id, orbit_id, kind, author_id FROM c ORDER BY id",
    )
    .bind::<Array<BigInt>, _>(orbit_ids)
    .bind::<Array<Text>, _>(kinds)
    .bind::<Array<BigInt>, _>(authors)
    .bind::<Array<Nullable<BigInt>>, _>(problem_ids)
    .bind::<Array<Text>, _>(titles)
    .bind::<Array<Text>, _>(bodies)
    .load::<Inserted>(conn)
}

/// Writes the revision after `base` (absent fields keep the current revision's
/// values) and makes it current with no assessments, by `contribution_revise`
/// (src/db/functions.sql), the write the quick revision runs too, which decides
/// that `base` is the current revision. The caller holds `lock`. Returns the new
/// revision, or `None` when `base` is not the current one (nothing written).
pub fn insert_revision(
    conn: &mut PgConnection,
    id: i64,
    base: i64,
    title: Option<&str>,
    body: Option<&str>,
    artifact_ids: Option<&[i64]>,
) -> QueryResult<Option<i64>> {
    #[derive(QueryableByName)]
    struct Revised {
        #[diesel(sql_type = Nullable<BigInt>)]
        revision: Option<i64>,
    }
    Ok(
        crate::db::sql("SELECT (contribution_revise($1, $2, $3, $4, $5)).revision")
            .bind::<BigInt, _>(id)
            .bind::<BigInt, _>(base)
            .bind::<Nullable<Text>, _>(title)
            .bind::<Nullable<Text>, _>(body)
            .bind::<Nullable<Array<BigInt>>, _>(artifact_ids)
            .get_result::<Revised>(conn)?
            .revision,
    )
}

/// Inserts an assessment of one exact revision. Returns its id.
#[expect(clippy::too_many_arguments, reason = "one column per argument")]
pub fn insert_assessment(
    conn: &mut PgConnection,
    orbit_id: i64,
    contribution_id: i64,
    revision: i64,
    verdict: Verdict,
    rationale: &str,
    evidence: &[i64],
    assessor: i64,
) -> QueryResult<i64> {
    crate::db::sql(
        "INSERT INTO assessments (contribution_id, contribution_revision, orbit_id, verdict, \
                                  rationale, evidence_contribution_ids, assessor_id) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
    )
    .bind::<BigInt, _>(contribution_id)
    .bind::<BigInt, _>(revision)
    .bind::<BigInt, _>(orbit_id)
    .bind::<Text, _>(verdict.as_str())
    .bind::<Text, _>(rationale)
    .bind::<Array<BigInt>, _>(evidence)
    .bind::<BigInt, _>(assessor)
    .get_result::<Id>(conn)
    .map(|r| r.id)
}

/// Counts one more assessment of the contribution's current revision. The caller
/// holds `lock`.
pub fn count_verdict(conn: &mut PgConnection, id: i64, verdict: Verdict) -> QueryResult<()> {
    let column = verdict.column();
    crate::db::sql(format!(
        "UPDATE contributions SET {column} = {column} + 1 WHERE id = $1"
    ))
    .bind::<BigInt, _>(id)
    .execute(conn)?;
    Ok(())
}

/// An orbit's newest contributions, newest first (`contributions_orbit_idx` read
/// backwards), with an id below `before` (`None`: from the newest).
pub fn latest_of_orbit(
    conn: &mut PgConnection,
    orbit_id: i64,
    before: Option<i64>,
    n: i64,
) -> QueryResult<Vec<Contribution>> {
    crate::db::sql(format!(
        "{CONTRIBUTION_SELECT} WHERE c.orbit_id = $1 AND c.id < $2 \
         ORDER BY c.orbit_id DESC, c.id DESC LIMIT $3"
    ))
    .bind::<BigInt, _>(orbit_id)
    .bind::<BigInt, _>(before.unwrap_or(i64::MAX))
    .bind::<BigInt, _>(n)
    .load::<ContributionRow>(conn)
    .map(all)
}
