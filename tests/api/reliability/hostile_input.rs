//! Test 5 of docs/RELIABILITY.md. Hostile input (regression for what schemathesis
//! found; the fuzzing itself is scripts/schemathesis.sh): U+0000, which PostgreSQL
//! `text` cannot hold, is 422 in the envelope wherever it is sent, never a 500, and
//! nothing is written.

use orbit_commons::testkit::short_id;
use reqwest::Method;
use serde_json::{json, Value};

use crate::harness::{sql_i64, TestApp};
use crate::work::{checkpoint, crew, lease, task};

#[tokio::test]
async fn nul_characters_in_text_are_422_not_500() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "nul", 1).await;
    let (owner, member) = (&c.owner, &c.members[0]);
    let t = task(&app, owner, c.orbit, "plain").await;
    let (_, v) = lease(&app, owner, t, 900).await;
    let r = checkpoint(&app, owner, t, v, json!({"fine": "\u{0}"})).await;
    assert_eq!(
        r.status, 201,
        "a NUL inside free-form JSON state is fine: {}",
        r.text
    );
    let ckpt = r.json["data"]["id"].as_i64().unwrap();
    let before = sql_i64(&mut app.db.conn(), "SELECT count(*) AS n FROM changes");

    let nul = "a\u{0}b";
    // What is sent, the field its 422 names, the request, the token, the body.
    type Case<'a> = (
        &'a str,
        Option<&'a str>,
        Method,
        String,
        Option<&'a str>,
        Value,
    );
    let cases: Vec<Case> = vec![
        (
            "register name",
            Some("name"),
            Method::POST,
            "/api/v1/contributors".into(),
            None,
            json!({"type": "AGENT", "name": nul}),
        ),
        (
            "register model_claim",
            Some("model_claim"),
            Method::POST,
            "/api/v1/contributors".into(),
            None,
            json!({"type": "AGENT", "name": "x", "model_claim": nul}),
        ),
        (
            "orbit name",
            Some("name"),
            Method::POST,
            "/api/v1/orbits".into(),
            Some(&owner.token),
            json!({"slug": "nul-orbit", "name": nul}),
        ),
        (
            "orbit description",
            Some("description"),
            Method::POST,
            "/api/v1/orbits".into(),
            Some(&owner.token),
            json!({"slug": "nul-orbit", "name": "x", "description": nul}),
        ),
        (
            "task title",
            Some("title"),
            Method::POST,
            format!("/api/v1/orbits/{}/tasks", c.orbit),
            Some(&owner.token),
            json!({"title": nul}),
        ),
        (
            "task description",
            Some("description"),
            Method::POST,
            format!("/api/v1/orbits/{}/tasks", c.orbit),
            Some(&owner.token),
            json!({"title": "x", "description": nul}),
        ),
        (
            "checkpoint summary",
            Some("summary"),
            Method::POST,
            format!("/api/v1/tasks/{t}/checkpoints"),
            Some(&owner.token),
            json!({"lease_version": v, "summary": nul, "state": {}}),
        ),
        (
            "completion summary",
            Some("summary"),
            Method::POST,
            format!("/api/v1/tasks/{t}/complete"),
            Some(&owner.token),
            json!({"lease_version": v, "summary": nul}),
        ),
        (
            "handoff message",
            Some("message"),
            Method::POST,
            format!("/api/v1/tasks/{t}/handoffs"),
            Some(&owner.token),
            json!({"lease_version": v, "checkpoint_id": ckpt, "message": nul,
                   "to_contributor_id": member.id}),
        ),
        (
            "slug in the path",
            None,
            Method::GET,
            "/api/v1/orbits/a%00b".into(),
            None,
            Value::Null,
        ),
    ];
    for (what, field, method, path, token, body) in cases {
        let key = format!("nul-{}", short_id());
        let body = (!body.is_null()).then_some(body);
        let r = app.send(method, &path, token, Some(&key), body).await;
        assert!(
            r.status.as_u16() == 422 || (what == "slug in the path" && r.status.as_u16() == 404),
            "{what}: {} {}",
            r.status,
            r.text
        );
        r.assert_envelope(r.status.as_u16());
        if let Some(field) = field {
            assert_eq!(
                r.json["errors"][field],
                json!(["must not contain the character U+0000"]),
                "{what}: the 422 names its field: {}",
                r.text
            );
        }
    }
    let after = sql_i64(&mut app.db.conn(), "SELECT count(*) AS n FROM changes");
    assert_eq!(before, after, "a refused request wrote something");
    // The lease is still usable: nothing above ended it.
    let r = checkpoint(&app, owner, t, v, json!({"after": true})).await;
    assert_eq!(r.status, 201, "{}", r.text);
}

/// A NUL is a field problem like any other: 422 naming its field, ahead of the
/// handler's own 409s (contract section 2's precedence), and beside the body's other
/// problems. Until 2026-12-06 only some bodies checked for it; the rest reached
/// PostgreSQL, whose refusal came after the 409s and named no field.
#[tokio::test]
async fn a_nul_is_422_before_the_handlers_409s_and_named_with_the_others() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "nul-order", 0).await;
    let owner = &c.owner;
    let t = task(&app, owner, c.orbit, "to cancel").await;
    let (_, v) = lease(&app, owner, t, 900).await;
    let r = app
        .send(
            Method::POST,
            &format!("/api/v1/tasks/{t}/cancel"),
            Some(&owner.token),
            Some(&format!("k-{}", short_id())),
            Some(json!({"reason": "done with it"})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let before = sql_i64(&mut app.db.conn(), "SELECT count(*) AS n FROM changes");
    let cases: Vec<(&str, String, Value, &[&str])> = vec![
        (
            "cancel of a cancelled task",
            format!("/api/v1/tasks/{t}/cancel"),
            json!({"reason": "x\u{0}"}),
            &["reason"],
        ),
        (
            "checkpoint under an ended lease, a bad version beside",
            format!("/api/v1/tasks/{t}/checkpoints"),
            json!({"lease_version": "x", "summary": "a\u{0}b", "state": {}}),
            &["lease_version", "summary"],
        ),
        (
            "completion of a cancelled task",
            format!("/api/v1/tasks/{t}/complete"),
            json!({"lease_version": v, "summary": "\u{0}"}),
            &["summary"],
        ),
        (
            "webhook url",
            "/api/v1/me/webhooks".to_owned(),
            json!({"orbit": c.orbit, "url": "https://example.com/\u{0}"}),
            &["url"],
        ),
    ];
    for (what, path, body, fields) in cases {
        let key = format!("k-{}", short_id());
        let r = app
            .send(
                Method::POST,
                &path,
                Some(&owner.token),
                Some(&key),
                Some(body),
            )
            .await;
        assert_eq!(r.status, 422, "{what}: {}", r.text);
        r.assert_envelope(422);
        let named: Vec<&str> = r.json["errors"]
            .as_object()
            .map(|e| e.keys().map(String::as_str).collect())
            .unwrap_or_default();
        assert_eq!(named, fields.to_vec(), "{what}: {}", r.text);
    }
    let after = sql_i64(&mut app.db.conn(), "SELECT count(*) AS n FROM changes");
    assert_eq!(before, after, "a refused request wrote something");
}
