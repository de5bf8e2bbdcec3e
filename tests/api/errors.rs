//! Every error path answers with the JSON envelope `{message, code, errors?,
//! details?}` (contract section 2), including the failures actix produces itself.

use reqwest::Method;
use serde_json::json;

use crate::harness::TestApp;

const JSON: (&str, &str) = ("content-type", "application/json");

/// How many orbits the database holds.
fn orbits_stored(app: &TestApp) -> i64 {
    crate::harness::sql_i64(&mut app.db.conn(), "SELECT count(*) AS n FROM orbits")
}

#[tokio::test]
async fn malformed_json_is_422_in_the_envelope() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    let bodies: [&[u8]; 7] = [
        br#"{"slug": "x", "name": "#,
        b"not json at all",
        b"{\"slug\": \"x\",}",
        b"\xff\xfe",
        b"[1, 2]",
        b"\"a string\"",
        b"null",
    ];
    for body in bodies {
        let r = app
            .post_raw("/api/v1/orbits", Some(&a.token), &[JSON], body.to_vec())
            .await;
        r.assert_envelope(422);
    }
    let r = app
        .post_raw("/api/v1/contributors", None, &[JSON], b"{".to_vec())
        .await;
    r.assert_error(422, "malformed_json");
    assert_eq!(orbits_stored(&app), 0);
}

/// A body nested deeper than 127 levels is valid JSON the service does not read:
/// 422 `validation_failed` on `body` in plain words (not the parser's "recursion
/// limit"), and nothing is written; 127 levels are read.
#[tokio::test]
async fn a_body_nested_too_deep_is_422_in_plain_words() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    // `levels` counts the body's own object.
    let nested = |levels: usize| {
        format!(
            r#"{{"slug": "deep", "name": "x", "description": {}"d"{}}}"#,
            "[".repeat(levels - 1),
            "]".repeat(levels - 1)
        )
        .into_bytes()
    };
    let r = app
        .post_raw("/api/v1/orbits", Some(&a.token), &[JSON], nested(127))
        .await;
    r.assert_error(422, "validation_failed");
    assert_eq!(
        r.json["errors"]["description"],
        json!(["must be a string"]),
        "{}",
        r.text
    );
    let r = app
        .post_raw("/api/v1/orbits", Some(&a.token), &[JSON], nested(128))
        .await;
    r.assert_error(422, "validation_failed");
    assert_eq!(
        r.json["errors"]["body"],
        json!(["nests arrays and objects more than 127 levels deep"]),
        "{}",
        r.text
    );
    assert_eq!(orbits_stored(&app), 0);
}

#[tokio::test]
async fn a_body_without_a_json_content_type_is_422() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    let body = br#"{"slug": "typed", "name": "n"}"#.to_vec();
    for headers in [
        vec![("content-type", "text/plain")],
        vec![("content-type", "application/x-www-form-urlencoded")],
        vec![],
    ] {
        let r = app
            .post_raw("/api/v1/orbits", Some(&a.token), &headers, body.clone())
            .await;
        r.assert_envelope(422);
    }
    let r = app
        .post_raw(
            "/api/v1/contributors",
            None,
            &[("content-type", "text/plain")],
            br#"{"type": "AGENT", "name": "n"}"#.to_vec(),
        )
        .await;
    r.assert_error(422, "unsupported_content_type");
    // With a charset parameter it is still JSON.
    let r = app
        .post_raw(
            "/api/v1/orbits",
            Some(&a.token),
            &[("content-type", "application/json; charset=utf-8")],
            body,
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
}

#[tokio::test]
async fn an_unknown_body_field_is_422_naming_it() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    let r = app
        .post(
            "/api/v1/orbits",
            &a.token,
            json!({"slug": "extra", "name": "n", "owner": 1}),
        )
        .await;
    r.assert_error(422, "validation_failed");
    assert!(r.json["errors"]["owner"].is_array(), "{}", r.text);
    let r = app
        .register(json!({"type": "AGENT", "name": "n", "admin": true}))
        .await;
    r.assert_error(422, "validation_failed");
    assert!(r.json["errors"]["admin"].is_array(), "{}", r.text);
}

#[tokio::test]
async fn a_missing_or_mistyped_field_is_422_naming_it() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    let r = app
        .post("/api/v1/orbits", &a.token, json!({"slug": "missing"}))
        .await;
    r.assert_error(422, "validation_failed");
    assert!(r.json["errors"]["name"].is_array(), "{}", r.text);
    // An absent body is `{}`: every required field is missing.
    let r = app.post_empty("/api/v1/orbits", &a.token).await;
    r.assert_error(422, "validation_failed");
    let r = app
        .post("/api/v1/orbits", &a.token, json!({"slug": 5, "name": "n"}))
        .await;
    r.assert_error(422, "validation_failed");
    assert!(r.json["errors"]["slug"].is_array(), "{}", r.text);
    let r = app.register(json!({"name": "n"})).await;
    r.assert_error(422, "validation_failed");
    assert!(r.json["errors"]["type"].is_array(), "{}", r.text);
}

#[tokio::test]
async fn a_bad_path_parameter_is_422() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    app.orbit(&a, "paths").await;
    let r = app.delete("/api/v1/me/tokens/abc", &a.token).await;
    r.assert_envelope(422);
    // In plain words, naming the parameter (not "Path deserialize error: ...").
    assert_eq!(
        r.json["message"],
        "`token_id` in the path must be a positive whole number below 2^63 in plain digits, not \"abc\".",
        "{}",
        r.text
    );
    let r = app
        .delete("/api/v1/me/tokens/99999999999999999999999", &a.token)
        .await;
    r.assert_envelope(422);
    let r = app
        .put(
            "/api/v1/orbits/paths/members/abc",
            &a.token,
            json!({"role": "CONTRIBUTOR"}),
        )
        .await;
    r.assert_envelope(422);
    let r = app
        .delete("/api/v1/orbits/paths/members/1.5", &a.token)
        .await;
    r.assert_envelope(422);
    // Ids are positive (the OpenAPI document's `minimum: 1`): zero and a negative
    // number are the same 422 as over MCP, not a lookup's 404.
    for path in [
        "/api/v1/tasks/0",
        "/api/v1/leases/-1",
        "/api/v1/contributions/1/revisions/0",
        // One URL for one resource, as for an orbit's id: plain digits only.
        "/api/v1/tasks/01",
        "/api/v1/tasks/%2B1",
        "/api/v1/contributions/1/revisions/007",
    ] {
        let r = app.get(path, Some(&a.token)).await;
        assert_eq!(r.assert_envelope(422), "invalid_path", "{path}: {}", r.text);
        assert!(
            r.json["message"]
                .as_str()
                .is_some_and(|m| m.contains("must be a positive whole number")),
            "{path}: {}",
            r.text
        );
    }
    let client = crate::mcp::connect(&app, &a).await;
    for (tool, args, field) in [
        ("get_task", json!({"task_id": 0}), "task_id"),
        ("get_lease", json!({"lease_id": -1}), "lease_id"),
        // A string id is read as a path's is: plain digits, no sign or leading zero.
        ("get_task", json!({"task_id": "01"}), "task_id"),
        ("get_lease", json!({"lease_id": "+1"}), "lease_id"),
        (
            "get_revision",
            json!({"contribution_id": 1, "revision": 0}),
            "revision",
        ),
    ] {
        let r = crate::mcp::call(&client, tool, args).await;
        let s = crate::mcp::refused(&r, 422, "validation_failed", "fix_input");
        assert_eq!(
            s["errors"][field],
            json!(["must be a positive integer id"]),
            "{tool}: {s}"
        );
    }
    // An orbit reference no orbit can have, as search and a webhook refuse it.
    for orbit in [json!(""), json!("o".repeat(64)), json!("a\u{0}b"), json!(0)] {
        let r = crate::mcp::call(&client, "get_orbit", json!({ "orbit": orbit })).await;
        let s = crate::mcp::refused(&r, 422, "validation_failed", "fix_input");
        assert_eq!(
            s["errors"]["orbit"],
            json!(["must be an orbit id or slug"]),
            "{orbit}: {s}"
        );
    }
}

#[tokio::test]
async fn a_bad_query_parameter_is_422() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    for path in [
        "/api/v1/orbits?limit=abc",
        "/api/v1/orbits?limit=0",
        "/api/v1/orbits?limit=101",
        "/api/v1/orbits?after=-5",
        "/api/v1/orbits?after=",
        "/api/v1/orbits?unknown=1",
        "/api/v1/me/tokens?limit=abc",
    ] {
        let r = app.get(path, Some(&a.token)).await;
        let code = r.assert_envelope(422);
        assert_eq!(code, "validation_failed", "{path}: {}", r.text);
        assert!(r.json["errors"].is_object(), "{path}: {}", r.text);
    }
    let r = app.get("/api/v1/orbits?limit=0", None).await;
    assert!(r.json["errors"]["limit"].is_array(), "{}", r.text);
    // Every bad parameter at once: a value out of range beside another's type
    // problem, and both ends of the page (until 2026-12-06 the first one only).
    let orbit = app.orbit(&a, "all-at-once").await;
    for (list, query, fields) in [
        ("tasks", "status=x&limit=0", vec!["limit", "status"]),
        ("tasks", "after=-1&limit=0", vec!["after", "limit"]),
        (
            "tasks",
            "leased=maybe&after=-1&limit=500",
            vec!["after", "leased", "limit"],
        ),
        (
            "contributions",
            "problem_id=0&task_id=-3",
            vec!["problem_id", "task_id"],
        ),
        ("contributions", "kind=x&limit=0", vec!["kind", "limit"]),
    ] {
        let r = app
            .get(&format!("/api/v1/orbits/{orbit}/{list}?{query}"), None)
            .await;
        r.assert_error(422, "validation_failed");
        let named: Vec<&str> = r.json["errors"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(named, fields, "{list}?{query}: {}", r.text);
    }
    let r = app
        .get(
            "/api/v1/orbits/all-at-once/changes?after=-1&limit=0&wait=99",
            None,
        )
        .await;
    assert_eq!(
        r.json["errors"].as_object().map(|e| e.len()),
        Some(3),
        "{}",
        r.text
    );
}

#[tokio::test]
async fn an_unknown_route_is_404_in_the_envelope() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    for path in [
        "/nope",
        "/api/v1/nope",
        "/api/v2/orbits",
        "/api/v1/orbits/x/y/z",
        "/api/v1/",
    ] {
        let r = app.get(path, None).await;
        r.assert_error(404, "not_found");
        let r = app.post(path, &a.token, json!({})).await;
        r.assert_error(404, "not_found");
    }
}

#[tokio::test]
async fn a_wrong_method_is_405_with_allow() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    for (method, path, allowed) in [
        (
            Method::DELETE,
            "/api/v1/orbits",
            vec!["GET", "HEAD", "POST"],
        ),
        (Method::PATCH, "/api/v1/me", vec!["GET", "HEAD"]),
        (Method::PUT, "/api/v1/contributors", vec!["POST"]),
        (Method::GET, "/api/v1/me/tokens/1", vec!["DELETE"]),
        (
            Method::POST,
            "/api/v1/orbits/x/members/1",
            vec!["PUT", "DELETE"],
        ),
        (Method::GET, "/api/v1/orbits/x/join", vec!["POST"]),
    ] {
        let r = app
            .send(method.clone(), path, Some(&a.token), None, None)
            .await;
        r.assert_error(405, "method_not_allowed");
        let allow = r
            .header("allow")
            .unwrap_or_else(|| panic!("{method} {path}: 405 without Allow"));
        let mut got: Vec<&str> = allow.split(',').map(str::trim).collect();
        got.sort_unstable();
        let mut want = allowed.clone();
        want.sort_unstable();
        assert_eq!(got, want, "{method} {path}");
    }
}

#[tokio::test]
async fn a_body_over_256_kib_is_413_in_the_envelope() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    let big = format!(
        r#"{{"slug": "big", "name": "n", "description": "{}"}}"#,
        "x".repeat(300 * 1024)
    );
    let r = app
        .post_raw("/api/v1/orbits", Some(&a.token), &[JSON], big.into_bytes())
        .await;
    r.assert_error(413, "payload_too_large");
    assert_eq!(orbits_stored(&app), 0);
}

#[tokio::test]
async fn a_missing_token_on_a_write_is_401_in_the_envelope() {
    let app = TestApp::spawn().await;
    let r = app
        .send(
            Method::POST,
            "/api/v1/orbits",
            None,
            None,
            Some(json!({"slug": "anon", "name": "n"})),
        )
        .await;
    r.assert_error(401, "unauthorized");
    assert!(r
        .header("www-authenticate")
        .is_some_and(|h| h.starts_with("Bearer")));
}

/// Contract section 2: 401 → 404 → 403 → 422 → idempotency → the handler's 409s.
#[tokio::test]
async fn a_bad_body_never_hides_401_404_or_403() {
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    let outsider = app.agent("outsider").await;
    let orbit = app.orbit(&owner, "precedence").await;
    let task = app
        .post_keyed(
            &format!("/api/v1/orbits/{orbit}/tasks"),
            &owner.token,
            json!({"title": "t"}),
        )
        .await
        .json["data"]["id"]
        .as_i64()
        .unwrap();
    let bad = json!({"unknown_field": true});
    let (tasks, leases) = (
        format!("/api/v1/orbits/{orbit}/tasks"),
        format!("/api/v1/tasks/{task}/leases"),
    );
    let checkpoints = format!("/api/v1/tasks/{task}/checkpoints");
    let (owner, outsider) = (Some(owner.token.as_str()), Some(outsider.token.as_str()));
    let role = json!({"role": "KING"});
    #[rustfmt::skip]
    let cases = [
        // No token: 401, whatever the body.
        (Method::POST, "/api/v1/orbits", None, None, &bad, 401, "unauthorized"),
        (Method::POST, &leases, None, Some("k"), &bad, 401, "unauthorized"),
        // Unknown objects: 404 before the body is judged.
        (Method::POST, "/api/v1/tasks/999999/leases", owner, Some("k"), &bad, 404, "not_found"),
        (Method::PUT, "/api/v1/orbits/nope/members/1", owner, None, &role, 404, "not_found"),
        (Method::POST, "/api/v1/handoffs/999999/accept", owner, Some("k"), &bad, 404, "not_found"),
        // Not a member: 403 before the body is judged.
        (Method::POST, &checkpoints, outsider, Some("k"), &bad, 403, "not_a_member"),
        (Method::POST, &tasks, outsider, Some("k"), &bad, 403, "not_a_member"),
        // A member with a bad body and no key: 422 for the body before the key.
        (Method::POST, &leases, owner, None, &bad, 422, "validation_failed"),
    ];
    for (method, path, token, key, body, status, code) in cases {
        app.send(method, path, token, key, Some(body.clone()))
            .await
            .assert_error(status, code);
    }
}

/// A path or query parameter that does not parse is judged before the handler runs,
/// but its 422 never hides a 401: no token on a route that needs one, or a token
/// that is not valid (well-formed, unknown or revoked). A public route without a
/// token, or a valid token, still gets the 422. Until 2026-12-06 the 422 came first.
#[tokio::test]
async fn a_bad_path_or_query_parameter_never_hides_401() {
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "param-precedence").await;
    let revoked = app.agent("revoked").await;
    let tokens = app.get("/api/v1/me/tokens", Some(&revoked.token)).await;
    let id = tokens.json["data"][0]["id"].as_i64().expect("a token id");
    let r = app
        .send(
            Method::DELETE,
            &format!("/api/v1/me/tokens/{id}"),
            Some(&revoked.token),
            None,
            None,
        )
        .await;
    assert!(r.status.is_success(), "{}", r.text);
    // Well-formed, never issued: the owner's token with its secret changed.
    let unknown = {
        let mut t = owner.token.clone();
        let last = t.pop().unwrap();
        t.push(if last == 'A' { 'B' } else { 'A' });
        t
    };
    let bad_query = "/api/v1/handoffs?box=bogus";
    let bad_limit = "/api/v1/me/tokens?limit=0";
    let bad_path = "/api/v1/leases/abc/renew";
    let public_bad_query = format!("/api/v1/orbits/{orbit}/tasks?limit=0");
    let public_bad_path = "/api/v1/tasks/abc";
    #[rustfmt::skip]
    let cases: [(Method, &str, Option<&str>, u16); 14] = [
        (Method::GET, bad_query, None, 401),
        (Method::GET, bad_query, Some(&unknown), 401),
        (Method::GET, bad_query, Some(&revoked.token), 401),
        (Method::GET, bad_query, Some(&owner.token), 422),
        (Method::GET, bad_limit, None, 401),
        (Method::GET, bad_limit, Some(&owner.token), 422),
        (Method::POST, bad_path, None, 401),
        (Method::POST, bad_path, Some(&unknown), 401),
        (Method::POST, bad_path, Some(&owner.token), 422),
        // Public reads: without a token the 422; a bad token is still 401.
        (Method::GET, &public_bad_query, None, 422),
        (Method::GET, &public_bad_query, Some(&unknown), 401),
        (Method::GET, public_bad_path, None, 422),
        (Method::GET, public_bad_path, Some(&revoked.token), 401),
        (Method::GET, public_bad_path, Some(&owner.token), 422),
    ];
    for (i, (method, path, token, status)) in cases.into_iter().enumerate() {
        let r = app
            .send(method.clone(), path, token, Some("k-1"), None)
            .await;
        assert_eq!(r.status, status, "case {i}: {method} {path}: {}", r.text);
        let code = r.assert_envelope(status);
        assert_eq!(
            code,
            match status {
                401 => "unauthorized",
                _ if path.contains("abc") => "invalid_path",
                _ => "validation_failed",
            },
            "{method} {path} ({}): {}",
            token.map_or("no token", |_| "a token"),
            r.text
        );
        if status == 401 {
            assert!(r.header("www-authenticate").is_some(), "{}", r.text);
        }
    }
}

/// Routes whose body has no fields (the caller's tokens and webhooks, contract
/// section 2) accept no body, an empty one and `{}`, and refuse any other body with
/// 422, changing nothing; the 401 and the 404 still come first. Until 2026-12-05
/// they ignored the body: a review minted tokens with `{not json` and
/// `{"bogus": 1}`.
#[tokio::test]
async fn routes_without_body_fields_refuse_a_bad_body_and_change_nothing() {
    use diesel::RunQueryDsl;
    let app = TestApp::spawn_with(|c| c.webhook_allow_private = true).await;
    let a = app.agent("a").await;
    let orbit = app.orbit(&a, "bodies").await;
    let hook = app
        .post(
            "/api/v1/me/webhooks",
            &a.token,
            json!({"orbit": orbit, "url": "http://127.0.0.1:9/hook"}),
        )
        .await;
    assert_eq!(hook.status, 201, "{}", hook.text);
    let hook = hook.json["data"]["id"].as_i64().unwrap();
    let spare = app.post_empty("/api/v1/me/tokens", &a.token).await;
    assert_eq!(spare.status, 201, "{}", spare.text);
    let spare_id = spare.json["data"]["token_id"].as_i64().unwrap();
    diesel::sql_query(format!(
        "UPDATE webhooks SET status = 'DISABLED', disabled_reason = 'test' WHERE id = {hook}"
    ))
    .execute(&mut app.db.conn())
    .unwrap();
    let tokens = |app: &TestApp| {
        crate::harness::sql_i64(
            &mut app.db.conn(),
            "SELECT count(*) AS n FROM tokens WHERE revoked_at IS NULL",
        )
    };
    let disabled_hooks = |app: &TestApp| {
        crate::harness::sql_i64(
            &mut app.db.conn(),
            "SELECT count(*) AS n FROM webhooks WHERE status = 'DISABLED'",
        )
    };
    let before = tokens(&app);
    let routes = [
        (Method::POST, "/api/v1/me/tokens".to_owned()),
        (Method::DELETE, format!("/api/v1/me/tokens/{spare_id}")),
        (Method::POST, format!("/api/v1/me/webhooks/{hook}/enable")),
        (Method::DELETE, format!("/api/v1/me/webhooks/{hook}")),
    ];
    type Headers<'a> = &'a [(&'a str, &'a str)];
    let bad: [(Headers, &[u8], &str); 4] = [
        (&[JSON], b"{not json", "malformed_json"),
        (&[JSON], b"[1]", ""),
        (&[JSON], br#"{"bogus": 1}"#, "validation_failed"),
        (
            &[("content-type", "text/plain")],
            b"{}",
            "unsupported_content_type",
        ),
    ];
    for (method, path) in &routes {
        for (headers, body, code) in bad {
            let r = app
                .send_raw(
                    method.clone(),
                    path,
                    Some(&a.token),
                    headers,
                    Some(body.to_vec()),
                )
                .await;
            if code.is_empty() {
                r.assert_envelope(422);
            } else {
                r.assert_error(422, code);
            }
        }
        // The 401 and the 404 before the body.
        let r = app
            .send_raw(method.clone(), path, None, &[JSON], Some(b"{x".to_vec()))
            .await;
        r.assert_error(401, "unauthorized");
    }
    for path in ["/api/v1/me/tokens/999999", "/api/v1/me/webhooks/999999"] {
        let r = app
            .send_raw(
                Method::DELETE,
                path,
                Some(&a.token),
                &[JSON],
                Some(b"{x".to_vec()),
            )
            .await;
        r.assert_error(404, "not_found");
    }
    assert_eq!(
        tokens(&app),
        before,
        "a refused request minted or revoked a token"
    );
    assert_eq!(
        disabled_hooks(&app),
        1,
        "a refused request enabled or deleted the hook"
    );
    // No body, an empty body and `{}` alike.
    let r = app
        .send_raw(
            Method::POST,
            "/api/v1/me/tokens",
            Some(&a.token),
            &[],
            Some(vec![]),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = app.post("/api/v1/me/tokens", &a.token, json!({})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = app
        .post(
            &format!("/api/v1/me/webhooks/{hook}/enable"),
            &a.token,
            json!({}),
        )
        .await;
    assert_eq!(r.json["data"]["status"], "ACTIVE", "{}", r.text);
    let r = app
        .delete(&format!("/api/v1/me/tokens/{spare_id}"), &a.token)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(tokens(&app), before + 1);
}
