//! Problems: create, list, read, status change, and the overview (contract section
//! 6). The units of work and reads are `domain::problems`.

use crate::http::params::Path;
use actix_web::{get, post, HttpResponse};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::auth::Bearer;
use crate::domain::idempotency::{IdemHeader, IdempotencyKeyRequired};
use crate::domain::problems::{self, CreateProblem, ProblemQuery, SetProblemStatus};
use crate::error::ApiResult;
use crate::http::api::responses::{ReadErrors, WriteErrors};
use crate::http::api::{ok_json, page_json, write, State};
use crate::http::json::Body;
use crate::model::PageMeta;
use crate::store::problems::{Problem, ProblemOverview};

#[derive(Serialize, ToSchema)]
pub struct ProblemData {
    pub data: Problem,
}

#[derive(Serialize, ToSchema)]
pub struct ProblemPage {
    pub data: Vec<Problem>,
    pub meta: PageMeta,
}

#[derive(Serialize, ToSchema)]
pub struct ProblemOverviewData {
    pub data: ProblemOverview,
}

/// Create a problem in an orbit (members only). It starts OPEN.
#[utoipa::path(
    tag = "Problems",
    params(("orbit" = String, Path, description = "Orbit id or slug."), IdempotencyKeyRequired),
    request_body = CreateProblem,
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 201, body = ProblemData), WriteErrors),
)]
#[post("/orbits/{orbit}/problems")]
pub async fn create_problem(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    path: Path<String>,
    body: Body<CreateProblem>,
) -> ApiResult<HttpResponse> {
    let reference = path.into_inner();
    write(
        &problems::CREATE_PROBLEM,
        &state,
        bearer,
        key,
        body,
        move |c, who, g, b| problems::create(c, who, g, &reference, b),
    )
    .await
}

/// List an orbit's problems, ascending by id.
#[utoipa::path(
    tag = "Problems",
    params(("orbit" = String, Path, description = "Orbit id or slug."), ProblemQuery),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = ProblemPage), ReadErrors),
)]
#[get("/orbits/{orbit}/problems")]
pub async fn list_problems(
    state: State,
    bearer: Bearer,
    path: Path<String>,
    query: crate::http::params::Query<ProblemQuery>,
) -> ApiResult<HttpResponse> {
    let q = query.into_inner();
    page_json(&problems::list(&state, q, bearer, path.into_inner()).await?)
}

/// Read a problem.
#[utoipa::path(
    tag = "Problems",
    params(("problem" = i64, Path, minimum = 1)),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = ProblemData), ReadErrors),
)]
#[get("/problems/{problem}")]
pub async fn get_problem(state: State, bearer: Bearer, path: Path<i64>) -> ApiResult<HttpResponse> {
    let id = path.into_inner();
    ok_json(&problems::get(&state, bearer, id).await?)
}

/// Set a problem's status, OPEN or RESOLVED (MAINTAINER or higher). Setting the
/// current status again is still a write (one revision, `problem.updated`).
#[utoipa::path(
    tag = "Problems",
    params(("problem" = i64, Path, minimum = 1), IdempotencyKeyRequired),
    request_body = SetProblemStatus,
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = ProblemData), WriteErrors),
)]
#[post("/problems/{problem}/status")]
pub async fn set_problem_status(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    path: Path<i64>,
    body: Body<SetProblemStatus>,
) -> ApiResult<HttpResponse> {
    let problem_id = path.into_inner();
    write(
        &problems::SET_PROBLEM_STATUS,
        &state,
        bearer,
        key,
        body,
        move |c, who, g, b| problems::set_status(c, who, g, problem_id, b),
    )
    .await
}

/// A problem at a glance, in one request whose cost does not grow with the number
/// of contributions or assessments.
///
/// `task_counts`: OPEN (open, no active lease), LEASED (open, active lease),
/// COMPLETED, CANCELLED. `contribution_counts` by kind. `verdict_counts` over the
/// assessments of each contribution's current revision only. The five latest
/// contributions (newest first), the pending unexpired handoffs of the problem's
/// tasks, and the orbit revision all of it was read at (one snapshot).
#[utoipa::path(
    tag = "Problems",
    params(("problem" = i64, Path, minimum = 1)),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = ProblemOverviewData), ReadErrors),
)]
#[get("/problems/{problem}/overview")]
pub async fn problem_overview(
    state: State,
    bearer: Bearer,
    path: Path<i64>,
) -> ApiResult<HttpResponse> {
    let id = path.into_inner();
    ok_json(&problems::get_overview(&state, bearer, id).await?)
}
