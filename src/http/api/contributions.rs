//! Contributions and their revisions (contract section 6). The units of work and
//! the reads are `domain::contributions`; assessments are in `api::assessments`.

use crate::http::params::Path;
use actix_web::{get, post, HttpResponse};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::auth::Bearer;
use crate::domain::contributions::{
    self, ContributionQuery, CreateContribution, ReviseContribution,
};
use crate::domain::idempotency::{IdemHeader, IdempotencyKeyRequired};
use crate::error::ApiResult;
use crate::http::api::responses::{ReadErrors, WriteErrors};
use crate::http::api::{list_json, ok_json, page_json, write_unit, State};
use crate::http::json::Body;
use crate::model::{PageMeta, PageParams};
use crate::store::contributions::{Contribution, ContributionRevision};

#[derive(Serialize, ToSchema)]
pub struct ContributionData {
    pub data: Contribution,
}

#[derive(Serialize, ToSchema)]
pub struct ContributionPage {
    pub data: Vec<Contribution>,
    pub meta: PageMeta,
}

#[derive(Serialize, ToSchema)]
pub struct ContributionRevisionData {
    pub data: ContributionRevision,
}

#[derive(Serialize, ToSchema)]
pub struct ContributionRevisionPage {
    pub data: Vec<ContributionRevision>,
    /// `next_after` is a revision number.
    pub meta: PageMeta,
}

/// Post a contribution (members only) at revision 1.
///
/// Kinds: ATTEMPT, OBSERVATION, CLAIM, QUESTION, NOTE. Attempts and observations are
/// not verified claims. `problem_id`, `task_id` and `artifact_ids` must name objects
/// of the same orbit (422 otherwise).
#[utoipa::path(
    tag = "Contributions",
    params(("orbit" = String, Path, description = "Orbit id or slug."), IdempotencyKeyRequired),
    request_body = CreateContribution,
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 201, body = ContributionData), WriteErrors),
)]
#[post("/orbits/{orbit}/contributions")]
pub async fn create_contribution(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    path: Path<String>,
    body: Body<CreateContribution>,
) -> ApiResult<HttpResponse> {
    let reference = path.into_inner();
    let unit = contributions::create_unit(reference, body.check());
    write_unit(
        &contributions::CREATE_CONTRIBUTION,
        &state,
        bearer,
        key,
        body,
        unit,
    )
    .await
}

/// List an orbit's contributions (each at its current revision), ascending by id.
#[utoipa::path(
    tag = "Contributions",
    params(("orbit" = String, Path, description = "Orbit id or slug."), ContributionQuery),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = ContributionPage), ReadErrors),
)]
#[get("/orbits/{orbit}/contributions")]
pub async fn list_contributions(
    state: State,
    bearer: Bearer,
    path: Path<String>,
    query: crate::http::params::Query<ContributionQuery>,
) -> ApiResult<HttpResponse> {
    let body = contributions::list(&state, query.into_inner(), bearer, path.into_inner()).await?;
    Ok(list_json(body))
}

/// Read a contribution at its current revision.
#[utoipa::path(
    tag = "Contributions",
    params(("contribution" = i64, Path, minimum = 1)),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = ContributionData), ReadErrors),
)]
#[get("/contributions/{contribution}")]
pub async fn get_contribution(
    state: State,
    bearer: Bearer,
    path: Path<i64>,
) -> ApiResult<HttpResponse> {
    let id = path.into_inner();
    ok_json(&contributions::get(&state, bearer, id).await?)
}

/// Write the next revision of your contribution (author only).
///
/// Answers the contribution at `revision = base_revision + 1`, with no assessments
/// yet (earlier revisions keep theirs). Fields left out keep the base revision's
/// values. 409 `revision_conflict` when `base_revision` is not the current revision
/// (`details.current_revision`): read it, merge, and send again.
#[utoipa::path(
    tag = "Contributions",
    params(("contribution" = i64, Path, minimum = 1), IdempotencyKeyRequired),
    request_body = ReviseContribution,
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 201, body = ContributionData), WriteErrors),
)]
#[post("/contributions/{contribution}/revisions")]
pub async fn revise_contribution(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    path: Path<i64>,
    body: Body<ReviseContribution>,
) -> ApiResult<HttpResponse> {
    let id = path.into_inner();
    let unit = contributions::revise_unit(id, body.check());
    write_unit(
        &contributions::REVISE_CONTRIBUTION,
        &state,
        bearer,
        key,
        body,
        unit,
    )
    .await
}

/// A contribution's revisions, ascending; `after` and `next_after` are revision numbers.
#[utoipa::path(
    tag = "Contributions",
    params(("contribution" = i64, Path, minimum = 1), PageParams),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = ContributionRevisionPage), ReadErrors),
)]
#[get("/contributions/{contribution}/revisions")]
pub async fn list_revisions(
    state: State,
    bearer: Bearer,
    path: Path<i64>,
    query: crate::http::params::Query<PageParams>,
) -> ApiResult<HttpResponse> {
    let page =
        contributions::revisions(&state, query.into_inner(), bearer, path.into_inner()).await?;
    page_json(&page)
}

/// Read one revision of a contribution exactly as it was written.
#[utoipa::path(
    tag = "Contributions",
    params(("contribution" = i64, Path, minimum = 1), ("n" = i64, Path, minimum = 1)),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = ContributionRevisionData), ReadErrors),
)]
#[get("/contributions/{contribution}/revisions/{n}")]
pub async fn get_revision(
    state: State,
    bearer: Bearer,
    path: Path<(i64, i64)>,
) -> ApiResult<HttpResponse> {
    let (id, n) = path.into_inner();
    ok_json(&contributions::revision(&state, bearer, id, n).await?)
}
