//! The MCP tool calls, each the REST operation's own domain function (the
//! catalogue of names, descriptions and input schemas is `catalogue`).
//!
//! A writing tool's arguments are the REST path parameters (`task_id`, `orbit`, ...),
//! the REST body's fields and `idempotency_key`. The body is rebuilt from the
//! arguments minus the path ids and the key, parsed and validated exactly like a
//! request body (`Body::from_value`), and its canonical form is the fingerprint's. The
//! key goes to the same `Operation` as the REST route, so a key sent over REST and
//! over MCP for the same operation and input is one request.

use diesel::PgConnection;
use rmcp::model::JsonObject;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

use super::Done;
use crate::db::{self, TxResult};
use crate::domain::access;
use crate::domain::auth::{Bearer, Caller};
use crate::domain::idempotency::{is_valid_key, Gate, IdemHeader, Operation};
use crate::error::{ApiError, ApiResult};
use crate::http::api::{
    artifacts, assessments, changes, checkpoints, contributions, handoffs, leases, members, memory,
    orbits, problems, tasks, Reply, State,
};
use crate::http::json::{Body, Validate};
use crate::model::{Cursor, PageParams};
use crate::store::contributors as contributor_store;
use crate::store::handoffs::{self as handoff_store, HandoffStatus};
use crate::store::orbits as orbit_store;
use crate::store::tasks as task_store;

/// A tool's arguments, taken apart the way a REST request is: path ids, the key,
/// then the rest as the body (or the query).
struct Args(Map<String, Value>);

impl Args {
    /// A required positive id (a JSON integer, or a string of digits).
    fn id(&mut self, name: &str) -> ApiResult<i64> {
        let v = self
            .0
            .remove(name)
            .ok_or_else(|| ApiError::field(name, "is required"))?;
        let n = match &v {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => s.parse::<i64>().ok(),
            _ => None,
        };
        n.filter(|n| *n >= 1)
            .ok_or_else(|| ApiError::field(name, "must be a positive integer id"))
    }

    /// The orbit, by id or slug.
    fn orbit(&mut self) -> ApiResult<String> {
        self.orbit_opt()?
            .ok_or_else(|| ApiError::field("orbit", "is required"))
    }

    fn orbit_opt(&mut self) -> ApiResult<Option<String>> {
        match self.0.remove("orbit") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if !s.is_empty() => Ok(Some(s)),
            Some(Value::Number(n)) if n.as_i64().is_some_and(|n| n >= 1) => Ok(Some(n.to_string())),
            Some(_) => Err(ApiError::field("orbit", "must be an orbit id or slug")),
        }
    }

    /// `idempotency_key`, in the form the header would have had.
    fn key(&mut self) -> IdemHeader {
        match self.0.remove("idempotency_key") {
            None | Some(Value::Null) => IdemHeader(None),
            Some(Value::String(s)) if is_valid_key(&s) => IdemHeader(Some(Ok(s))),
            Some(_) => IdemHeader(Some(Err(()))),
        }
    }

    /// The remaining arguments as a REST body: parsed and validated late, like one.
    fn body<T: DeserializeOwned + Validate>(self) -> Body<T> {
        Body::from_value(Value::Object(self.0))
    }

    /// The remaining arguments as a query (unknown ones refused).
    fn query<T: DeserializeOwned>(self) -> ApiResult<T> {
        crate::http::json::arguments(Value::Object(self.0))
    }
}

/// `{"data": ...}`, as the REST API answers a read.
fn data<T: Serialize>(value: &T) -> ApiResult<Done> {
    let body = serde_json::to_vec(&crate::model::Data { data: value })
        .map_err(|_| ApiError::internal())?;
    Ok(Done {
        body,
        replayed: false,
    })
}

fn raw<T: Serialize>(value: &T) -> ApiResult<Done> {
    let body = serde_json::to_vec(value).map_err(|_| ApiError::internal())?;
    Ok(Done {
        body,
        replayed: false,
    })
}

/// A write through `domain::write::run`: the REST operation's transaction and key.
async fn write<F>(
    state: &State,
    bearer: Bearer,
    key: IdemHeader,
    op: &'static Operation,
    canonical: String,
    work: F,
) -> ApiResult<Done>
where
    F: FnMut(&mut PgConnection, &Caller, &mut Gate) -> TxResult<Reply> + Send + 'static,
{
    let written = crate::domain::write::run(state, bearer, key, op, canonical, None, work).await?;
    Ok(Done {
        body: written.body,
        replayed: written.replayed,
    })
}

/// Runs the tool `name`; `None` when there is no such tool.
pub async fn call(
    state: &State,
    bearer: Bearer,
    name: &str,
    arguments: JsonObject,
) -> Option<ApiResult<Done>> {
    // Integral floats are integers for ids and query arguments too, as for bodies
    // (issue 26, finding 10).
    let mut arguments = Value::Object(arguments);
    crate::http::json::integral_floats_to_integers(&mut arguments);
    let arguments = match arguments {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    let a = Args(arguments);
    Some(match name {
        "whoami" => whoami(state, bearer, a).await,
        "list_orbits" => list_orbits(state, bearer, a).await,
        "join_orbit" => join_orbit(state, bearer, a).await,
        "find_work" => find_work(state, bearer, a).await,
        "get_task" => get_task(state, bearer, a).await,
        "create_task" => create_task(state, bearer, a).await,
        "acquire_lease" => acquire_lease(state, bearer, a).await,
        "renew_lease" => renew_lease(state, bearer, a).await,
        "release_lease" => release_lease(state, bearer, a).await,
        "check_fence" => check_fence(state, bearer, a).await,
        "write_checkpoint" => write_checkpoint(state, bearer, a).await,
        "list_checkpoints" => list_checkpoints(state, bearer, a).await,
        "offer_handoff" => offer_handoff(state, bearer, a).await,
        "accept_handoff" => accept_handoff(state, bearer, a).await,
        "decline_handoff" => decline_handoff(state, bearer, a).await,
        "withdraw_handoff" => withdraw_handoff(state, bearer, a).await,
        "handoff_inbox" => handoff_inbox(state, bearer, a).await,
        "complete_task" => complete_task(state, bearer, a).await,
        "create_contribution" => create_contribution(state, bearer, a).await,
        "revise_contribution" => revise_contribution(state, bearer, a).await,
        "assess_revision" => assess_revision(state, bearer, a).await,
        "problem_overview" => problem_overview(state, bearer, a).await,
        "read_changes" => read_changes(state, bearer, a).await,
        "write_memory" => write_memory(state, bearer, a).await,
        "search" => search(state, bearer, a).await,
        "create_orbit" => create_orbit(state, bearer, a).await,
        "get_orbit" => get_orbit(state, bearer, a).await,
        "list_members" => list_members(state, bearer, a).await,
        "set_member" => set_member(state, bearer, a).await,
        "remove_member" => remove_member(state, bearer, a).await,
        "create_problem" => create_problem(state, bearer, a).await,
        "list_problems" => list_problems(state, bearer, a).await,
        "get_problem" => get_problem(state, bearer, a).await,
        "set_problem_status" => set_problem_status(state, bearer, a).await,
        "list_contributions" => list_contributions(state, bearer, a).await,
        "get_contribution" => get_contribution(state, bearer, a).await,
        "list_revisions" => list_revisions(state, bearer, a).await,
        "get_revision" => get_revision(state, bearer, a).await,
        "list_assessments" => list_assessments(state, bearer, a).await,
        "create_artifact" => create_artifact(state, bearer, a).await,
        "list_artifacts" => list_artifacts(state, bearer, a).await,
        "get_artifact" => get_artifact(state, bearer, a).await,
        "list_memory" => list_memory(state, bearer, a).await,
        "list_tasks" => list_tasks(state, bearer, a).await,
        "cancel_task" => cancel_task(state, bearer, a).await,
        "get_lease" => get_lease(state, bearer, a).await,
        "list_leases" => list_leases(state, bearer, a).await,
        "get_checkpoint" => get_checkpoint(state, bearer, a).await,
        "get_handoff" => get_handoff(state, bearer, a).await,
        "list_handoffs" => list_handoffs(state, bearer, a).await,
        "list_task_handoffs" => list_task_handoffs(state, bearer, a).await,
        _ => return None,
    })
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitArg {
    limit: Option<i64>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct InboxArgs {
    status: Option<HandoffStatus>,
    limit: Option<i64>,
    after: Option<i64>,
}

async fn whoami(state: &State, bearer: Bearer, a: Args) -> ApiResult<Done> {
    let NoArgs {} = a.query()?;
    let tokens = state.tokens.clone();
    let me = db::read(&state.pool, move |conn| {
        crate::domain::reads::me_of(conn, &bearer, &tokens)
    })
    .await?;
    data(&me)
}

async fn list_orbits(state: &State, bearer: Bearer, a: Args) -> ApiResult<Done> {
    let cursor = a.query::<PageParams>()?.checked()?;
    let tokens = state.tokens.clone();
    let rows = db::read(&state.pool, move |conn| {
        bearer.require(conn, &tokens)?;
        Ok(orbit_store::list(conn, cursor)?)
    })
    .await?;
    raw(&cursor.page(rows, |o| o.id))
}

async fn join_orbit(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let reference = a.orbit()?;
    // Joining ignores keys (as the REST route ignores the header).
    a.key();
    let body: Body<orbits::Empty> = a.body();
    write(
        state,
        bearer,
        IdemHeader::default(),
        &orbits::JOIN_ORBIT,
        body.canonical.clone(),
        move |conn, caller, gate| orbits::join(conn, caller, gate, &reference, &body),
    )
    .await
}

/// What `find_work` answers.
#[derive(Serialize)]
struct Work {
    /// OPEN tasks without an active lease, by orbit then id.
    open_tasks: Vec<task_store::Task>,
    /// PENDING handoffs in the caller's inbox.
    inbox_handoffs: Vec<handoff_store::Handoff>,
    /// True when there are more open tasks than `limit`.
    more_tasks: bool,
    /// True when there are more inbox handoffs than `limit`.
    more_handoffs: bool,
}

async fn find_work(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let reference = a.orbit_opt()?;
    let LimitArg { limit } = a.query()?;
    let Cursor { limit, .. } = PageParams { limit, after: None }.checked()?;
    let tokens = state.tokens.clone();
    let work = db::read(&state.pool, move |conn| {
        let caller = bearer.require(conn, &tokens)?;
        let orbit_ids: Vec<i64> = match &reference {
            Some(r) => {
                let orbit = access::resolve(conn, r)?;
                access::require_member(conn, orbit.id, caller.id())?;
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
            let mut rows = task_store::tasks_page(
                conn,
                orbit_id,
                Some(task_store::TaskStatus::Open.as_str()),
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
    .await?;
    data(&work)
}

async fn get_task(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let id = a.id("task_id")?;
    let NoArgs {} = a.query()?;
    let tokens = state.tokens.clone();
    let task = db::read(&state.pool, move |conn| {
        bearer.require(conn, &tokens)?;
        crate::domain::reads::task(conn, id)
    })
    .await?;
    data(&task)
}

async fn create_task(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let reference = a.orbit()?;
    let key = a.key();
    let body: Body<tasks::CreateTask> = a.body();
    write(
        state,
        bearer,
        key,
        &tasks::CREATE_TASK,
        body.canonical.clone(),
        move |conn, caller, gate| tasks::create(conn, caller, gate, &reference, &body),
    )
    .await
}

async fn complete_task(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let task_id = a.id("task_id")?;
    let key = a.key();
    let body: Body<tasks::CompleteTask> = a.body();
    write(
        state,
        bearer,
        key,
        &tasks::COMPLETE_TASK,
        body.canonical.clone(),
        move |conn, caller, gate| tasks::complete(conn, caller, gate, task_id, &body),
    )
    .await
}

async fn acquire_lease(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let task_id = a.id("task_id")?;
    let key = a.key();
    let body: Body<leases::AcquireLease> = a.body();
    let st = state.clone();
    write(
        state,
        bearer,
        key,
        &leases::ACQUIRE_LEASE,
        body.canonical.clone(),
        move |conn, caller, gate| leases::acquire(conn, caller, gate, &st, task_id, &body),
    )
    .await
}

async fn renew_lease(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let lease_id = a.id("lease_id")?;
    let key = a.key();
    let body: Body<leases::RenewLease> = a.body();
    let st = state.clone();
    write(
        state,
        bearer,
        key,
        &leases::RENEW_LEASE,
        body.canonical.clone(),
        move |conn, caller, gate| leases::renew(conn, caller, gate, &st, lease_id, &body),
    )
    .await
}

async fn release_lease(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let lease_id = a.id("lease_id")?;
    let key = a.key();
    let body: Body<leases::LeaseVersionBody> = a.body();
    write(
        state,
        bearer,
        key,
        &leases::RELEASE_LEASE,
        body.canonical.clone(),
        move |conn, caller, gate| leases::release(conn, caller, gate, lease_id, &body),
    )
    .await
}

async fn check_fence(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let task_id = a.id("task_id")?;
    // The fence check ignores keys.
    a.key();
    let body: Body<leases::LeaseVersionBody> = a.body();
    let tokens = state.tokens.clone();
    let verdict = db::transact(&state.pool, move |conn| {
        let caller = bearer.require(conn, &tokens)?;
        leases::fence_verdict(conn, &caller, task_id, &body)
    })
    .await?;
    data(&verdict)
}

async fn write_checkpoint(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let task_id = a.id("task_id")?;
    let key = a.key();
    let body: Body<checkpoints::CreateCheckpoint> = a.body();
    let hashed = checkpoints::state_hash(&body);
    write(
        state,
        bearer,
        key,
        &checkpoints::CREATE_CHECKPOINT,
        body.canonical.clone(),
        move |conn, caller, gate| checkpoints::create(conn, caller, gate, task_id, &body, &hashed),
    )
    .await
}

async fn list_checkpoints(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let task_id = a.id("task_id")?;
    let cursor = a.query::<PageParams>()?.checked()?;
    let tokens = state.tokens.clone();
    let page = db::read(&state.pool, move |conn| {
        bearer.require(conn, &tokens)?;
        crate::domain::reads::checkpoints(conn, task_id, cursor)
    })
    .await?;
    raw(&page)
}

async fn offer_handoff(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let task_id = a.id("task_id")?;
    let key = a.key();
    let body: Body<handoffs::OfferHandoff> = a.body();
    let min = leases::min_duration(state);
    write(
        state,
        bearer,
        key,
        &handoffs::OFFER_HANDOFF,
        body.canonical.clone(),
        move |conn, caller, gate| handoffs::offer(conn, caller, gate, min, task_id, &body),
    )
    .await
}

async fn accept_handoff(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let handoff_id = a.id("handoff_id")?;
    let key = a.key();
    let body: Body<handoffs::AcceptHandoff> = a.body();
    let st = state.clone();
    write(
        state,
        bearer,
        key,
        &handoffs::ACCEPT_HANDOFF,
        body.canonical.clone(),
        move |conn, caller, gate| handoffs::accept(conn, caller, gate, &st, handoff_id, &body),
    )
    .await
}

async fn decline_handoff(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let handoff_id = a.id("handoff_id")?;
    let key = a.key();
    let body: Body<handoffs::DeclineHandoff> = a.body();
    write(
        state,
        bearer,
        key,
        &handoffs::DECLINE_HANDOFF,
        body.canonical.clone(),
        move |conn, caller, gate| handoffs::decline(conn, caller, gate, handoff_id, &body),
    )
    .await
}

async fn withdraw_handoff(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let handoff_id = a.id("handoff_id")?;
    let key = a.key();
    let body: Body<orbits::Empty> = a.body();
    write(
        state,
        bearer,
        key,
        &handoffs::WITHDRAW_HANDOFF,
        body.canonical.clone(),
        move |conn, caller, gate| handoffs::withdraw(conn, caller, gate, handoff_id, &body),
    )
    .await
}

async fn handoff_inbox(state: &State, bearer: Bearer, a: Args) -> ApiResult<Done> {
    let InboxArgs {
        status,
        limit,
        after,
    } = a.query()?;
    let q = handoffs::MailboxQuery {
        mailbox: Some(handoffs::MailBox::Inbox),
        status,
        limit,
        after,
    };
    raw(&handoffs::mailbox(state, bearer, q).await?)
}

async fn create_contribution(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let reference = a.orbit()?;
    let key = a.key();
    let body: Body<contributions::CreateContribution> = a.body();
    write(
        state,
        bearer,
        key,
        &contributions::CREATE_CONTRIBUTION,
        body.canonical.clone(),
        move |conn, caller, gate| contributions::create(conn, caller, gate, &reference, &body),
    )
    .await
}

async fn revise_contribution(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let id = a.id("contribution_id")?;
    let key = a.key();
    let body: Body<contributions::ReviseContribution> = a.body();
    write(
        state,
        bearer,
        key,
        &contributions::REVISE_CONTRIBUTION,
        body.canonical.clone(),
        move |conn, caller, gate| contributions::revise(conn, caller, gate, id, &body),
    )
    .await
}

async fn assess_revision(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let id = a.id("contribution_id")?;
    let n = a.id("revision")?;
    let key = a.key();
    let body: Body<assessments::CreateAssessment> = a.body();
    write(
        state,
        bearer,
        key,
        &assessments::CREATE_ASSESSMENT,
        body.canonical.clone(),
        move |conn, caller, gate| assessments::create(conn, caller, gate, id, n, &body),
    )
    .await
}

async fn problem_overview(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let id = a.id("problem_id")?;
    let NoArgs {} = a.query()?;
    let tokens = state.tokens.clone();
    let overview = db::read(&state.pool, move |conn| {
        bearer.require(conn, &tokens)?;
        problems::overview(conn, id)
    })
    .await?;
    data(&overview)
}

async fn read_changes(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let reference = a.orbit()?;
    let q: changes::ChangesQuery = a.query()?;
    let page = changes::read_page(state, bearer, reference, q, None).await?;
    raw(&page)
}

async fn write_memory(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let reference = a.orbit()?;
    // Memory records ignore keys (as the REST route ignores the header).
    a.key();
    let body: Body<memory::CreateMemoryRecord> = a.body();
    write(
        state,
        bearer,
        IdemHeader::default(),
        &memory::CREATE_MEMORY_RECORD,
        body.canonical.clone(),
        move |conn, caller, gate| memory::create(conn, caller, gate, &reference, &body),
    )
    .await
}

async fn search(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let orbit = a.orbit_opt()?;
    let mut query: crate::domain::search::SearchQuery = a.query()?;
    query.orbit = orbit;
    let page = crate::domain::search::search(state, bearer, query).await?;
    raw(&page)
}

/// A read through `public_read`, as its REST route reads (token checked if sent).
async fn read<T, F>(state: &State, bearer: Bearer, f: F) -> ApiResult<T>
where
    T: Send + 'static,
    F: FnOnce(&mut PgConnection) -> TxResult<T> + Send + 'static,
{
    crate::http::api::public_read(state, bearer, f).await
}

fn bytes(body: actix_web::web::Bytes) -> ApiResult<Done> {
    Ok(Done {
        body: body.to_vec(),
        replayed: false,
    })
}

async fn create_orbit(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let key = a.key();
    let body: Body<orbits::CreateOrbit> = a.body();
    write(
        state,
        bearer,
        key,
        &orbits::CREATE_ORBIT,
        body.canonical.clone(),
        move |conn, caller, gate| orbits::create(conn, caller, gate, &body),
    )
    .await
}

async fn get_orbit(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let reference = a.orbit()?;
    let NoArgs {} = a.query()?;
    data(&read(state, bearer, move |conn| access::resolve(conn, &reference)).await?)
}

async fn list_members(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let reference = a.orbit()?;
    let cursor = a.query::<PageParams>()?.checked()?;
    let rows = read(state, bearer, move |conn| {
        members::page(conn, &reference, cursor)
    })
    .await?;
    raw(&cursor.page(rows, |m| m.contributor.id))
}

async fn set_member(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let reference = a.orbit()?;
    let target = a.id("contributor_id")?;
    // Membership writes ignore keys (as the REST route ignores the header).
    a.key();
    let body: Body<members::PutMember> = a.body();
    write(
        state,
        bearer,
        IdemHeader::default(),
        &members::PUT_MEMBER,
        body.canonical.clone(),
        move |conn, caller, gate| members::put(conn, caller, gate, &reference, target, &body),
    )
    .await
}

async fn remove_member(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let reference = a.orbit()?;
    let target = a.id("contributor_id")?;
    a.key();
    let body: Body<orbits::Empty> = a.body();
    write(
        state,
        bearer,
        IdemHeader::default(),
        &members::DELETE_MEMBER,
        body.canonical.clone(),
        move |conn, caller, gate| members::remove(conn, caller, gate, &reference, target, &body),
    )
    .await
}

async fn create_problem(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let reference = a.orbit()?;
    let key = a.key();
    let body: Body<problems::CreateProblem> = a.body();
    write(
        state,
        bearer,
        key,
        &problems::CREATE_PROBLEM,
        body.canonical.clone(),
        move |conn, caller, gate| problems::create(conn, caller, gate, &reference, &body),
    )
    .await
}

async fn list_problems(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let reference = a.orbit()?;
    let q: problems::ProblemQuery = a.query()?;
    let cursor = crate::model::page_bounds(q.limit, q.after)?;
    let status = q.status.map(crate::store::problems::ProblemStatus::as_str);
    let rows = read(state, bearer, move |conn| {
        problems::page(conn, &reference, status, cursor)
    })
    .await?;
    raw(&cursor.page(rows, |p| p.id))
}

async fn get_problem(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let id = a.id("problem_id")?;
    let NoArgs {} = a.query()?;
    data(&read(state, bearer, move |conn| problems::read(conn, id)).await?)
}

async fn set_problem_status(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let id = a.id("problem_id")?;
    let key = a.key();
    let body: Body<problems::SetProblemStatus> = a.body();
    write(
        state,
        bearer,
        key,
        &problems::SET_PROBLEM_STATUS,
        body.canonical.clone(),
        move |conn, caller, gate| problems::set_status(conn, caller, gate, id, &body),
    )
    .await
}

async fn list_contributions(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let reference = a.orbit()?;
    let q: contributions::ContributionQuery = a.query()?;
    bytes(contributions::list_page(state, bearer, reference, q).await?)
}

async fn get_contribution(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let id = a.id("contribution_id")?;
    let NoArgs {} = a.query()?;
    let c = read(state, bearer, move |conn| {
        Ok(contributions::read(conn, id)?)
    })
    .await?;
    data(&c.ok_or_else(|| ApiError::not_found("Contribution"))?)
}

async fn list_revisions(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let id = a.id("contribution_id")?;
    let cursor = a.query::<PageParams>()?.checked()?;
    let rows = read(state, bearer, move |conn| {
        contributions::revisions_page(conn, id, cursor)
    })
    .await?;
    raw(&cursor.page(rows, |r| r.revision))
}

async fn get_revision(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let id = a.id("contribution_id")?;
    let n = a.id("revision")?;
    let NoArgs {} = a.query()?;
    data(
        &read(state, bearer, move |conn| {
            contributions::read_revision(conn, id, n)
        })
        .await?,
    )
}

async fn list_assessments(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let id = a.id("contribution_id")?;
    let q: assessments::AssessmentQuery = a.query()?;
    let cursor = crate::model::page_bounds(q.limit, q.after)?;
    assessments::check_revision(q.revision)?;
    let rows = read(state, bearer, move |conn| {
        assessments::page(conn, id, q.revision, cursor)
    })
    .await?;
    raw(&cursor.page(rows, |x| x.id))
}

async fn create_artifact(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let reference = a.orbit()?;
    let key = a.key();
    let body: Body<artifacts::CreateArtifact> = a.body();
    let decoded = artifacts::decoded(&body);
    write(
        state,
        bearer,
        key,
        &artifacts::CREATE_ARTIFACT,
        body.canonical.clone(),
        move |conn, caller, gate| {
            artifacts::create(conn, caller, gate, &reference, &body, &decoded)
        },
    )
    .await
}

async fn list_artifacts(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let reference = a.orbit()?;
    let cursor = a.query::<PageParams>()?.checked()?;
    let rows = read(state, bearer, move |conn| {
        artifacts::page(conn, &reference, cursor)
    })
    .await?;
    raw(&cursor.page(rows, |x| x.id))
}

async fn get_artifact(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let id = a.id("artifact_id")?;
    let NoArgs {} = a.query()?;
    data(&read(state, bearer, move |conn| artifacts::read(conn, id)).await?)
}

async fn list_memory(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let reference = a.orbit()?;
    let q: memory::MemoryQuery = a.query()?;
    let cursor = crate::model::page_bounds(q.limit, q.after)?;
    memory::check_tag(q.tag.as_deref())?;
    let rows = read(state, bearer, move |conn| {
        memory::page(conn, &reference, q.tag.as_deref(), cursor)
    })
    .await?;
    raw(&cursor.page(rows, |m| m.id))
}

async fn list_tasks(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let reference = a.orbit()?;
    let q: tasks::TaskQuery = a.query()?;
    bytes(tasks::list_page(state, bearer, reference, q).await?)
}

async fn cancel_task(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let task_id = a.id("task_id")?;
    let key = a.key();
    let body: Body<tasks::CancelTask> = a.body();
    write(
        state,
        bearer,
        key,
        &tasks::CANCEL_TASK,
        body.canonical.clone(),
        move |conn, caller, gate| tasks::cancel(conn, caller, gate, task_id, &body),
    )
    .await
}

async fn get_lease(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let id = a.id("lease_id")?;
    let NoArgs {} = a.query()?;
    data(&read(state, bearer, move |conn| leases::read(conn, id)).await?)
}

async fn list_leases(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let task_id = a.id("task_id")?;
    let cursor = a.query::<PageParams>()?.checked()?;
    let rows = read(state, bearer, move |conn| {
        leases::page(conn, task_id, cursor)
    })
    .await?;
    raw(&cursor.page(rows, |l| l.id))
}

async fn get_checkpoint(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let id = a.id("checkpoint_id")?;
    let NoArgs {} = a.query()?;
    data(&read(state, bearer, move |conn| checkpoints::read(conn, id)).await?)
}

async fn get_handoff(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let id = a.id("handoff_id")?;
    let NoArgs {} = a.query()?;
    data(&read(state, bearer, move |conn| handoffs::read(conn, id)).await?)
}

async fn list_handoffs(state: &State, bearer: Bearer, a: Args) -> ApiResult<Done> {
    let q: handoffs::MailboxQuery = a.query()?;
    raw(&handoffs::mailbox(state, bearer, q).await?)
}

async fn list_task_handoffs(state: &State, bearer: Bearer, mut a: Args) -> ApiResult<Done> {
    let task_id = a.id("task_id")?;
    let cursor = a.query::<PageParams>()?.checked()?;
    let rows = read(state, bearer, move |conn| {
        handoffs::task_page(conn, task_id, cursor)
    })
    .await?;
    raw(&cursor.page(rows, |h| h.id))
}
