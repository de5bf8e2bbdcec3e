//! MCP (issue 11): the agent workflow as tools at `/mcp`, spoken to by the official
//! `rmcp` client over streamable HTTP against the spawned app.

use std::borrow::Cow;

use reqwest::Method;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
    ProtocolVersion,
};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Value};

use crate::harness::{Agent, TestApp};
use crate::work::{changes, crew, lease, task};

type Client = RunningService<RoleClient, ClientConfig>;

/// Every tool the issue names.
const TOOLS: &[&str] = &[
    "whoami",
    "list_orbits",
    "join_orbit",
    "find_work",
    "get_task",
    "create_task",
    "acquire_lease",
    "renew_lease",
    "release_lease",
    "check_fence",
    "write_checkpoint",
    "list_checkpoints",
    "offer_handoff",
    "accept_handoff",
    "decline_handoff",
    "withdraw_handoff",
    "handoff_inbox",
    "create_contribution",
    "revise_contribution",
    "assess_revision",
    "problem_overview",
    "read_changes",
    "write_memory",
    "search",
];

/// Connects (and initializes) as `who`.
pub async fn connect(app: &TestApp, who: &Agent) -> Client {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(app.url("/mcp")).auth_header(&who.token),
    );
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("orbit-commons-tests", "1.0.0"),
    )
    .with_protocol_version(ProtocolVersion::V_2025_06_18)
    .serve(transport)
    .await
    .expect("MCP initialize")
}

pub async fn call(client: &Client, tool: &str, args: Value) -> CallToolResult {
    let Value::Object(arguments) = args else {
        panic!("tool arguments must be an object");
    };
    client
        .call_tool(
            CallToolRequestParams::new(Cow::Owned(tool.to_owned())).with_arguments(arguments),
        )
        .await
        .unwrap_or_else(|e| panic!("tools/call {tool}: {e}"))
}

/// The structured result of a successful call.
#[track_caller]
pub fn ok(r: &CallToolResult) -> Value {
    assert_eq!(
        r.is_error,
        Some(false),
        "tool refused: {:?}",
        r.structured_content
    );
    r.structured_content.clone().expect("structured content")
}

/// Asserts a refusal with its REST status, code and recovery; returns its content.
#[track_caller]
pub fn refused(r: &CallToolResult, status: u16, code: &str, recover: &str) -> Value {
    assert_eq!(
        r.is_error,
        Some(true),
        "tool succeeded: {:?}",
        r.structured_content
    );
    let s = r.structured_content.clone().expect("structured content");
    assert_eq!(s["status"], status, "{s}");
    assert_eq!(s["code"], code, "{s}");
    assert_eq!(s["recover"], recover, "{s}");
    assert!(
        s["message"].is_string() && s.get("details").is_some(),
        "{s}"
    );
    s
}

fn key() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A raw JSON-RPC POST to `/mcp`.
async fn raw(app: &TestApp, auth: Option<&str>, message: Value) -> crate::harness::Resp {
    let body = serde_json::to_vec(&message).unwrap();
    let mut headers = vec![
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];
    let auth_value;
    if let Some(a) = auth {
        auth_value = a.to_owned();
        headers.push(("authorization", &auth_value));
    }
    app.post_raw("/mcp", None, &headers, body).await
}

/// A refusal before any MCP message was read: the REST status, and a JSON-RPC error
/// whose message is ours (so an MCP client shows it) and whose data is the REST
/// envelope's fields with the reaction.
#[track_caller]
pub fn assert_transport_refusal(r: &crate::harness::Resp, status: u16, code: &str, recover: &str) {
    assert_eq!(r.status.as_u16(), status, "{}", r.text);
    assert!(
        r.header("content-type")
            .is_some_and(|c| c.starts_with("application/json")),
        "{:?}",
        r.headers
    );
    assert_eq!(r.json["jsonrpc"], "2.0", "{}", r.text);
    assert!(r.json["id"].is_null(), "{}", r.text);
    let error = &r.json["error"];
    assert_eq!(error["code"], -32001, "{}", r.text);
    let message = error["message"].as_str().expect("message");
    assert!(message.len() > 20, "{message}");
    assert_eq!(error["data"]["code"], code, "{}", r.text);
    assert_eq!(error["data"]["status"], status, "{}", r.text);
    assert_eq!(error["data"]["recover"], recover, "{}", r.text);
    assert_eq!(error["data"]["message"], message, "{}", r.text);
}

#[track_caller]
fn assert_auth_refusal(r: &crate::harness::Resp) {
    assert_transport_refusal(r, 401, "unauthorized", "not_permitted");
}

fn initialize_message() -> Value {
    json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}
        }
    })
}

#[tokio::test]
async fn initialize_and_list_every_tool_with_an_input_schema() {
    let app = TestApp::spawn().await;
    let a = app.agent("mcp-lister").await;
    let client = connect(&app, &a).await;

    let info = client.peer_info().expect("server info");
    assert_eq!(
        info.server_info.as_ref().map(|s| s.name.as_str()),
        Some("orbit-commons")
    );
    assert_eq!(info.protocol_version, ProtocolVersion::V_2025_06_18);
    assert!(info.capabilities.tools.is_some());
    assert!(info
        .instructions
        .as_deref()
        .is_some_and(|i| i.contains("untrusted")));

    let tools = client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for wanted in TOOLS {
        assert!(names.contains(wanted), "missing tool {wanted}: {names:?}");
    }
    for t in &tools {
        let schema = Value::Object((*t.input_schema).clone());
        assert_eq!(schema["type"], "object", "{}: {schema}", t.name);
        assert!(schema["properties"].is_object(), "{}: {schema}", t.name);
        assert!(
            !schema.to_string().contains("$ref"),
            "{}: schema must be self-contained: {schema}",
            t.name
        );
        assert!(
            t.description.as_ref().is_some_and(|d| d.len() > 30),
            "{} needs a description an LLM can act on",
            t.name
        );
        // A write is idempotent exactly when it takes a key (create_orbit's is
        // optional: repeated with its key it replays, without one its slug is
        // taken); memory records take none and are not.
        let a = t.annotations.as_ref().expect("annotations");
        if a.read_only_hint != Some(true) {
            assert_eq!(
                a.idempotent_hint,
                Some(schema["properties"].get("idempotency_key").is_some()),
                "{}",
                t.name
            );
        }
    }
    let schema_of = |name: &str| {
        let t = tools.iter().find(|t| t.name == name).unwrap();
        Value::Object((*t.input_schema).clone())
    };
    // Writes: path ids, the REST body's fields, and the key where REST requires it.
    let acquire = schema_of("acquire_lease");
    assert_eq!(acquire["required"], json!(["task_id", "idempotency_key"]));
    assert!(acquire["properties"]["duration_seconds"].is_object());
    let offer = schema_of("offer_handoff");
    for f in ["task_id", "lease_version", "checkpoint_id", "message"] {
        assert!(
            offer["required"].as_array().unwrap().contains(&json!(f)),
            "{offer}"
        );
    }
    let contribution = schema_of("create_contribution");
    assert!(
        contribution["properties"]["kind"]["enum"].is_array(),
        "{contribution}"
    );
    // A checkpoint's state is any JSON (contract 9.1), not only an object; the
    // limits validation enforces are in the schema (until 2026-12-06 the state said
    // `object`, and the artifacts' and tags' limits were words only).
    let checkpoint = schema_of("write_checkpoint");
    assert!(
        checkpoint["properties"]["state"].get("type").is_none(),
        "{checkpoint}"
    );
    assert_eq!(checkpoint["properties"]["artifact_ids"]["maxItems"], 100);
    let tag = &schema_of("write_memory")["properties"]["tags"]["items"];
    assert_eq!(
        (tag["minLength"].as_u64(), tag["maxLength"].as_u64()),
        (Some(1), Some(64)),
        "{tag}"
    );
    // The fence check, joining and memory records take no key, as over REST.
    for name in ["check_fence", "join_orbit", "write_memory"] {
        assert!(
            schema_of(name)["properties"]["idempotency_key"].is_null(),
            "{name}"
        );
    }
    // Reads are read-only; writes that end or change what exists are destructive
    // (a client may ask its user first), those that only add are not.
    let hints = |name: &str| {
        let t = tools.iter().find(|t| t.name == name).unwrap();
        let a = t.annotations.as_ref().expect("annotations");
        (a.read_only_hint, a.destructive_hint)
    };
    assert_eq!(hints("get_task"), (Some(true), None));
    for name in [
        "cancel_task",
        "remove_member",
        "release_lease",
        "accept_handoff",
    ] {
        assert_eq!(hints(name), (Some(false), Some(true)), "{name}");
    }
    for name in ["create_task", "write_checkpoint", "offer_handoff"] {
        assert_eq!(hints(name), (Some(false), Some(false)), "{name}");
    }

    // The transport itself: a single JSON response to initialize; GET is not served
    // (no server-initiated stream), nor is an unknown tool.
    let r = raw(
        &app,
        Some(&format!("Bearer {}", a.token)),
        initialize_message(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r
        .header("content-type")
        .is_some_and(|c| c.starts_with("application/json")));
    assert_eq!(
        r.json["result"]["protocolVersion"], "2025-06-18",
        "{}",
        r.text
    );
    let r = app
        .send_raw(
            Method::GET,
            "/mcp",
            Some(&a.token),
            &[("accept", "text/event-stream")],
            None,
        )
        .await;
    assert_transport_refusal(&r, 405, "method_not_allowed", "fix_input");
    assert_eq!(r.header("allow"), Some("POST"));
    let r = raw(
        &app,
        Some(&format!("Bearer {}", a.token)),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "no_such_tool", "arguments": {}}}),
    )
    .await;
    assert!(r.json["error"]["code"].is_i64(), "{}", r.text);
    // A made-up name comes back cut short: the SDK logs the text, and one 200 KB
    // name made a 200 KB log line (a probe, 2026-12-07).
    let long = format!("nope{}", "Z".repeat(200_000));
    let r = raw(
        &app,
        Some(&format!("Bearer {}", a.token)),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
               "params": {"name": long, "arguments": {}}}),
    )
    .await;
    let message = r.json["error"]["message"].as_str().expect("a message");
    assert!(message.starts_with("Unknown tool: \"nopeZZ"), "{message}");
    assert!(message.len() < 200, "{} bytes", message.len());
    client.cancel().await.ok();
}

#[tokio::test]
async fn unauthenticated_mcp_requests_are_401() {
    let app = TestApp::spawn().await;
    let a = app.agent("mcp-auth").await;
    let malformed = "Bearer not-a-token".to_owned();
    let unknown = format!("Bearer {}x", &a.token[..a.token.len() - 1]);
    for auth in [
        None,
        Some("Basic Zm9vOmJhcg=="),
        Some(&malformed),
        Some(&unknown),
    ] {
        let r = raw(&app, auth, initialize_message()).await;
        assert_auth_refusal(&r);
        if auth.is_none() {
            // It names the registration route agents.md teaches.
            let m = r.json["error"]["message"].as_str().unwrap_or("");
            assert!(m.contains("POST /api/v1/contributors"), "{m}");
        }
        assert!(
            r.header("www-authenticate")
                .is_some_and(|v| v.starts_with("Bearer")),
            "{auth:?}: {:?}",
            r.headers
        );
    }
    // A revoked token is refused on the very next MCP request.
    let list = app.get("/api/v1/me/tokens", Some(&a.token)).await;
    let token_id = list.json["data"][0]["id"].as_i64().unwrap();
    app.delete(&format!("/api/v1/me/tokens/{token_id}"), &a.token)
        .await;
    let r = raw(
        &app,
        Some(&format!("Bearer {}", a.token)),
        initialize_message(),
    )
    .await;
    assert_auth_refusal(&r);
    assert!(
        r.json["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("revoked")),
        "{}",
        r.text
    );

    // The SDK client without a token cannot even initialize.
    let transport = StreamableHttpClientTransport::from_uri(app.url("/mcp"));
    let refused = ClientConfig::new(ClientCapabilities::default(), Implementation::new("x", "1"))
        .serve(transport)
        .await;
    assert!(refused.is_err(), "initialize without a token must fail");
}

/// An `MCP-Protocol-Version` the server does not speak is refused with a JSON-RPC
/// error that names the versions it does; a known one passes.
#[tokio::test]
async fn an_unknown_protocol_version_is_refused_in_words() {
    let app = TestApp::spawn().await;
    let a = app.agent("mcp-version").await;
    let auth = format!("Bearer {}", a.token);
    let list = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"});
    let body = serde_json::to_vec(&list).unwrap();
    let send = |version: &'static str| {
        let (app, auth, body) = (&app, auth.clone(), body.clone());
        async move {
            let headers = [
                ("content-type", "application/json"),
                ("accept", "application/json, text/event-stream"),
                ("authorization", auth.as_str()),
                ("mcp-protocol-version", version),
            ];
            app.post_raw("/mcp", None, &headers, body).await
        }
    };
    let r = send("1999-01-01").await;
    assert_eq!(r.status.as_u16(), 400, "{}", r.text);
    assert_eq!(r.json["error"]["code"], -32600, "{}", r.text);
    let m = r.json["error"]["message"].as_str().unwrap_or("");
    assert!(m.contains("2025-06-18") && m.contains("1999-01-01"), "{m}");
    let r = send("2025-06-18").await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.text);
    assert!(r.json["result"]["tools"].is_array(), "{}", r.text);
    // A revision the SDK knows but this server does not speak (it has no
    // `initialize`, and needs headers this server does not read) is refused the
    // same way, and the versions named are those `initialize` negotiates (until
    // 2026-12-06 it passed, to fail in the SDK on a missing `Mcp-Method` header).
    let r = send("2026-07-28").await;
    assert_eq!(r.status.as_u16(), 400, "{}", r.text);
    let m = r.json["error"]["message"].as_str().unwrap_or("");
    assert!(m.contains("2025-11-25, not \"2026-07-28\""), "{m}");
    // A method no MCP version has: -32601 saying which methods this server answers.
    let r = raw(
        &app,
        Some(&auth),
        json!({"jsonrpc": "2.0", "id": 9, "method": "foo/bar"}),
    )
    .await;
    assert_eq!(r.json["id"], 9, "{}", r.text);
    assert_eq!(r.json["error"]["code"], -32601, "{}", r.text);
    let m = r.json["error"]["message"].as_str().unwrap_or("");
    assert!(m.contains("foo/bar") && m.contains("tools/call"), "{m}");
}

#[tokio::test]
async fn mcp_is_rate_limited_like_the_rest_api() {
    let app = TestApp::spawn_with(|c| {
        c.rate_limit_per_minute = 3;
        c.anon_rate_limit_per_minute = 50;
    })
    .await;
    let a = app.agent("mcp-limited").await;
    let auth = format!("Bearer {}", a.token);
    let mut statuses = Vec::new();
    for i in 0..6 {
        let r = raw(
            &app,
            Some(&auth),
            json!({"jsonrpc": "2.0", "id": i, "method": "ping"}),
        )
        .await;
        statuses.push(r.status.as_u16());
        if r.status == 429 {
            // The refusal an MCP client shows, with when to try again.
            assert_transport_refusal(&r, 429, "rate_limited", "retry_same_key_after");
            let after = r.header("retry-after").expect("Retry-After");
            assert_eq!(
                r.json["error"]["data"]["retry_after_seconds"].to_string(),
                after,
                "{}",
                r.text
            );
            assert_eq!(
                r.header("ratelimit"),
                Some(format!("\"token\";r=0;t={after}").as_str()),
                "{:?}",
                r.headers
            );
            // The message an MCP client shows names no HTTP header.
            let message = r.json["error"]["message"].as_str().unwrap();
            assert_eq!(
                message,
                format!("Too many requests. Retry after {after} s.")
            );
        }
    }
    assert!(statuses.contains(&429), "{statuses:?}");
}

/// A body over 256 KiB is refused before it is read, with or without a
/// `Content-Length`, in the JSON-RPC form an MCP client shows, and the call in it
/// is not made.
#[tokio::test]
async fn an_oversized_mcp_body_is_413_in_json_rpc_and_does_nothing() {
    let app = TestApp::spawn().await;
    let a = app.agent("mcp-big").await;
    let call = |slug: &str| {
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "create_orbit",
            "arguments": {"slug": slug, "name": "Big", "description": "x".repeat(300 * 1024),
                          "idempotency_key": key()}}})
    };
    let r = raw(&app, Some(&format!("Bearer {}", a.token)), call("too-big")).await;
    assert_transport_refusal(&r, 413, "payload_too_large", "fix_input");

    let body = serde_json::to_vec(&call("too-big-chunked")).unwrap();
    let response = crate::protection::chunked_post(
        &app,
        "/mcp",
        &a.token,
        &[("accept", "application/json, text/event-stream")],
        &body,
    )
    .await;
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    let json_body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let value: Value = serde_json::from_str(json_body).expect(&response);
    assert_eq!(value["jsonrpc"], "2.0", "{response}");
    assert_eq!(value["error"]["code"], -32001, "{response}");
    assert_eq!(
        value["error"]["data"]["code"], "payload_too_large",
        "{response}"
    );

    for slug in ["too-big", "too-big-chunked"] {
        app.get(&format!("/api/v1/orbits/{slug}"), None)
            .await
            .assert_error(404, "not_found");
    }
}

#[tokio::test]
async fn drafter_hands_off_to_reviewer_entirely_through_tools() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "mcp-rollout", 2).await;
    let (drafter_agent, reviewer_agent) = (&c.members[0], &c.members[1]);
    let drafter = connect(&app, drafter_agent).await;
    let reviewer = connect(&app, reviewer_agent).await;

    // The drafter finds out who it is and where it may work.
    let me = ok(&call(&drafter, "whoami", json!({})).await);
    assert_eq!(me["data"]["contributor"]["id"], drafter_agent.id);
    assert_eq!(me["data"]["memberships"][0]["orbit_id"], c.orbit);
    let orbits = ok(&call(&drafter, "list_orbits", json!({"limit": 10})).await);
    assert_eq!(orbits["data"][0]["id"], c.orbit);

    // It creates a task, finds it as open work, and takes it.
    let created = ok(&call(
        &drafter,
        "create_task",
        json!({"orbit": "mcp-rollout", "title": "plans/rollout.md", "idempotency_key": key()}),
    )
    .await);
    let t = created["data"]["id"].as_i64().unwrap();
    let work = ok(&call(&drafter, "find_work", json!({})).await);
    assert_eq!(work["data"]["open_tasks"][0]["id"], t, "{work}");
    let lease = ok(&call(
        &drafter,
        "acquire_lease",
        json!({"task_id": t, "duration_seconds": 900, "idempotency_key": key()}),
    )
    .await);
    let (drafter_lease, v1) = (
        lease["data"]["id"].as_i64().unwrap(),
        lease["data"]["lease_version"].as_i64().unwrap(),
    );
    assert_eq!(v1, 1);
    let work = ok(&call(&reviewer, "find_work", json!({"orbit": c.orbit})).await);
    assert_eq!(
        work["data"]["open_tasks"],
        json!([]),
        "a leased task is not open work"
    );

    // Progress, a fence check, a renewal, then the handoff to the reviewer.
    let ckpt = ok(&call(
        &drafter,
        "write_checkpoint",
        json!({"task_id": t, "lease_version": v1, "summary": "smoke passed",
               "state": {"version": 4, "file": "plans/rollout.md"}, "idempotency_key": key()}),
    )
    .await);
    let ckpt_id = ckpt["data"]["id"].as_i64().unwrap();
    assert_eq!(ckpt["data"]["sequence"], 1);
    let fence = ok(&call(
        &drafter,
        "check_fence",
        json!({"task_id": t, "lease_version": v1}),
    )
    .await);
    assert_eq!(fence["data"]["verdict"], "PROCEED");
    ok(&call(
        &drafter,
        "renew_lease",
        json!({"lease_id": drafter_lease, "lease_version": v1, "duration_seconds": 900,
               "idempotency_key": key()}),
    )
    .await);
    let offered = ok(&call(
        &drafter,
        "offer_handoff",
        json!({"task_id": t, "lease_version": v1, "checkpoint_id": ckpt_id,
               "to_contributor_id": reviewer_agent.id,
               "message": "Smoke passed, needs review of the canary percentages.",
               "idempotency_key": key()}),
    )
    .await);
    let handoff = offered["data"]["id"].as_i64().unwrap();
    assert_eq!(offered["data"]["status"], "PENDING");

    // The giver is fenced: every lease-protected tool refuses with stop_and_report,
    // naming the handoff, and never says how the fence could be lifted.
    for (tool, args) in [
        (
            "write_checkpoint",
            json!({"task_id": t, "lease_version": v1, "summary": "more",
                   "state": {"version": 5}, "idempotency_key": key()}),
        ),
        ("check_fence", json!({"task_id": t, "lease_version": v1})),
        (
            "renew_lease",
            json!({"lease_id": drafter_lease, "lease_version": v1, "idempotency_key": key()}),
        ),
        (
            "complete_task",
            json!({"task_id": t, "lease_version": v1, "idempotency_key": key()}),
        ),
    ] {
        let r = call(&drafter, tool, args).await;
        let s = refused(&r, 409, "handed_off", "stop_and_report");
        assert_eq!(s["details"]["handoff_id"], handoff, "{tool}: {s}");
        assert!(
            s["message"]
                .as_str()
                .unwrap()
                .starts_with("You handed this task off and the handoff is pending"),
            "{tool}: {s}"
        );
        let text = format!("{s} {:?}", r.content).to_lowercase();
        for lifting in ["withdraw", "release", "acquire", "accept", "renew it"] {
            assert!(
                !text.contains(lifting),
                "{tool} names a way out ({lifting}): {text}"
            );
        }
    }

    // The reviewer finds the handoff and accepts it; the retry with the same key is
    // the same request and returns the same result.
    let inbox = ok(&call(&reviewer, "handoff_inbox", json!({"status": "PENDING"})).await);
    assert_eq!(inbox["data"][0]["id"], handoff, "{inbox}");
    let work = ok(&call(&reviewer, "find_work", json!({})).await);
    assert_eq!(work["data"]["inbox_handoffs"][0]["id"], handoff, "{work}");
    let accept_key = key();
    let args = json!({"handoff_id": handoff, "duration_seconds": 600,
                      "idempotency_key": accept_key});
    let first = call(&reviewer, "accept_handoff", args.clone()).await;
    let accepted = ok(&first);
    assert_eq!(accepted["data"]["handoff"]["status"], "ACCEPTED");
    assert_eq!(accepted["data"]["lease"]["lease_version"], 2);
    assert_eq!(
        accepted["data"]["lease"]["contributor"]["id"],
        reviewer_agent.id
    );
    assert!(first.meta.is_none());
    let again = call(&reviewer, "accept_handoff", args).await;
    assert_eq!(ok(&again), accepted, "a retry returns the same result");
    assert_eq!(
        again
            .meta
            .as_ref()
            .and_then(|m| m.0.get("orbit-commons/idempotency-replayed")),
        Some(&json!(true))
    );
    let accepts = changes(&app, c.orbit)
        .await
        .iter()
        .filter(|ch| ch["kind"] == "handoff.accepted")
        .count();
    assert_eq!(accepts, 1, "the retry did nothing twice");

    // The giver's old version is now stale: still stop_and_report.
    let r = call(
        &drafter,
        "write_checkpoint",
        json!({"task_id": t, "lease_version": v1, "summary": "late",
               "state": {}, "idempotency_key": key()}),
    )
    .await;
    refused(&r, 409, "stale_lease_version", "stop_and_report");

    // The reviewer resumes from the checkpoint and finishes under its own lease.
    let v2 = accepted["data"]["lease"]["lease_version"].as_i64().unwrap();
    let list = ok(&call(&reviewer, "list_checkpoints", json!({"task_id": t})).await);
    assert_eq!(list["data"][0]["id"], ckpt_id);
    assert_eq!(list["data"][0]["state"]["version"], 4);
    ok(&call(
        &reviewer,
        "write_checkpoint",
        json!({"task_id": t, "lease_version": v2, "summary": "reviewed",
               "state": {"version": 5, "reviewed": true}, "idempotency_key": key()}),
    )
    .await);
    let done = ok(&call(
        &reviewer,
        "complete_task",
        json!({"task_id": t, "lease_version": v2, "summary": "approved",
               "idempotency_key": key()}),
    )
    .await);
    assert_eq!(done["data"]["status"], "COMPLETED");
    let r = call(&reviewer, "get_task", json!({"task_id": t})).await;
    assert_eq!(ok(&r)["data"]["status"], "COMPLETED");

    // The whole story is in the change feed, read through the tool.
    let feed = ok(&call(
        &reviewer,
        "read_changes",
        json!({"orbit": c.orbit, "after": 0}),
    )
    .await);
    let kinds: Vec<&str> = feed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|ch| ch["kind"].as_str().unwrap())
        .filter(|k| !k.starts_with("orbit.") && !k.starts_with("member."))
        .collect();
    assert_eq!(
        kinds,
        [
            "task.created",
            "lease.acquired",
            "checkpoint.created",
            "lease.renewed",
            "handoff.offered",
            "handoff.accepted",
            "checkpoint.created",
            "task.completed"
        ]
    );
    drafter.cancel().await.ok();
    reviewer.cancel().await.ok();
}

#[tokio::test]
async fn the_same_key_over_rest_and_mcp_is_one_request() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "mcp-keys", 1).await;
    let who = &c.members[0];
    let client = connect(&app, who).await;

    // REST first, then MCP: the tool replays the REST result.
    let t = task(&app, who, c.orbit, "one acquire").await;
    let k = key();
    let rest = app
        .post_with_key(
            &format!("/api/v1/tasks/{t}/leases"),
            &who.token,
            &k,
            json!({"duration_seconds": 600}),
        )
        .await;
    assert_eq!(rest.status, 201, "{}", rest.text);
    let r = call(
        &client,
        "acquire_lease",
        json!({"task_id": t, "duration_seconds": 600, "idempotency_key": k}),
    )
    .await;
    assert_eq!(ok(&r), rest.json, "the same request: the same result");
    let leases = app.get(&format!("/api/v1/tasks/{t}/leases"), None).await;
    assert_eq!(leases.json["data"].as_array().unwrap().len(), 1);
    // The same key with other input is another intent.
    let r = call(
        &client,
        "acquire_lease",
        json!({"task_id": t, "duration_seconds": 700, "idempotency_key": k}),
    )
    .await;
    refused(&r, 409, "idempotency_key_reused", "new_key_for_new_intent");

    // MCP first, then REST: the header replays the tool's result, byte for byte.
    let k = key();
    let created = call(
        &client,
        "create_task",
        json!({"orbit": c.orbit, "title": "made over MCP", "idempotency_key": k}),
    )
    .await;
    let created = ok(&created);
    let rest = app
        .post_with_key(
            "/api/v1/orbits/mcp-keys/tasks",
            &who.token,
            &k,
            json!({"title": "made over MCP"}),
        )
        .await;
    assert_eq!(rest.status, 201, "{}", rest.text);
    assert_eq!(rest.header("idempotency-replayed"), Some("true"));
    assert_eq!(rest.json, created);

    // A lease refusal names its recovery; the key is required as over REST.
    let r = call(
        &client,
        "acquire_lease",
        json!({"task_id": t, "idempotency_key": key()}),
    )
    .await;
    let s = refused(&r, 409, "lease_already_held", "renew_instead");
    assert!(s["details"]["lease_id"].is_i64());
    let r = call(&client, "acquire_lease", json!({"task_id": t})).await;
    refused(&r, 422, "idempotency_key_required", "fix_input");
    let r = call(
        &client,
        "acquire_lease",
        json!({"task_id": t, "duration_seconds": "long", "idempotency_key": key()}),
    )
    .await;
    let s = refused(&r, 422, "validation_failed", "fix_input");
    assert!(s["errors"]["duration_seconds"].is_array(), "{s}");
    client.cancel().await.ok();
}

#[tokio::test]
async fn a_non_member_is_refused_with_not_permitted() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "mcp-private", 1).await;
    let t = task(&app, &c.members[0], c.orbit, "members only").await;
    let outsider = app.agent("mcp-outsider").await;
    let client = connect(&app, &outsider).await;

    let r = call(
        &client,
        "acquire_lease",
        json!({"task_id": t, "idempotency_key": key()}),
    )
    .await;
    refused(&r, 403, "not_a_member", "not_permitted");
    let r = call(&client, "find_work", json!({"orbit": "mcp-private"})).await;
    refused(&r, 403, "not_a_member", "not_permitted");
    let r = call(
        &client,
        "write_memory",
        json!({"orbit": c.orbit, "content": "hello"}),
    )
    .await;
    refused(&r, 403, "not_a_member", "not_permitted");
    let r = call(&client, "get_task", json!({"task_id": 999_999})).await;
    refused(&r, 404, "not_found", "not_found");
    // Nothing was written in the orbit by the outsider.
    let changes = app
        .get(&format!("/api/v1/orbits/{}/changes", c.orbit), None)
        .await;
    assert!(changes.json["data"]
        .as_array()
        .unwrap()
        .iter()
        .all(|ch| ch["contributor"]["id"] != outsider.id));

    // Joining makes the same call work.
    ok(&call(&client, "join_orbit", json!({"orbit": "mcp-private"})).await);
    let r = call(&client, "join_orbit", json!({"orbit": "mcp-private"})).await;
    refused(&r, 409, "already_member", "continue");
    let r = call(
        &client,
        "acquire_lease",
        json!({"task_id": t, "idempotency_key": key()}),
    )
    .await;
    assert_eq!(ok(&r)["data"]["lease_version"], 1);
    client.cancel().await.ok();
}

/// `task_closed` keeps its reaction (`stop_and_report`, issue 11) but not the lease
/// codes' neutral words: an acquirer never held a lease, so the refusal says the
/// task is closed (until 2026-12-05: "Your lease no longer lets you work on this
/// task"). A lease code says its fact and no way around the fence (until
/// 2026-12-06 every one said "Your lease no longer lets you work on this task", to
/// a caller who never held the lease too).
#[tokio::test]
async fn acquiring_a_closed_task_says_the_task_is_closed() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "mcp-closed", 1).await;
    let t = task(&app, &c.owner, c.orbit, "soon cancelled").await;
    let r = app
        .post_keyed(
            &format!("/api/v1/tasks/{t}/cancel"),
            &c.owner.token,
            json!({}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let client = connect(&app, &c.members[0]).await;
    let r = call(
        &client,
        "acquire_lease",
        json!({"task_id": t, "idempotency_key": key()}),
    )
    .await;
    let s = refused(&r, 409, "task_closed", "stop_and_report");
    let message = s["message"].as_str().unwrap();
    assert!(message.contains("closed"), "{message}");
    assert!(!message.contains("lease"), "{message}");
    assert_eq!(s["details"]["status"], "CANCELLED", "{s}");
    // A lease code keeps the neutral words.
    let t2 = task(&app, &c.owner, c.orbit, "held elsewhere").await;
    let (_, v) = lease(&app, &c.owner, t2, 900).await;
    let r = call(
        &client,
        "write_checkpoint",
        json!({"task_id": t2, "lease_version": v, "summary": "s", "state": {},
               "idempotency_key": key()}),
    )
    .await;
    let s = refused(&r, 409, "lease_not_held", "stop_and_report");
    assert_eq!(
        s["message"],
        "This lease is not yours (lease_not_held). Stop working on this task and report \
         what you have.",
        "{s}"
    );
    client.cancel().await.ok();
}

/// A tool whose REST route ignores the Idempotency-Key header has no
/// `idempotency_key` in its schema; one sent is refused like any argument the tool
/// does not take (until 2026-12-06 it was dropped unseen, and an agent could believe
/// its retry was protected), and nothing is done.
#[tokio::test]
async fn a_key_sent_to_a_tool_that_takes_none_is_refused() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "mcp-nokey", 1).await;
    let member = &c.members[0];
    let t = task(&app, member, c.orbit, "fenced").await;
    let (_, v) = crate::work::lease(&app, member, t, 900).await;
    let outsider = app.agent("mcp-nokey-outsider").await;
    let client = connect(&app, member).await;
    let stranger = connect(&app, &outsider).await;
    let calls = [
        (
            &client,
            "write_memory",
            json!({"orbit": c.orbit, "content": "hello", "idempotency_key": key()}),
        ),
        (
            &client,
            "check_fence",
            json!({"task_id": t, "lease_version": v, "idempotency_key": key()}),
        ),
        (
            &stranger,
            "join_orbit",
            json!({"orbit": c.orbit, "idempotency_key": key()}),
        ),
    ];
    for (who, tool, args) in calls {
        let r = call(who, tool, args).await;
        let s = refused(&r, 422, "validation_failed", "fix_input");
        assert_eq!(
            s["errors"]["idempotency_key"],
            json!(["is not an argument of this tool: it takes no idempotency_key"]),
            "{tool}: {s}"
        );
    }
    let memory = app
        .get(
            &format!("/api/v1/orbits/{}/memory", c.orbit),
            Some(&member.token),
        )
        .await;
    assert_eq!(memory.json["data"], json!([]), "{}", memory.text);
    let members = app
        .get(&format!("/api/v1/orbits/{}/members", c.orbit), None)
        .await;
    assert_eq!(
        members.json["data"].as_array().unwrap().len(),
        2,
        "{}",
        members.text
    );
    // Without the key the same calls work; a null key is no key, as elsewhere.
    ok(&call(
        &client,
        "write_memory",
        json!({"orbit": c.orbit, "content": "hello", "idempotency_key": null}),
    )
    .await);
    ok(&call(
        &client,
        "check_fence",
        json!({"task_id": t, "lease_version": v}),
    )
    .await);
    ok(&call(&stranger, "join_orbit", json!({"orbit": c.orbit})).await);
    // A read tool lists a value out of range beside another's type problem, as its
    // REST route does.
    let r = call(
        &client,
        "list_tasks",
        json!({"orbit": c.orbit, "status": "x", "limit": 0}),
    )
    .await;
    let s = refused(&r, 422, "validation_failed", "fix_input");
    assert!(
        s["errors"]["status"].is_array() && s["errors"]["limit"].is_array(),
        "{s}"
    );
    client.cancel().await.ok();
    stranger.cancel().await.ok();
}

/// A `null` argument is a left-out one: tool-calling clients send every optional
/// argument, `null` when unused. `duration_seconds: null` is the default 900 (a
/// REST body's `null` there is 422), `to_contributor_id: null` an open handoff, and
/// a required argument sent as `null` "is required".
#[tokio::test]
async fn a_null_argument_is_left_out() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "mcp-nulls", 1).await;
    let member = &c.members[0];
    let t = task(&app, &c.owner, c.orbit, "nulls").await;
    let client = connect(&app, member).await;
    let r = call(
        &client,
        "acquire_lease",
        json!({"task_id": t, "duration_seconds": null, "idempotency_key": key()}),
    )
    .await;
    let lease = ok(&r)["data"].clone();
    let acquired =
        chrono::DateTime::parse_from_rfc3339(lease["acquired_at"].as_str().unwrap()).unwrap();
    let expires =
        chrono::DateTime::parse_from_rfc3339(lease["expires_at"].as_str().unwrap()).unwrap();
    assert_eq!((expires - acquired).num_seconds(), 900, "{lease}");
    let r = call(
        &client,
        "write_checkpoint",
        json!({"task_id": t, "lease_version": null, "summary": "s", "state": {},
               "idempotency_key": key()}),
    )
    .await;
    let s = refused(&r, 422, "validation_failed", "fix_input");
    assert_eq!(s["errors"]["lease_version"], json!(["is required"]), "{s}");
    client.cancel().await.ok();
}

/// A refusal over MCP counts in `/metrics` as the same refusal over REST does
/// (contract section 12: lease and idempotency conflicts): a fleet of agents on
/// MCP must not look conflict-free.
#[tokio::test]
async fn mcp_refusals_count_in_the_metrics_like_rest_ones() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "mcp-metrics", 2).await;
    let t = task(&app, &c.owner, c.orbit, "contested").await;
    lease(&app, &c.members[0], t, 600).await;
    let client = connect(&app, &c.members[1]).await;
    let names = [
        "orbit_lease_conflicts_total",
        "orbit_idempotency_conflicts_total",
    ];
    let before = app.metrics(names).await;
    let r = call(
        &client,
        "acquire_lease",
        json!({"task_id": t, "idempotency_key": "contested-1"}),
    )
    .await;
    refused(&r, 409, "lease_conflict", "choose_other_task");
    let create =
        |title: &str| json!({"orbit": c.orbit, "title": title, "idempotency_key": "one-task"});
    ok(&call(&client, "create_task", create("first")).await);
    let r = call(&client, "create_task", create("another")).await;
    refused(&r, 409, "idempotency_key_reused", "new_key_for_new_intent");
    let after = app.metrics(names).await;
    assert_eq!([after[0] - before[0], after[1] - before[1]], [1, 1]);
}

/// A checkpoint's `state` is any JSON, `null` included, over MCP as over REST: an
/// agent resuming from a checkpoint whose state is `null` can write it back. (Every
/// other `null` argument is one left out: `duration_seconds: null` is the default.)
#[tokio::test]
async fn a_null_state_is_a_state_over_mcp_too() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "mcp-null-state", 1).await;
    let agent = &c.members[0];
    let t = task(&app, &c.owner, c.orbit, "t").await;
    let client = connect(&app, agent).await;
    let leased = ok(&call(
        &client,
        "acquire_lease",
        json!({"task_id": t, "duration_seconds": null, "idempotency_key": key()}),
    )
    .await);
    let v = leased["data"]["lease_version"].as_i64().unwrap();
    let saved = ok(&call(
        &client,
        "write_checkpoint",
        json!({"task_id": t, "lease_version": v, "summary": "nothing yet", "state": null,
               "idempotency_key": key()}),
    )
    .await);
    assert_eq!(saved["data"]["state"], Value::Null, "{saved}");
    let id = saved["data"]["id"].as_i64().unwrap();
    let r = app.get(&format!("/api/v1/checkpoints/{id}"), None).await;
    assert!(
        r.json["data"].as_object().unwrap().contains_key("state"),
        "{}",
        r.text
    );
    assert_eq!(r.json["data"]["state"], Value::Null, "{}", r.text);
    // Left out, it is still required.
    let r = call(
        &client,
        "write_checkpoint",
        json!({"task_id": t, "lease_version": v, "summary": "s", "idempotency_key": key()}),
    )
    .await;
    let s = refused(&r, 422, "validation_failed", "fix_input");
    assert_eq!(s["errors"]["state"], json!(["is required"]), "{s}");
}
