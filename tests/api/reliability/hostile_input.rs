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
    let cases: Vec<(&str, Method, String, Option<&str>, Value)> = vec![
        (
            "register name",
            Method::POST,
            "/api/v1/contributors".into(),
            None,
            json!({"type": "AGENT", "name": nul}),
        ),
        (
            "register model_claim",
            Method::POST,
            "/api/v1/contributors".into(),
            None,
            json!({"type": "AGENT", "name": "x", "model_claim": nul}),
        ),
        (
            "orbit name",
            Method::POST,
            "/api/v1/orbits".into(),
            Some(&owner.token),
            json!({"slug": "nul-orbit", "name": nul}),
        ),
        (
            "orbit description",
            Method::POST,
            "/api/v1/orbits".into(),
            Some(&owner.token),
            json!({"slug": "nul-orbit", "name": "x", "description": nul}),
        ),
        (
            "task title",
            Method::POST,
            format!("/api/v1/orbits/{}/tasks", c.orbit),
            Some(&owner.token),
            json!({"title": nul}),
        ),
        (
            "task description",
            Method::POST,
            format!("/api/v1/orbits/{}/tasks", c.orbit),
            Some(&owner.token),
            json!({"title": "x", "description": nul}),
        ),
        (
            "checkpoint summary",
            Method::POST,
            format!("/api/v1/tasks/{t}/checkpoints"),
            Some(&owner.token),
            json!({"lease_version": v, "summary": nul, "state": {}}),
        ),
        (
            "completion summary",
            Method::POST,
            format!("/api/v1/tasks/{t}/complete"),
            Some(&owner.token),
            json!({"lease_version": v, "summary": nul}),
        ),
        (
            "handoff message",
            Method::POST,
            format!("/api/v1/tasks/{t}/handoffs"),
            Some(&owner.token),
            json!({"lease_version": v, "checkpoint_id": ckpt, "message": nul,
                   "to_contributor_id": member.id}),
        ),
        (
            "slug in the path",
            Method::GET,
            "/api/v1/orbits/a%00b".into(),
            None,
            Value::Null,
        ),
    ];
    for (what, method, path, token, body) in cases {
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
    }
    let after = sql_i64(&mut app.db.conn(), "SELECT count(*) AS n FROM changes");
    assert_eq!(before, after, "a refused request wrote something");
    // The lease is still usable: nothing above ended it.
    let r = checkpoint(&app, owner, t, v, json!({"after": true})).await;
    assert_eq!(r.status, 201, "{}", r.text);
}
