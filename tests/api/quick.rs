//! Quick writes (src/quick.rs): the lease cycle's successful case in one statement
//! answers exactly what the ordinary path would, and declines everything else to it.

use reqwest::Method;
use serde_json::{json, Value};

use crate::harness::{Agent, Resp, TestApp};
use crate::work::{crew, task};

/// `(done, declined)` from `/metrics`.
async fn quick_counts(app: &TestApp) -> (u64, u64) {
    let text = app.get("/metrics", None).await.text;
    let read = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
    };
    (
        read("orbit_quick_writes_total"),
        read("orbit_quick_writes_declined_total"),
    )
}

/// The write's body is the read's body with the write's `orbit_revision` last.
fn assert_write_is_read_plus_revision(write: &Resp, read: &Resp) {
    assert_eq!(read.status, 200, "{}", read.text);
    let revision = write.json["data"]["orbit_revision"]
        .as_i64()
        .expect("orbit_revision");
    let head = read.text.strip_suffix("}}").expect("an object in data");
    let expected = format!("{head},\"orbit_revision\":{revision}}}}}");
    assert_eq!(write.text, expected);
}

async fn keyed(app: &TestApp, who: &Agent, path: &str, key: &str, body: Value) -> Resp {
    app.send(Method::POST, path, Some(&who.token), Some(key), Some(body))
        .await
}

#[tokio::test]
async fn quick_writes_answer_byte_for_byte_what_the_ordinary_reads_show() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "quick", 0).await;
    // A name and no model claim that exercise the JSON escaping of the database's
    // rendering: quotes, a backslash, emoji, right-to-left text.
    let r = app
        .send(
            Method::POST,
            "/api/v1/contributors",
            None,
            None,
            Some(json!({"type": "AGENT", "name": "Zoë \"q\" \\ 🚀 مرحبا"})),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let a = Agent {
        id: r.json["data"]["contributor"]["id"].as_i64().unwrap(),
        token: r.json["data"]["token"].as_str().unwrap().to_owned(),
    };
    app.join(&a, c.orbit).await;
    let t = task(&app, &c.owner, c.orbit, "quick").await;
    let before = quick_counts(&app).await;
    let rev0 = crate::work::orbit_revision(&app, c.orbit).await;

    let path = format!("/api/v1/tasks/{t}/leases");
    let acquired = keyed(
        &app,
        &a,
        &path,
        "q-acquire",
        json!({"duration_seconds": 600}),
    )
    .await;
    assert_eq!(acquired.status, 201, "{}", acquired.text);
    assert_eq!(acquired.json["data"]["orbit_revision"], rev0 + 1);
    let lease_id = acquired.json["data"]["id"].as_i64().unwrap();
    let read = app.get(&format!("/api/v1/leases/{lease_id}"), None).await;
    assert_write_is_read_plus_revision(&acquired, &read);
    assert_eq!(
        acquired.json["data"]["contributor"]["model_claim"],
        Value::Null
    );

    let summary = "line 1\nline 2\t\u{1}\u{1f} \"quoted\" \\ / 🚀 שלום";
    let state = json!({"z": [1, 0.5, 1e21, -0.0, true, null], "a": {"é": "\u{7f}", "\u{10000}": 1, "\u{ff61}": 2}});
    let cp = keyed(
        &app,
        &a,
        &format!("/api/v1/tasks/{t}/checkpoints"),
        "q-checkpoint",
        json!({"lease_version": 1, "summary": summary, "state": state, "artifact_ids": []}),
    )
    .await;
    assert_eq!(cp.status, 201, "{}", cp.text);
    assert_eq!(cp.json["data"]["orbit_revision"], rev0 + 2);
    assert_eq!(cp.json["data"]["summary"], summary);
    assert_eq!(cp.json["data"]["sequence"], 1);
    let cp_id = cp.json["data"]["id"].as_i64().unwrap();
    let read = app.get(&format!("/api/v1/checkpoints/{cp_id}"), None).await;
    assert_write_is_read_plus_revision(&cp, &read);

    let release_path = format!("/api/v1/leases/{lease_id}/release");
    let released = keyed(
        &app,
        &a,
        &release_path,
        "q-release",
        json!({"lease_version": 1}),
    )
    .await;
    assert_eq!(released.status, 200, "{}", released.text);
    assert_eq!(released.json["data"]["end_reason"], "RELEASED");
    assert_eq!(released.json["data"]["is_active"], false);
    let read = app.get(&format!("/api/v1/leases/{lease_id}"), None).await;
    assert_write_is_read_plus_revision(&released, &read);

    // All three went the quick way.
    let after = quick_counts(&app).await;
    assert_eq!((after.0 - before.0, after.1 - before.1), (3, 0));
    // Their keys are kept for the retention, from one reading of the clock.
    let kept = crate::harness::sql_i64(
        &mut app.db.conn(),
        &format!(
            "SELECT count(*) AS n FROM idempotency_keys WHERE contributor_id = {} \
             AND key LIKE 'q-%' AND expires_at - created_at = interval '24 hours' \
             AND response_status > 0",
            a.id
        ),
    );
    assert_eq!(kept, 3);

    // Their changes, in the feed, dense.
    let feed = app
        .get(
            &format!("/api/v1/orbits/{}/changes?after={rev0}", c.orbit),
            None,
        )
        .await;
    let changes = feed.json["data"].as_array().expect("changes").clone();
    let seen: Vec<(i64, String, String, i64)> = changes
        .iter()
        .map(|ch| {
            (
                ch["revision"].as_i64().unwrap(),
                ch["kind"].as_str().unwrap().to_owned(),
                ch["summary"].as_str().unwrap().to_owned(),
                ch["contributor"]["id"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (
                rev0 + 1,
                "lease.acquired".into(),
                format!("lease v1 acquired on task {t}"),
                a.id
            ),
            (
                rev0 + 2,
                "checkpoint.created".into(),
                format!("checkpoint 1 of task {t} under lease v1"),
                a.id
            ),
            (
                rev0 + 3,
                "lease.released".into(),
                "lease v1 released".into(),
                a.id
            ),
        ],
        "{}",
        feed.text
    );

    // The stored responses replay byte for byte (through the ordinary path).
    for (path, key, body, first) in [
        (
            &path,
            "q-acquire",
            json!({"duration_seconds": 600}),
            &acquired,
        ),
        (
            &format!("/api/v1/tasks/{t}/checkpoints"),
            "q-checkpoint",
            json!({"lease_version": 1, "summary": summary, "state": state, "artifact_ids": []}),
            &cp,
        ),
        (
            &release_path,
            "q-release",
            json!({"lease_version": 1}),
            &released,
        ),
    ] {
        let again = keyed(&app, &a, path, key, body).await;
        assert_eq!(again.status, first.status);
        assert_eq!(again.header("idempotency-replayed"), Some("true"));
        assert_eq!(again.bytes, first.bytes);
    }
    let last = quick_counts(&app).await;
    assert_eq!((last.0 - after.0, last.1 - after.1), (0, 3));
    assert_eq!(crate::work::orbit_revision(&app, c.orbit).await, rev0 + 3);
}

#[tokio::test]
async fn refusals_decline_to_the_ordinary_path_and_change_nothing() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "quick-no", 2).await;
    let (a, b) = (&c.members[0], &c.members[1]);
    let t = task(&app, &c.owner, c.orbit, "contested").await;
    let acquired = keyed(
        &app,
        a,
        &format!("/api/v1/tasks/{t}/leases"),
        "a1",
        json!({}),
    )
    .await;
    assert_eq!(acquired.status, 201, "{}", acquired.text);
    let lease_id = acquired.json["data"]["id"].as_i64().unwrap();
    let rev = crate::work::orbit_revision(&app, c.orbit).await;
    let before = quick_counts(&app).await;

    // Each refusal is decided and worded by the ordinary path.
    keyed(
        &app,
        b,
        &format!("/api/v1/tasks/{t}/leases"),
        "b1",
        json!({}),
    )
    .await
    .assert_error(409, "lease_conflict");
    keyed(
        &app,
        a,
        &format!("/api/v1/tasks/{t}/leases"),
        "a2",
        json!({}),
    )
    .await
    .assert_error(409, "lease_already_held");
    keyed(
        &app,
        b,
        &format!("/api/v1/tasks/{t}/checkpoints"),
        "b2",
        json!({"lease_version": 1, "summary": "zombie", "state": {}}),
    )
    .await
    .assert_error(409, "lease_not_held");
    keyed(
        &app,
        a,
        &format!("/api/v1/tasks/{t}/checkpoints"),
        "a3",
        json!({"lease_version": 2, "summary": "future", "state": {}}),
    )
    .await
    .assert_error(409, "stale_lease_version");
    keyed(
        &app,
        b,
        &format!("/api/v1/leases/{lease_id}/release"),
        "b3",
        json!({"lease_version": 1}),
    )
    .await
    .assert_error(409, "lease_not_held");
    keyed(
        &app,
        a,
        &format!("/api/v1/leases/{lease_id}/release"),
        "a4",
        json!({"lease_version": 2}),
    )
    .await
    .assert_error(409, "stale_lease_version");
    let outsider = app.agent("quick-outsider").await;
    app.get("/api/v1/me", Some(&outsider.token)).await;
    keyed(
        &app,
        &outsider,
        &format!("/api/v1/tasks/{t}/leases"),
        "o1",
        json!({}),
    )
    .await
    .assert_error(403, "not_a_member");

    let after = quick_counts(&app).await;
    assert_eq!((after.0 - before.0, after.1 - before.1), (0, 7));
    assert_eq!(crate::work::orbit_revision(&app, c.orbit).await, rev);
    let cps = app
        .get(&format!("/api/v1/tasks/{t}/checkpoints"), None)
        .await;
    assert_eq!(cps.json["data"], json!([]));

    // A token revoked after this instance verified it is refused on a quick write.
    let second = app
        .send(
            Method::POST,
            "/api/v1/me/tokens",
            Some(&a.token),
            None,
            None,
        )
        .await;
    assert_eq!(second.status, 201, "{}", second.text);
    let second_token = second.json["data"]["token"].as_str().unwrap().to_owned();
    let list = app.get("/api/v1/me/tokens", Some(&a.token)).await;
    let first_id = list.json["data"][0]["id"].as_i64().unwrap();
    let revoked = app
        .delete(&format!("/api/v1/me/tokens/{first_id}"), &second_token)
        .await;
    assert_eq!(revoked.status, 200, "{}", revoked.text);
    let r = keyed(
        &app,
        a,
        &format!("/api/v1/leases/{lease_id}/release"),
        "a5",
        json!({"lease_version": 1}),
    )
    .await;
    assert_eq!(r.status, 401, "{}", r.text);
    let lease = app.get(&format!("/api/v1/leases/{lease_id}"), None).await;
    assert_eq!(lease.json["data"]["is_active"], true);
    assert_eq!(crate::work::orbit_revision(&app, c.orbit).await, rev);
}
