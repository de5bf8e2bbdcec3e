//! Tasks: create, list, read, complete (lease-protected), cancel (contract section 7).
//! The units of work and reads are `domain::tasks`.

use crate::http::params::Path;
use actix_web::{get, post, HttpResponse};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::auth::Bearer;
use crate::domain::idempotency::{IdemHeader, IdempotencyKeyRequired};
use crate::domain::tasks::{self, CancelTask, CompleteTask, CreateTask, TaskQuery};
use crate::error::ApiResult;
use crate::http::api::responses::{ReadErrors, WriteErrors};
use crate::http::api::{list_json, ok_json, write, write_unit, State};
use crate::http::json::Body;
use crate::model::PageMeta;
use crate::store::tasks::Task;

#[derive(Serialize, ToSchema)]
pub struct TaskData {
    pub data: Task,
}

#[derive(Serialize, ToSchema)]
pub struct TaskPage {
    pub data: Vec<Task>,
    pub meta: PageMeta,
}

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
    path: Path<String>,
    body: Body<CreateTask>,
) -> ApiResult<HttpResponse> {
    let reference = path.into_inner();
    let unit = tasks::create_unit(reference, body.check());
    write_unit(&tasks::CREATE_TASK, &state, bearer, key, body, unit).await
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
    path: Path<String>,
    query: crate::http::params::Query<TaskQuery>,
) -> ApiResult<HttpResponse> {
    let body = tasks::list(&state, query.into_inner(), bearer, path.into_inner()).await?;
    Ok(list_json(body))
}

/// Read a task with its active lease.
#[utoipa::path(
    tag = "Tasks",
    params(("task" = i64, Path, minimum = 1)),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = TaskData), ReadErrors),
)]
#[get("/tasks/{task}")]
pub async fn get_task(state: State, bearer: Bearer, path: Path<i64>) -> ApiResult<HttpResponse> {
    let id = path.into_inner();
    let task = tasks::get(&state, bearer, id).await?;
    ok_json(&task)
}

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
    path: Path<i64>,
    body: Body<CompleteTask>,
) -> ApiResult<HttpResponse> {
    let task_id = path.into_inner();
    write(
        &tasks::COMPLETE_TASK,
        &state,
        bearer,
        key,
        body,
        move |c, who, g, b| tasks::complete(c, who, g, task_id, b),
    )
    .await
}

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
    path: Path<i64>,
    body: Body<CancelTask>,
) -> ApiResult<HttpResponse> {
    let task_id = path.into_inner();
    write(
        &tasks::CANCEL_TASK,
        &state,
        bearer,
        key,
        body,
        move |c, who, g, b| tasks::cancel(c, who, g, task_id, b),
    )
    .await
}
