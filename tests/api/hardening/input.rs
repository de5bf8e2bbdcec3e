//! Findings 2, 7 and 10 on what clients send: numbers a double cannot hold,
//! integral floats, malformed JSON-RPC and bad query parameters.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::harness::TestApp;

/// Finding 2: a number a double does not hold exactly is 422 in `state` and in
/// every other field; one it does hold is stored and returned as sent.
#[tokio::test]
async fn numbers_a_double_cannot_hold_are_refused_everywhere() {
    let app = TestApp::spawn().await;
    let c = crate::work::crew(&app, "numbers", 0).await;
    let t = crate::work::task(&app, &c.owner, c.orbit, "numbers").await;
    let (_, v) = crate::work::lease(&app, &c.owner, t, 300).await;
    let path = format!("/api/v1/tasks/{t}/checkpoints");
    let raw = |body: String, key: &str| {
        let key = key.to_owned();
        let app = &app;
        let path = path.clone();
        let token = c.owner.token.clone();
        async move {
            app.post_raw(
                &path,
                Some(&token),
                &[
                    ("content-type", "application/json"),
                    ("idempotency-key", &key),
                ],
                body.into_bytes(),
            )
            .await
        }
    };
    for bad in [
        "9007199254740993",
        "-9007199254740993",
        "0.12345678901234567890",
        "1e400",
        "1e-400",
    ] {
        let body = format!(r#"{{"lease_version": {v}, "summary": "s", "state": {{"n": {bad}}}}}"#);
        let r = raw(body, &uuid::Uuid::new_v4().to_string()).await;
        r.assert_error(422, "validation_failed");
        let problem = r.json["errors"]["state"][0].as_str().unwrap_or_default();
        assert!(
            problem.contains("cannot be kept exactly"),
            "{bad}: {}",
            r.text
        );
        // The field name is the schema's, never a key from inside `state`.
        assert!(r.json["errors"].get("n").is_none(), "{}", r.text);
    }
    // Outside `state` too: an integer field and the top level.
    let r = raw(
        r#"{"lease_version": 9007199254740993, "summary": "s", "state": {}}"#.to_owned(),
        "k-big-version",
    )
    .await;
    r.assert_error(422, "validation_failed");
    assert!(r.json["errors"]["lease_version"].is_array(), "{}", r.text);
    let r = app
        .post_raw(
            &format!("/api/v1/orbits/{}/memory", c.orbit),
            Some(&c.owner.token),
            &[("content-type", "application/json")],
            br#"{"content": "x", "tags": [], "extra": 0.12345678901234567890}"#.to_vec(),
        )
        .await;
    r.assert_error(422, "validation_failed");
    // The probe's replay: a near-miss number under a used key no longer replays.
    let body =
        format!(r#"{{"lease_version": {v}, "summary": "s", "state": {{"n": 9007199254740992}}}}"#);
    let r = raw(body, "k-replay").await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let body =
        format!(r#"{{"lease_version": {v}, "summary": "s", "state": {{"n": 9007199254740993}}}}"#);
    let r = raw(body, "k-replay").await;
    r.assert_error(422, "validation_failed");
    // A whole number a double holds is kept however it is written, and the way the
    // service writes it back is accepted back: `1e16` reads as 10000000000000000,
    // which is the same request (one canonical form) and replays.
    let body = format!(r#"{{"lease_version": {v}, "summary": "s", "state": {{"n": 1e16}}}}"#);
    let r = raw(body, "k-spelling").await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let id = r.json["data"]["id"].as_i64().expect("checkpoint id");
    let read = app.get(&format!("/api/v1/checkpoints/{id}"), None).await;
    assert!(
        read.text.contains(r#""state":{"n":10000000000000000}"#),
        "{}",
        read.text
    );
    let body =
        format!(r#"{{"lease_version": {v}, "summary": "s", "state": {{"n": 10000000000000000}}}}"#);
    let r = raw(body, "k-spelling").await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(r.json["data"]["id"].as_i64(), Some(id), "{}", r.text);
    // Long decimals that are the shortest form of their double come back as sent
    // (serde_json's default parser read these one step off the nearest double).
    let body = format!(
        r#"{{"lease_version": {v}, "summary": "s", "state": {{"a": 51.248178375505404, "b": -93.31137037688033, "c": 943.2678359191087, "d": 123456789012345680000}}}}"#
    );
    let r = raw(body.clone(), "k-long-decimals").await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let id = r.json["data"]["id"].as_i64().expect("checkpoint id");
    // A neighbouring double under the same key is another request: 409, no replay.
    let other = body.replace("943.2678359191087", "943.2678359191088");
    raw(other, "k-long-decimals")
        .await
        .assert_error(409, "idempotency_key_reused");
    let read = app.get(&format!("/api/v1/checkpoints/{id}"), None).await;
    assert!(
        read.text
            .contains(r#""state":{"a":51.248178375505404,"b":-93.31137037688033,"c":943.2678359191087,"d":123456789012345680000}"#),
        "{}",
        read.text
    );
    // In an integer field, a whole number an i64 cannot hold is out of range.
    let r = raw(
        r#"{"lease_version": 1e20, "summary": "s", "state": {}}"#.to_owned(),
        "k-out-of-range",
    )
    .await;
    r.assert_error(422, "validation_failed");
    assert_eq!(
        r.json["errors"]["lease_version"],
        json!(["is out of range"]),
        "{}",
        r.text
    );
    // Numbers a double holds are kept as the same values.
    let body = format!(
        r#"{{"lease_version": {v}, "summary": "s", "state": {{"a": 0.1, "b": 1e300, "c": 9007199254740991, "d": -2.5}}}}"#
    );
    let r = raw(body, "k-ok").await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let id = r.json["data"]["id"].as_i64().expect("checkpoint id");
    let r = app.get(&format!("/api/v1/checkpoints/{id}"), None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let state = &r.json["data"]["state"];
    assert_eq!(state["a"].as_f64(), Some(0.1), "{state}");
    assert_eq!(state["b"].as_f64(), Some(1e300), "{state}");
    assert_eq!(state["c"].as_i64(), Some(9_007_199_254_740_991), "{state}");
    assert_eq!(state["d"].as_f64(), Some(-2.5), "{state}");
}

/// Finding 10: an integral float is an integer, as JSON Schema says; a fraction
/// where an integer is expected is refused in plain words.
#[tokio::test]
async fn integral_floats_are_accepted_where_integers_are_expected() {
    let app = TestApp::spawn().await;
    let c = crate::work::crew(&app, "floats", 0).await;
    let t = crate::work::task(&app, &c.owner, c.orbit, "floats").await;
    let (lease, v) = crate::work::lease(&app, &c.owner, t, 300).await;
    let r = app
        .post_raw(
            &format!("/api/v1/tasks/{t}/fence"),
            Some(&c.owner.token),
            &[("content-type", "application/json")],
            format!(r#"{{"lease_version": {v}.0}}"#).into_bytes(),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = app
        .post_raw(
            &format!("/api/v1/leases/{lease}/renew"),
            Some(&c.owner.token),
            &[
                ("content-type", "application/json"),
                ("idempotency-key", "renew-float"),
            ],
            format!(r#"{{"lease_version": {v}.0, "duration_seconds": 6e2}}"#).into_bytes(),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = app
        .post_raw(
            &format!("/api/v1/tasks/{t}/fence"),
            Some(&c.owner.token),
            &[("content-type", "application/json")],
            format!(r#"{{"lease_version": {v}.5}}"#).into_bytes(),
        )
        .await;
    r.assert_error(422, "validation_failed");
    assert_eq!(
        r.json["errors"]["lease_version"][0], "must be a whole number",
        "{}",
        r.text
    );
}

/// Finding 10 over MCP: integral floats are integers in tool arguments too (ids,
/// query arguments and bodies).
#[tokio::test]
async fn integral_floats_are_integers_in_mcp_tool_arguments() {
    let app = TestApp::spawn().await;
    let c = crate::work::crew(&app, "mcp-floats", 0).await;
    let t = crate::work::task(&app, &c.owner, c.orbit, "floats").await;
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];
    for (id, name, arguments) in [
        (1, "get_task", json!({"task_id": t as f64})),
        (
            2,
            "read_changes",
            json!({"orbit": c.orbit as f64, "after": 0.0, "wait": 0.0}),
        ),
        (
            3,
            "acquire_lease",
            json!({"task_id": t as f64, "duration_seconds": 600.0,
                                    "idempotency_key": "mcp-float"}),
        ),
    ] {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": name, "arguments": arguments}});
        let r = app
            .post_raw(
                "/mcp",
                Some(&c.owner.token),
                &headers,
                serde_json::to_vec(&call).unwrap(),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        assert_eq!(r.json["result"]["isError"], false, "{name}: {}", r.text);
    }
}

/// Finding 7: malformed JSON-RPC on `/mcp` gets the JSON-RPC errors the
/// specification names, not the SDK's plain 415.
#[tokio::test]
async fn malformed_json_rpc_gets_the_json_rpc_parse_error() {
    let app = TestApp::spawn().await;
    let a = app.agent("rpc").await;
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];
    let r = app
        .post_raw("/mcp", Some(&a.token), &headers, b"{not json".to_vec())
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert_eq!(r.json["jsonrpc"], "2.0", "{}", r.text);
    assert_eq!(r.json["id"], serde_json::Value::Null, "{}", r.text);
    assert_eq!(r.json["error"]["code"], -32700, "{}", r.text);
    let r = app
        .post_raw(
            "/mcp",
            Some(&a.token),
            &headers,
            br#"{"id": 3, "hello": "world"}"#.to_vec(),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert_eq!(r.json["error"]["code"], -32600, "{}", r.text);
    assert_eq!(r.json["id"], 3, "{}", r.text);
    // A message nested past 127 levels: the parse error says the whole message
    // counts, arguments two levels in.
    let state = format!("{}{}", "[".repeat(125), "]".repeat(125));
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{{"name":"whoami","arguments":{{"state":{state}}}}}}}"#
    );
    let r = app
        .post_raw("/mcp", Some(&a.token), &headers, deep.into_bytes())
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert_eq!(r.json["error"]["code"], -32700, "{}", r.text);
    let message = r.json["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("127 levels") && message.contains("two levels inside"),
        "{message}"
    );
    // A JSON-RPC response or error sent to the server, which asked nothing: -32600
    // with `"id": null` (the SDK's own refusal had no `id` member at all).
    for message in [
        json!({"jsonrpc": "2.0", "id": 5, "result": {}}),
        json!({"jsonrpc": "2.0", "id": 6, "error": {"code": 1, "message": "x"}}),
    ] {
        let r = app
            .post_raw(
                "/mcp",
                Some(&a.token),
                &headers,
                serde_json::to_vec(&message).unwrap(),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
        assert_eq!(r.json["error"]["code"], -32600, "{}", r.text);
        assert!(r.json.get("id").is_some_and(Value::is_null), "{}", r.text);
    }
    // A tool call with a number a double does not hold: the tool's 422 refusal.
    let call = br#"{"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "read_changes", "arguments": {"orbit": "x", "after": 9007199254740993}}}"#;
    let r = app
        .post_raw("/mcp", Some(&a.token), &headers, call.to_vec())
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.json["id"], 7, "{}", r.text);
    assert_eq!(r.json["result"]["isError"], true, "{}", r.text);
    assert_eq!(
        r.json["result"]["structuredContent"]["status"], 422,
        "{}",
        r.text
    );
    assert!(
        r.json["result"]["structuredContent"]["errors"]["after"].is_array(),
        "{}",
        r.text
    );
    // A tools/call whose params do not fit: -32602 saying what they must be (the
    // SDK read it as an unknown method: -32601 "tools/call", until 2026-12-05).
    // In plain words that name the problem, not serde's (which names the SDK's types).
    for (params, problem) in [
        (
            json!({"name": "get_task", "arguments": [1]}),
            "`params.arguments` must be an object",
        ),
        (json!({"name": 5}), "`params.name` must be a string"),
        (json!({"arguments": {}}), "`params.name` is missing"),
        (Value::Null, "`params` is missing"),
    ] {
        let mut call = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call"});
        if !params.is_null() {
            call["params"] = params.clone();
        }
        let r = app
            .post_raw(
                "/mcp",
                Some(&a.token),
                &headers,
                serde_json::to_vec(&call).unwrap(),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{params}: {}", r.text);
        assert_eq!(r.json["id"], 8, "{}", r.text);
        assert_eq!(r.json["error"]["code"], -32602, "{params}: {}", r.text);
        let message = r.json["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("\"arguments\""), "{message}");
        assert!(message.contains(problem), "{params}: {message}");
        assert!(!message.contains("struct"), "{message}");
    }
    // The transport's own refusals have codes of their own, with the status the
    // guide's table gives them (until 2026-12-05 both were `bad_request`), in the
    // JSON-RPC form an MCP client shows (until 2026-12-06 the REST envelope).
    let r = app
        .post_raw(
            "/mcp",
            Some(&a.token),
            &[("content-type", "text/plain"), headers[1]],
            b"{}".to_vec(),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{}", r.text);
    crate::mcp::assert_transport_refusal(&r, 415, "unsupported_media_type", "fix_input");
    let ping = br#"{"jsonrpc": "2.0", "id": 9, "method": "ping"}"#;
    let r = app
        .post_raw("/mcp", Some(&a.token), &[headers[0]], ping.to_vec())
        .await;
    crate::mcp::assert_transport_refusal(&r, 406, "not_acceptable", "fix_input");
    // A well-formed message still reaches the SDK.
    let init = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}}
    });
    let r = app
        .post_raw(
            "/mcp",
            Some(&a.token),
            &headers,
            serde_json::to_vec(&init).unwrap(),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(r.json["result"]["serverInfo"].is_object(), "{}", r.text);
}

/// Finding 7: a query error is filed under a documented parameter name, never
/// under a value or a name the client sent.
#[tokio::test]
async fn query_error_fields_come_from_the_schema() {
    let app = TestApp::spawn().await;
    let a = app.agent("fields").await;
    for (path, field) in [
        ("/api/v1/handoffs?box=all", "box"),
        ("/api/v1/handoffs?box=inbox&status=SOMETIMES", "status"),
        ("/api/v1/orbits?limit=abc", "limit"),
        ("/api/v1/orbits?after=1&limit=x1", "limit"),
        ("/api/v1/orbits?made_up_zz=1", "query"),
    ] {
        let r = app.get(path, Some(&a.token)).await;
        r.assert_error(422, "validation_failed");
        let errors = r.json["errors"].as_object().expect("errors");
        assert_eq!(
            errors.keys().collect::<Vec<_>>(),
            vec![field],
            "{path}: {}",
            r.text
        );
    }
}

/// Contract section 17: every bad query parameter is reported at once, in plain
/// words, a missing required one too, and a made-up one only as `query`.
#[tokio::test]
async fn every_bad_query_parameter_is_reported_at_once() {
    let app = TestApp::spawn().await;
    let a = app.agent("all-at-once").await;
    let r = app
        .get("/api/v1/orbits?limit=abc&after=-x", Some(&a.token))
        .await;
    r.assert_error(422, "validation_failed");
    let errors = r.json["errors"].as_object().expect("errors");
    assert_eq!(
        errors.keys().collect::<Vec<_>>(),
        vec!["after", "limit"],
        "{}",
        r.text
    );
    assert_eq!(
        r.json["errors"]["limit"][0], "must be a whole number",
        "{}",
        r.text
    );
    // A whole number too big for the parameter is out of range, as in a body.
    let r = app
        .get("/api/v1/orbits?limit=99999999999999999999", Some(&a.token))
        .await;
    r.assert_error(422, "validation_failed");
    assert_eq!(
        r.json["errors"]["limit"],
        json!(["is out of range"]),
        "{}",
        r.text
    );
    let r = app
        .get(
            "/api/v1/handoffs?box=all&status=SOMETIMES&made_up_zz=1",
            Some(&a.token),
        )
        .await;
    r.assert_error(422, "validation_failed");
    let errors = r.json["errors"].as_object().expect("errors");
    assert_eq!(
        errors.keys().collect::<Vec<_>>(),
        vec!["box", "query", "status"],
        "{}",
        r.text
    );
    assert!(!r.text.contains("made_up_zz"), "{}", r.text);
}

/// A parameter given twice is named in plain words (not serde's "duplicate
/// field"), beside the problems of its first value and of the others; a made-up
/// one given twice is only "not a parameter", under `query`.
#[tokio::test]
async fn a_query_parameter_given_twice_is_named_in_plain_words() {
    let app = TestApp::spawn().await;
    let a = app.agent("twice").await;
    let r = app
        .get("/api/v1/orbits?limit=5&limit=6&after=-x", Some(&a.token))
        .await;
    r.assert_error(422, "validation_failed");
    assert_eq!(
        r.json["errors"]["limit"],
        json!(["is given more than once: give it once"]),
        "{}",
        r.text
    );
    assert!(r.json["errors"]["after"].is_array(), "{}", r.text);
    let r = app
        .get("/api/v1/orbits?limit=abc&limit=abc", Some(&a.token))
        .await;
    r.assert_error(422, "validation_failed");
    assert_eq!(
        r.json["errors"]["limit"],
        json!([
            "is given more than once: give it once",
            "must be a whole number"
        ]),
        "{}",
        r.text
    );
    // The first value's range is judged too.
    let r = app
        .get("/api/v1/orbits?limit=0&limit=0", Some(&a.token))
        .await;
    r.assert_error(422, "validation_failed");
    let words = r.json["errors"]["limit"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(words.len(), 2, "{}", r.text);
    assert_eq!(
        words[0], "is given more than once: give it once",
        "{}",
        r.text
    );
    let r = app
        .get("/api/v1/orbits?made_up_zz=1&made_up_zz=2", Some(&a.token))
        .await;
    r.assert_error(422, "validation_failed");
    assert_eq!(
        r.json["errors"],
        json!({"query": ["is not a parameter of this route"]}),
        "{}",
        r.text
    );
    assert!(!r.text.contains("duplicate"), "{}", r.text);
}

/// Contract section 17: a 422 lists every invalid field at once, also when an
/// enum field (`kind`, `verdict`) is missing or not one of its values (until
/// 2026-12-06 only that field was listed: the other fields' problems came one
/// round later). Nothing is written.
#[tokio::test]
async fn a_missing_or_unknown_enum_field_is_listed_beside_the_others() {
    let app = TestApp::spawn().await;
    let a = app.agent("enums").await;
    let orbit = app.orbit(&a, "enums").await;
    let errors_of = |r: &crate::harness::Resp| {
        r.assert_error(422, "validation_failed");
        let mut keys: Vec<String> = r.json["errors"]
            .as_object()
            .expect("errors")
            .keys()
            .cloned()
            .collect();
        keys.sort();
        keys
    };
    let create = format!("/api/v1/orbits/{orbit}/contributions");
    let r = app.post_keyed(&create, &a.token, json!({})).await;
    assert_eq!(errors_of(&r), ["body", "kind", "title"], "{}", r.text);
    let r = app
        .post_keyed(&create, &a.token, json!({"kind": "FOO", "title": ""}))
        .await;
    assert_eq!(errors_of(&r), ["body", "kind", "title"], "{}", r.text);
    assert!(
        r.json["errors"]["kind"][0]
            .as_str()
            .is_some_and(|w| w.starts_with("must be one of")),
        "{}",
        r.text
    );
    let made = app
        .post_keyed(
            &create,
            &a.token,
            json!({"kind": "NOTE", "title": "t", "body": "b"}),
        )
        .await;
    assert_eq!(made.status, 201, "{}", made.text);
    let id = made.json["data"]["id"].as_i64().unwrap();
    let assess = format!("/api/v1/contributions/{id}/revisions/1/assessments");
    let r = app.post_keyed(&assess, &a.token, json!({})).await;
    assert_eq!(errors_of(&r), ["rationale", "verdict"], "{}", r.text);
    let r = app
        .post(
            &assess,
            &a.token,
            json!({"verdict": "MAYBE", "rationale": ""}),
        )
        .await;
    assert_eq!(errors_of(&r), ["rationale", "verdict"], "{}", r.text);
    let changes = app
        .get(&format!("/api/v1/orbits/{orbit}/changes"), None)
        .await;
    assert_eq!(
        changes.json["data"].as_array().map(Vec::len),
        Some(2),
        "only the orbit and the one contribution: {}",
        changes.text
    );
}

/// A route that takes no query parameters refuses one as a route with parameters
/// refuses one it does not take (until 2026-12-06 it was ignored: `GET
/// /me?bogus=1` was 200), after the contract's 401; a write so refused writes
/// nothing.
#[tokio::test]
async fn a_query_parameter_on_a_route_that_takes_none_is_422() {
    let app = TestApp::spawn().await;
    let a = app.agent("stray").await;
    let orbit = app.orbit(&a, "stray").await;
    for path in [
        "/api/v1/me?bogus=1".to_owned(),
        format!("/api/v1/orbits/{orbit}?limit=5"),
        "/api/v1/me/webhooks/1/deliveries?limit=0".to_owned(),
    ] {
        let r = app.get(&path, Some(&a.token)).await;
        r.assert_error(422, "validation_failed");
        assert_eq!(
            r.json["errors"],
            json!({"query": ["is not a parameter of this route"]}),
            "{path}: {}",
            r.text
        );
    }
    // The path as actix routes it: `m%65` is `me`.
    let r = app.get("/api/v1/m%65?bogus=1", Some(&a.token)).await;
    r.assert_error(422, "validation_failed");
    // 401 first, on a route that needs a token; a public read is judged as is.
    app.get("/api/v1/me?bogus=1", None)
        .await
        .assert_error(401, "unauthorized");
    app.get(&format!("/api/v1/orbits/{orbit}?x=1"), None)
        .await
        .assert_error(422, "validation_failed");
    // A method the path does not serve is still its 405.
    let r = app
        .send_raw(
            reqwest::Method::DELETE,
            "/api/v1/me?bogus=1",
            Some(&a.token),
            &[],
            None,
        )
        .await;
    r.assert_error(405, "method_not_allowed");
    // No parameter at all is no problem, nor is an empty query string.
    for path in ["/api/v1/me", "/api/v1/me?"] {
        let r = app.get(path, Some(&a.token)).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text);
    }
    let r = app
        .post_keyed(
            &format!("/api/v1/orbits/{orbit}/tasks?title=x"),
            &a.token,
            json!({"title": "stray"}),
        )
        .await;
    r.assert_error(422, "validation_failed");
    let tasks = app
        .get(&format!("/api/v1/orbits/{orbit}/tasks"), None)
        .await;
    assert_eq!(tasks.json["data"], json!([]), "{}", tasks.text);
}

/// A key given twice in one object of a body is refused (422 on the body's field
/// it is in), over REST and in an MCP tool's arguments: JSON leaves its meaning
/// open, and until 2026-12-06 the last value won silently (a webhook was made on
/// the second `orbit` named). Nothing is written.
#[tokio::test]
async fn a_key_given_twice_in_a_body_is_refused() {
    let app = TestApp::spawn().await;
    let a = app.agent("twice-keys").await;
    let json_headers = [
        ("content-type", "application/json"),
        ("idempotency-key", "k1"),
    ];
    let r = app
        .post_raw(
            "/api/v1/orbits",
            Some(&a.token),
            &json_headers,
            br#"{"slug": "first-one", "name": "n", "slug": "second-one"}"#.to_vec(),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    assert_eq!(r.json["code"], "validation_failed", "{}", r.text);
    let why = r.json["errors"]["slug"][0].as_str().unwrap_or_default();
    assert!(
        why.contains("\"slug\" is given more than once"),
        "{}",
        r.text
    );
    // Inside a field's content: named by the field.
    let orbit = app.orbit(&a, "twice-keys").await;
    let task = app
        .post_keyed(
            &format!("/api/v1/orbits/{orbit}/tasks"),
            &a.token,
            json!({"title": "t"}),
        )
        .await;
    let task = task.json["data"]["id"].as_i64().unwrap();
    let lease = app
        .post_keyed(&format!("/api/v1/tasks/{task}/leases"), &a.token, json!({}))
        .await;
    assert_eq!(lease.status, StatusCode::CREATED, "{}", lease.text);
    let r = app
        .post_raw(
            &format!("/api/v1/tasks/{task}/checkpoints"),
            Some(&a.token),
            &json_headers,
            br#"{"lease_version": 1, "summary": "s", "state": {"a": 1, "a": 2}}"#.to_vec(),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    assert!(r.json["errors"]["state"].is_array(), "{}", r.text);
    // A tool's arguments: the tool's 422 refusal.
    let call = br#"{"jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"name": "get_orbit", "arguments": {"orbit": "x", "orbit": "twice-keys"}}}"#;
    let r = app
        .post_raw(
            "/mcp",
            Some(&a.token),
            &[
                ("content-type", "application/json"),
                ("accept", "application/json, text/event-stream"),
            ],
            call.to_vec(),
        )
        .await;
    assert_eq!(r.json["result"]["isError"], true, "{}", r.text);
    let refused = &r.json["result"]["structuredContent"];
    assert_eq!(refused["status"], 422, "{}", r.text);
    assert!(refused["errors"]["orbit"].is_array(), "{}", r.text);
    // Shaped as the SDK shapes every other result for these protocol versions.
    assert!(r.json["result"].get("resultType").is_none(), "{}", r.text);
    // Nothing was written: the orbit list holds only the one made above, and the
    // task has no checkpoint.
    let orbits = app.get("/api/v1/orbits", None).await;
    assert_eq!(orbits.json["data"].as_array().map(Vec::len), Some(1));
    let checkpoints = app
        .get(&format!("/api/v1/tasks/{task}/checkpoints"), None)
        .await;
    assert_eq!(checkpoints.json["data"], json!([]), "{}", checkpoints.text);
}

/// A body in a content coding is refused unread, over REST and MCP: until
/// 2026-12-07 `Content-Encoding` was ignored, so a gzip body was "not JSON"
/// (`malformed_json`, whose reaction resends it as it was) and an unknown coding
/// was read as plain bytes (a probe following every `recover` literally).
#[tokio::test]
async fn a_body_in_a_content_coding_is_refused_and_changes_nothing() {
    // gzip of `{"title": "zipped"}`.
    const ZIPPED: [u8; 39] = [
        31, 139, 8, 0, 0, 0, 0, 0, 2, 3, 171, 86, 42, 201, 44, 201, 73, 85, 178, 82, 80, 170, 202,
        44, 40, 72, 77, 81, 170, 5, 0, 163, 59, 10, 92, 19, 0, 0, 0,
    ];
    let app = TestApp::spawn().await;
    let a = app.agent("zipper").await;
    let orbit = app.orbit(&a, "zipped").await;
    let tasks = format!("/api/v1/orbits/{orbit}/tasks");
    let before = crate::work::orbit_revision(&app, orbit).await;
    for (coding, body) in [
        ("gzip", ZIPPED.to_vec()),
        ("GZIP", ZIPPED.to_vec()),
        ("identity, br", br#"{"title": "plain"}"#.to_vec()),
        ("x-unknown", br#"{"title": "plain"}"#.to_vec()),
    ] {
        let headers = [
            ("content-type", "application/json"),
            ("content-encoding", coding),
            ("idempotency-key", coding),
        ];
        let r = app.post_raw(&tasks, Some(&a.token), &headers, body).await;
        r.assert_error(422, "unsupported_content_encoding");
        assert!(r.text.contains("Send it uncompressed"), "{}", r.text);
    }
    assert_eq!(crate::work::orbit_revision(&app, orbit).await, before);
    // `identity` is no coding.
    let headers = [
        ("content-type", "application/json"),
        ("content-encoding", "Identity"),
        ("idempotency-key", "identity"),
    ];
    let r = app
        .post_raw(
            &tasks,
            Some(&a.token),
            &headers,
            br#"{"title": "plain"}"#.to_vec(),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    // An empty body is in no coding, whatever the header says: a route whose body
    // is optional takes it.
    let headers = [("content-encoding", "gzip")];
    let r = app
        .post_raw("/api/v1/me/tokens", Some(&a.token), &headers, Vec::new())
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    // MCP: the same refusal, in the JSON-RPC form its clients show.
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("content-encoding", "gzip"),
    ];
    let r = app
        .post_raw("/mcp", Some(&a.token), &headers, ZIPPED.to_vec())
        .await;
    crate::mcp::assert_transport_refusal(&r, 422, "unsupported_content_encoding", "fix_input");
}
