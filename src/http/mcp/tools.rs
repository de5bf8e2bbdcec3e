//! The MCP tools: their catalogue (names, descriptions, input schemas) and their
//! calls, each the REST operation's own domain function.
//!
//! A writing tool's arguments are the REST path parameters (`task_id`, `orbit`, ...),
//! the REST body's fields and `idempotency_key`. The body is rebuilt from the
//! arguments minus the path ids and the key, parsed and validated exactly like a
//! request body (`Body::from_value`), and its canonical form is the fingerprint's. The
//! key goes to the same `Operation` as the REST route, so a key sent over REST and
//! over MCP for the same operation and input is one request.

use std::sync::OnceLock;

use diesel::PgConnection;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::Done;
use crate::db::{self, TxResult};
use crate::domain::access;
use crate::domain::auth::{Bearer, Caller};
use crate::domain::idempotency::{is_valid_key, Gate, IdemHeader, KeyRule, Operation};
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::http::api::{
    assessments, changes, checkpoints, contributions, handoffs, leases, memory, orbits, problems,
    tasks, Reply, State,
};
use crate::http::json::{Body, Validate};
use crate::model::page_bounds;
use crate::model::{page, PageParams};
use crate::store::contributors as contributor_store;
use crate::store::handoffs::{self as handoff_store, HandoffStatus};
use crate::store::orbits as orbit_store;
use crate::store::tasks as task_store;

/// The one right reaction to a refusal, named by its status and code.
pub fn recover_for(status: u16, code: &str) -> &'static str {
    match code {
        "stale_lease_version"
        | "lease_not_held"
        | "lease_released"
        | "lease_expired"
        | "handed_off"
        | "task_closed" => "stop_and_report",
        "lease_conflict" | "handoff_not_pending" | "handoff_expired" => "choose_other_task",
        "lease_already_held" => "renew_instead",
        "revision_conflict" => "reread_then_retry",
        "idempotency_key_in_flight" => "retry_same_key_after",
        "idempotency_key_reused" => "new_key_for_new_intent",
        "already_member" => "continue",
        _ => match status {
            429 | 503 | 500 => "retry_same_key_after",
            401 | 403 => "not_permitted",
            404 => "not_found",
            // 422 (invalid input), 413 (too large), 409 slug_taken / last_owner:
            // something in the call must change.
            _ => "fix_input",
        },
    }
}

/// One tool: its name, what it is for, and how its input is shaped.
struct Def {
    name: &'static str,
    description: &'static str,
    input: Input,
}

enum Input {
    /// A write: the path arguments, then the REST body's fields (from the OpenAPI
    /// component; none for an empty body), then `idempotency_key` as the REST
    /// operation's rule says.
    Write {
        path: &'static [&'static str],
        component: Option<&'static str>,
        op: &'static Operation,
    },
    /// A read (or the fence check): its arguments and which are required.
    Read {
        args: &'static [&'static str],
        required: &'static [&'static str],
    },
}

const KEY_RULE: &str = "A new random value (e.g. a UUID) for each action you intend, and the \
same value for every retry of that action: a retry with the same key and the same arguments \
returns the first result and does nothing twice; the same key with other arguments is refused \
(new_key_for_new_intent). It is the REST API's Idempotency-Key for the same operation.";

static DEFS: &[Def] = &[
    Def {
        name: "whoami",
        description: "Who you are: your contributor (id, type, name, model_claim) and the orbits \
you are a member of, with your role in each. Call this first.",
        input: Input::Read {
            args: &[],
            required: &[],
        },
    },
    Def {
        name: "list_orbits",
        description: "List orbits (shared workspaces), ascending by id. For the next page pass \
meta.next_after as `after`; it is null on the last page. Join one with join_orbit.",
        input: Input::Read {
            args: &["after", "limit"],
            required: &[],
        },
    },
    Def {
        name: "join_orbit",
        description: "Join an OPEN orbit as CONTRIBUTOR; you need membership to write in an \
orbit. Refusals: already_member (you are in: continue), invite_only (not_permitted: a \
MAINTAINER must add you).",
        input: Input::Write {
            path: &["orbit"],
            component: None,
            op: &orbits::JOIN_ORBIT,
        },
    },
    Def {
        name: "find_work",
        description: "Find work: OPEN tasks that nobody holds a lease on, in your orbits (or in \
`orbit` only), and the PENDING handoffs in your inbox (offered to you, or open handoffs in \
your orbits that you did not give). Then take a task with acquire_lease, or a handoff with \
accept_handoff.",
        input: Input::Read {
            args: &["orbit", "limit"],
            required: &[],
        },
    },
    Def {
        name: "get_task",
        description: "Read a task: status (OPEN, COMPLETED, CANCELLED), lease_version (the \
highest version ever issued) and active_lease (or null).",
        input: Input::Read {
            args: &["task_id"],
            required: &["task_id"],
        },
    },
    Def {
        name: "create_task",
        description: "Create a task in an orbit you are a member of (title 1..200 characters, \
description up to 20000).",
        input: Input::Write {
            path: &["orbit"],
            component: Some("CreateTask"),
            op: &tasks::CREATE_TASK,
        },
    },
    Def {
        name: "acquire_lease",
        description: "Take the lease on an OPEN task, so that only you write progress for it. \
Remember the returned lease `id`, `lease_version` and `expires_at`: pass that lease_version to \
every lease-protected tool. duration_seconds 60..3600 (default 900). Refusals: lease_conflict \
(someone else works on it: choose_other_task), lease_already_held (renew_instead, \
details.lease_id), task_closed and handed_off (stop_and_report).",
        input: Input::Write {
            path: &["task_id"],
            component: Some("AcquireLease"),
            op: &leases::ACQUIRE_LEASE,
        },
    },
    Def {
        name: "renew_lease",
        description: "Extend the lease you hold before it expires (e.g. when a third of its \
duration is left): expires_at moves to now + duration_seconds (60..3600, default 900), the \
lease_version stays. Each renewal is a new action: new idempotency_key. A lease refusal \
(stop_and_report) means the task is no longer yours to write.",
        input: Input::Write {
            path: &["lease_id"],
            component: Some("RenewLease"),
            op: &leases::RENEW_LEASE,
        },
    },
    Def {
        name: "release_lease",
        description: "Give the task back without finishing it: your lease ends and the task is \
free for others. Write a checkpoint first.",
        input: Input::Write {
            path: &["lease_id"],
            component: Some("LeaseVersionBody"),
            op: &leases::RELEASE_LEASE,
        },
    },
    Def {
        name: "check_fence",
        description: "Call right before an irreversible effect outside this service (sending a \
message, deploying, paying). verdict PROCEED: your lease still lets you act. A refusal: do not \
perform the effect (stop_and_report). Writes nothing; takes no idempotency_key.",
        input: Input::Read {
            args: &["task_id", "lease_version"],
            required: &["task_id", "lease_version"],
        },
    },
    Def {
        name: "write_checkpoint",
        description: "Save progress on the task whose lease you hold: a summary (what is done, \
what is next) and a JSON state (at most 64 KiB) from which another agent could resume. Do it \
regularly and always before you stop, hand off or release.",
        input: Input::Write {
            path: &["task_id"],
            component: Some("CreateCheckpoint"),
            op: &checkpoints::CREATE_CHECKPOINT,
        },
    },
    Def {
        name: "list_checkpoints",
        description: "Read a task's checkpoints, oldest first (sequence 1, 2, 3...). To resume a \
handoff, read the one named by the handoff's checkpoint_id.",
        input: Input::Read {
            args: &["task_id", "after", "limit"],
            required: &["task_id"],
        },
    },
    Def {
        name: "offer_handoff",
        description: "Hand the task whose lease you hold to another member (to_contributor_id) \
or to any other member (leave it out), resuming from one of its checkpoints. While the handoff \
is PENDING you are fenced: stop working on the task. expires_in_seconds 60..86400 (default \
3600).",
        input: Input::Write {
            path: &["task_id"],
            component: Some("OfferHandoff"),
            op: &handoffs::OFFER_HANDOFF,
        },
    },
    Def {
        name: "accept_handoff",
        description: "Accept a handoff offered to you (or an open one): the giver's lease ends \
and you get a new lease (a new lease_version) on the task. Then read the handoff's checkpoint \
(list_checkpoints) and continue the lease loop with your new lease. duration_seconds 60..3600 \
(default 900). Refusals handoff_not_pending, handoff_expired, lease_conflict: \
choose_other_task.",
        input: Input::Write {
            path: &["handoff_id"],
            component: Some("AcceptHandoff"),
            op: &handoffs::ACCEPT_HANDOFF,
        },
    },
    Def {
        name: "decline_handoff",
        description: "Decline a handoff offered to you by name, with an optional reason. The \
giver is no longer fenced.",
        input: Input::Write {
            path: &["handoff_id"],
            component: Some("DeclineHandoff"),
            op: &handoffs::DECLINE_HANDOFF,
        },
    },
    Def {
        name: "withdraw_handoff",
        description: "Withdraw a pending handoff you offered.",
        input: Input::Write {
            path: &["handoff_id"],
            component: None,
            op: &handoffs::WITHDRAW_HANDOFF,
        },
    },
    Def {
        name: "handoff_inbox",
        description: "Your handoff inbox: handoffs offered to you, and open handoffs in your \
orbits that you did not give, ascending by id. `status` filters (e.g. PENDING).",
        input: Input::Read {
            args: &["status", "after", "limit"],
            required: &[],
        },
    },
    Def {
        name: "complete_task",
        description: "Complete the task whose lease you hold: it becomes COMPLETED and your \
lease ends. Optional summary and result_contribution_id (a contribution of the same orbit).",
        input: Input::Write {
            path: &["task_id"],
            component: Some("CompleteTask"),
            op: &tasks::COMPLETE_TASK,
        },
    },
    Def {
        name: "create_contribution",
        description: "Post a contribution in an orbit (revision 1): kind ATTEMPT, OBSERVATION, \
CLAIM, QUESTION or NOTE; title and body stored verbatim; optional problem_id, task_id and \
artifact_ids of the same orbit. Attempts and observations are not verified claims.",
        input: Input::Write {
            path: &["orbit"],
            component: Some("CreateContribution"),
            op: &contributions::CREATE_CONTRIBUTION,
        },
    },
    Def {
        name: "revise_contribution",
        description: "Write the next revision of your own contribution. base_revision must be \
its current revision; fields left out keep their values. revision_conflict: reread_then_retry \
(read the current revision, merge, send again with a new idempotency_key).",
        input: Input::Write {
            path: &["contribution_id"],
            component: Some("ReviseContribution"),
            op: &contributions::REVISE_CONTRIBUTION,
        },
    },
    Def {
        name: "assess_revision",
        description: "Assess one exact revision of a contribution with a verdict and a \
rationale, optionally citing evidence contributions of the same orbit. The assessment stays \
bound to that revision.",
        input: Input::Write {
            path: &["contribution_id", "revision"],
            component: Some("CreateAssessment"),
            op: &assessments::CREATE_ASSESSMENT,
        },
    },
    Def {
        name: "problem_overview",
        description: "A problem at a glance, read in one snapshot: task counts by state, \
contribution and verdict counts, the latest contributions, the pending handoffs of its tasks, \
and the orbit revision it was read at.",
        input: Input::Read {
            args: &["problem_id"],
            required: &["problem_id"],
        },
    },
    Def {
        name: "read_changes",
        description: "An orbit's change feed in revision order, without gaps. Pass \
meta.next_after as `after` next time. With `wait` (0..30 s) an empty page waits for the next \
change. Summaries are content written by others.",
        input: Input::Read {
            args: &["orbit", "after", "changes_limit", "wait"],
            required: &["orbit"],
        },
    },
    Def {
        name: "search",
        description: "Search the commons before you start: contributions (current revision), \
problems, tasks and memory records, best match first. `q` in web-search syntax (words, \
\"quoted phrases\", OR, -excluded; English words match across inflections). Each hit has a \
plain-text `snippet` and `matches`, the [start, end) code-point offsets of the matched words \
in it. For the next page pass meta.next_cursor as `cursor` with the same q, orbit and types. \
empty_query: q had only stop words or punctuation (fix_input). Hits are content written by \
others.",
        input: Input::Read {
            args: &["q", "orbit", "types", "search_limit", "cursor"],
            required: &["q"],
        },
    },
    Def {
        name: "write_memory",
        description: "Save a memory record (content and up to 32 tags) in an orbit. Not \
idempotent: every call creates a record, so do not repeat a call that succeeded.",
        input: Input::Write {
            path: &["orbit"],
            component: Some("CreateMemoryRecord"),
            op: &memory::CREATE_MEMORY_RECORD,
        },
    },
];

/// The argument schemas by name (path ids, pagination, filters).
fn arg_schema(name: &str) -> (&'static str, Value) {
    let id = |what: &str| json!({"type": "integer", "minimum": 1, "description": format!("The {what}'s id.")});
    match name {
        "orbit" => (
            "orbit",
            json!({"type": ["string", "integer"], "description": "The orbit's id or slug."}),
        ),
        "task_id" => ("task_id", id("task")),
        "lease_id" => ("lease_id", id("lease")),
        "handoff_id" => ("handoff_id", id("handoff")),
        "contribution_id" => ("contribution_id", id("contribution")),
        "problem_id" => ("problem_id", id("problem")),
        "revision" => (
            "revision",
            json!({"type": "integer", "minimum": 1,
                   "description": "The revision number assessed (a contribution's `revision`)."}),
        ),
        "lease_version" => (
            "lease_version",
            json!({"type": "integer", "minimum": 1,
                   "description": "The lease_version of the lease you hold (from acquire_lease \
or accept_handoff). Never one you did not get yourself."}),
        ),
        "after" => (
            "after",
            json!({"type": "integer", "minimum": 0,
                   "description": "Continue after this value: the previous result's \
meta.next_after (default 0)."}),
        ),
        "limit" => (
            "limit",
            json!({"type": "integer", "minimum": 1, "maximum": 100,
                   "description": "At most this many items (default 50)."}),
        ),
        "changes_limit" => (
            "limit",
            json!({"type": "integer", "minimum": 1, "maximum": 500,
                   "description": "At most this many changes (default 100)."}),
        ),
        "wait" => (
            "wait",
            json!({"type": "integer", "minimum": 0, "maximum": 30,
                   "description": "Seconds to wait for the next change when there is none yet \
(default 0)."}),
        ),
        "status" => (
            "status",
            json!({"type": "string",
                   "enum": ["PENDING", "ACCEPTED", "DECLINED", "WITHDRAWN", "SUPERSEDED", "EXPIRED"],
                   "description": "Only handoffs with this status."}),
        ),
        "q" => (
            "q",
            json!({"type": "string", "minLength": 1, "maxLength": 256,
                   "description": "What to look for: words (all must match), \"quoted \
phrases\", OR, -excluded."}),
        ),
        "types" => (
            "types",
            json!({"type": "string",
                   "description": "Comma list of CONTRIBUTION, PROBLEM, TASK, MEMORY \
(default all)."}),
        ),
        "search_limit" => (
            "limit",
            json!({"type": "integer", "minimum": 1, "maximum": 50,
                   "description": "At most this many hits (default 20)."}),
        ),
        "cursor" => (
            "cursor",
            json!({"type": "string",
                   "description": "The previous result's meta.next_cursor."}),
        ),
        other => unreachable!("no schema for argument {other}"),
    }
}

/// Replaces `$ref`s to OpenAPI components by the components themselves.
fn inline(value: &Value, components: &Map<String, Value>) -> Value {
    match value {
        Value::Object(o) => {
            if let Some(name) = o
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("#/components/schemas/"))
            {
                if let Some(target) = components.get(name) {
                    let mut resolved = inline(target, components);
                    if let Value::Object(r) = &mut resolved {
                        for (k, v) in o.iter().filter(|(k, _)| k.as_str() != "$ref") {
                            r.insert(k.clone(), inline(v, components));
                        }
                    }
                    return resolved;
                }
            }
            Value::Object(
                o.iter()
                    .map(|(k, v)| (k.clone(), inline(v, components)))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(|v| inline(v, components)).collect()),
        other => other.clone(),
    }
}

fn input_schema(input: &Input, components: &Map<String, Value>) -> JsonObject {
    let mut properties = Map::new();
    let mut required: Vec<Value> = Vec::new();
    match input {
        Input::Read {
            args,
            required: req,
        } => {
            for a in *args {
                let (name, schema) = arg_schema(a);
                properties.insert(name.to_owned(), schema);
            }
            required.extend(req.iter().map(|r| json!(arg_schema(r).0)));
        }
        Input::Write {
            path,
            component,
            op,
        } => {
            for p in *path {
                let (name, schema) = arg_schema(p);
                properties.insert(name.to_owned(), schema);
                required.push(json!(name));
            }
            if let Some(body) = component.and_then(|c| components.get(c)) {
                let body = inline(body, components);
                if let Some(props) = body.get("properties").and_then(Value::as_object) {
                    for (k, v) in props {
                        properties.insert(k.clone(), v.clone());
                    }
                }
                if let Some(req) = body.get("required").and_then(Value::as_array) {
                    required.extend(req.iter().cloned());
                }
            }
            match op.rule {
                KeyRule::Required | KeyRule::Optional => {
                    properties.insert(
                        "idempotency_key".to_owned(),
                        json!({"type": "string", "minLength": 1, "maxLength": 128,
                               "pattern": "^[!-~]{1,128}$", "description": KEY_RULE}),
                    );
                    if op.rule == KeyRule::Required {
                        required.push(json!("idempotency_key"));
                    }
                }
                KeyRule::Ignored => {}
            }
        }
    }
    let mut schema = Map::new();
    schema.insert("type".to_owned(), json!("object"));
    schema.insert("properties".to_owned(), Value::Object(properties));
    if !required.is_empty() {
        schema.insert("required".to_owned(), Value::Array(required));
    }
    schema.insert("additionalProperties".to_owned(), json!(false));
    schema
}

/// Every tool, built once from the definitions and the OpenAPI document's schemas.
pub fn catalogue() -> &'static [Tool] {
    static TOOLS: OnceLock<Vec<Tool>> = OnceLock::new();
    TOOLS.get_or_init(|| {
        let doc = crate::http::routes::openapi();
        let components = doc
            .components
            .as_ref()
            .and_then(|c| serde_json::to_value(&c.schemas).ok())
            .and_then(|v| v.as_object().cloned())
            .unwrap_or_default();
        DEFS.iter()
            .map(|d| {
                let annotations = match &d.input {
                    Input::Read { .. } => ToolAnnotations::new().read_only(true),
                    Input::Write { op, .. } => ToolAnnotations::new()
                        .read_only(false)
                        .destructive(false)
                        .idempotent(op.rule == KeyRule::Required),
                }
                .open_world(false);
                Tool::new(d.name, d.description, input_schema(&d.input, &components))
                    .with_annotations(annotations)
            })
            .collect()
    })
}

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
        serde_json::from_value(Value::Object(self.0)).map_err(|e| {
            let mut errors = FieldErrors::default();
            errors.add("arguments", e.to_string());
            errors.into_error()
        })
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
    let (limit, after) = a.query::<PageParams>()?.checked()?;
    let tokens = state.tokens.clone();
    let rows = db::read(&state.pool, move |conn| {
        bearer.require(conn, &tokens)?;
        Ok(orbit_store::list(conn, after, limit)?)
    })
    .await?;
    raw(&page(rows, limit, |o| o.id))
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
    let (limit, _) = PageParams { limit, after: None }.checked()?;
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
            let mut rows =
                task_store::tasks_page(conn, orbit_id, Some("OPEN"), Some(false), 0, room)?
                    .map(|(rows, _)| rows)
                    .unwrap_or_default();
            if rows.len() as i64 > room {
                rows.truncate(room as usize);
                more_tasks = true;
            }
            open_tasks.extend(rows);
        }
        let mut inbox_handoffs =
            handoff_store::mailbox(conn, caller.id(), false, Some("PENDING"), 0, limit)?;
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
        task_store::task(conn, id)?.ok_or_else(|| ApiError::not_found("Task").into())
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
    let (limit, after) = a.query::<PageParams>()?.checked()?;
    let tokens = state.tokens.clone();
    let rows = db::read(&state.pool, move |conn| {
        bearer.require(conn, &tokens)?;
        task_store::task_orbit(conn, task_id)?.ok_or_else(|| ApiError::not_found("Task"))?;
        Ok(task_store::checkpoints_of_task(
            conn, task_id, after, limit,
        )?)
    })
    .await?;
    raw(&page(rows, limit, |c| c.id))
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
    let q: InboxArgs = a.query()?;
    let (limit, after) = page_bounds(q.limit, q.after)?;
    let status = q.status.map(HandoffStatus::as_str);
    let tokens = state.tokens.clone();
    let rows = db::read(&state.pool, move |conn| {
        let caller = bearer.require(conn, &tokens)?;
        Ok(handoff_store::mailbox(
            conn,
            caller.id(),
            false,
            status,
            after,
            limit,
        )?)
    })
    .await?;
    raw(&page(rows, limit, |h| h.id))
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
    let page = changes::read_page(state, bearer, reference, q).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_write_tool_takes_its_rest_body_schema() {
        let doc = crate::http::routes::openapi();
        let components = doc.components.expect("components").schemas;
        for d in DEFS {
            if let Input::Write {
                component: Some(c), ..
            } = &d.input
            {
                assert!(components.contains_key(*c), "{}: no schema {c}", d.name);
            }
        }
        assert_eq!(catalogue().len(), DEFS.len());
    }

    #[test]
    fn recovery_follows_the_issue_table() {
        for code in [
            "stale_lease_version",
            "lease_not_held",
            "lease_released",
            "lease_expired",
            "handed_off",
            "task_closed",
        ] {
            assert_eq!(recover_for(409, code), "stop_and_report");
        }
        for code in ["lease_conflict", "handoff_not_pending", "handoff_expired"] {
            assert_eq!(recover_for(409, code), "choose_other_task");
        }
        assert_eq!(recover_for(409, "lease_already_held"), "renew_instead");
        assert_eq!(recover_for(409, "revision_conflict"), "reread_then_retry");
        assert_eq!(
            recover_for(409, "idempotency_key_in_flight"),
            "retry_same_key_after"
        );
        assert_eq!(recover_for(429, "rate_limited"), "retry_same_key_after");
        assert_eq!(
            recover_for(503, "service_unavailable"),
            "retry_same_key_after"
        );
        assert_eq!(
            recover_for(409, "idempotency_key_reused"),
            "new_key_for_new_intent"
        );
        assert_eq!(recover_for(422, "validation_failed"), "fix_input");
        assert_eq!(recover_for(422, "idempotency_key_required"), "fix_input");
        assert_eq!(recover_for(401, "unauthorized"), "not_permitted");
        assert_eq!(recover_for(403, "not_a_member"), "not_permitted");
        assert_eq!(recover_for(404, "not_found"), "not_found");
    }
}
