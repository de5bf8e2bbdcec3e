//! Assessments: a verdict on one exact revision of a contribution (contract section
//! 6). The unit of work and the list are `domain::assessments`.

use crate::http::params::Path;
use actix_web::{get, post, HttpResponse};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::assessments::{self, AssessmentQuery, CreateAssessment};
use crate::domain::auth::Bearer;
use crate::domain::idempotency::{IdemHeader, IdempotencyKeyRequired};
use crate::error::ApiResult;
use crate::http::api::responses::{ReadErrors, WriteErrors};
use crate::http::api::{page_json, write, State};
use crate::http::json::Body;
use crate::model::PageMeta;
use crate::store::contributions::Assessment;

#[derive(Serialize, ToSchema)]
pub struct AssessmentData {
    pub data: Assessment,
}

#[derive(Serialize, ToSchema)]
pub struct AssessmentPage {
    pub data: Vec<Assessment>,
    pub meta: PageMeta,
}

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
    path: Path<(i64, i64)>,
    body: Body<CreateAssessment>,
) -> ApiResult<HttpResponse> {
    let (contribution_id, n) = path.into_inner();
    write(
        &assessments::CREATE_ASSESSMENT,
        &state,
        bearer,
        key,
        body,
        move |c, who, g, b| assessments::create(c, who, g, contribution_id, n, b),
    )
    .await
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
    path: Path<i64>,
    query: crate::http::params::Query<AssessmentQuery>,
) -> ApiResult<HttpResponse> {
    let q = query.into_inner();
    page_json(&assessments::list(&state, q, bearer, path.into_inner()).await?)
}
