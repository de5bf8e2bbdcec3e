//! Assessments: a verdict on one exact revision of a contribution (contract section
//! 6): the unit of work and the list behind `http::api::assessments` and the MCP tools.
//!
//! An assessment stays bound to the revision it names; a later revision starts with
//! none. Assessments are never averaged or merged: counts by verdict are all the
//! service derives from them.

use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use crate::db::TxResult;
use crate::domain::access;
use crate::domain::auth::{Bearer, Caller};
use crate::domain::idempotency::{Gate, Operation};
use crate::domain::revision::Change;
use crate::domain::write::{claim, public_page, Reply};
use crate::domain::Core;
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::model::{page_problems, query_cursor, verbatim, Page, Validate, MAX_PAGE};
use crate::store::contributions::{self as store, Assessment, Verdict};
use crate::store::{problems, refs};

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
        e.text("rationale", &self.rationale, 1, 8000);
        if let Some(ids) = &self.evidence_contribution_ids {
            verbatim::ids(e, "evidence_contribution_ids", ids);
        }
    }
}

pub static CREATE_ASSESSMENT: Operation = Operation::required(
    "POST",
    "/api/v1/contributions/{contribution}/revisions/{n}/assessments",
);

/// The assessment, inside `domain::write::run`'s transaction (REST and MCP).
pub fn create(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    contribution_id: i64,
    n: i64,
    body: ApiResult<&CreateAssessment>,
) -> TxResult<Reply> {
    let (head, role) = store::peek_as(conn, contribution_id, caller.id())?
        .ok_or_else(|| ApiError::not_found("Contribution"))?;
    if n < 1 || n > head.revision {
        return Err(ApiError::not_found("Contribution revision").into());
    }
    access::member_or_forbidden(role)?;
    let value = body?;
    let evidence = value.evidence_contribution_ids.clone().unwrap_or_default();
    if !refs::contributions_in_orbit(conn, head.orbit_id, &evidence)? {
        return Err(ApiError::field(
            "evidence_contribution_ids",
            "every contribution must exist in this orbit",
        )
        .into());
    }
    claim!(gate, conn, &[contribution_id, n]);
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
    let mut assessment = store::assessment(conn, id)?.ok_or(ApiError::internal())?;
    assessment.orbit_revision = Some(gate.record(
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
    )?);
    Reply::created(&assessment, head.orbit_id)
}

/// The query of `GET /api/v1/contributions/{contribution}/assessments`.
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

impl Validate for AssessmentQuery {
    fn validate(&self, e: &mut FieldErrors) {
        page_problems(e, self.limit, self.after, MAX_PAGE);
        if self.revision.is_some_and(|r| r < 1) {
            e.add("revision", "must be at least 1");
        }
    }
}

/// A contribution's assessments, ascending by id, `revision` keeping one revision's
/// (REST and MCP).
pub async fn list(
    core: &Core,
    q: AssessmentQuery,
    bearer: Bearer,
    id: i64,
) -> ApiResult<Page<Assessment>> {
    let cursor = query_cursor(&q, q.limit, q.after)?;
    public_page(
        core,
        bearer,
        cursor,
        |a: &Assessment| a.id,
        move |conn, cursor| {
            store::peek(conn, id)?.ok_or_else(|| ApiError::not_found("Contribution"))?;
            Ok(store::assessments(conn, id, q.revision, cursor)?)
        },
    )
    .await
}
