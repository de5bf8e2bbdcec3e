//! Problems: create, list, read, status change, and the overview (contract section
//! 6): the units of work and reads behind `http::api::problems`, the MCP tools and
//! the problem page.

use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use crate::db::{TxError, TxResult};
use crate::domain::access;
use crate::domain::auth::{Bearer, Caller};
use crate::domain::idempotency::{Gate, Operation};
use crate::domain::revision::Change;
use crate::domain::write::{claim, public_page, public_read, Reply};
use crate::domain::Core;
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::model::{page_problems, query_cursor, Page, Validate, MAX_PAGE};
use crate::store::contributions as contribution_store;
use crate::store::handoffs as handoff_store;
use crate::store::orbits::Role;
use crate::store::problems::{self as store, Problem, ProblemOverview, ProblemStatus};

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
        e.text("title", &self.title, 1, 200);
        e.text("statement", &self.statement, 0, 20000);
    }
}

/// Reads a problem back inside the write's transaction (before the revision, so
/// the orbit lock is held only for the last statements before commit).
fn written_problem(conn: &mut diesel::PgConnection, id: i64) -> TxResult<Problem> {
    Ok(store::problem(conn, id)?.ok_or(ApiError::internal())?)
}

pub static CREATE_PROBLEM: Operation =
    Operation::required("POST", "/api/v1/orbits/{orbit}/problems");

/// Creating a problem, inside `domain::write::run`'s transaction (REST and MCP).
pub fn create(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    reference: &str,
    body: ApiResult<&CreateProblem>,
) -> TxResult<Reply> {
    let orbit = access::member_orbit(conn, reference, caller.id())?;
    let value = body?;
    claim!(gate, conn, &[orbit.id]);
    let id = store::insert(conn, orbit.id, &value.title, &value.statement, caller.id())?;
    let mut problem = written_problem(conn, id)?;
    problem.orbit_revision = Some(gate.record(
        orbit.id,
        caller.id(),
        Change {
            kind: "problem.created",
            entity_type: "problem",
            entity_id: id,
            task_id: None,
            summary: format!("problem {id} created"),
        },
    )?);
    Reply::created(&problem, orbit.id)
}

/// The query of `GET /api/v1/orbits/{orbit}/problems` (and of its tool).
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

impl Validate for ProblemQuery {
    fn validate(&self, e: &mut FieldErrors) {
        page_problems(e, self.limit, self.after, MAX_PAGE);
    }
}

impl ProblemQuery {
    /// The status filter as stored, if any.
    fn status(&self) -> Option<&'static str> {
        self.status.map(ProblemStatus::as_str)
    }
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

/// Setting a problem's status, inside `domain::write::run`'s transaction (REST and MCP).
pub fn set_status(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    problem_id: i64,
    body: ApiResult<&SetProblemStatus>,
) -> TxResult<Reply> {
    let orbit_id =
        store::problem_orbit(conn, problem_id)?.ok_or_else(|| ApiError::not_found("Problem"))?;
    access::require_role(
        conn,
        orbit_id,
        caller.id(),
        Role::Maintainer,
        "Setting a problem's status",
    )?;
    let value = body?;
    claim!(gate, conn, &[problem_id]);
    let old = store::set_status(conn, problem_id, value.status)?;
    let mut problem = written_problem(conn, problem_id)?;
    problem.orbit_revision = Some(gate.record(
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
    )?);
    Reply::ok(&problem, orbit_id)
}

/// A problem's overview read in one snapshot (the API and the problem page).
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

/// An orbit's problems, ascending by id, `status` keeping one status (REST and MCP).
pub async fn list(
    core: &Core,
    q: ProblemQuery,
    bearer: Bearer,
    reference: String,
) -> ApiResult<Page<Problem>> {
    let cursor = query_cursor(&q, q.limit, q.after)?;
    let status = q.status();
    public_page(
        core,
        bearer,
        cursor,
        |p: &Problem| p.id,
        move |conn, cursor| {
            let orbit = access::resolve(conn, &reference)?;
            Ok(store::problems_of_orbit(conn, orbit.id, status, cursor)?)
        },
    )
    .await
}

/// A problem (REST and MCP).
pub async fn get(core: &Core, bearer: Bearer, id: i64) -> ApiResult<Problem> {
    public_read(core, bearer, move |conn| {
        store::problem(conn, id)?.ok_or_else(|| ApiError::not_found("Problem").into())
    })
    .await
}

/// A problem's overview (REST and MCP), read as [`overview`].
pub async fn get_overview(core: &Core, bearer: Bearer, id: i64) -> ApiResult<ProblemOverview> {
    public_read(core, bearer, move |conn| overview(conn, id)).await
}
