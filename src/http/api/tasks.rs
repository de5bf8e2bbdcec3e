//! Tasks: create, list, read, complete (lease-protected), cancel (contract section 7).

use actix_web::{get, post, web, HttpResponse};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::db::TxResult;
use crate::domain::access;
use crate::domain::auth::{Bearer, Caller};
use crate::domain::fence::{self, Guard, LockMode};
use crate::domain::idempotency::{Gate, IdemHeader, IdempotencyKeyRequired, Operation};
use crate::domain::revision::Change;
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::http::api::public_read;
use crate::http::api::responses::{ReadErrors, WriteErrors};
use crate::http::api::{ok_json, write, Reply, State};
use crate::http::json::{Body, Validate};
use crate::model::page_bounds;
use crate::model::PageMeta;
use crate::perf::listcache::ListRoute;
use crate::store::orbits::Role;
use crate::store::tasks::{self as store, Task, TaskStatus};

#[derive(Serialize, ToSchema)]
pub struct TaskData {
    pub data: Task,
}

#[derive(Serialize, ToSchema)]
pub struct TaskPage {
    pub data: Vec<Task>,
    pub meta: PageMeta,
}

/// Body of `POST /api/v1/orbits/{orbit}/tasks`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTask {
    #[schema(min_length = 1, max_length = 200)]
    pub title: String,
    #[schema(max_length = 20000)]
    pub description: Option<String>,
    /// A problem of the same orbit.
    #[schema(minimum = 1)]
    pub problem_id: Option<i64>,
}

impl Validate for CreateTask {
    fn validate(&self, e: &mut FieldErrors) {
        e.len("title", &self.title, 1, 200);
        if let Some(d) = &self.description {
            e.len("description", d, 0, 20000);
        }
    }
}

/// Checks that a referenced problem exists in the orbit (422 otherwise).
pub fn check_problem(
    conn: &mut diesel::PgConnection,
    orbit_id: i64,
    problem_id: Option<i64>,
) -> TxResult<()> {
    if let Some(pid) = problem_id {
        if !crate::store::refs::problem_in_orbit(conn, orbit_id, pid)? {
            return Err(ApiError::field("problem_id", "no such problem in this orbit").into());
        }
    }
    Ok(())
}

pub static CREATE_TASK: Operation = Operation::required("POST", "/api/v1/orbits/{orbit}/tasks");

/// Create a task in an orbit (members only).
#[utoipa::path(
    tag = "Tasks",
    params(("orbit" = String, Path, description = "Orbit id or slug."), IdempotencyKeyRequired),
    request_body = CreateTask,
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 201, body = TaskData), WriteErrors),
)]
#[post("/orbits/{orbit}/tasks")]
pub async fn create_task(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    path: web::Path<String>,
    body: Body<CreateTask>,
) -> ApiResult<HttpResponse> {
    let reference = path.into_inner();
    let canonical = body.canonical.clone();
    write(
        &state,
        bearer,
        key,
        &CREATE_TASK,
        canonical,
        move |conn, caller, gate| create(conn, caller, gate, &reference, &body),
    )
    .await
}

/// Task creation, inside `domain::write::run`'s transaction (REST and MCP). `reference` is
/// the orbit id or slug.
pub fn create(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    reference: &str,
    body: &Body<CreateTask>,
) -> TxResult<Reply> {
    let orbit = access::resolve(conn, reference)?;
    access::require_member(conn, orbit.id, caller.id())?;
    let value = body.check()?;
    check_problem(conn, orbit.id, value.problem_id)?;
    if let Some(stored) = gate.claim(conn, &[orbit.id])? {
        return Ok(Reply::replayed(stored));
    }
    let id = store::insert_task(
        conn,
        orbit.id,
        value.problem_id,
        &value.title,
        value.description.as_deref().unwrap_or(""),
        caller.id(),
    )?;
    let mut out = store::task(conn, id)?.ok_or(ApiError::internal())?;
    let rev = gate.record(
        orbit.id,
        caller.id(),
        Change {
            kind: "task.created",
            entity_type: "task",
            entity_id: id,
            task_id: Some(id),
            summary: format!("task {id} created"),
        },
    )?;
    out.orbit_revision = Some(rev);
    Reply::created(&out, orbit.id)
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct TaskQuery {
    /// Only tasks with this status.
    pub status: Option<TaskStatus>,
    /// Only tasks with (true) or without (false) an active lease.
    pub leased: Option<bool>,
    /// Page size, 1..100 (default 50).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<i64>,
    /// Return tasks with an id greater than this.
    #[param(minimum = 0)]
    pub after: Option<i64>,
}

/// List an orbit's tasks, ascending by id.
#[utoipa::path(
    tag = "Tasks",
    params(("orbit" = String, Path, description = "Orbit id or slug."), TaskQuery),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = TaskPage), ReadErrors),
)]
#[get("/orbits/{orbit}/tasks")]
pub async fn list_tasks(
    state: State,
    bearer: Bearer,
    path: web::Path<String>,
    query: crate::http::json::Query<TaskQuery>,
) -> ApiResult<HttpResponse> {
    let body = list_page(&state, bearer, path.into_inner(), query.into_inner()).await?;
    Ok(crate::http::api::json_response(
        actix_web::http::StatusCode::OK,
        body,
    ))
}

/// A page of an orbit's tasks, through the list cache (REST and MCP).
pub async fn list_page(
    state: &State,
    bearer: Bearer,
    reference: String,
    q: TaskQuery,
) -> ApiResult<actix_web::web::Bytes> {
    let cursor = page_bounds(q.limit, q.after)?;
    let status = q.status.map(TaskStatus::as_str);
    let params = format!(
        "status={status:?}&leased={:?}&after={}&limit={}",
        q.leased, cursor.after, cursor.limit
    );
    crate::http::api::public_list(
        state,
        bearer,
        reference,
        ListRoute::Tasks,
        params,
        move |conn, orbit_id| {
            Ok(store::tasks_page(conn, orbit_id, status, q.leased, cursor)?
                .map(|(rows, stamp)| (cursor.page(rows, |t| t.id), stamp)))
        },
    )
    .await
}

/// Read a task with its active lease.
#[utoipa::path(
    tag = "Tasks",
    params(("task" = i64, Path, minimum = 1)),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = TaskData), ReadErrors),
)]
#[get("/tasks/{task}")]
pub async fn get_task(
    state: State,
    bearer: Bearer,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let id = path.into_inner();
    let task = match &state.reads {
        // Anonymous: no token to check, so the read can share a group's statement.
        Some(reads) if !bearer.is_present() => reads
            .task
            .read(id)
            .await?
            .ok_or_else(|| ApiError::not_found("Task"))?,
        _ => {
            public_read(&state, bearer, move |conn| {
                crate::domain::reads::task(conn, id)
            })
            .await?
        }
    };
    ok_json(&task)
}

/// Resolves a task's orbit and checks membership (404, then 403).
pub fn task_member(
    conn: &mut diesel::PgConnection,
    task_id: i64,
    caller: i64,
) -> TxResult<(i64, Role)> {
    let (orbit_id, role) = store::task_orbit_role(conn, task_id, caller)?
        .ok_or_else(|| ApiError::not_found("Task"))?;
    let role = role.and_then(|r| Role::parse(&r));
    Ok((orbit_id, access::member_or_forbidden(role)?))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteTask {
    /// The version of the lease you hold.
    #[schema(minimum = 1)]
    pub lease_version: i64,
    #[schema(max_length = 4000)]
    pub summary: Option<String>,
    /// A contribution of the same orbit that holds the result.
    #[schema(minimum = 1)]
    pub result_contribution_id: Option<i64>,
}

impl Validate for CompleteTask {
    fn validate(&self, e: &mut FieldErrors) {
        if self.lease_version < 1 {
            e.add("lease_version", "must be at least 1");
        }
        if let Some(s) = &self.summary {
            e.len("summary", s, 0, 4000);
        }
    }
}

pub static COMPLETE_TASK: Operation = Operation::required("POST", "/api/v1/tasks/{task}/complete");

/// Complete a task (lease-protected). Ends the lease; the task becomes COMPLETED.
#[utoipa::path(
    tag = "Tasks",
    params(("task" = i64, Path, minimum = 1), IdempotencyKeyRequired),
    request_body = CompleteTask,
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = TaskData), WriteErrors),
)]
#[post("/tasks/{task}/complete")]
pub async fn complete_task(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    path: web::Path<i64>,
    body: Body<CompleteTask>,
) -> ApiResult<HttpResponse> {
    let task_id = path.into_inner();
    let canonical = body.canonical.clone();
    write(
        &state,
        bearer,
        key,
        &COMPLETE_TASK,
        canonical,
        move |conn, caller, gate| complete(conn, caller, gate, task_id, &body),
    )
    .await
}

/// Completion, inside `domain::write::run`'s transaction (REST and MCP).
pub fn complete(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    task_id: i64,
    body: &Body<CompleteTask>,
) -> TxResult<Reply> {
    let (orbit_id, _) = task_member(conn, task_id, caller.id())?;
    let value = body.check()?;
    if let Some(cid) = value.result_contribution_id {
        if !crate::store::refs::contribution_in_orbit(conn, orbit_id, cid)? {
            return Err(ApiError::field(
                "result_contribution_id",
                "no such contribution in this orbit",
            )
            .into());
        }
    }
    if let Some(stored) = gate.claim(conn, &[task_id])? {
        return Ok(Reply::replayed(stored));
    }
    let (task, held) = fence::guard(
        conn,
        task_id,
        caller.id(),
        value.lease_version,
        None,
        Guard::Work,
    )?;
    let superseded = task.supersede_pending(conn)?;
    store::end_lease(conn, held.lease_id, task.now, "COMPLETED")?;
    store::close_task(
        conn,
        task_id,
        TaskStatus::Completed,
        task.now,
        value.summary.as_deref(),
        value.result_contribution_id,
        None,
    )?;
    let mut summary = format!(
        "task {task_id} completed under lease v{}",
        held.lease_version
    );
    for h in superseded {
        summary.push_str(&format!("; handoff {h} superseded"));
    }
    let mut out = store::task(conn, task_id)?.ok_or(ApiError::internal())?;
    let rev = gate.record(
        orbit_id,
        caller.id(),
        Change {
            kind: "task.completed",
            entity_type: "task",
            entity_id: task_id,
            task_id: Some(task_id),
            summary,
        },
    )?;
    out.orbit_revision = Some(rev);
    Reply::ok(&out, orbit_id)
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelTask {
    #[schema(max_length = 4000)]
    pub reason: Option<String>,
}

impl Validate for CancelTask {
    fn validate(&self, e: &mut FieldErrors) {
        if let Some(r) = &self.reason {
            e.len("reason", r, 0, 4000);
        }
    }
}

pub static CANCEL_TASK: Operation = Operation::required("POST", "/api/v1/tasks/{task}/cancel");

/// Cancel a task (MAINTAINER or higher). Ends any lease; PENDING handoffs become
/// SUPERSEDED.
#[utoipa::path(
    tag = "Tasks",
    params(("task" = i64, Path, minimum = 1), IdempotencyKeyRequired),
    request_body = CancelTask,
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = TaskData), WriteErrors),
)]
#[post("/tasks/{task}/cancel")]
pub async fn cancel_task(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    path: web::Path<i64>,
    body: Body<CancelTask>,
) -> ApiResult<HttpResponse> {
    let task_id = path.into_inner();
    let canonical = body.canonical.clone();
    write(
        &state,
        bearer,
        key,
        &CANCEL_TASK,
        canonical,
        move |conn, caller, gate| cancel(conn, caller, gate, task_id, &body),
    )
    .await
}

/// Cancelling a task, inside `domain::write::run`'s transaction (REST and MCP).
pub fn cancel(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    task_id: i64,
    body: &Body<CancelTask>,
) -> TxResult<Reply> {
    let (orbit_id, role) = task_member(conn, task_id, caller.id())?;
    if role < Role::Maintainer {
        return Err(ApiError::forbidden(
            "insufficient_role",
            "Cancelling a task needs the MAINTAINER role or higher.",
        )
        .into());
    }
    let value = body.check()?;
    if let Some(stored) = gate.claim(conn, &[task_id])? {
        return Ok(Reply::replayed(stored));
    }
    let task = fence::lock(conn, task_id, LockMode::Update)?;
    if !task.is_open() {
        return Err(task_closed(&task.status).into());
    }
    let superseded = task.supersede_pending(conn)?;
    let mut summary = format!("task {task_id} cancelled");
    if let Some(lease) = &task.open_lease {
        store::end_lease(conn, lease.id, task.now, "CANCELLED")?;
        if lease.expires_at > task.now {
            summary.push_str(&format!("; lease v{} ended", lease.lease_version));
        } else {
            summary.push_str(&format!("; lease v{} expired", lease.lease_version));
        }
    }
    for h in superseded {
        summary.push_str(&format!("; handoff {h} superseded"));
    }
    store::close_task(
        conn,
        task_id,
        TaskStatus::Cancelled,
        task.now,
        None,
        None,
        value.reason.as_deref(),
    )?;
    let mut out = store::task(conn, task_id)?.ok_or(ApiError::internal())?;
    let rev = gate.record(
        orbit_id,
        caller.id(),
        Change {
            kind: "task.cancelled",
            entity_type: "task",
            entity_id: task_id,
            task_id: Some(task_id),
            summary,
        },
    )?;
    out.orbit_revision = Some(rev);
    Reply::ok(&out, orbit_id)
}

pub use crate::domain::fence::task_closed;
