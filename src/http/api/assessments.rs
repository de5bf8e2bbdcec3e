//! Assessments: a verdict on one exact revision of a contribution (contract section 6).
//!
//! An assessment stays bound to the revision it names; a later revision starts with
//! none. Assessments are never averaged or merged: counts by verdict are all the
//! service derives from them.

use actix_web::{get, post, web, HttpResponse};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::db::TxResult;
use crate::domain::access;
use crate::domain::auth::{Bearer, Caller};
use crate::domain::idempotency::{Gate, IdemHeader, IdempotencyKeyRequired, Operation};
use crate::domain::revision::Change;
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::http::api::public_read;
use crate::http::api::responses::{ReadErrors, WriteErrors};
use crate::http::api::{page_json, write, Reply, State};
use crate::http::json::{Body, Validate};
use crate::model::page_bounds;
use crate::model::verbatim;
use crate::model::PageMeta;
use crate::store::contributions::{self as store, Assessment, Verdict};
use crate::store::{problems, refs};

#[derive(Serialize, ToSchema)]
pub struct AssessmentData {
    pub data: Assessment,
}

#[derive(Serialize, ToSchema)]
pub struct AssessmentPage {
    pub data: Vec<Assessment>,
    pub meta: PageMeta,
}

/// Body of `POST /api/v1/contributions/{contribution}/revisions/{n}/assessments`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateAssessment {
    pub verdict: Verdict,
    #[schema(min_length = 1, max_length = 8000)]
    pub rationale: String,
    /// Contributions of the same orbit offered as evidence (at most 100).
    #[schema(max_items = 100)]
    pub evidence_contribution_ids: Option<Vec<i64>>,
}

impl Validate for CreateAssessment {
    fn validate(&self, e: &mut FieldErrors) {
        verbatim::text(e, "rationale", &self.rationale, 1, 8000);
        if let Some(ids) = &self.evidence_contribution_ids {
            verbatim::ids(e, "evidence_contribution_ids", ids);
        }
    }
}

pub static CREATE_ASSESSMENT: Operation = Operation::required(
    "POST",
    "/api/v1/contributions/{contribution}/revisions/{n}/assessments",
);

/// Assess one exact revision of a contribution (members only).
///
/// The assessment belongs to revision `n` forever. It counts in the contribution's
/// `verdict_counts` (and its problem's overview) only while `n` is the current
/// revision. Any member may assess, the author included, and as often as they like:
/// each assessment stays its assessor's own.
#[utoipa::path(
    tag = "Assessments",
    params(
        ("contribution" = i64, Path, minimum = 1),
        ("n" = i64, Path, minimum = 1, description = "The revision assessed."),
        IdempotencyKeyRequired,
    ),
    request_body = CreateAssessment,
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 201, body = AssessmentData), WriteErrors),
)]
#[post("/contributions/{contribution}/revisions/{n}/assessments")]
pub async fn create_assessment(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    path: web::Path<(i64, i64)>,
    body: Body<CreateAssessment>,
) -> ApiResult<HttpResponse> {
    let (contribution_id, n) = path.into_inner();
    let canonical = body.canonical.clone();
    write(
        &state,
        bearer,
        key,
        &CREATE_ASSESSMENT,
        canonical,
        move |conn, caller, gate| create(conn, caller, gate, contribution_id, n, &body),
    )
    .await
}

/// The assessment, inside `domain::write::run`'s transaction (REST and MCP).
pub fn create(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    contribution_id: i64,
    n: i64,
    body: &Body<CreateAssessment>,
) -> TxResult<Reply> {
    let head =
        store::peek(conn, contribution_id)?.ok_or_else(|| ApiError::not_found("Contribution"))?;
    if n < 1 || n > head.revision {
        return Err(ApiError::not_found("Contribution revision").into());
    }
    access::require_member(conn, head.orbit_id, caller.id())?;
    let value = body.check()?;
    let evidence = value.evidence_contribution_ids.clone().unwrap_or_default();
    if !refs::contributions_in_orbit(conn, head.orbit_id, &evidence)? {
        return Err(ApiError::field(
            "evidence_contribution_ids",
            "every contribution must exist in this orbit",
        )
        .into());
    }
    if let Some(stored) = gate.claim(conn, &[contribution_id, n])? {
        return Ok(Reply::replayed(stored));
    }
    // Under the lock, a revision cannot slip in between the check of the
    // current revision and the counters.
    let head = store::lock(conn, contribution_id)?;
    let id = store::insert_assessment(
        conn,
        head.orbit_id,
        contribution_id,
        n,
        value.verdict,
        &value.rationale,
        &evidence,
        caller.id(),
    )?;
    let current = n == head.revision;
    if current {
        store::count_verdict(conn, contribution_id, value.verdict)?;
        if let Some(problem_id) = head.problem_id {
            problems::count_verdict(conn, problem_id, value.verdict)?;
        }
    }
    let mut out = store::assessment(conn, id)?.ok_or(ApiError::internal())?;
    let rev = gate.record(
        head.orbit_id,
        caller.id(),
        Change {
            kind: "assessment.created",
            entity_type: "assessment",
            entity_id: id,
            task_id: None,
            summary: format!(
                "assessment {id}: {} on contribution {contribution_id} revision {n}{}",
                value.verdict.as_str(),
                if current { "" } else { " (not current)" }
            ),
        },
    )?;
    out.orbit_revision = Some(rev);
    Reply::created(&out, head.orbit_id)
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AssessmentQuery {
    /// Only assessments of this revision.
    #[param(minimum = 1)]
    pub revision: Option<i64>,
    /// Page size, 1..100 (default 50).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<i64>,
    /// Return assessments with an id greater than this.
    #[param(minimum = 0)]
    pub after: Option<i64>,
}

/// A contribution's assessments, ascending by id; `revision` keeps one revision's.
#[utoipa::path(
    tag = "Assessments",
    params(("contribution" = i64, Path, minimum = 1), AssessmentQuery),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = AssessmentPage), ReadErrors),
)]
#[get("/contributions/{contribution}/assessments")]
pub async fn list_assessments(
    state: State,
    bearer: Bearer,
    path: web::Path<i64>,
    query: crate::http::json::Query<AssessmentQuery>,
) -> ApiResult<HttpResponse> {
    let q = query.into_inner();
    let cursor = page_bounds(q.limit, q.after)?;
    check_revision(q.revision)?;
    let id = path.into_inner();
    let rows = public_read(&state, bearer, move |conn| {
        page(conn, id, q.revision, cursor)
    })
    .await?;
    page_json(&cursor.page(rows, |a| a.id))
}

/// The `revision` filter of the assessment list (REST and MCP).
pub fn check_revision(revision: Option<i64>) -> ApiResult<()> {
    if revision.is_some_and(|r| r < 1) {
        return Err(ApiError::field("revision", "must be at least 1"));
    }
    Ok(())
}

/// A page of a contribution's assessments (REST and MCP).
pub fn page(
    conn: &mut diesel::PgConnection,
    id: i64,
    revision: Option<i64>,
    cursor: crate::model::Cursor,
) -> TxResult<Vec<Assessment>> {
    store::peek(conn, id)?.ok_or_else(|| ApiError::not_found("Contribution"))?;
    Ok(store::assessments(conn, id, revision, cursor)?)
}
