//! The MCP tool catalogue: each tool's name, description and input schema (built
//! from the REST operation's OpenAPI schema), and the one reaction to each refusal
//! (`recover_for`). The calls are in `tools`.

use std::sync::OnceLock;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{json, Map, Value};

use crate::domain::idempotency::{KeyRule, Operation};
use crate::http::api::{
    assessments, checkpoints, contributions, handoffs, leases, memory, orbits, tasks,
};

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
