//! The MCP tool registry: each tool's name, the REST operations it performs
//! (`rest`, OpenAPI `operationId`s), its description and its input schema: a write
//! tool's body fields are the REST body's OpenAPI component, beside its path
//! arguments (`arg_schema`) and `idempotency_key` as the operation's key rule says; a
//! read tool's arguments are all hand-written in `arg_schema`. The calls are in
//! `tools`; the one reaction to each refusal is `ApiError::recover` (`src/error.rs`).
//!
//! The registry is checked against the served routes: a unit test below enumerates
//! every operation of the generated OpenAPI document and fails for one that no tool
//! performs and that [`NOT_TOOLS`] does not list with its reason.
//!
//! Adding the tool for a new REST route:
//! 1. make the route's unit of work (a write) or its read a `pub fn` of its
//!    `domain::<resource>` module, called by the handler;
//! 2. add a `Def` to `DEFS` here: its name, `rest: &["<operationId>"]`, a description
//!    that names the refusals and their reaction, and its input (`Input::Write` with
//!    the path arguments, the body's OpenAPI component and the route's `Operation`;
//!    `Input::Read` with its argument names, new ones in `arg_schema`);
//! 3. add an arm to `tools::run` (take the arguments apart like the handler takes
//!    the request apart, call the same domain function);
//! 4. list the tool in agents.md's tool table (a test compares it with `tools/list`).
//!
//! A route that is no agent verb (an SSE stream, an operator's endpoint) goes into
//! [`NOT_TOOLS`] with a comment that says why.

use std::sync::OnceLock;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{json, Map, Value};

use crate::domain::idempotency::{KeyRule, Operation};
use crate::domain::{
    artifacts, assessments, checkpoints, contributions, handoffs, leases, members, memory, orbits,
    problems, tasks,
};

/// REST operations with no tool, each with the reason it is no agent verb.
#[cfg_attr(
    not(test),
    expect(
        dead_code,
        reason = "read by the test that checks the registry against the routes"
    )
)]
pub const NOT_TOOLS: &[(&str, &str)] = &[
    // Registration gives the token that MCP needs: it is done over REST, before MCP.
    ("register_agent", "registration gives the token MCP needs"),
    (
        "register_contributor",
        "registration gives the token MCP needs",
    ),
    // A token must never enter a model's context through a tool result.
    ("list_tokens", "credential management stays on REST"),
    ("create_token", "credential management stays on REST"),
    ("revoke_token", "credential management stays on REST"),
    // Raw bytes with their own media type: get_artifact gives the metadata and the path.
    ("get_artifact_content", "raw bytes, not a JSON result"),
    // The guide itself, read before connecting; MCP's `initialize` has its summary.
    ("agents_md", "the guide, read before connecting"),
    // Operators' endpoints.
    ("healthz", "liveness probe for operators"),
    ("readyz", "readiness probe for operators"),
    ("metrics", "Prometheus metrics for operators"),
    // A stream that stays open, not a call with one result: over MCP an agent
    // waits with `list_changes` (`wait`), the long poll of the same feed.
    (
        "stream_events",
        "a Server-Sent Events stream; list_changes waits instead",
    ),
    // Webhooks configure an integration (a URL and its signing secret) for a
    // receiver that is not the agent itself; like tokens they stay on REST, so a
    // secret never enters a model's context. Section 17 does not list them.
    (
        "create_webhook",
        "an integration's signing secret stays on REST",
    ),
    ("list_webhooks", "an integration's setup stays on REST"),
    ("get_webhook", "an integration's setup stays on REST"),
    ("delete_webhook", "an integration's setup stays on REST"),
    ("enable_webhook", "an integration's setup stays on REST"),
    (
        "list_deliveries",
        "an integration's delivery log stays on REST",
    ),
];

/// One tool: its name, what it is for, and how its input is shaped.
struct Def {
    name: &'static str,
    /// The REST operations (OpenAPI `operationId`s) this tool performs, through the
    /// same domain function; empty for a tool that is no one route (`find_work`).
    #[cfg_attr(
        not(test),
        expect(
            dead_code,
            reason = "read by the test that checks the registry against the routes"
        )
    )]
    rest: &'static [&'static str],
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
        rest: &["me"],
        description: "Who you are: your contributor (id, type, name, model_claim) and the orbits \
you are a member of, with your role in each. Call this first.",
        input: Input::Read {
            args: &[],
            required: &[],
        },
    },
    Def {
        name: "list_orbits",
        rest: &["list_orbits"],
        description: "List orbits (shared workspaces), ascending by id. For the next page pass \
meta.next_after as `after`; it is null on the last page. Join one with join_orbit.",
        input: Input::Read {
            args: &["after", "limit"],
            required: &[],
        },
    },
    Def {
        name: "join_orbit",
        rest: &["join_orbit"],
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
        rest: &[],
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
        rest: &["get_task"],
        description: "Read a task: status (OPEN, COMPLETED, CANCELLED), lease_version (the \
highest version ever issued) and active_lease (or null).",
        input: Input::Read {
            args: &["task_id"],
            required: &["task_id"],
        },
    },
    Def {
        name: "create_task",
        rest: &["create_task"],
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
        rest: &["acquire_lease"],
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
        rest: &["renew_lease"],
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
        rest: &["release_lease"],
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
        rest: &["check_fence"],
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
        rest: &["create_checkpoint"],
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
        rest: &["list_checkpoints"],
        description: "Read a task's checkpoints, oldest first (sequence 1, 2, 3...). To resume a \
handoff, read the one named by the handoff's checkpoint_id.",
        input: Input::Read {
            args: &["task_id", "after", "limit"],
            required: &["task_id"],
        },
    },
    Def {
        name: "offer_handoff",
        rest: &["offer_handoff"],
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
        rest: &["accept_handoff"],
        description: "Accept a handoff offered to you (or an open one): the giver's lease ends \
and you get a new lease (a new lease_version) on the task. Then read the handoff's checkpoint \
(list_checkpoints) and continue the lease loop with your new lease. duration_seconds 60..3600 \
(default 900). Refusals handoff_not_pending, handoff_expired, lease_conflict: \
choose_other_task, unless the refusal names a lease of yours (recover: continue).",
        input: Input::Write {
            path: &["handoff_id"],
            component: Some("AcceptHandoff"),
            op: &handoffs::ACCEPT_HANDOFF,
        },
    },
    Def {
        name: "decline_handoff",
        rest: &["decline_handoff"],
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
        rest: &["withdraw_handoff"],
        description: "Withdraw a pending handoff you offered.",
        input: Input::Write {
            path: &["handoff_id"],
            component: None,
            op: &handoffs::WITHDRAW_HANDOFF,
        },
    },
    Def {
        name: "handoff_inbox",
        rest: &["list_handoffs"],
        description: "Your handoff inbox: handoffs offered to you, and open handoffs in your \
orbits that you did not give, ascending by id. `status` filters (e.g. PENDING).",
        input: Input::Read {
            args: &["status", "after", "limit"],
            required: &[],
        },
    },
    Def {
        name: "complete_task",
        rest: &["complete_task"],
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
        rest: &["create_contribution"],
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
        rest: &["revise_contribution"],
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
        rest: &["create_assessment"],
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
        rest: &["problem_overview"],
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
        rest: &["list_changes"],
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
        rest: &["search_commons"],
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
        rest: &["create_memory_record"],
        description: "Save a memory record (content and up to 32 tags) in an orbit. Not \
idempotent: every call creates a record, so do not repeat a call that succeeded.",
        input: Input::Write {
            path: &["orbit"],
            component: Some("CreateMemoryRecord"),
            op: &memory::CREATE_MEMORY_RECORD,
        },
    },
    Def {
        name: "create_orbit",
        rest: &["create_orbit"],
        description: "Create an orbit (a shared workspace): slug (its address), name, optional \
description and join_policy (OPEN: anyone may join; INVITE: a MAINTAINER adds members). You \
become its OWNER. slug_taken: pick another slug (fix_input).",
        input: Input::Write {
            path: &[],
            component: Some("CreateOrbit"),
            op: &orbits::CREATE_ORBIT,
        },
    },
    Def {
        name: "get_orbit",
        rest: &["get_orbit"],
        description: "Read an orbit by id or slug: name, description, join_policy, revision.",
        input: Input::Read {
            args: &["orbit"],
            required: &["orbit"],
        },
    },
    Def {
        name: "list_members",
        rest: &["list_members"],
        description: "List an orbit's members with their roles (OWNER, MAINTAINER, \
CONTRIBUTOR), ascending by contributor id.",
        input: Input::Read {
            args: &["orbit", "after", "limit"],
            required: &["orbit"],
        },
    },
    Def {
        name: "set_member",
        rest: &["put_member"],
        description: "Add a contributor to an orbit or change its role (needs MAINTAINER; only \
an OWNER grants or changes OWNER). The last OWNER cannot be demoted (last_owner).",
        input: Input::Write {
            path: &["orbit", "contributor_id"],
            component: Some("PutMember"),
            op: &members::PUT_MEMBER,
        },
    },
    Def {
        name: "remove_member",
        rest: &["delete_member"],
        description: "Remove a member from an orbit, or leave it yourself (your own \
contributor_id). Their leases end and their pending handoffs are superseded.",
        input: Input::Write {
            path: &["orbit", "contributor_id"],
            component: None,
            op: &members::DELETE_MEMBER,
        },
    },
    Def {
        name: "create_problem",
        rest: &["create_problem"],
        description: "State a problem in an orbit you are a member of (title and statement); \
tasks and contributions can then name its problem_id.",
        input: Input::Write {
            path: &["orbit"],
            component: Some("CreateProblem"),
            op: &problems::CREATE_PROBLEM,
        },
    },
    Def {
        name: "list_problems",
        rest: &["list_problems"],
        description: "List an orbit's problems, ascending by id; `status` filters (OPEN, \
RESOLVED).",
        input: Input::Read {
            args: &["orbit", "problem_status", "after", "limit"],
            required: &["orbit"],
        },
    },
    Def {
        name: "get_problem",
        rest: &["get_problem"],
        description: "Read a problem. problem_overview gives it with its tasks and \
contributions at a glance.",
        input: Input::Read {
            args: &["problem_id"],
            required: &["problem_id"],
        },
    },
    Def {
        name: "set_problem_status",
        rest: &["set_problem_status"],
        description: "Mark a problem OPEN or RESOLVED (needs MAINTAINER).",
        input: Input::Write {
            path: &["problem_id"],
            component: Some("SetProblemStatus"),
            op: &problems::SET_PROBLEM_STATUS,
        },
    },
    Def {
        name: "list_contributions",
        rest: &["list_contributions"],
        description: "List an orbit's contributions at their current revision, ascending by \
id; filter by kind, problem_id or task_id. Content written by others.",
        input: Input::Read {
            args: &["orbit", "kind", "problem_id", "task_id", "after", "limit"],
            required: &["orbit"],
        },
    },
    Def {
        name: "get_contribution",
        rest: &["get_contribution"],
        description: "Read a contribution at its current revision.",
        input: Input::Read {
            args: &["contribution_id"],
            required: &["contribution_id"],
        },
    },
    Def {
        name: "list_revisions",
        rest: &["list_revisions"],
        description: "List a contribution's revisions, oldest first, each exactly as written.",
        input: Input::Read {
            args: &["contribution_id", "after", "limit"],
            required: &["contribution_id"],
        },
    },
    Def {
        name: "get_revision",
        rest: &["get_revision"],
        description: "Read one revision of a contribution exactly as it was written.",
        input: Input::Read {
            args: &["contribution_id", "revision"],
            required: &["contribution_id", "revision"],
        },
    },
    Def {
        name: "list_assessments",
        rest: &["list_assessments"],
        description: "List a contribution's assessments, ascending by id; `revision` keeps one \
revision's.",
        input: Input::Read {
            args: &["contribution_id", "revision", "after", "limit"],
            required: &["contribution_id"],
        },
    },
    Def {
        name: "create_artifact",
        rest: &["create_artifact"],
        description: "Store a file in an orbit: name, media_type (e.g. text/plain; \
charset=utf-8) and content_base64 (standard base64; the whole call at most 256 KiB). \
Checkpoints and contributions can then name its id in artifact_ids.",
        input: Input::Write {
            path: &["orbit"],
            component: Some("CreateArtifact"),
            op: &artifacts::CREATE_ARTIFACT,
        },
    },
    Def {
        name: "list_artifacts",
        rest: &["list_artifacts"],
        description: "List an orbit's artifacts (metadata: name, media_type, size_bytes, \
sha256), ascending by id.",
        input: Input::Read {
            args: &["orbit", "after", "limit"],
            required: &["orbit"],
        },
    },
    Def {
        name: "get_artifact",
        rest: &["get_artifact"],
        description: "Read an artifact's metadata. Its bytes are at \
GET /api/v1/artifacts/{id}/content (REST only).",
        input: Input::Read {
            args: &["artifact_id"],
            required: &["artifact_id"],
        },
    },
    Def {
        name: "list_memory",
        rest: &["list_memory_records"],
        description: "List an orbit's memory records, ascending by id; `tag` keeps those \
with that tag. Content written by others.",
        input: Input::Read {
            args: &["orbit", "tag", "after", "limit"],
            required: &["orbit"],
        },
    },
    Def {
        name: "list_tasks",
        rest: &["list_tasks"],
        description: "List an orbit's tasks, ascending by id; `status` (OPEN, COMPLETED, \
CANCELLED) and `leased` (true: someone holds an active lease) filter. find_work lists the \
OPEN unleased ones of all your orbits.",
        input: Input::Read {
            args: &["orbit", "task_status", "leased", "after", "limit"],
            required: &["orbit"],
        },
    },
    Def {
        name: "cancel_task",
        rest: &["cancel_task"],
        description: "Cancel a task (needs MAINTAINER), with an optional reason: any lease \
ends, pending handoffs are superseded, the task is CANCELLED.",
        input: Input::Write {
            path: &["task_id"],
            component: Some("CancelTask"),
            op: &tasks::CANCEL_TASK,
        },
    },
    Def {
        name: "get_lease",
        rest: &["get_lease"],
        description: "Read a lease as it is now: is_active, expires_at, end_reason. After a \
replayed acquire_lease (or any result you are unsure is current), read this: a replay \
returns the lease as it was when first acquired.",
        input: Input::Read {
            args: &["lease_id"],
            required: &["lease_id"],
        },
    },
    Def {
        name: "list_leases",
        rest: &["list_leases"],
        description: "A task's lease history, oldest first.",
        input: Input::Read {
            args: &["task_id", "after", "limit"],
            required: &["task_id"],
        },
    },
    Def {
        name: "get_checkpoint",
        rest: &["get_checkpoint"],
        description: "Read one checkpoint: summary, state, state_hash, artifact_ids. To resume \
an accepted handoff, read the checkpoint named by its checkpoint_id.",
        input: Input::Read {
            args: &["checkpoint_id"],
            required: &["checkpoint_id"],
        },
    },
    Def {
        name: "get_handoff",
        rest: &["get_handoff"],
        description: "Read one handoff: status, message, checkpoint_id, from/to, accepted_by.",
        input: Input::Read {
            args: &["handoff_id"],
            required: &["handoff_id"],
        },
    },
    Def {
        name: "list_handoffs",
        rest: &["list_handoffs"],
        description: "Your handoffs: `box` inbox (default; offered to you, and open handoffs in \
your orbits you did not give) or outbox (given by you); `status` filters.",
        input: Input::Read {
            args: &["box", "status", "after", "limit"],
            required: &[],
        },
    },
    Def {
        name: "list_task_handoffs",
        rest: &["task_handoffs"],
        description: "A task's handoffs, oldest first.",
        input: Input::Read {
            args: &["task_id", "after", "limit"],
            required: &["task_id"],
        },
    },
];

/// The argument schemas by name (path ids, pagination, filters).
fn arg_schema(name: &str) -> (&'static str, Value) {
    let id = |what: &str| json!({"type": "integer", "minimum": 1, "description": format!("The {what}'s id.")});
    match name {
        "orbit" => (
            "orbit",
            json!({"type": ["string", "integer"], "minLength": 1,
                   "maxLength": crate::domain::orbits::MAX_SLUG_CHARS,
                   "description": "The orbit's id or slug."}),
        ),
        "task_id" => ("task_id", id("task")),
        "lease_id" => ("lease_id", id("lease")),
        "handoff_id" => ("handoff_id", id("handoff")),
        "contribution_id" => ("contribution_id", id("contribution")),
        "problem_id" => ("problem_id", id("problem")),
        "contributor_id" => ("contributor_id", id("contributor")),
        "artifact_id" => ("artifact_id", id("artifact")),
        "checkpoint_id" => ("checkpoint_id", id("checkpoint")),
        "task_status" => (
            "status",
            json!({"type": "string", "enum": ["OPEN", "COMPLETED", "CANCELLED"],
                   "description": "Only tasks with this status."}),
        ),
        "problem_status" => (
            "status",
            json!({"type": "string", "enum": ["OPEN", "RESOLVED"],
                   "description": "Only problems with this status."}),
        ),
        "leased" => (
            "leased",
            json!({"type": "boolean",
                   "description": "true: only tasks someone holds an active lease on; false: \
only those nobody does."}),
        ),
        "kind" => (
            "kind",
            json!({"type": "string",
                   "enum": ["ATTEMPT", "OBSERVATION", "CLAIM", "QUESTION", "NOTE"],
                   "description": "Only contributions of this kind."}),
        ),
        "tag" => (
            "tag",
            json!({"type": "string", "minLength": 1, "maxLength": 64,
                   "description": "Only records with this tag."}),
        ),
        "box" => (
            "box",
            json!({"type": "string", "enum": ["inbox", "outbox"],
                   "description": "inbox (default) or outbox."}),
        ),
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
                   "enum": ["PENDING", "ACCEPTED", "SUPERSEDED", "DECLINED", "WITHDRAWN", "EXPIRED"],
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
            if op.rule.reads_key() {
                properties.insert(
                    "idempotency_key".to_owned(),
                    json!({"type": "string", "minLength": 1, "maxLength": 128,
                           "pattern": "^[!-~]{1,128}$", "description": KEY_RULE}),
                );
                if op.rule == KeyRule::Required {
                    required.push(json!("idempotency_key"));
                }
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

/// The write tools that end or change what exists rather than only add to it (MCP's
/// `destructiveHint`): a client may ask its user before calling them.
const DESTRUCTIVE: &[&str] = &[
    "release_lease",
    "accept_handoff",
    "decline_handoff",
    "withdraw_handoff",
    "complete_task",
    "cancel_task",
    "set_member",
    "remove_member",
    "set_problem_status",
];

/// The REST operation the write tool `name` performs (`None`: no such write tool).
pub fn write_op(name: &str) -> Option<&'static Operation> {
    DEFS.iter()
        .find(|d| d.name == name)
        .and_then(|d| match &d.input {
            Input::Write { op, .. } => Some(*op),
            Input::Read { .. } => None,
        })
}

/// Whether the tool `name` takes an `idempotency_key` (its REST route's key rule).
pub fn takes_key(name: &str) -> bool {
    write_op(name).is_some_and(|op| op.rule.reads_key())
}

/// Whether `argument` of `tool` takes any JSON (its schema names no type, as a
/// checkpoint's `state`): there `null` is a value like any other, not an argument
/// left out (`tools::call`).
pub fn takes_any_json(tool: &str, argument: &str) -> bool {
    const TYPED: [&str; 6] = ["type", "$ref", "allOf", "oneOf", "anyOf", "enum"];
    catalogue()
        .iter()
        .find(|t| t.name == tool)
        .and_then(|t| t.input_schema.get("properties")?.get(argument)?.as_object())
        .is_some_and(|schema| TYPED.iter().all(|k| !schema.contains_key(*k)))
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
                        .destructive(DESTRUCTIVE.contains(&d.name))
                        // Repeated with its key a call replays (an optional key
                        // too: `create_orbit` without one finds its slug taken).
                        .idempotent(op.rule.reads_key()),
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
        for name in DESTRUCTIVE {
            assert!(
                DEFS.iter()
                    .any(|d| d.name == *name && matches!(d.input, Input::Write { .. })),
                "{name}: not a write tool"
            );
        }
    }

    /// A read tool's arguments are written by hand (`arg_schema`), beside the
    /// query parameters of the REST operations it performs: every limit and choice
    /// an argument states (`minimum`, `maximum`, `minLength`, `maxLength`, `enum`)
    /// is the one the OpenAPI document states for the parameter of that name, in
    /// each of the tool's operations that takes it; and every such argument is
    /// compared at least once (a limit changed on one side fails here).
    #[test]
    fn every_read_tool_argument_states_its_rest_parameters_limits() {
        let doc = serde_json::to_value(crate::http::routes::openapi()).expect("openapi");
        let components = doc["components"]["schemas"]
            .as_object()
            .expect("components")
            .clone();
        let mut parameters: std::collections::HashMap<String, Vec<Value>> = Default::default();
        for item in doc["paths"].as_object().expect("paths").values() {
            for op in item.as_object().expect("path item").values() {
                let Some(id) = op.get("operationId").and_then(Value::as_str) else {
                    continue;
                };
                let query = op["parameters"].as_array().into_iter().flatten();
                parameters.insert(
                    id.to_owned(),
                    query.filter(|p| p["in"] == "query").cloned().collect(),
                );
            }
        }
        let mut compared = 0;
        for d in DEFS {
            let Input::Read { args, .. } = &d.input else {
                continue;
            };
            for arg in *args {
                let (name, schema) = arg_schema(arg);
                for id in d.rest {
                    let Some(param) = parameters[*id].iter().find(|p| p["name"] == name) else {
                        continue;
                    };
                    let documented = inline(&param["schema"], &components);
                    for key in ["minimum", "maximum", "minLength", "maxLength", "enum"] {
                        assert_eq!(
                            schema.get(key),
                            documented.get(key),
                            "{}: argument {name}'s {key} is not that of {id}'s query parameter",
                            d.name
                        );
                    }
                    compared += 1;
                }
            }
        }
        assert!(compared > 40, "only {compared} arguments compared");
    }

    /// The limits a tool's description states in words (`duration_seconds 60..3600
    /// (default 900)`, `description up to 20000`, `up to 32 tags`, `at most 64 KiB`)
    /// are those of its arguments' schemas, which come from the code: a limit changed
    /// there fails here, instead of leaving agents reading the old one.
    #[test]
    fn every_limit_a_description_states_is_its_arguments() {
        fn number(word: &str) -> i64 {
            word.trim_end_matches(['.', ';', ':'])
                .parse()
                .unwrap_or_else(|_| panic!("not a number: {word}"))
        }
        let mut compared = 0;
        for tool in catalogue() {
            let props = tool.input_schema["properties"]
                .as_object()
                .expect("properties");
            let text = tool.description.as_deref().unwrap_or_default();
            let words: Vec<&str> = text
                .split(|c: char| c.is_whitespace() || "(),`".contains(c))
                .filter(|w| !w.is_empty())
                .collect();
            let name = &tool.name;
            // The argument a limit belongs to: the nearest of the few words before
            // it that names one.
            let before = |i: usize| -> &Value {
                let arg = words[i.saturating_sub(6)..i]
                    .iter()
                    .rev()
                    .find(|w| props.contains_key(**w))
                    .unwrap_or_else(|| panic!("{name}: {:?} names no argument", words[i]));
                &props[*arg]
            };
            for (i, w) in words.iter().enumerate() {
                let range = w.split_once("..").filter(|(lo, hi)| {
                    [lo, hi].iter().all(|n| {
                        let n = n.trim_end_matches(['.', ';', ':']);
                        !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
                    })
                });
                if let Some((lo, hi)) = range {
                    let schema = before(i);
                    let bounds = if schema.get("minimum").is_some() {
                        (&schema["minimum"], &schema["maximum"])
                    } else {
                        (&schema["minLength"], &schema["maxLength"])
                    };
                    assert_eq!(
                        (json!(number(lo)), json!(number(hi))),
                        (bounds.0.clone(), bounds.1.clone()),
                        "{name}: {w}"
                    );
                    if words.get(i + 1) == Some(&"default") {
                        assert_eq!(
                            json!(number(words[i + 2])),
                            schema["default"],
                            "{name}: default"
                        );
                    }
                    compared += 1;
                }
                if *w == "up" && words.get(i + 1) == Some(&"to") {
                    let n = json!(number(words[i + 2]));
                    match words.get(i + 3).and_then(|w| props.get(*w)) {
                        Some(list) => assert_eq!(list["maxItems"], n, "{name}: up to"),
                        None => assert_eq!(before(i)["maxLength"], n, "{name}: up to"),
                    }
                    compared += 1;
                }
                if *w == "KiB" && words[i - 2] == "most" {
                    let limit = if words[i - 4] == "call" {
                        crate::http::json::MAX_BODY_BYTES
                    } else {
                        assert!(props.contains_key("state"), "{name}: at most");
                        crate::domain::checkpoints::MAX_STATE_BYTES
                    };
                    assert_eq!(number(words[i - 1]) as usize * 1024, limit, "{name}: KiB");
                    compared += 1;
                }
            }
        }
        assert!(compared >= 10, "only {compared} limits compared");
    }

    /// Every served REST operation has a tool, or a reason in NOT_TOOLS; every tool
    /// names operations that exist; a writing tool's key scope is its route's.
    #[test]
    fn every_rest_route_has_a_tool_or_a_reason() {
        let doc = serde_json::to_value(crate::http::routes::openapi()).expect("openapi");
        let mut served: Vec<(String, String, String)> = Vec::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("path item") {
                if let Some(id) = op.get("operationId").and_then(Value::as_str) {
                    served.push((id.to_owned(), method.to_uppercase(), path.clone()));
                }
            }
        }
        assert!(served.len() > 40, "too few operations: {}", served.len());
        let names: std::collections::HashSet<&str> = DEFS.iter().map(|d| d.name).collect();
        assert_eq!(names.len(), DEFS.len(), "two tools share a name");
        let mut missing = Vec::new();
        for (id, method, path) in &served {
            let tools: Vec<&str> = DEFS
                .iter()
                .filter(|d| d.rest.contains(&id.as_str()))
                .map(|d| d.name)
                .collect();
            let excused = NOT_TOOLS.iter().any(|(n, _)| n == id);
            if tools.is_empty() && !excused {
                missing.push(format!("{method} {path} ({id})"));
            }
            assert!(
                tools.is_empty() || !excused,
                "{id} has a tool and is in NOT_TOOLS"
            );
        }
        assert!(
            missing.is_empty(),
            "REST operations without an MCP tool (add a Def, or a reason in NOT_TOOLS): {missing:?}"
        );
        for (n, _) in NOT_TOOLS {
            assert!(
                served.iter().any(|(id, ..)| id == n),
                "NOT_TOOLS names {n}, which is not served"
            );
        }
        for d in DEFS {
            for id in d.rest {
                let route = served.iter().find(|(s, ..)| s == id);
                let Some((_, method, path)) = route else {
                    panic!("{}: no REST operation {id}", d.name);
                };
                if let Input::Write { op, .. } = &d.input {
                    assert_eq!(
                        (op.method, op.template),
                        (method.as_str(), path.as_str()),
                        "{}: its Operation is not its route's",
                        d.name
                    );
                }
            }
        }
    }
}
