//! Tasks, fenced leases and checkpoints (issue 4).

use futures::future::join_all;
use reqwest::Method;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::harness::TestApp;
use crate::work::{
    acquire, checkpoint, crew, fence, last_change, lease, orbit_revision, outlive, release, task,
};

#[tokio::test]
async fn full_lease_lifecycle_acquire_checkpoint_renew_release_complete() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "life", 2).await;
    let (a, b) = (&c.members[0], &c.members[1]);
    let t = task(&app, a, c.orbit, "write the plan").await;

    let r = app.get(&format!("/api/v1/tasks/{t}"), None).await;
    assert_eq!(r.json["data"]["lease_version"], 0);
    assert!(r.json["data"]["active_lease"].is_null());

    let r = acquire(&app, a, t, json!({})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let lease_id = r.json["data"]["id"].as_i64().unwrap();
    assert_eq!(r.json["data"]["lease_version"], 1);
    assert_eq!(r.json["data"]["is_active"], true);
    assert_eq!(r.json["data"]["contributor"]["id"], a.id);
    assert!(r.json["data"]["orbit_revision"].is_i64());
    assert!(r.json["data"]["renewed_at"].is_null());

    let r = app.get(&format!("/api/v1/tasks/{t}"), None).await;
    assert_eq!(r.json["data"]["lease_version"], 1);
    assert_eq!(r.json["data"]["active_lease"]["id"], lease_id);

    for n in 1..=2 {
        let r = checkpoint(&app, a, t, 1, json!({"step": n})).await;
        assert_eq!(r.status, 201, "{}", r.text);
        assert_eq!(r.json["data"]["sequence"], n);
        assert_eq!(r.json["data"]["state"], json!({"step": n}));
    }

    let r = app
        .post_keyed(
            &format!("/api/v1/leases/{lease_id}/renew"),
            &a.token,
            json!({"lease_version": 1, "duration_seconds": 600}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["data"]["lease_version"], 1);
    assert!(r.json["data"]["renewed_at"].is_string());

    // Someone else cannot take it while it is active; only the expiry is revealed.
    let r = acquire(&app, b, t, json!({})).await;
    r.assert_error(409, "lease_conflict");
    assert!(r.json["details"]["expires_at"].is_string());
    assert_eq!(
        r.json["details"].as_object().unwrap().len(),
        1,
        "holder must not leak: {}",
        r.text
    );

    let r = acquire(&app, a, t, json!({})).await;
    r.assert_error(409, "lease_already_held");
    assert_eq!(r.json["details"]["lease_id"], lease_id);
    // And its version, which the renew it advises needs.
    assert_eq!(r.json["details"]["lease_version"], 1, "{}", r.text);

    let r = release(&app, a, lease_id, 1).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.json["data"]["released_at"].is_string());
    assert_eq!(r.json["data"]["end_reason"], "RELEASED");
    assert_eq!(r.json["data"]["is_active"], false);

    let (_, v2) = lease(&app, b, t, 900).await;
    assert_eq!(v2, 2);
    let r = app
        .post_keyed(
            &format!("/api/v1/tasks/{t}/complete"),
            &b.token,
            json!({"lease_version": 2, "summary": "done"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["data"]["status"], "COMPLETED");
    assert!(r.json["data"]["active_lease"].is_null());

    let r = app.get(&format!("/api/v1/tasks/{t}/leases"), None).await;
    let versions: Vec<i64> = r.json["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["lease_version"].as_i64().unwrap())
        .collect();
    assert_eq!(versions, vec![1, 2]);
    assert_eq!(r.json["data"][1]["end_reason"], "COMPLETED");

    let r = app
        .get(
            &format!("/api/v1/orbits/{}/changes?limit=500", c.orbit),
            None,
        )
        .await;
    let kinds: Vec<&str> = r.json["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["kind"].as_str().unwrap())
        .collect();
    let tail: Vec<&str> = kinds.iter().rev().take(8).rev().copied().collect();
    assert_eq!(
        tail,
        vec![
            "task.created",
            "lease.acquired",
            "checkpoint.created",
            "checkpoint.created",
            "lease.renewed",
            "lease.released",
            "lease.acquired",
            "task.completed"
        ]
    );

    // A closed task cannot be leased.
    acquire(&app, a, t, json!({}))
        .await
        .assert_error(409, "task_closed");
}

#[tokio::test]
async fn zombie_holder_can_never_write_after_its_lease_was_reissued() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "zombie", 2).await;
    let (a, b) = (&c.members[0], &c.members[1]);
    let t = task(&app, a, c.orbit, "t").await;
    let (a_lease, v1) = lease(&app, a, t, 1).await;
    assert_eq!(
        checkpoint(&app, a, t, v1, json!({"a": 1})).await.status,
        201
    );
    outlive(1).await;

    let r = acquire(&app, b, t, json!({})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json["data"]["lease_version"], 2);
    let last = last_change(&app, c.orbit).await;
    assert_eq!(last["kind"], "lease.acquired");
    assert!(
        last["summary"]
            .as_str()
            .unwrap()
            .contains("lease v1 expired"),
        "{last}"
    );

    let before = orbit_revision(&app, c.orbit).await;
    checkpoint(&app, a, t, v1, json!({"zombie": true}))
        .await
        .assert_error(409, "stale_lease_version");
    app.post_keyed(
        &format!("/api/v1/leases/{a_lease}/renew"),
        &a.token,
        json!({"lease_version": v1}),
    )
    .await
    .assert_error(409, "stale_lease_version");
    app.post_keyed(
        &format!("/api/v1/tasks/{t}/complete"),
        &a.token,
        json!({"lease_version": v1}),
    )
    .await
    .assert_error(409, "stale_lease_version");
    release(&app, a, a_lease, v1)
        .await
        .assert_error(409, "stale_lease_version");
    assert_eq!(
        orbit_revision(&app, c.orbit).await,
        before,
        "a refused write advanced the revision"
    );
    let r = app
        .get(&format!("/api/v1/tasks/{t}/checkpoints"), None)
        .await;
    assert_eq!(
        r.json["data"].as_array().unwrap().len(),
        1,
        "the zombie wrote a checkpoint"
    );
    let r = app.get(&format!("/api/v1/tasks/{t}"), None).await;
    assert_eq!(r.json["data"]["status"], "OPEN");
    assert_eq!(r.json["data"]["active_lease"]["contributor"]["id"], b.id);

    // The old lease reads as expired.
    let r = app.get(&format!("/api/v1/leases/{a_lease}"), None).await;
    assert_eq!(r.json["data"]["end_reason"], "EXPIRED");
    assert_eq!(r.json["data"]["is_active"], false);
}

#[tokio::test]
async fn thirty_two_concurrent_acquires_issue_exactly_one_lease() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "race", 32).await;
    let t = task(&app, &c.owner, c.orbit, "contended").await;
    let results = join_all(c.members.iter().map(|m| acquire(&app, m, t, json!({})))).await;
    let won = results.iter().filter(|r| r.status == 201).count();
    assert_eq!(won, 1, "exactly one acquire must win");
    for r in results.iter().filter(|r| r.status != 201) {
        r.assert_error(409, "lease_conflict");
    }
    let mut conn = app.db.conn();
    use diesel::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct N {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let n: N = diesel::sql_query(format!(
        "SELECT count(*) AS n FROM leases WHERE task_id = {t}"
    ))
    .get_result(&mut conn)
    .unwrap();
    assert_eq!(n.n, 1);
}

#[tokio::test]
async fn replayed_acquire_after_the_lease_changed_hands_returns_the_original() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "replay", 2).await;
    let (a, b) = (&c.members[0], &c.members[1]);
    let t = task(&app, a, c.orbit, "t").await;
    let path = format!("/api/v1/tasks/{t}/leases");
    let first = app
        .post_with_key(&path, &a.token, "acq-1", json!({"duration_seconds": 1}))
        .await;
    assert_eq!(first.status, 201);
    outlive(1).await;
    lease(&app, b, t, 900).await;
    let again = app
        .post_with_key(&path, &a.token, "acq-1", json!({"duration_seconds": 1}))
        .await;
    assert_eq!(again.status, 201);
    assert_eq!(
        again.bytes, first.bytes,
        "a replay must return the original bytes"
    );
    assert_eq!(again.header("idempotency-replayed"), Some("true"));
    // A new key is a new intent: now it conflicts.
    let fresh = app
        .post_with_key(&path, &a.token, "acq-2", json!({"duration_seconds": 1}))
        .await;
    fresh.assert_error(409, "lease_conflict");
}

#[tokio::test]
async fn renew_after_expiry_is_lease_expired_and_fence_says_so() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "expiry", 1).await;
    let a = &c.members[0];
    let t = task(&app, a, c.orbit, "t").await;
    let (lease_id, v) = lease(&app, a, t, 1).await;
    let r = fence(&app, a, t, v).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["data"]["verdict"], "PROCEED");
    assert_eq!(r.json["data"]["lease_id"], lease_id);
    outlive(1).await;
    app.post_keyed(
        &format!("/api/v1/leases/{lease_id}/renew"),
        &a.token,
        json!({"lease_version": v}),
    )
    .await
    .assert_error(409, "lease_expired");
    checkpoint(&app, a, t, v, json!({}))
        .await
        .assert_error(409, "lease_expired");
    fence(&app, a, t, v)
        .await
        .assert_error(409, "lease_expired");
}

#[tokio::test]
async fn fence_check_is_never_replayed_even_with_a_key() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "fence", 1).await;
    let a = &c.members[0];
    let t = task(&app, a, c.orbit, "t").await;
    let (lease_id, v) = lease(&app, a, t, 900).await;
    let path = format!("/api/v1/tasks/{t}/fence");
    let body = json!({"lease_version": v});
    let r = app
        .post_with_key(&path, &a.token, "fence-key", body.clone())
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let rev = orbit_revision(&app, c.orbit).await;
    release(&app, a, lease_id, v).await;
    let r = app.post_with_key(&path, &a.token, "fence-key", body).await;
    r.assert_error(409, "lease_released");
    assert!(r.header("idempotency-replayed").is_none());
    assert_eq!(
        orbit_revision(&app, c.orbit).await,
        rev + 1,
        "only the release advanced the revision"
    );
}

#[tokio::test]
async fn another_members_version_is_lease_not_held() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "notheld", 2).await;
    let (a, b) = (&c.members[0], &c.members[1]);
    let t = task(&app, a, c.orbit, "t").await;
    let (_, v) = lease(&app, a, t, 900).await;
    checkpoint(&app, b, t, v, json!({}))
        .await
        .assert_error(409, "lease_not_held");
    fence(&app, b, t, v)
        .await
        .assert_error(409, "lease_not_held");
}

/// A path that names an old lease with the task's current version: the refusal says
/// the two name different leases (not that the version is not current, which it
/// is), and, the current lease being the caller's, where to continue.
#[tokio::test]
async fn a_path_lease_and_a_body_version_that_differ_are_worded_as_such() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "mismatch", 1).await;
    let a = &c.members[0];
    let t = task(&app, a, c.orbit, "t").await;
    let (old, v1) = lease(&app, a, t, 900).await;
    assert_eq!(release(&app, a, old, v1).await.status, 200);
    let (current, v2) = lease(&app, a, t, 900).await;
    for verb in ["renew", "release"] {
        let r = app
            .post_keyed(
                &format!("/api/v1/leases/{old}/{verb}"),
                &a.token,
                json!({"lease_version": v2}),
            )
            .await;
        r.assert_error(409, "stale_lease_version");
        let message = r.json["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!(
                "The lease in the path has lease_version {v1}, not {v2}"
            )),
            "{verb}: {message}"
        );
        assert!(
            message.contains("continue with the lease in details"),
            "{message}"
        );
        assert_eq!(r.json["details"]["yours"], json!(true), "{}", r.text);
        assert_eq!(r.json["details"]["lease_id"], json!(current), "{}", r.text);
    }
    // The other way round, the version sent is what is stale: said so.
    let r = app
        .post_keyed(
            &format!("/api/v1/leases/{current}/renew"),
            &a.token,
            json!({"lease_version": v1}),
        )
        .await;
    r.assert_error(409, "stale_lease_version");
    assert!(
        r.json["message"]
            .as_str()
            .unwrap()
            .starts_with("Your lease_version is not the task's current one"),
        "{}",
        r.text
    );
}

#[tokio::test]
async fn non_members_cannot_create_tasks_or_lease_them() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "members-only", 0).await;
    let outsider = app.agent("outsider").await;
    let t = task(&app, &c.owner, c.orbit, "t").await;
    app.post_keyed(
        &format!("/api/v1/orbits/{}/tasks", c.orbit),
        &outsider.token,
        json!({"title": "x"}),
    )
    .await
    .assert_error(403, "not_a_member");
    acquire(&app, &outsider, t, json!({}))
        .await
        .assert_error(403, "not_a_member");
    fence(&app, &outsider, t, 1)
        .await
        .assert_error(403, "not_a_member");
    // Reads stay public.
    assert_eq!(
        app.get(&format!("/api/v1/tasks/{t}"), None).await.status,
        200
    );
}

#[tokio::test]
async fn cancel_needs_a_maintainer_and_ends_the_lease() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "cancel", 1).await;
    let a = &c.members[0];
    let t = task(&app, a, c.orbit, "t").await;
    let (lease_id, v) = lease(&app, a, t, 900).await;
    app.post_keyed(&format!("/api/v1/tasks/{t}/cancel"), &a.token, json!({}))
        .await
        .assert_error(403, "insufficient_role");
    let r = app
        .post_keyed(
            &format!("/api/v1/tasks/{t}/cancel"),
            &c.owner.token,
            json!({"reason": "obsolete"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["data"]["status"], "CANCELLED");
    assert_eq!(r.json["data"]["cancel_reason"], "obsolete");
    let r = app.get(&format!("/api/v1/leases/{lease_id}"), None).await;
    assert_eq!(r.json["data"]["end_reason"], "CANCELLED");
    checkpoint(&app, a, t, v, json!({}))
        .await
        .assert_error(409, "lease_released");
    app.post_keyed(
        &format!("/api/v1/tasks/{t}/cancel"),
        &c.owner.token,
        json!({}),
    )
    .await
    .assert_error(409, "task_closed");
}

#[tokio::test]
async fn lease_writes_validate_input_before_anything_else() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "validate", 1).await;
    let a = &c.members[0];
    let t = task(&app, a, c.orbit, "t").await;
    let r = app
        .post_keyed(
            &format!("/api/v1/tasks/{t}/checkpoints"),
            &a.token,
            json!({"summary": "s", "state": {}}),
        )
        .await;
    r.assert_error(422, "validation_failed");
    assert!(r.json["errors"]["lease_version"].is_array(), "{}", r.text);
    acquire(&app, a, t, json!({"duration_seconds": 5000}))
        .await
        .assert_error(422, "validation_failed");
    acquire(&app, a, t, json!({"duration_seconds": 900, "extra": 1}))
        .await
        .assert_error(422, "validation_failed");
    // The schema types it as an integer: null is no integer (absent is the default).
    let r = acquire(&app, a, t, json!({"duration_seconds": null})).await;
    r.assert_error(422, "validation_failed");
    assert_eq!(
        r.json["errors"]["duration_seconds"],
        json!(["must be a whole number"]),
        "{}",
        r.text
    );
    let other = task(&app, a, c.orbit, "renewed").await;
    let lease = acquire(&app, a, other, json!({})).await.json["data"]["id"].clone();
    let r = app
        .post_keyed(
            &format!("/api/v1/leases/{lease}/renew"),
            &a.token,
            json!({"lease_version": 1, "duration_seconds": null}),
        )
        .await;
    r.assert_error(422, "validation_failed");
    assert!(
        r.json["errors"]["duration_seconds"].is_array(),
        "{}",
        r.text
    );
    let r = app
        .send(
            Method::POST,
            &format!("/api/v1/tasks/{t}/leases"),
            Some(&a.token),
            None,
            Some(json!({})),
        )
        .await;
    r.assert_error(422, "idempotency_key_required");
    app.post_keyed("/api/v1/tasks/999999/leases", &a.token, json!({}))
        .await
        .assert_error(404, "not_found");
    // Without a token, 401 comes first.
    let r = app
        .send(
            Method::POST,
            &format!("/api/v1/tasks/{t}/leases"),
            None,
            None,
            None,
        )
        .await;
    r.assert_error(401, "unauthorized");
}

/// A duration or expiry out of range is one of the body's problems, listed beside
/// the others in the one 422 (contract section 17: every invalid field at once),
/// over REST and MCP alike, and nothing is written. (The smallest duration is the
/// instance's setting: 1 s under the tests' short-durations flag, so 0 is out.)
#[tokio::test]
async fn an_out_of_range_duration_is_listed_beside_the_bodys_other_problems() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "ranges", 1).await;
    let a = &c.members[0];
    let t = task(&app, a, c.orbit, "t").await;
    #[track_caller]
    fn both(r: &crate::harness::Resp, range: &str, other: &str) {
        r.assert_error(422, "validation_failed");
        let errors = r.json["errors"].as_object().expect("errors");
        assert!(errors.contains_key(range), "{}", r.text);
        assert!(errors.contains_key(other), "{}", r.text);
    }
    let r = acquire(&app, a, t, json!({"duration_seconds": 0, "extra": 1})).await;
    both(&r, "duration_seconds", "extra");
    assert!(
        r.json["errors"]["duration_seconds"][0]
            .as_str()
            .is_some_and(|m| m.contains("between 1 and 3600")),
        "{}",
        r.text
    );

    let (l, v) = lease(&app, a, t, 900).await;
    let r = app
        .post_keyed(
            &format!("/api/v1/leases/{l}/renew"),
            &a.token,
            json!({"lease_version": 0, "duration_seconds": 4000}),
        )
        .await;
    both(&r, "duration_seconds", "lease_version");
    let ckpt = checkpoint(&app, a, t, v, json!({})).await.created_id();
    let r = app
        .post_keyed(
            &format!("/api/v1/tasks/{t}/handoffs"),
            &a.token,
            json!({"lease_version": 0, "checkpoint_id": ckpt, "message": "m",
                   "expires_in_seconds": 0}),
        )
        .await;
    both(&r, "expires_in_seconds", "lease_version");
    let offered = app
        .post_keyed(
            &format!("/api/v1/tasks/{t}/handoffs"),
            &a.token,
            json!({"lease_version": v, "checkpoint_id": ckpt, "message": "m"}),
        )
        .await
        .created_id();
    let r = app
        .post_keyed(
            &format!("/api/v1/handoffs/{offered}/accept"),
            &c.owner.token,
            json!({"duration_seconds": -5, "extra": true}),
        )
        .await;
    both(&r, "duration_seconds", "extra");

    let mcp = crate::mcp::connect(&app, a).await;
    let other = task(&app, a, c.orbit, "u").await;
    let r = crate::mcp::call(
        &mcp,
        "acquire_lease",
        json!({"task_id": other, "duration_seconds": 0, "extra": 1,
               "idempotency_key": uuid::Uuid::new_v4().to_string()}),
    )
    .await;
    let s = crate::mcp::refused(&r, 422, "validation_failed", "fix_input");
    assert!(s["errors"]["duration_seconds"].is_array(), "{s}");
    assert!(s["errors"]["extra"].is_array(), "{s}");

    // None of them changed anything: the lease is still the one taken above, the
    // handoff still pending, the other task never leased.
    let r = app.get(&format!("/api/v1/leases/{l}"), None).await;
    assert_eq!(r.json["data"]["is_active"], true, "{}", r.text);
    let r = app.get(&format!("/api/v1/handoffs/{offered}"), None).await;
    assert_eq!(r.json["data"]["status"], "PENDING", "{}", r.text);
    let r = app.get(&format!("/api/v1/tasks/{other}"), None).await;
    assert_eq!(r.json["data"]["lease_version"], 0, "{}", r.text);
}

#[tokio::test]
async fn checkpoint_state_is_hashed_in_canonical_form_and_bounded() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "state", 1).await;
    let a = &c.members[0];
    let t = task(&app, a, c.orbit, "t").await;
    let (_, v) = lease(&app, a, t, 900).await;
    let state: serde_json::Value =
        serde_json::from_str(r#"{"b": [1.0, 2.5e1, "é"], "a": {"y": null, "x": true}}"#).unwrap();
    let r = checkpoint(&app, a, t, v, state).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let canonical = r#"{"a":{"x":true,"y":null},"b":[1,25,"é"]}"#;
    let expected = hex::encode(Sha256::digest(canonical.as_bytes()));
    assert_eq!(r.json["data"]["state_hash"], expected);

    let big = "x".repeat(70 * 1024);
    let r = checkpoint(&app, a, t, v, json!({"blob": big})).await;
    r.assert_error(422, "validation_failed");
    assert!(r.json["errors"]["state"].is_array());

    let r = app
        .post_keyed(
            &format!("/api/v1/tasks/{t}/checkpoints"),
            &a.token,
            json!({"lease_version": v, "summary": "s", "state": {}, "artifact_ids": [1]}),
        )
        .await;
    r.assert_error(422, "validation_failed");
    assert!(r.json["errors"]["artifact_ids"].is_array());
    // An id list is checked as on every body that carries one (`verbatim::ids`):
    // a non-positive id is the body's problem, named with the others.
    let r = app
        .post_keyed(
            &format!("/api/v1/tasks/{t}/checkpoints"),
            &a.token,
            json!({"lease_version": v, "summary": "", "state": {}, "artifact_ids": [0]}),
        )
        .await;
    r.assert_error(422, "validation_failed");
    assert_eq!(
        r.json["errors"],
        json!({"artifact_ids": ["every id must be a positive integer"],
               "summary": ["must not be empty"]}),
        "{}",
        r.text
    );
}

#[tokio::test]
async fn concurrent_checkpoints_get_dense_sequences() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "dense", 1).await;
    let a = &c.members[0];
    let t = task(&app, a, c.orbit, "t").await;
    let (_, v) = lease(&app, a, t, 900).await;
    let results = join_all((0..12).map(|i| checkpoint(&app, a, t, v, json!({"i": i})))).await;
    assert!(results.iter().all(|r| r.status == 201));
    let mut seqs: Vec<i64> = results
        .iter()
        .map(|r| r.json["data"]["sequence"].as_i64().unwrap())
        .collect();
    seqs.sort();
    assert_eq!(seqs, (1..=12).collect::<Vec<_>>());
}

#[tokio::test]
async fn task_list_filters_by_status_and_lease() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "filters", 1).await;
    let a = &c.members[0];
    let t1 = task(&app, a, c.orbit, "one").await;
    let t2 = task(&app, a, c.orbit, "two").await;
    let t3 = task(&app, a, c.orbit, "three").await;
    lease(&app, a, t2, 900).await;
    let (_, v) = lease(&app, a, t3, 900).await;
    app.post_keyed(
        &format!("/api/v1/tasks/{t3}/complete"),
        &a.token,
        json!({"lease_version": v}),
    )
    .await;
    let ids = |r: &crate::harness::Resp| -> Vec<i64> {
        r.json["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_i64().unwrap())
            .collect()
    };
    let base = format!("/api/v1/orbits/{}/tasks", c.orbit);
    assert_eq!(
        ids(&app
            .get(&format!("{base}?leased=false&status=OPEN"), None)
            .await),
        vec![t1]
    );
    assert_eq!(
        ids(&app.get(&format!("{base}?leased=true"), None).await),
        vec![t2]
    );
    assert_eq!(
        ids(&app.get(&format!("{base}?status=COMPLETED"), None).await),
        vec![t3]
    );
    assert_eq!(
        ids(&app.get(&format!("{base}?limit=2"), None).await),
        vec![t1, t2]
    );
    app.get(&format!("{base}?status=NOPE"), None)
        .await
        .assert_error(422, "validation_failed");
}

#[tokio::test]
async fn the_database_refuses_overlapping_leases_of_one_task_whatever_the_code_does() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "overlap", 1).await;
    let a = &c.members[0];
    let t1 = task(&app, a, c.orbit, "one").await;
    let t2 = task(&app, a, c.orbit, "two").await;
    let r = acquire(&app, a, t1, json!({})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let mut conn = app.db.conn();
    use diesel::RunQueryDsl;
    // A second, already ended lease whose time overlaps the active one: not the
    // open-lease index but the exclusion constraint must refuse it.
    let insert = |task_id: i64, version: i64| {
        format!(
            "INSERT INTO leases (task_id, orbit_id, contributor_id, lease_version, acquired_at, \
                                 expires_at, released_at, end_reason) \
             SELECT id, orbit_id, {who}, {version}, clock_timestamp() - interval '1 minute', \
                    clock_timestamp() + interval '1 minute', clock_timestamp(), 'RELEASED' \
             FROM tasks WHERE id = {task_id}",
            who = a.id
        )
    };
    let refused = diesel::sql_query(insert(t1, 2)).execute(&mut conn);
    let message = format!(
        "{:?}",
        refused.expect_err("an overlapping lease was stored")
    );
    assert!(message.contains("leases_no_overlap"), "{message}");
    // The same interval on another task is fine.
    assert_eq!(
        diesel::sql_query(insert(t2, 1)).execute(&mut conn).unwrap(),
        1
    );
}

#[tokio::test]
async fn a_lease_or_checkpoint_can_only_carry_its_own_tasks_orbit() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "own-orbit", 1).await;
    let d = crew(&app, "other-orbit", 1).await;
    let a = &c.members[0];
    let t = task(&app, a, c.orbit, "mine").await;
    let r = acquire(&app, a, t, json!({})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let mut conn = app.db.conn();
    use diesel::RunQueryDsl;
    let mut assert_refused = |sql: String, what: &str, constraint: &str| {
        let refused = diesel::sql_query(sql).execute(&mut conn);
        let message = format!(
            "{:?}",
            refused.expect_err(&format!("a {what} in another orbit was stored"))
        );
        assert!(message.contains(constraint), "{message}");
    };
    // The orbit column must be the task's orbit, not merely an existing orbit.
    assert_refused(
        format!(
            "INSERT INTO leases (task_id, orbit_id, contributor_id, lease_version, acquired_at, \
                                 expires_at, released_at, end_reason) \
             VALUES ({t}, {other}, {who}, 99, clock_timestamp() - interval '3 hours', \
                     clock_timestamp() - interval '2 hours', clock_timestamp() - interval '2 hours', \
                     'RELEASED')",
            other = d.orbit,
            who = a.id
        ),
        "lease",
        "leases_task_orbit_fkey",
    );
    assert_refused(
        format!(
            "INSERT INTO checkpoints (task_id, orbit_id, author_id, lease_version, sequence, \
                                      summary, state, state_hash) \
             VALUES ({t}, {other}, {who}, 1, 99, 's', '{{}}', 'h')",
            other = d.orbit,
            who = a.id
        ),
        "checkpoint",
        "checkpoints_task_orbit_fkey",
    );
}
