//! Problems: create, list, read, status change, and the overview (contract section 6).

use actix_web::{get, post, web, HttpResponse};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::db::{TxError, TxResult};
use crate::domain::access;
use crate::domain::auth::{Bearer, Caller};
use crate::domain::idempotency::{Gate, IdemHeader, IdempotencyKeyRequired, Operation};
use crate::domain::revision::Change;
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::http::api::public_read;
use crate::http::api::responses::{ReadErrors, WriteErrors};
use crate::http::api::{ok_json, page_json, write, Reply, State};
use crate::http::json::{Body, Validate};
use crate::model::page_bounds;
use crate::model::verbatim;
use crate::model::PageMeta;
use crate::store::contributions as contribution_store;
use crate::store::handoffs as handoff_store;
use crate::store::orbits::Role;
use crate::store::problems::{self as store, Problem, ProblemOverview, ProblemStatus};

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

/// Body of `POST /api/v1/orbits/{orbit}/problems`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateProblem {
    #[schema(min_length = 1, max_length = 200)]
    pub title: String,
    /// May be empty.
    #[schema(max_length = 20000)]
    pub statement: String,
}

impl Validate for CreateProblem {
    fn validate(&self, e: &mut FieldErrors) {
        verbatim::text(e, "title", &self.title, 1, 200);
        verbatim::text(e, "statement", &self.statement, 0, 20000);
    }
}

/// Reads a problem back inside the write's transaction (before the revision, so
/// the orbit lock is held only for the last statements before commit).
fn written_problem(conn: &mut diesel::PgConnection, id: i64) -> TxResult<Problem> {
    Ok(store::problem(conn, id)?.ok_or(ApiError::internal())?)
}

pub static CREATE_PROBLEM: Operation =
    Operation::required("POST", "/api/v1/orbits/{orbit}/problems");

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
    path: web::Path<String>,
    body: Body<CreateProblem>,
) -> ApiResult<HttpResponse> {
    let reference = path.into_inner();
    let canonical = body.canonical.clone();
    write(
        &state,
        bearer,
        key,
        &CREATE_PROBLEM,
        canonical,
        move |conn, caller, gate| create(conn, caller, gate, &reference, &body),
    )
    .await
}

/// Creating a problem, inside `domain::write::run`'s transaction (REST and MCP).
pub fn create(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    reference: &str,
    body: &Body<CreateProblem>,
) -> TxResult<Reply> {
    let orbit = access::resolve(conn, reference)?;
    access::require_member(conn, orbit.id, caller.id())?;
    let value = body.check()?;
    if let Some(stored) = gate.claim(conn, &[orbit.id])? {
        return Ok(Reply::replayed(stored));
    }
    let id = store::insert(conn, orbit.id, &value.title, &value.statement, caller.id())?;
    let mut out = written_problem(conn, id)?;
    let rev = gate.record(
        orbit.id,
        caller.id(),
        Change {
            kind: "problem.created",
            entity_type: "problem",
            entity_id: id,
            task_id: None,
            summary: format!("problem {id} created"),
        },
    )?;
    out.orbit_revision = Some(rev);
    Reply::created(&out, orbit.id)
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ProblemQuery {
    /// Only problems with this status.
    pub status: Option<ProblemStatus>,
    /// Page size, 1..100 (default 50).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<i64>,
    /// Return problems with an id greater than this.
    #[param(minimum = 0)]
    pub after: Option<i64>,
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
    path: web::Path<String>,
    query: crate::http::json::Query<ProblemQuery>,
) -> ApiResult<HttpResponse> {
    let q = query.into_inner();
    let cursor = page_bounds(q.limit, q.after)?;
    let reference = path.into_inner();
    let status = q.status.map(ProblemStatus::as_str);
    let rows = public_read(&state, bearer, move |conn| {
        page(conn, &reference, status, cursor)
    })
    .await?;
    page_json(&cursor.page(rows, |p| p.id))
}

/// Read a problem.
#[utoipa::path(
    tag = "Problems",
    params(("problem" = i64, Path, minimum = 1)),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = ProblemData), ReadErrors),
)]
#[get("/problems/{problem}")]
pub async fn get_problem(
    state: State,
    bearer: Bearer,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let id = path.into_inner();
    let problem = public_read(&state, bearer, move |conn| read(conn, id)).await?;
    ok_json(&problem)
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetProblemStatus {
    pub status: ProblemStatus,
}

impl Validate for SetProblemStatus {
    fn validate(&self, _: &mut FieldErrors) {}
}

pub static SET_PROBLEM_STATUS: Operation =
    Operation::required("POST", "/api/v1/problems/{problem}/status");

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
    path: web::Path<i64>,
    body: Body<SetProblemStatus>,
) -> ApiResult<HttpResponse> {
    let problem_id = path.into_inner();
    let canonical = body.canonical.clone();
    write(
        &state,
        bearer,
        key,
        &SET_PROBLEM_STATUS,
        canonical,
        move |conn, caller, gate| set_status(conn, caller, gate, problem_id, &body),
    )
    .await
}

/// Setting a problem's status, inside `domain::write::run`'s transaction (REST and MCP).
pub fn set_status(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    problem_id: i64,
    body: &Body<SetProblemStatus>,
) -> TxResult<Reply> {
    let orbit_id =
        store::problem_orbit(conn, problem_id)?.ok_or_else(|| ApiError::not_found("Problem"))?;
    access::require_role(conn, orbit_id, caller.id(), Role::Maintainer)?;
    let value = body.check()?;
    if let Some(stored) = gate.claim(conn, &[problem_id])? {
        return Ok(Reply::replayed(stored));
    }
    let old = store::set_status(conn, problem_id, value.status)?;
    let mut out = written_problem(conn, problem_id)?;
    let rev = gate.record(
        orbit_id,
        caller.id(),
        Change {
            kind: "problem.updated",
            entity_type: "problem",
            entity_id: problem_id,
            task_id: None,
            summary: format!(
                "problem {problem_id} status {old} -> {}",
                value.status.as_str()
            ),
        },
    )?;
    out.orbit_revision = Some(rev);
    Reply::ok(&out, orbit_id)
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
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let id = path.into_inner();
    let overview = public_read(&state, bearer, move |conn| overview(conn, id)).await?;
    ok_json(&overview)
}

/// A problem's overview read in one snapshot (REST and MCP).
pub fn overview(conn: &mut diesel::PgConnection, id: i64) -> TxResult<ProblemOverview> {
    // One snapshot: the counts, lists and revision agree with each other.
    conn.build_transaction()
        .read_only()
        .repeatable_read()
        .run::<_, TxError, _>(|conn| {
            let problem =
                store::problem(conn, id)?.ok_or_else(|| ApiError::not_found("Problem"))?;
            let (task_counts, contribution_counts, verdict_counts) =
                store::counters(conn, problem.orbit_id, id)?;
            let latest_contributions =
                contribution_store::latest_of_problem(conn, id, store::LATEST)?;
            let mut pending_handoffs = Vec::new();
            for h in store::pending_handoff_ids(conn, problem.orbit_id, id)? {
                if let Some(handoff) = handoff_store::handoff(conn, h)? {
                    pending_handoffs.push(handoff);
                }
            }
            let orbit_revision = store::orbit_revision(conn, problem.orbit_id)?;
            Ok(ProblemOverview {
                problem,
                task_counts,
                contribution_counts,
                verdict_counts,
                latest_contributions,
                pending_handoffs,
                orbit_revision,
            })
        })
}

/// A page of an orbit's problems (REST and MCP).
pub fn page(
    conn: &mut diesel::PgConnection,
    reference: &str,
    status: Option<&'static str>,
    cursor: crate::model::Cursor,
) -> TxResult<Vec<crate::store::problems::Problem>> {
    let orbit = access::resolve(conn, reference)?;
    Ok(store::problems_of_orbit(conn, orbit.id, status, cursor)?)
}

/// A problem (REST and MCP).
pub fn read(conn: &mut diesel::PgConnection, id: i64) -> TxResult<crate::store::problems::Problem> {
    store::problem(conn, id)?.ok_or_else(|| ApiError::not_found("Problem").into())
}
