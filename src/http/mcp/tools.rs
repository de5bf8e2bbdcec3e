//! The MCP tool calls, each the REST operation's own domain function (the
//! catalogue of names, descriptions and input schemas is `catalogue`).
//!
//! A writing tool's arguments are the REST path parameters (`task_id`, `orbit`, ...),
//! the REST body's fields and `idempotency_key`. The body is rebuilt from the
//! arguments minus the path ids and the key, parsed and validated exactly like a
//! request body (`Body::from_value`), and its canonical form is the fingerprint's. The
//! key goes to the same `Operation` as the REST route (and is refused where the route
//! ignores the header: the tool's schema has no key), so a key sent over REST and
//! over MCP for the same operation and input is one request. Each tool is one arm
//! of [`run`]: its arguments taken apart, one call into the domain.

use diesel::PgConnection;
use rmcp::model::JsonObject;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

use super::{catalogue, Done};
use crate::db::TxResult;
use crate::domain::auth::{Bearer, Caller};
use crate::domain::handoffs::{MailBox, MailboxQuery};
use crate::domain::idempotency::{is_valid_key, Gate, IdemHeader, Operation};
use crate::domain::write::{Unit, Written};
use crate::domain::{
    artifacts, assessments, changes, checkpoints, contributions, contributors, handoffs, leases,
    members, memory, orbits, problems, search, tasks,
};
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::http::api::{written, Reply, State};
use crate::http::json::{Body, Validate};
use crate::http::peer;
use crate::model::{page_problems, Limits, MAX_PAGE};
use crate::store::handoffs::HandoffStatus;

/// A tool's arguments, taken apart the way a REST request is: path ids, the key,
/// then the rest as the body (or the query). A bad id or orbit is noted (`.1`), not
/// raised at once: the call that takes the rest (`query`, `none`, `body`, `write`)
/// answers one 422 that lists it beside every problem of the rest (contract section
/// 17: every invalid field at once), before anything is read. `.2`: the limits
/// the body's own checks take, as a REST body's (`Validate::validate_within`).
struct Args(Map<String, Value>, FieldErrors, Limits);

/// `problems`, with the field problems of `e` (a 422 of the rest) beside them.
fn all_problems(mut problems: FieldErrors, e: Option<ApiError>) -> ApiError {
    if let Some(e) = e {
        match e.body.errors {
            Some(fields) => {
                for (field, words) in fields {
                    for w in words {
                        problems.add(&field, w);
                    }
                }
            }
            // A refusal of the rest that is no field problem stands alone.
            None => return e,
        }
    }
    problems.into_error()
}

impl Args {
    /// A required positive id (a JSON integer, or a string of digits); 0 when it is
    /// missing or bad (noted).
    fn id(&mut self, name: &str) -> i64 {
        let Some(v) = self.0.remove(name) else {
            self.1.add(name, "is required");
            return 0;
        };
        let n = match &v {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => crate::model::plain_id(s),
            _ => None,
        };
        match n.filter(|n| *n >= 1) {
            Some(n) => n,
            None => {
                self.1.add(name, "must be a positive integer id");
                0
            }
        }
    }

    /// The orbit, by id or slug; empty when it is missing or bad (noted).
    fn orbit(&mut self) -> String {
        match self.orbit_opt() {
            Some(o) => o,
            None => {
                if !self.1.has("orbit") {
                    self.1.add("orbit", "is required");
                }
                String::new()
            }
        }
    }

    fn orbit_opt(&mut self) -> Option<String> {
        match self.0.remove("orbit") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => {
                crate::domain::orbits::check_reference(&mut self.1, "orbit", &s).then_some(s)
            }
            Some(Value::Number(n)) if n.as_i64().is_some_and(|n| n >= 1) => Some(n.to_string()),
            Some(_) => {
                self.1.add("orbit", crate::domain::orbits::NOT_AN_ORBIT);
                None
            }
        }
    }

    /// `idempotency_key`, in the form the header would have had (taken out of the
    /// arguments); the operation's key rule decides what becomes of it (`Gate`).
    /// Where the operation ignores keys (as its REST route ignores the header) the
    /// tool's schema has no such argument, and one sent is refused like any other
    /// argument it does not take (noted): an agent must not believe its retry is
    /// protected.
    fn key(&mut self, op: &Operation) -> IdemHeader {
        if !op.rule.reads_key() {
            self.no_key();
            return IdemHeader(None);
        }
        match self.0.remove("idempotency_key") {
            None | Some(Value::Null) => IdemHeader(None),
            Some(Value::String(s)) if is_valid_key(&s) => IdemHeader(Some(Ok(s))),
            Some(_) => IdemHeader(Some(Err(()))),
        }
    }

    /// Notes an `idempotency_key` sent to a tool that takes none.
    fn no_key(&mut self) {
        // `null` is no key, as for the tools that take one.
        if self
            .0
            .remove("idempotency_key")
            .is_some_and(|k| !k.is_null())
        {
            self.1.add(
                "idempotency_key",
                "is not an argument of this tool: it takes no idempotency_key",
            );
        }
    }

    /// The remaining arguments as a REST body: parsed and validated late, like one;
    /// after a bad id, the 422 of both at once.
    fn body<T: DeserializeOwned + Validate>(self) -> ApiResult<Body<T>> {
        let body = Body::from_value(Value::Object(self.0), &self.2);
        if self.1.is_empty() {
            return Ok(body);
        }
        Err(all_problems(self.1, body.into_parsed().err()))
    }

    /// The remaining arguments as a query (unknown ones refused), with a bad id's
    /// problems beside the query's own.
    fn query<T: DeserializeOwned + Validate>(self) -> ApiResult<T> {
        let query = crate::http::json::arguments(Value::Object(self.0));
        if self.1.is_empty() {
            return query;
        }
        Err(all_problems(self.1, query.err()))
    }

    /// No arguments left (a read of one object by its path ids).
    fn none(self) -> ApiResult<()> {
        let NoArgs {} = self.query()?;
        Ok(())
    }

    /// A write tool: the operation's key, the remaining arguments as its body, and
    /// its unit of work, run as its REST route runs them.
    async fn write<T, F>(
        self,
        state: &State,
        bearer: Bearer,
        op: &'static Operation,
        work: F,
    ) -> ApiResult<Done>
    where
        T: DeserializeOwned + Validate + Send + 'static,
        F: FnMut(&mut PgConnection, &Caller, &mut Gate, ApiResult<&T>) -> TxResult<Reply>
            + Send
            + 'static,
    {
        self.write_unit(state, bearer, op, |_| Unit::plain(work))
            .await
    }

    /// [`Args::write`] for a write that prepares something from its body: `unit`
    /// is the resource's `*_unit` function, which its REST route calls too.
    async fn write_unit<T>(
        mut self,
        state: &State,
        bearer: Bearer,
        op: &'static Operation,
        unit: impl FnOnce(ApiResult<&T>) -> Unit<T>,
    ) -> ApiResult<Done>
    where
        T: DeserializeOwned + Validate + Send + 'static,
    {
        let key = self.key(op);
        let body = self.body()?;
        let unit = unit(body.check());
        done(written(op, state, bearer, key, body, unit).await?)
    }
}

/// `{"data": ...}`, as the REST API answers a read.
fn data<T: Serialize>(value: &T) -> ApiResult<Done> {
    Ok(Done {
        body: crate::model::data_bytes(value)?,
        replayed: false,
    })
}

/// A list page (or any body the REST API answers as is).
fn raw<T: Serialize>(value: &T) -> ApiResult<Done> {
    Ok(Done {
        body: crate::model::json_bytes(value)?,
        replayed: false,
    })
}

/// A page read through the list cache, its bytes as cached.
fn bytes(body: actix_web::web::Bytes) -> ApiResult<Done> {
    Ok(Done {
        body: body.to_vec(),
        replayed: false,
    })
}

/// A write's answer, as its REST route answers it.
fn done(written: Written) -> ApiResult<Done> {
    Ok(Done {
        body: written.body,
        replayed: written.replayed,
    })
}

/// Runs the tool `name`; `None` when there is no such tool.
pub async fn call(
    state: &State,
    bearer: Bearer,
    watch: Option<peer::Watch>,
    name: &str,
    arguments: JsonObject,
) -> Option<ApiResult<Done>> {
    // Integral floats are integers for ids and query arguments too, as for bodies
    // (issue 26, finding 10).
    let mut arguments = Value::Object(arguments);
    crate::http::json::integral_floats_to_integers(&mut arguments);
    let mut arguments = match arguments {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    // An argument given as `null` is one left out (a required one is then
    // "is required"): tool-calling clients commonly send every optional argument,
    // `null` when unused (OpenAI's strict function calling does), where a REST
    // client leaves the field out. So `duration_seconds: null` is the default here,
    // while a REST body's `null` where its schema says integer is a 422. Where an
    // argument takes any JSON (a checkpoint's `state`), `null` is a value and stays.
    arguments.retain(|k, v| !v.is_null() || catalogue::takes_any_json(name, k));
    let limits = leases::limits(&state.config);
    run(
        state,
        bearer,
        watch,
        name,
        Args(arguments, FieldErrors::default(), limits),
    )
    .await
    .transpose()
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

impl Validate for NoArgs {
    fn validate(&self, _: &mut FieldErrors) {}
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitArg {
    limit: Option<i64>,
}

impl Validate for LimitArg {
    fn validate(&self, e: &mut FieldErrors) {
        page_problems(e, self.limit, None, MAX_PAGE);
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct InboxArgs {
    status: Option<HandoffStatus>,
    limit: Option<i64>,
    after: Option<i64>,
}

impl Validate for InboxArgs {
    fn validate(&self, e: &mut FieldErrors) {
        page_problems(e, self.limit, self.after, MAX_PAGE);
    }
}

/// The tools: each takes its arguments apart as its REST route takes the request
/// apart, then calls the route's domain function. `Ok(None)`: no such tool.
async fn run(
    state: &State,
    bearer: Bearer,
    watch: Option<peer::Watch>,
    name: &str,
    mut a: Args,
) -> ApiResult<Option<Done>> {
    let min = leases::min_duration(&state.config);
    // A write tool's operation is its definition's (`catalogue`), which a unit test
    // holds to the REST route the tool names: not named a third time here.
    let write_op = || catalogue::write_op(name).expect("a write tool's definition names its op");
    let done = match name {
        "whoami" => {
            a.none()?;
            data(&contributors::me(state, bearer).await?)
        }
        "list_orbits" => raw(&orbits::list(state, a.query()?, bearer).await?),
        "create_orbit" => a.write(state, bearer, write_op(), orbits::create).await,
        "get_orbit" => {
            let orbit = a.orbit();
            a.none()?;
            data(&orbits::get(state, bearer, orbit).await?)
        }
        "join_orbit" => {
            let orbit = a.orbit();
            a.write(state, bearer, write_op(), move |c, who, g, b| {
                orbits::join(c, who, g, &orbit, b)
            })
            .await
        }
        "list_members" => {
            let orbit = a.orbit();
            raw(&members::list(state, a.query()?, bearer, orbit).await?)
        }
        "set_member" => {
            let orbit = a.orbit();
            let target = a.id("contributor_id");
            a.write(state, bearer, write_op(), move |c, who, g, b| {
                members::put(c, who, g, &orbit, target, b)
            })
            .await
        }
        "remove_member" => {
            let orbit = a.orbit();
            let target = a.id("contributor_id");
            a.write(state, bearer, write_op(), move |c, who, g, b| {
                members::remove(c, who, g, &orbit, target, b)
            })
            .await
        }
        "find_work" => {
            let orbit = a.orbit_opt();
            let LimitArg { limit } = a.query()?;
            data(&tasks::find_work(state, bearer, orbit, limit).await?)
        }
        "list_tasks" => {
            let orbit = a.orbit();
            bytes(tasks::list(state, a.query()?, bearer, orbit).await?)
        }
        "get_task" => {
            let id = a.id("task_id");
            a.none()?;
            data(&tasks::get(state, bearer, id).await?)
        }
        "create_task" => {
            let orbit = a.orbit();
            a.write_unit(state, bearer, write_op(), move |b| {
                tasks::create_unit(orbit, b)
            })
            .await
        }
        "complete_task" => {
            let id = a.id("task_id");
            a.write(state, bearer, write_op(), move |c, who, g, b| {
                tasks::complete(c, who, g, id, b)
            })
            .await
        }
        "cancel_task" => {
            let id = a.id("task_id");
            a.write(state, bearer, write_op(), move |c, who, g, b| {
                tasks::cancel(c, who, g, id, b)
            })
            .await
        }
        "acquire_lease" => {
            let id = a.id("task_id");
            a.write_unit(state, bearer, write_op(), move |b| {
                leases::acquire_unit(id, min, b)
            })
            .await
        }
        "renew_lease" => {
            let id = a.id("lease_id");
            a.write(state, bearer, write_op(), move |c, who, g, b| {
                leases::renew(c, who, g, min, id, b)
            })
            .await
        }
        "release_lease" => {
            let id = a.id("lease_id");
            a.write_unit(state, bearer, write_op(), move |b| {
                leases::release_unit(id, b)
            })
            .await
        }
        "get_lease" => {
            let id = a.id("lease_id");
            a.none()?;
            data(&leases::get(state, bearer, id).await?)
        }
        "list_leases" => {
            let id = a.id("task_id");
            raw(&leases::list(state, a.query()?, bearer, id).await?)
        }
        "check_fence" => {
            let id = a.id("task_id");
            // The fence check writes nothing and takes no key.
            a.no_key();
            let body = a.body::<leases::LeaseVersionBody>()?.into_parsed();
            data(&leases::check_fence(state, bearer, id, body).await?)
        }
        "write_checkpoint" => {
            let id = a.id("task_id");
            a.write_unit(state, bearer, write_op(), move |b| {
                checkpoints::create_unit(id, b)
            })
            .await
        }
        "list_checkpoints" => {
            let id = a.id("task_id");
            raw(&checkpoints::list(state, a.query()?, bearer, id).await?)
        }
        "get_checkpoint" => {
            let id = a.id("checkpoint_id");
            a.none()?;
            data(&checkpoints::get(state, bearer, id).await?)
        }
        "offer_handoff" => {
            let id = a.id("task_id");
            a.write(state, bearer, write_op(), move |c, who, g, b| {
                handoffs::offer(c, who, g, min, id, b)
            })
            .await
        }
        "accept_handoff" => {
            let id = a.id("handoff_id");
            a.write(state, bearer, write_op(), move |c, who, g, b| {
                handoffs::accept(c, who, g, min, id, b)
            })
            .await
        }
        "decline_handoff" => {
            let id = a.id("handoff_id");
            a.write(state, bearer, write_op(), move |c, who, g, b| {
                handoffs::decline(c, who, g, id, b)
            })
            .await
        }
        "withdraw_handoff" => {
            let id = a.id("handoff_id");
            a.write(state, bearer, write_op(), move |c, who, g, b| {
                handoffs::withdraw(c, who, g, id, b)
            })
            .await
        }
        "handoff_inbox" => {
            let InboxArgs {
                status,
                limit,
                after,
            } = a.query()?;
            let q = MailboxQuery {
                mailbox: Some(MailBox::Inbox),
                status,
                limit,
                after,
            };
            raw(&handoffs::mailbox(state, q, bearer).await?)
        }
        "list_handoffs" => raw(&handoffs::mailbox(state, a.query()?, bearer).await?),
        "get_handoff" => {
            let id = a.id("handoff_id");
            a.none()?;
            data(&handoffs::get(state, bearer, id).await?)
        }
        "list_task_handoffs" => {
            let id = a.id("task_id");
            raw(&handoffs::of_task(state, a.query()?, bearer, id).await?)
        }
        "create_problem" => {
            let orbit = a.orbit();
            a.write(state, bearer, write_op(), move |c, who, g, b| {
                problems::create(c, who, g, &orbit, b)
            })
            .await
        }
        "list_problems" => {
            let orbit = a.orbit();
            raw(&problems::list(state, a.query()?, bearer, orbit).await?)
        }
        "get_problem" => {
            let id = a.id("problem_id");
            a.none()?;
            data(&problems::get(state, bearer, id).await?)
        }
        "set_problem_status" => {
            let id = a.id("problem_id");
            let op = write_op();
            a.write(state, bearer, op, move |c, who, g, b| {
                problems::set_status(c, who, g, id, b)
            })
            .await
        }
        "problem_overview" => {
            let id = a.id("problem_id");
            a.none()?;
            data(&problems::get_overview(state, bearer, id).await?)
        }
        "create_contribution" => {
            let orbit = a.orbit();
            a.write_unit(state, bearer, write_op(), move |b| {
                contributions::create_unit(orbit, b)
            })
            .await
        }
        "revise_contribution" => {
            let id = a.id("contribution_id");
            a.write_unit(state, bearer, write_op(), move |b| {
                contributions::revise_unit(id, b)
            })
            .await
        }
        "list_contributions" => {
            let orbit = a.orbit();
            bytes(contributions::list(state, a.query()?, bearer, orbit).await?)
        }
        "get_contribution" => {
            let id = a.id("contribution_id");
            a.none()?;
            data(&contributions::get(state, bearer, id).await?)
        }
        "list_revisions" => {
            let id = a.id("contribution_id");
            raw(&contributions::revisions(state, a.query()?, bearer, id).await?)
        }
        "get_revision" => {
            let id = a.id("contribution_id");
            let n = a.id("revision");
            a.none()?;
            data(&contributions::revision(state, bearer, id, n).await?)
        }
        "assess_revision" => {
            let id = a.id("contribution_id");
            let n = a.id("revision");
            let op = write_op();
            a.write(state, bearer, op, move |c, who, g, b| {
                assessments::create(c, who, g, id, n, b)
            })
            .await
        }
        "list_assessments" => {
            let id = a.id("contribution_id");
            raw(&assessments::list(state, a.query()?, bearer, id).await?)
        }
        "create_artifact" => {
            let orbit = a.orbit();
            a.write_unit(state, bearer, write_op(), move |b| {
                artifacts::create_unit(orbit, b)
            })
            .await
        }
        "list_artifacts" => {
            let orbit = a.orbit();
            raw(&artifacts::list(state, a.query()?, bearer, orbit).await?)
        }
        "get_artifact" => {
            let id = a.id("artifact_id");
            a.none()?;
            data(&artifacts::get(state, bearer, id).await?)
        }
        "write_memory" => {
            let orbit = a.orbit();
            let op = write_op();
            a.write(state, bearer, op, move |c, who, g, b| {
                memory::create(c, who, g, &orbit, b)
            })
            .await
        }
        "list_memory" => {
            let orbit = a.orbit();
            raw(&memory::list(state, a.query()?, bearer, orbit).await?)
        }
        "read_changes" => {
            let orbit = a.orbit();
            // A poll whose client left ends then, as over REST (`http::peer`).
            let gone = async move {
                match watch {
                    Some(watch) => watch.gone().await,
                    None => std::future::pending().await,
                }
            };
            raw(&changes::read_page(state, bearer, orbit, a.query()?, None, gone).await?)
        }
        "search" => {
            let orbit = a.orbit_opt();
            let mut query: search::SearchQuery = a.query()?;
            query.orbit = orbit;
            raw(&search::search(state, bearer, query).await?)
        }
        _ => return Ok(None),
    };
    done.map(Some)
}
