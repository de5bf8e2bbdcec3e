//! Tasks: create, list, read, complete (lease-protected), cancel (contract section 7),
//! and an agent's next work (`find_work`): the units of work, reads and rules
//! behind `http::api::tasks` and their MCP tools.

use actix_web::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::db::{self, TxResult};
use crate::domain::access;
use crate::domain::auth::{Bearer, Caller};
use crate::domain::fence::{self, task_closed, Guard, LockMode};
use crate::domain::idempotency::{Gate, Operation};
use crate::domain::marks::Marks;
use crate::domain::revision::{Change, PENDING};
use crate::domain::write::{claim, public_list, public_read, Quick, Reply, Unit};
use crate::domain::Core;
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::model::{page_problems, query_cursor, Cursor, PageParams, Validate, MAX_PAGE};
use crate::perf::listcache::ListRoute;
use crate::perf::quick::QuickCall;
use crate::store::contributors as contributor_store;
use crate::store::handoffs::{self as handoff_store, HandoffStatus};
use crate::store::orbits::Role;
use crate::store::tasks::{self as store, Task, TaskStatus};

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
        e.text("title", &self.title, 1, 200);
        if let Some(d) = &self.description {
            e.text("description", d, 0, 20000);
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

/// Task creation, inside `domain::write::run`'s transaction (REST and MCP). `reference` is
/// the orbit id or slug.
fn create(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    reference: &str,
    body: ApiResult<&CreateTask>,
) -> TxResult<Reply> {
    let orbit = access::member_orbit(conn, reference, caller.id())?;
    let value = body?;
    check_problem(conn, orbit.id, value.problem_id)?;
    claim!(gate, conn, &[orbit.id]);
    let id = store::insert_task(
        conn,
        orbit.id,
        value.problem_id,
        &value.title,
        value.description.as_deref().unwrap_or(""),
        caller.id(),
    )?;
    let mut task = store::task(conn, id)?.ok_or(ApiError::internal())?;
    task.orbit_revision = Some(gate.record(orbit.id, caller.id(), created(&task))?);
    Reply::created(&task, orbit.id)
}

/// Task creation in the orbit named by `reference` (id or slug), as its REST route
/// and MCP tool run it: [`create`], tried first as a quick write when the orbit is
/// named by its id and the body is valid ([`quick_create`]).
pub fn create_unit(reference: String, body: ApiResult<&CreateTask>) -> Unit<CreateTask> {
    let quick = access::orbit_id_of(&reference)
        .zip(body.ok())
        .and_then(|(orbit_id, value)| quick_create(orbit_id, value));
    Unit::new(quick, move |c, who, g, b| create(c, who, g, &reference, b))
}

/// Task creation as a quick write (`perf::quick`), for an orbit named by its id and
/// a task with no problem (the ordinary path checks a problem): answered as
/// [`create`] answers it, with marks for what the statement chooses (the task's id
/// and times). A new task is OPEN, never leased, by its caller.
fn quick_create(orbit_id: i64, value: &CreateTask) -> Option<Quick> {
    if value.problem_id.is_some() {
        return None;
    }
    let title = value.title.clone();
    let description = value.description.clone().unwrap_or_default();
    Some(Quick {
        call: QuickCall::CreateTask {
            orbit_id,
            title: title.clone(),
            description: description.clone(),
        },
        render: Box::new(move |actor| {
            let mut marks = Marks::default();
            let task = Task {
                id: marks.number("id"),
                orbit_id,
                problem_id: None,
                title,
                description,
                status: TaskStatus::Open.as_str().into(),
                lease_version: 0,
                active_lease: None,
                completion_summary: None,
                result_contribution_id: None,
                cancel_reason: None,
                created_by: actor.clone(),
                created_at: marks.time("created_at"),
                updated_at: marks.time("updated_at"),
                orbit_revision: Some(PENDING),
            };
            let reply = Reply::new(StatusCode::CREATED, &task, None).ok()?;
            marks.rendered(reply, created(&task))
        }),
    })
}

/// The change of a task's creation.
fn created(task: &Task) -> Change<'static> {
    Change {
        kind: "task.created",
        entity_type: "task",
        entity_id: task.id,
        task_id: Some(task.id),
        summary: format!("task {} created", task.id),
    }
}

/// The query of `GET /api/v1/orbits/{orbit}/tasks` (and of the `list_tasks` tool).
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

impl Validate for TaskQuery {
    fn validate(&self, e: &mut FieldErrors) {
        page_problems(e, self.limit, self.after, MAX_PAGE);
    }
}

impl TaskQuery {
    /// The list cache's key of this query at `cursor`: its parameters, defaults applied.
    fn cache_params(&self, cursor: Cursor) -> String {
        let status = self.status.map(TaskStatus::as_str);
        format!(
            "status={status:?}&leased={:?}&after={}&limit={}",
            self.leased, cursor.after, cursor.limit
        )
    }
}

/// A page of an orbit's tasks, through the list cache (REST and MCP).
pub async fn list(
    core: &Core,
    q: TaskQuery,
    bearer: Bearer,
    reference: String,
) -> ApiResult<actix_web::web::Bytes> {
    let cursor = query_cursor(&q, q.limit, q.after)?;
    let params = q.cache_params(cursor);
    let status = q.status.map(TaskStatus::as_str);
    public_list(
        core,
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

/// A task with its active lease (REST and MCP).
pub async fn get(core: &Core, bearer: Bearer, id: i64) -> ApiResult<Task> {
    match &core.reads {
        // Anonymous: no token to check, so the read can share a group's statement.
        Some(reads) if !bearer.is_present() => reads
            .task
            .read(id)
            .await?
            .ok_or_else(|| ApiError::not_found("Task")),
        _ => {
            public_read(core, bearer, move |conn| {
                crate::domain::reads::task(conn, id)
            })
            .await
        }
    }
}

/// What `find_work` answers.
#[derive(Serialize)]
pub struct Work {
    /// OPEN tasks without an active lease, by orbit then id.
    open_tasks: Vec<Task>,
    /// PENDING handoffs in the caller's inbox.
    inbox_handoffs: Vec<handoff_store::Handoff>,
    /// True when there are more open tasks than `limit`.
    more_tasks: bool,
    /// True when there are more inbox handoffs than `limit`.
    more_handoffs: bool,
}

/// The caller's next work (the MCP tool `find_work`): open unleased tasks of one
/// orbit or of all its orbits, and the pending handoffs of its inbox, `limit` of each.
pub async fn find_work(
    core: &Core,
    bearer: Bearer,
    reference: Option<String>,
    limit: Option<i64>,
) -> ApiResult<Work> {
    let Cursor { limit, .. } = PageParams { limit, after: None }.checked()?;
    let tokens = core.tokens.clone();
    db::read(&core.pool, move |conn| {
        let caller = bearer.require(conn, &tokens)?;
        let orbit_ids: Vec<i64> = match &reference {
            Some(r) => {
                let orbit = access::member_orbit_read(conn, r, caller.id())?;
                vec![orbit.id]
            }
            None => contributor_store::member_orbit_ids(conn, caller.id())?,
        };
        let mut open_tasks = Vec::new();
        let mut more_tasks = false;
        for orbit_id in orbit_ids {
            let room = limit - open_tasks.len() as i64;
            if room <= 0 {
                more_tasks = true;
                break;
            }
            let mut rows = store::tasks_page(
                conn,
                orbit_id,
                Some(TaskStatus::Open.as_str()),
                Some(false),
                Cursor {
                    after: 0,
                    limit: room,
                },
            )?
            .map(|(rows, _)| rows)
            .unwrap_or_default();
            if rows.len() as i64 > room {
                rows.truncate(room as usize);
                more_tasks = true;
            }
            open_tasks.extend(rows);
        }
        let mut inbox_handoffs = handoff_store::mailbox(
            conn,
            caller.id(),
            false,
            Some(HandoffStatus::Pending.as_str()),
            Cursor { after: 0, limit },
        )?;
        let more_handoffs = inbox_handoffs.len() as i64 > limit;
        inbox_handoffs.truncate(limit as usize);
        Ok(Work {
            open_tasks,
            inbox_handoffs,
            more_tasks,
            more_handoffs,
        })
    })
    .await
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
            e.text("summary", s, 0, 4000);
        }
    }
}

pub static COMPLETE_TASK: Operation = Operation::required("POST", "/api/v1/tasks/{task}/complete");

/// Completion, inside `domain::write::run`'s transaction (REST and MCP).
pub fn complete(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    task_id: i64,
    body: ApiResult<&CompleteTask>,
) -> TxResult<Reply> {
    let (orbit_id, _) = task_member(conn, task_id, caller.id())?;
    let value = body?;
    if let Some(cid) = value.result_contribution_id {
        if !crate::store::refs::contribution_in_orbit(conn, orbit_id, cid)? {
            return Err(ApiError::field(
                "result_contribution_id",
                "no such contribution in this orbit",
            )
            .into());
        }
    }
    claim!(gate, conn, &[task_id]);
    let version = value.lease_version;
    let (task, held) = fence::guard(conn, task_id, caller.id(), version, None, Guard::Work)?;
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
    closed(conn, gate, "task.completed", orbit_id, task_id, summary)
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
            e.text("reason", r, 0, 4000);
        }
    }
}

pub static CANCEL_TASK: Operation = Operation::required("POST", "/api/v1/tasks/{task}/cancel");

/// Cancelling a task, inside `domain::write::run`'s transaction (REST and MCP).
pub fn cancel(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    task_id: i64,
    body: ApiResult<&CancelTask>,
) -> TxResult<Reply> {
    let (orbit_id, role) = task_member(conn, task_id, caller.id())?;
    access::at_least(role, Role::Maintainer, "Cancelling a task")?;
    let value = body?;
    claim!(gate, conn, &[task_id]);
    let task = fence::lock(conn, task_id, LockMode::Update)?;
    if !task.is_open() {
        return Err(task_closed(&task.status).into());
    }
    let superseded = task.supersede_pending(conn)?;
    let mut summary = format!("task {task_id} cancelled");
    if let Some(lease) = &task.open_lease {
        store::end_lease(conn, lease.id, task.now, "CANCELLED")?;
        if lease.active {
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
    closed(conn, gate, "task.cancelled", orbit_id, task_id, summary)
}

/// The end of a completion or a cancellation: the task as it is now, with the
/// change that closed it.
fn closed(
    conn: &mut diesel::PgConnection,
    gate: &mut Gate,
    kind: &'static str,
    orbit_id: i64,
    task_id: i64,
    summary: String,
) -> TxResult<Reply> {
    let mut task = store::task(conn, task_id)?.ok_or(ApiError::internal())?;
    let change = Change {
        kind,
        entity_type: "task",
        entity_id: task_id,
        task_id: Some(task_id),
        summary,
    };
    let by = gate.contributor_id();
    task.orbit_revision = Some(gate.record(orbit_id, by, change)?);
    Reply::ok(&task, orbit_id)
}
