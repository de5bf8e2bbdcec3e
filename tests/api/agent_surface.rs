//! The agent surface (issue 24, API section 17): errors that carry what their one
//! reaction needs, every invalid field at once, replayed acquires, MCP parity with
//! REST, and agents.md checked against the server.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::harness::{Resp, TestApp};
use crate::mcp::{call, connect, ok, refused};
use crate::work::{checkpoint, crew, lease, release, task};

const GUIDE: &str = include_str!("../../agents.md");

/// Both write paths: the quick lease-cycle writes (default) and the ordinary path
/// alone. Their refusals must be the same (the quick functions decline, the Rust
/// fence decides).
async fn both_paths() -> Vec<TestApp> {
    vec![
        TestApp::spawn().await,
        TestApp::spawn_with(|c| c.quick_writes = false).await,
    ]
}

async fn keyed(app: &TestApp, path: &str, token: &str, key: &str, body: Value) -> Resp {
    app.post_with_key(path, token, key, body).await
}

#[tokio::test]
async fn stale_lease_version_says_whether_the_current_lease_is_yours() {
    for app in both_paths().await {
        let c = crew(&app, "stale-yours", 1).await;
        let (a, b) = (&c.owner, &c.members[0]);
        let t = task(&app, a, c.orbit, "t").await;
        let (l1, v1) = lease(&app, a, t, 600).await;
        let r = release(&app, a, l1, v1).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let (l2, v2) = lease(&app, a, t, 600).await;
        assert_eq!(v2, v1 + 1);

        // The old version of the caller's own task: the current lease is its own.
        let r = checkpoint(&app, a, t, v1, json!({})).await;
        r.assert_error(409, "stale_lease_version");
        assert_eq!(r.json["details"]["current_lease_version"], v2, "{}", r.text);
        assert_eq!(r.json["details"]["yours"], true, "{}", r.text);
        assert_eq!(r.json["details"]["lease_id"], l2, "{}", r.text);
        assert!(r.text.contains("Continue with the lease"), "{}", r.text);

        // The current lease is the caller's but has ended: nothing to continue with.
        release(&app, a, l2, v2).await;
        let r = checkpoint(&app, a, t, v1, json!({})).await;
        r.assert_error(409, "stale_lease_version");
        assert_eq!(r.json["details"]["current_lease_version"], v2, "{}", r.text);
        assert_eq!(r.json["details"]["yours"], false, "{}", r.text);
        assert!(r.json["details"].get("lease_id").is_none(), "{}", r.text);
        assert!(r.text.contains("Stop writing and report"), "{}", r.text);

        // Someone else's lease since: not yours.
        let (_, v3) = lease(&app, b, t, 600).await;
        let r = checkpoint(&app, a, t, v2, json!({})).await;
        r.assert_error(409, "stale_lease_version");
        assert_eq!(r.json["details"]["current_lease_version"], v3, "{}", r.text);
        assert_eq!(r.json["details"]["yours"], false, "{}", r.text);

        // lease_not_held: the current version, presented by someone else.
        let r = checkpoint(&app, a, t, v3, json!({})).await;
        r.assert_error(409, "lease_not_held");
        assert_eq!(r.json["details"]["current_lease_version"], v3, "{}", r.text);
    }
}

/// A current lease of the caller's that its own pending handoff fences is no lease
/// to continue with: a stale version, the fence check and the accepter's second
/// accept say so, and never `continue` (a probe following every `recover`
/// literally, 2026-12-07: "continue" led to `handed_off`).
#[tokio::test]
async fn a_lease_fenced_by_its_holders_own_handoff_is_not_offered_to_continue() {
    for app in both_paths().await {
        let c = crew(&app, "stale-fenced", 2).await;
        let (a, b, d) = (&c.owner, &c.members[0], &c.members[1]);
        let t = task(&app, a, c.orbit, "t").await;
        let (l1, v1) = lease(&app, a, t, 600).await;
        release(&app, a, l1, v1).await.assert_envelope_ok(200);
        let (l2, v2) = lease(&app, a, t, 600).await;
        let offer = |who: &crate::harness::Agent, v: i64, to: i64| {
            let (path, who) = (format!("/api/v1/tasks/{t}/handoffs"), who.clone());
            let app = &app;
            async move {
                let ck = checkpoint(app, &who, t, v, json!({})).await;
                let ck = ck.json["data"]["id"].as_i64().expect("a checkpoint");
                let body = json!({"lease_version": v, "checkpoint_id": ck,
                    "to_contributor_id": to, "message": "yours"});
                app.post_keyed(&path, &who.token, body).await
            }
        };
        let h = offer(a, v2, b.id).await;
        assert_eq!(h.status, 201, "{}", h.text);
        let h = h.json["data"]["id"].as_i64().unwrap();

        let before = crate::work::orbit_revision(&app, c.orbit).await;
        for r in [
            checkpoint(&app, a, t, v1, json!({})).await,
            crate::work::fence(&app, a, t, v1).await,
        ] {
            r.assert_error(409, "stale_lease_version");
            // The current lease is the caller's own (contract section 17), but it
            // names no lease to go on with: a checkpoint or the fence check with it
            // would be `handed_off`.
            assert_eq!(r.json["details"]["yours"], true, "{}", r.text);
            assert!(r.json["details"].get("lease_id").is_none(), "{}", r.text);
            assert_eq!(r.json["details"]["handoff_id"], h, "{}", r.text);
            assert!(
                r.text.contains("fenced by your pending handoff"),
                "{}",
                r.text
            );
        }
        assert_eq!(crate::work::orbit_revision(&app, c.orbit).await, before);
        // A release is not fenced by a pending handoff: with a stale version, or
        // the path naming the old lease, it names the lease to go on with (a
        // review: it said to stop).
        for r in [
            release(&app, a, l2, v1).await,
            release(&app, a, l1, v2).await,
        ] {
            r.assert_error(409, "stale_lease_version");
            assert_eq!(r.json["details"]["yours"], true, "{}", r.text);
            assert_eq!(r.json["details"]["lease_id"], l2, "{}", r.text);
            assert!(r.json["details"].get("handoff_id").is_none(), "{}", r.text);
            let message = r.json["message"].as_str().unwrap().to_lowercase();
            assert!(message.contains("continue with the lease"), "{}", r.text);
        }
        // Without the handoff, the same stale version says continue.
        app.post_keyed(
            &format!("/api/v1/handoffs/{h}/withdraw"),
            &a.token,
            json!({}),
        )
        .await
        .assert_envelope_ok(200);
        let r = checkpoint(&app, a, t, v1, json!({})).await;
        assert_eq!(r.json["details"]["yours"], true, "{}", r.text);
        assert!(r.json["details"].get("handoff_id").is_none(), "{}", r.text);

        // The accepter that offered the task on: its second accept offers no lease.
        let h = offer(a, v2, b.id).await;
        let h = h.json["data"]["id"].as_i64().unwrap();
        let path = format!("/api/v1/handoffs/{h}/accept");
        let first = keyed(&app, &path, &b.token, "accept-1", json!({})).await;
        assert_eq!(first.status, 200, "{}", first.text);
        let vb = first.json["data"]["lease"]["lease_version"]
            .as_i64()
            .unwrap();
        offer(b, vb, d.id).await.assert_envelope_ok(201);
        let again = keyed(&app, &path, &b.token, "accept-2", json!({})).await;
        again.assert_error(409, "handoff_not_pending");
        assert_eq!(again.json["details"]["accepted_by"], b.id, "{}", again.text);
        assert!(
            again.json["details"].get("lease_id").is_none(),
            "{}",
            again.text
        );
    }
}

#[tokio::test]
async fn a_lease_version_never_issued_is_422_and_changes_nothing() {
    for app in both_paths().await {
        let c = crew(&app, "not-issued", 0).await;
        let a = &c.owner;
        let t = task(&app, a, c.orbit, "t").await;
        let (l, v) = lease(&app, a, t, 600).await;
        let before = crate::work::orbit_revision(&app, c.orbit).await;
        let r = checkpoint(&app, a, t, v + 5, json!({})).await;
        r.assert_error(422, "lease_version_not_issued");
        assert_eq!(r.json["details"]["current_lease_version"], v, "{}", r.text);
        for path in [
            format!("/api/v1/leases/{l}/renew"),
            format!("/api/v1/leases/{l}/release"),
            format!("/api/v1/tasks/{t}/complete"),
            format!("/api/v1/tasks/{t}/fence"),
        ] {
            let r = app
                .post_keyed(&path, &a.token, json!({"lease_version": v + 1}))
                .await;
            r.assert_error(422, "lease_version_not_issued");
        }
        assert_eq!(crate::work::orbit_revision(&app, c.orbit).await, before);
        // The lease still works with its real version.
        checkpoint(&app, a, t, v, json!({}))
            .await
            .assert_envelope_ok(201);
    }
}

trait OkStatus {
    fn assert_envelope_ok(&self, status: u16);
}

impl OkStatus for Resp {
    #[track_caller]
    fn assert_envelope_ok(&self, status: u16) {
        assert_eq!(self.status.as_u16(), status, "{}", self.text);
    }
}

/// The lost-accept story: the acceptor lost the answer and its key; an accept with a
/// new key tells it the task is already its own, with the lease it holds.
#[tokio::test]
async fn an_acceptor_that_lost_the_answer_learns_it_holds_the_task() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "lost-accept", 2).await;
    let (giver, taker, other) = (&c.owner, &c.members[0], &c.members[1]);
    let t = task(&app, giver, c.orbit, "t").await;
    let (_, v) = lease(&app, giver, t, 600).await;
    let ck = checkpoint(&app, giver, t, v, json!({"step": 1})).await;
    let ck = ck.json["data"]["id"].as_i64().unwrap();
    let offer = app
        .post_keyed(
            &format!("/api/v1/tasks/{t}/handoffs"),
            &giver.token,
            json!({"lease_version": v, "checkpoint_id": ck, "message": "open"}),
        )
        .await;
    assert_eq!(offer.status, 201, "{}", offer.text);
    let h = offer.json["data"]["id"].as_i64().unwrap();

    let path = format!("/api/v1/handoffs/{h}/accept");
    let first = keyed(&app, &path, &taker.token, "accept-1", json!({})).await;
    assert_eq!(first.status, 200, "{}", first.text);
    let lease_id = first.json["data"]["lease"]["id"].as_i64().unwrap();
    let lease_version = first.json["data"]["lease"]["lease_version"]
        .as_i64()
        .unwrap();

    // Same key: the original answer, replayed.
    let replay = keyed(&app, &path, &taker.token, "accept-1", json!({})).await;
    assert_eq!(replay.status, 200);
    assert_eq!(replay.header("idempotency-replayed"), Some("true"));
    assert_eq!(replay.bytes, first.bytes);

    // A new key: 409, with the lease the caller holds.
    let again = keyed(&app, &path, &taker.token, "accept-2", json!({})).await;
    again.assert_error(409, "handoff_not_pending");
    let d = &again.json["details"];
    assert_eq!(d["current_status"], "ACCEPTED", "{}", again.text);
    assert_eq!(d["accepted_by"], taker.id, "{}", again.text);
    assert_eq!(d["lease_id"], lease_id, "{}", again.text);
    assert_eq!(d["lease_version"], lease_version, "{}", again.text);
    assert!(
        !again.json["message"]
            .as_str()
            .unwrap()
            .contains("Choose other work"),
        "{}",
        again.text
    );

    // Anyone else: who accepted, and no lease of theirs.
    let third = keyed(&app, &path, &other.token, "accept-3", json!({})).await;
    third.assert_error(409, "handoff_not_pending");
    assert_eq!(third.json["details"]["accepted_by"], taker.id);
    assert!(
        third.json["details"].get("lease_id").is_none(),
        "{}",
        third.text
    );

    // The taker continues with that lease.
    checkpoint(&app, taker, t, lease_version, json!({"step": 2}))
        .await
        .assert_envelope_ok(201);

    // Once that lease has ended (the taker completed the task), an accept with a new
    // key no longer offers it: there is nothing to continue with.
    app.post_keyed(
        &format!("/api/v1/tasks/{t}/complete"),
        &taker.token,
        json!({"lease_version": lease_version}),
    )
    .await
    .assert_envelope_ok(200);
    let after = keyed(&app, &path, &taker.token, "accept-4", json!({})).await;
    after.assert_error(409, "handoff_not_pending");
    assert_eq!(
        after.json["details"]["accepted_by"], taker.id,
        "{}",
        after.text
    );
    assert!(
        after.json["details"].get("lease_id").is_none(),
        "{}",
        after.text
    );
    assert!(after.text.contains("Choose other work"), "{}", after.text);

    // A withdrawn handoff carries no accepted_by.
    let t2 = task(&app, giver, c.orbit, "t2").await;
    let (_, v2) = lease(&app, giver, t2, 600).await;
    let ck2 = checkpoint(&app, giver, t2, v2, json!({})).await.json["data"]["id"]
        .as_i64()
        .unwrap();
    let h2 = app
        .post_keyed(
            &format!("/api/v1/tasks/{t2}/handoffs"),
            &giver.token,
            json!({"lease_version": v2, "checkpoint_id": ck2, "message": "m"}),
        )
        .await
        .json["data"]["id"]
        .as_i64()
        .unwrap();
    app.post_keyed(
        &format!("/api/v1/handoffs/{h2}/withdraw"),
        &giver.token,
        json!({}),
    )
    .await
    .assert_envelope_ok(200);
    let r = app
        .post_keyed(
            &format!("/api/v1/handoffs/{h2}/accept"),
            &taker.token,
            json!({}),
        )
        .await;
    r.assert_error(409, "handoff_not_pending");
    assert_eq!(r.json["details"]["current_status"], "WITHDRAWN");
    assert!(r.json["details"].get("accepted_by").is_none(), "{}", r.text);
}

/// Release, then re-acquire: a replayed acquire is history (marked by
/// `Idempotency-Replayed`), and `GET /leases/{id}` says what the lease is now.
#[tokio::test]
async fn a_replayed_acquire_is_marked_and_the_lease_reads_as_it_is_now() {
    for app in both_paths().await {
        let c = crew(&app, "replay-acquire", 0).await;
        let a = &c.owner;
        let t = task(&app, a, c.orbit, "t").await;
        let path = format!("/api/v1/tasks/{t}/leases");
        let first = keyed(&app, &path, &a.token, "acq-1", json!({})).await;
        assert_eq!(first.status, 201, "{}", first.text);
        assert!(first.header("idempotency-replayed").is_none());
        let id = first.json["data"]["id"].as_i64().unwrap();
        let v = first.json["data"]["lease_version"].as_i64().unwrap();
        release(&app, a, id, v).await.assert_envelope_ok(200);

        let replay = keyed(&app, &path, &a.token, "acq-1", json!({})).await;
        assert_eq!(replay.status, 201);
        assert_eq!(replay.header("idempotency-replayed"), Some("true"));
        assert_eq!(
            replay.json["data"]["is_active"], true,
            "history, as first answered"
        );
        let now = app.get(&format!("/api/v1/leases/{id}"), None).await;
        assert_eq!(now.json["data"]["is_active"], false, "{}", now.text);
        assert_eq!(now.json["data"]["end_reason"], "RELEASED", "{}", now.text);

        // Re-acquire with a new key: a new version; the old one is stale, and yours.
        let (_, v2) = lease(&app, a, t, 600).await;
        assert_eq!(v2, v + 1);
        let r = checkpoint(&app, a, t, v, json!({})).await;
        r.assert_error(409, "stale_lease_version");
        assert_eq!(r.json["details"]["yours"], true);
        checkpoint(&app, a, t, v2, json!({}))
            .await
            .assert_envelope_ok(201);
    }
}

/// Every bad element of a list is named, each at its index, beside the list's own
/// rule on the elements that parsed, in one 422. (A probe, 2026-12-07: only the
/// first bad element was named, and the list's own rules waited for the next try.)
/// The fields a 422 `validation_failed` names.
fn refused_fields(r: &Resp) -> BTreeSet<&str> {
    r.assert_error(422, "validation_failed");
    let errors = r.json["errors"].as_object().expect("errors");
    errors.keys().map(String::as_str).collect()
}

#[tokio::test]
async fn validation_names_every_bad_element_of_a_list() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "bad-elements", 0).await;
    let a = &c.owner;
    let contribution =
        |ids: Value| json!({"kind": "NOTE", "title": "t", "body": "", "artifact_ids": ids});
    let path = format!("/api/v1/orbits/{}/contributions", c.orbit);
    let r = app
        .post_keyed(&path, &a.token, contribution(json!(["y", 3, "x"])))
        .await;
    assert_eq!(
        refused_fields(&r),
        BTreeSet::from(["artifact_ids[0]", "artifact_ids[2]"]),
        "{}",
        r.text
    );
    assert_eq!(
        r.json["errors"]["artifact_ids[2]"][0],
        "must be a whole number"
    );

    let r = app
        .post_keyed(&path, &a.token, contribution(json!([0, "x"])))
        .await;
    r.assert_error(422, "validation_failed");
    assert_eq!(
        r.json["errors"]["artifact_ids[1]"][0], "must be a whole number",
        "{}",
        r.text
    );
    assert_eq!(
        r.json["errors"]["artifact_ids"][0], "every id must be a positive integer",
        "{}",
        r.text
    );

    let r = app
        .post(
            &format!("/api/v1/orbits/{}/memory", c.orbit),
            &a.token,
            json!({"content": "c", "tags": ["", "a".repeat(65), 5, "fine"]}),
        )
        .await;
    assert_eq!(
        refused_fields(&r),
        BTreeSet::from(["tags[0]", "tags[1]", "tags[2]"]),
        "{}",
        r.text
    );
    assert_eq!(r.json["errors"]["tags[2]"][0], "must be a string");

    // A list's own rules never read a stand-in: a webhook's kinds of the wrong
    // type are named, not taken for unknown or repeated kinds.
    for kinds in [json!([5]), json!([5, 6]), json!([5, "task.created", 6])] {
        let r = app
            .post_keyed(
                "/api/v1/me/webhooks",
                &a.token,
                json!({"orbit": c.orbit, "url": "https://example.com/hook", "kinds": kinds}),
            )
            .await;
        let named: BTreeSet<&str> = refused_fields(&r)
            .into_iter()
            .filter(|k| k.starts_with("kinds"))
            .collect();
        let bad: BTreeSet<String> = kinds
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .filter(|(_, k)| k.is_number())
            .map(|(i, _)| format!("kinds[{i}]"))
            .collect();
        assert_eq!(
            named,
            bad.iter().map(String::as_str).collect(),
            "{kinds}: {}",
            r.text
        );
    }
    // Past 16 bad elements, the list is named as a whole.
    let many: Vec<Value> = (0..40).map(|i| json!(format!("bad-{i}"))).collect();
    let r = app
        .post_keyed(&path, &a.token, contribution(Value::Array(many)))
        .await;
    r.assert_error(422, "validation_failed");
    let errors = r.json["errors"].as_object().expect("errors");
    assert_eq!(errors.len(), 17, "{}", r.text);
    assert_eq!(
        errors["artifact_ids"][0], "has more than 16 invalid elements",
        "{}",
        r.text
    );

    // Over MCP, the same rules name the same elements.
    let mcp = connect(&app, a).await;
    let r = call(
        &mcp,
        "create_contribution",
        json!({"orbit": c.orbit, "kind": "NOTE", "title": "t", "body": "",
               "artifact_ids": ["y", 3, "x"], "idempotency_key": "k-elements"}),
    )
    .await;
    let refusal = refused(&r, 422, "validation_failed", "fix_input");
    for f in ["artifact_ids[0]", "artifact_ids[2]"] {
        assert!(refusal["errors"].get(f).is_some(), "{f}: {refusal}");
    }
}

#[tokio::test]
async fn validation_lists_every_invalid_field_in_plain_words() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "plain-words", 0).await;
    let a = &c.owner;
    let r = app
        .post_keyed(
            &format!("/api/v1/orbits/{}/tasks", c.orbit),
            &a.token,
            json!({"title": 3, "description": ["x"], "problem_id": "seven", "colour": "red"}),
        )
        .await;
    r.assert_error(422, "validation_failed");
    let errors = r.json["errors"].as_object().expect("errors");
    let fields: BTreeSet<&str> = errors.keys().map(String::as_str).collect();
    assert_eq!(
        fields,
        BTreeSet::from(["title", "description", "problem_id", "colour"]),
        "{}",
        r.text
    );
    assert_eq!(errors["title"][0], "must be a string");
    assert_eq!(errors["description"][0], "must be a string");
    assert_eq!(errors["problem_id"][0], "must be a whole number");
    assert_eq!(errors["colour"][0], "is not a known field");
    for jargon in ["invalid type", "i64", "expected", "struct", "serde"] {
        assert!(!r.text.contains(jargon), "{jargon} in {}", r.text);
    }

    // Missing required fields, all of them, and a type error beside them.
    let t = task(&app, a, c.orbit, "t").await;
    let (_, v) = lease(&app, a, t, 600).await;
    let r = app
        .post_keyed(
            &format!("/api/v1/tasks/{t}/checkpoints"),
            &a.token,
            json!({"artifact_ids": "none"}),
        )
        .await;
    r.assert_error(422, "validation_failed");
    let errors = r.json["errors"].as_object().expect("errors");
    for f in ["lease_version", "summary", "state"] {
        assert_eq!(errors[f][0], "is required", "{f}: {}", r.text);
    }
    assert_eq!(errors["artifact_ids"][0], "must be a list", "{}", r.text);

    // A type error and a rule of the type's own at once.
    let r = app
        .post_keyed(
            &format!("/api/v1/tasks/{t}/checkpoints"),
            &a.token,
            json!({"lease_version": "3", "summary": "", "state": {}}),
        )
        .await;
    r.assert_error(422, "validation_failed");
    assert_eq!(
        r.json["errors"]["lease_version"][0],
        "must be a whole number"
    );
    assert_eq!(
        r.json["errors"]["summary"][0], "must not be empty",
        "{}",
        r.text
    );
    let m = r.json["message"].as_str().unwrap();
    assert!(m.contains("lease_version") && m.contains("summary"), "{m}");
    // Nothing was written: the lease still takes checkpoint 1.
    let ok = checkpoint(&app, a, t, v, json!({})).await;
    assert_eq!(ok.json["data"]["sequence"], 1, "{}", ok.text);
}

/// The table at the top of agents.md lists every code of `error::CODES`, with its
/// status and reaction, and no other.
#[test]
fn the_guide_lists_every_error_code_with_its_reaction() {
    let start = GUIDE
        .find("<!-- error-codes:begin -->")
        .expect("begin marker");
    let end = GUIDE.find("<!-- error-codes:end -->").expect("end marker");
    let mut listed = std::collections::BTreeMap::new();
    for line in GUIDE[start..end].lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let code = cells[1].trim_matches('`');
        let status: u16 = cells[2].parse().expect("status");
        let recover = cells[3].trim_matches('`');
        assert!(!cells[4].is_empty(), "{code}: no reaction");
        assert!(
            listed
                .insert(code.to_owned(), (status, recover.to_owned()))
                .is_none(),
            "{code} listed twice"
        );
    }
    let defined: std::collections::BTreeMap<String, (u16, String)> = orbit_commons::error::CODES
        .iter()
        .map(|c| (c.code.to_owned(), (c.status, c.recover.to_owned())))
        .collect();
    assert_eq!(
        listed, defined,
        "agents.md's error table and error::CODES differ"
    );
    // The guide's sections are numbered uniquely.
    let numbers: Vec<&str> = GUIDE
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .filter_map(|l| l.split_once(". ").map(|(n, _)| n))
        .filter(|n| n.chars().all(|c| c.is_ascii_digit()))
        .collect();
    let unique: BTreeSet<&&str> = numbers.iter().collect();
    assert_eq!(
        unique.len(),
        numbers.len(),
        "section numbers repeat: {numbers:?}"
    );
}

/// The tool table in agents.md is the server's tool list.
#[tokio::test]
async fn the_guide_lists_exactly_the_servers_tools() {
    let app = TestApp::spawn().await;
    let a = app.agent("tool-lister").await;
    let client = connect(&app, &a).await;
    let served: BTreeSet<String> = client
        .list_all_tools()
        .await
        .expect("tools/list")
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    let start = GUIDE
        .find("<!-- mcp-tools:begin -->")
        .expect("begin marker");
    let end = GUIDE.find("<!-- mcp-tools:end -->").expect("end marker");
    let listed: BTreeSet<String> = GUIDE[start..end]
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| l.split('`').nth(1).unwrap().to_owned())
        .collect();
    assert_eq!(
        listed, served,
        "agents.md's tool table and tools/list differ"
    );
    client.cancel().await.ok();
}

/// The new tools answer what their REST routes answer (the same domain function).
#[tokio::test]
async fn the_new_tools_answer_like_their_rest_routes() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "parity", 1).await;
    let (a, b) = (&c.owner, &c.members[0]);
    let client = connect(&app, a).await;
    let key = || uuid::Uuid::new_v4().to_string();

    let orbit = ok(&call(
        &client,
        "create_orbit",
        json!({"slug": "parity-two", "name": "Two", "idempotency_key": key()}),
    )
    .await);
    assert_eq!(orbit["data"]["slug"], "parity-two");
    assert_eq!(orbit["data"]["orbit_revision"], 1);

    let problem = ok(&call(
        &client,
        "create_problem",
        json!({"orbit": c.orbit, "title": "P", "statement": "s", "idempotency_key": key()}),
    )
    .await);
    let p = problem["data"]["id"].as_i64().unwrap();
    let t = task(&app, a, c.orbit, "t").await;
    let (l, v) = lease(&app, a, t, 600).await;
    let ck = checkpoint(&app, a, t, v, json!({"x": 1})).await.json["data"]["id"]
        .as_i64()
        .unwrap();
    let art = ok(&call(
        &client,
        "create_artifact",
        json!({"orbit": c.orbit, "name": "n.txt", "media_type": "text/plain",
               "content_base64": "aGk=", "idempotency_key": key()}),
    )
    .await);
    let art = art["data"]["id"].as_i64().unwrap();

    let same = [
        (
            "get_orbit",
            json!({"orbit": c.orbit}),
            format!("/api/v1/orbits/{}", c.orbit),
        ),
        (
            "list_members",
            json!({"orbit": c.orbit}),
            format!("/api/v1/orbits/{}/members", c.orbit),
        ),
        (
            "list_problems",
            json!({"orbit": c.orbit, "status": "OPEN"}),
            format!("/api/v1/orbits/{}/problems?status=OPEN", c.orbit),
        ),
        (
            "get_problem",
            json!({"problem_id": p}),
            format!("/api/v1/problems/{p}"),
        ),
        (
            "list_tasks",
            json!({"orbit": c.orbit, "leased": true}),
            format!("/api/v1/orbits/{}/tasks?leased=true", c.orbit),
        ),
        (
            "get_lease",
            json!({"lease_id": l}),
            format!("/api/v1/leases/{l}"),
        ),
        (
            "list_leases",
            json!({"task_id": t}),
            format!("/api/v1/tasks/{t}/leases"),
        ),
        (
            "get_checkpoint",
            json!({"checkpoint_id": ck}),
            format!("/api/v1/checkpoints/{ck}"),
        ),
        (
            "list_artifacts",
            json!({"orbit": c.orbit}),
            format!("/api/v1/orbits/{}/artifacts", c.orbit),
        ),
        (
            "get_artifact",
            json!({"artifact_id": art}),
            format!("/api/v1/artifacts/{art}"),
        ),
        (
            "list_memory",
            json!({"orbit": c.orbit}),
            format!("/api/v1/orbits/{}/memory", c.orbit),
        ),
        (
            "list_contributions",
            json!({"orbit": c.orbit}),
            format!("/api/v1/orbits/{}/contributions", c.orbit),
        ),
        (
            "list_task_handoffs",
            json!({"task_id": t}),
            format!("/api/v1/tasks/{t}/handoffs"),
        ),
    ];
    for (tool, args, path) in same {
        let got = ok(&call(&client, tool, args).await);
        let rest = app.get(&path, Some(&a.token)).await;
        assert_eq!(rest.status, 200, "{path}: {}", rest.text);
        assert_eq!(got, rest.json, "{tool} and GET {path} differ");
    }

    // Writes: status, member changes, cancel, each as its REST route would.
    ok(&call(
        &client,
        "set_problem_status",
        json!({"problem_id": p, "status": "RESOLVED", "idempotency_key": key()}),
    )
    .await);
    let r = app.get(&format!("/api/v1/problems/{p}"), None).await;
    assert_eq!(r.json["data"]["status"], "RESOLVED");
    let m = ok(&call(
        &client,
        "set_member",
        json!({"orbit": c.orbit, "contributor_id": b.id, "role": "MAINTAINER"}),
    )
    .await);
    assert_eq!(m["data"]["role"], "MAINTAINER");
    let cancelled = ok(&call(
        &client,
        "cancel_task",
        json!({"task_id": t, "reason": "no longer needed", "idempotency_key": key()}),
    )
    .await);
    assert_eq!(cancelled["data"]["status"], "CANCELLED");
    let lease_now = app.get(&format!("/api/v1/leases/{l}"), None).await;
    assert_eq!(lease_now.json["data"]["end_reason"], "CANCELLED");
    let gone = ok(&call(
        &client,
        "remove_member",
        json!({"orbit": c.orbit, "contributor_id": b.id}),
    )
    .await);
    assert_eq!(gone["data"]["contributor"]["id"], b.id);

    // A tool's invalid arguments: every field, plain words.
    let bad = call(
        &client,
        "list_tasks",
        json!({"orbit": c.orbit, "leased": "yes", "limit": "many"}),
    )
    .await;
    let s = refused(&bad, 422, "validation_failed", "fix_input");
    assert_eq!(s["errors"]["leased"][0], "must be true or false", "{s}");
    assert_eq!(s["errors"]["limit"][0], "must be a whole number", "{s}");
    client.cancel().await.ok();
}

/// Over MCP too every invalid argument is listed at once: a bad or missing id or
/// orbit beside the problems of the rest, before anything is read or written.
#[tokio::test]
async fn mcp_lists_every_invalid_argument_at_once() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "mcp-all-at-once", 0).await;
    let client = connect(&app, &c.owner).await;
    let fields = |s: &Value| -> BTreeSet<String> {
        s["errors"]
            .as_object()
            .expect("errors")
            .keys()
            .cloned()
            .collect()
    };
    let r = call(&client, "create_task", json!({"idempotency_key": "k-1"})).await;
    let s = refused(&r, 422, "validation_failed", "fix_input");
    assert_eq!(
        fields(&s),
        BTreeSet::from(["orbit".into(), "title".into()]),
        "{s}"
    );
    let r = call(
        &client,
        "get_revision",
        json!({"contribution_id": 0, "revision": 0}),
    )
    .await;
    let s = refused(&r, 422, "validation_failed", "fix_input");
    assert_eq!(
        fields(&s),
        BTreeSet::from(["contribution_id".into(), "revision".into()]),
        "{s}"
    );
    let r = call(
        &client,
        "write_checkpoint",
        json!({"task_id": "x", "summary": 5, "idempotency_key": "k-2"}),
    )
    .await;
    let s = refused(&r, 422, "validation_failed", "fix_input");
    let got = fields(&s);
    for f in ["task_id", "summary", "lease_version"] {
        assert!(got.contains(f), "{f} in {s}");
    }
    let r = call(&client, "list_tasks", json!({"orbit": [], "limit": "many"})).await;
    let s = refused(&r, 422, "validation_failed", "fix_input");
    assert_eq!(
        fields(&s),
        BTreeSet::from(["orbit".into(), "limit".into()]),
        "{s}"
    );
    // Nothing was written.
    assert_eq!(crate::work::orbit_revision(&app, c.orbit).await, 1);
    client.cancel().await.ok();
}

/// Over MCP, the key errors name the argument; the lease details reach the tool
/// refusal with the reaction they imply.
#[tokio::test]
async fn mcp_refusals_name_arguments_and_carry_the_details() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "mcp-details", 0).await;
    let a = &c.owner;
    let client = connect(&app, a).await;
    let missing = call(
        &client,
        "create_task",
        json!({"orbit": c.orbit, "title": "t"}),
    )
    .await;
    let s = refused(&missing, 422, "idempotency_key_required", "fix_input");
    let m = s["message"].as_str().unwrap();
    assert!(
        m.contains("idempotency_key") && !m.contains("Idempotency-Key"),
        "{m}"
    );
    let text = format!("{:?}", missing.content);
    assert!(!text.contains("Idempotency-Key"), "{text}");

    let t = task(&app, a, c.orbit, "t").await;
    let (l1, v1) = lease(&app, a, t, 600).await;
    release(&app, a, l1, v1).await;
    let (_, v2) = lease(&app, a, t, 600).await;
    let stale = call(
        &client,
        "write_checkpoint",
        json!({"task_id": t, "lease_version": v1, "summary": "s", "state": {},
               "idempotency_key": uuid::Uuid::new_v4().to_string()}),
    )
    .await;
    let s = refused(&stale, 409, "stale_lease_version", "continue");
    assert_eq!(s["details"]["current_lease_version"], v2);
    assert_eq!(s["details"]["yours"], true);
    let never = call(
        &client,
        "check_fence",
        json!({"task_id": t, "lease_version": v2 + 10}),
    )
    .await;
    refused(&never, 422, "lease_version_not_issued", "fix_input");
    client.cancel().await.ok();
}
