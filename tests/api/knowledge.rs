//! Knowledge (issue 6): problems and their overview, revisioned contributions,
//! exact-revision assessments, artifacts and memory records.

use base64::Engine as _;
use reqwest::Method;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::harness::{Agent, Resp, TestApp};
use crate::work::{crew, lease, orbit_revision, outlive, task};

async fn problem(app: &TestApp, who: &Agent, orbit: i64, title: &str) -> i64 {
    let r = app
        .post_keyed(
            &format!("/api/v1/orbits/{orbit}/problems"),
            &who.token,
            json!({"title": title, "statement": "why it matters"}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.json["data"]["id"].as_i64().expect("problem id")
}

async fn contribute(app: &TestApp, who: &Agent, orbit: i64, body: Value) -> Resp {
    app.post_keyed(
        &format!("/api/v1/orbits/{orbit}/contributions"),
        &who.token,
        body,
    )
    .await
}

/// Posts a contribution and returns its id.
async fn contribution(app: &TestApp, who: &Agent, orbit: i64, body: Value) -> i64 {
    let r = contribute(app, who, orbit, body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.json["data"]["id"].as_i64().expect("contribution id")
}

async fn revise(app: &TestApp, who: &Agent, id: i64, body: Value) -> Resp {
    app.post_keyed(
        &format!("/api/v1/contributions/{id}/revisions"),
        &who.token,
        body,
    )
    .await
}

async fn assess(app: &TestApp, who: &Agent, id: i64, n: i64, verdict: &str) -> Resp {
    app.post_keyed(
        &format!("/api/v1/contributions/{id}/revisions/{n}/assessments"),
        &who.token,
        json!({"verdict": verdict, "rationale": "checked it"}),
    )
    .await
}

async fn overview(app: &TestApp, problem: i64) -> Value {
    let r = app
        .get(&format!("/api/v1/problems/{problem}/overview"), None)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.json["data"].clone()
}

fn verdicts(supports: i64, disputes: i64, inconclusive: i64, needs_work: i64) -> Value {
    json!({
        "SUPPORTS": supports, "DISPUTES": disputes,
        "INCONCLUSIVE": inconclusive, "NEEDS_WORK": needs_work
    })
}

async fn artifact(app: &TestApp, who: &Agent, orbit: i64, bytes: &[u8], media_type: &str) -> Resp {
    app.post_keyed(
        &format!("/api/v1/orbits/{orbit}/artifacts"),
        &who.token,
        json!({
            "name": "trace.bin",
            "media_type": media_type,
            "content_base64": base64::engine::general_purpose::STANDARD.encode(bytes),
        }),
    )
    .await
}

#[tokio::test]
async fn a_revision_from_a_stale_base_is_a_conflict_naming_the_current_revision() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "conflict", 1).await;
    let (author, other) = (&c.owner, &c.members[0]);
    let id = contribution(
        &app,
        author,
        c.orbit,
        json!({"kind": "CLAIM", "title": "v1", "body": "first"}),
    )
    .await;

    let r = revise(
        &app,
        author,
        id,
        json!({"base_revision": 1, "body": "second"}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json["data"]["revision"], 2);
    assert_eq!(r.json["data"]["title"], "v1", "an absent title is kept");
    assert_eq!(r.json["data"]["body"], "second");
    assert!(r.json["data"]["orbit_revision"].is_i64());

    // A second edit that also started from revision 1 loses.
    let r = revise(
        &app,
        author,
        id,
        json!({"base_revision": 1, "body": "stale"}),
    )
    .await;
    r.assert_error(409, "revision_conflict");
    assert_eq!(r.json["details"]["current_revision"], 2, "{}", r.text);
    let r = revise(
        &app,
        author,
        id,
        json!({"base_revision": 7, "body": "ahead"}),
    )
    .await;
    r.assert_error(409, "revision_conflict");
    assert_eq!(r.json["details"]["current_revision"], 2);

    // Only the author revises; other members assess or contribute instead.
    let r = revise(&app, other, id, json!({"base_revision": 2, "body": "mine"})).await;
    r.assert_error(403, "not_author");
    let r = revise(&app, author, 999_999, json!({"base_revision": 1})).await;
    r.assert_error(404, "not_found");

    let r = app.get(&format!("/api/v1/contributions/{id}"), None).await;
    assert_eq!(r.json["data"]["revision"], 2);
    assert_eq!(r.json["data"]["body"], "second");
}

#[tokio::test]
async fn earlier_revisions_stay_readable_and_unchanged() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "history", 0).await;
    let a = &c.owner;
    let art = artifact(&app, a, c.orbit, b"log", "text/plain").await;
    assert_eq!(art.status, 201, "{}", art.text);
    let art = art.json["data"]["id"].as_i64().unwrap();
    let id = contribution(
        &app,
        a,
        c.orbit,
        json!({"kind": "OBSERVATION", "title": "first title", "body": "first body",
               "artifact_ids": [art]}),
    )
    .await;
    let before = app
        .get(&format!("/api/v1/contributions/{id}/revisions/1"), None)
        .await;
    assert_eq!(before.status, 200, "{}", before.text);
    assert_eq!(
        before.json["data"]["title"], "first title",
        "{}",
        before.text
    );
    assert_eq!(before.json["data"]["artifact_ids"], json!([art]));

    let r = revise(
        &app,
        a,
        id,
        json!({"base_revision": 1, "title": "second title", "body": "second body",
               "artifact_ids": []}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);

    let after = app
        .get(&format!("/api/v1/contributions/{id}/revisions/1"), None)
        .await;
    assert_eq!(after.status, 200);
    assert_eq!(after.bytes, before.bytes, "revision 1 changed");
    let second = app
        .get(&format!("/api/v1/contributions/{id}/revisions/2"), None)
        .await;
    assert_eq!(second.json["data"]["title"], "second title");
    assert_eq!(second.json["data"]["body"], "second body");
    assert_eq!(second.json["data"]["artifact_ids"], json!([]));
    assert_eq!(second.json["data"]["revision"], 2);

    let list = app
        .get(&format!("/api/v1/contributions/{id}/revisions"), None)
        .await;
    let revisions: Vec<i64> = list.json["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["revision"].as_i64().unwrap())
        .collect();
    assert_eq!(revisions, vec![1, 2]);
    assert_eq!(list.json["meta"]["next_after"], Value::Null);
    let page = app
        .get(
            &format!("/api/v1/contributions/{id}/revisions?limit=1"),
            None,
        )
        .await;
    assert_eq!(page.json["meta"]["next_after"], 1, "{}", page.text);

    app.get(&format!("/api/v1/contributions/{id}/revisions/3"), None)
        .await
        .assert_error(404, "not_found");

    // The database refuses to change a written revision, whatever the code does.
    let mut conn = app.db.conn();
    let err = diesel::RunQueryDsl::execute(
        diesel::sql_query("UPDATE contribution_revisions SET body = 'rewritten'"),
        &mut conn,
    );
    assert!(err.is_err(), "a revision was rewritten");
}

#[tokio::test]
async fn an_assessment_of_revision_1_is_not_counted_on_revision_2() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "pinned", 2).await;
    let (author, b, d) = (&c.owner, &c.members[0], &c.members[1]);
    let p = problem(&app, author, c.orbit, "is the cache coherent?").await;
    let id = contribution(
        &app,
        author,
        c.orbit,
        json!({"kind": "CLAIM", "title": "coherent", "body": "proof", "problem_id": p}),
    )
    .await;

    let r = assess(&app, b, id, 1, "SUPPORTS").await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json["data"]["contribution_revision"], 1);
    assert_eq!(r.json["data"]["verdict"], "SUPPORTS");
    assert_eq!(r.json["data"]["assessor"]["id"], b.id);
    assert!(r.json["data"]["orbit_revision"].is_i64());
    assert_eq!(assess(&app, d, id, 1, "DISPUTES").await.status, 201);

    let got = app.get(&format!("/api/v1/contributions/{id}"), None).await;
    assert_eq!(got.json["data"]["verdict_counts"], verdicts(1, 1, 0, 0));
    assert_eq!(
        overview(&app, p).await["verdict_counts"],
        verdicts(1, 1, 0, 0)
    );

    let r = revise(
        &app,
        author,
        id,
        json!({"base_revision": 1, "body": "better proof"}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json["data"]["verdict_counts"], verdicts(0, 0, 0, 0));
    assert_eq!(
        overview(&app, p).await["verdict_counts"],
        verdicts(0, 0, 0, 0)
    );

    // Revision 1 can still be assessed, and that assessment stays with revision 1.
    assert_eq!(assess(&app, d, id, 1, "INCONCLUSIVE").await.status, 201);
    assert_eq!(assess(&app, b, id, 2, "NEEDS_WORK").await.status, 201);
    let got = app.get(&format!("/api/v1/contributions/{id}"), None).await;
    assert_eq!(got.json["data"]["verdict_counts"], verdicts(0, 0, 0, 1));
    assert_eq!(
        overview(&app, p).await["verdict_counts"],
        verdicts(0, 0, 0, 1)
    );

    let of = |n: i64| {
        let path = format!("/api/v1/contributions/{id}/assessments?revision={n}");
        let app = &app;
        async move { app.get(&path, None).await }
    };
    let one = of(1).await;
    let v1: Vec<&str> = one.json["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(v1, vec!["SUPPORTS", "DISPUTES", "INCONCLUSIVE"]);
    let two = of(2).await;
    assert_eq!(two.json["data"].as_array().unwrap().len(), 1);
    let all = app
        .get(&format!("/api/v1/contributions/{id}/assessments"), None)
        .await;
    assert_eq!(all.json["data"].as_array().unwrap().len(), 4);

    assess(&app, b, id, 3, "SUPPORTS")
        .await
        .assert_error(404, "not_found");
    assess(&app, b, id, 0, "SUPPORTS")
        .await
        .assert_error(404, "not_found");
    let r = app
        .post_keyed(
            &format!("/api/v1/contributions/{id}/revisions/2/assessments"),
            &b.token,
            json!({"verdict": "MAYBE", "rationale": "x"}),
        )
        .await;
    r.assert_error(422, "validation_failed");
    let r = app
        .post_keyed(
            &format!("/api/v1/contributions/{id}/revisions/2/assessments"),
            &b.token,
            json!({"verdict": "SUPPORTS", "rationale": ""}),
        )
        .await;
    r.assert_error(422, "validation_failed");
    assert!(r.json["errors"]["rationale"].is_array());
}

#[tokio::test]
async fn a_new_problem_overview_lists_every_key_with_zeros() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "empty", 0).await;
    let p = problem(&app, &c.owner, c.orbit, "nothing yet").await;
    let o = overview(&app, p).await;
    assert_eq!(
        o["task_counts"],
        json!({"OPEN": 0, "LEASED": 0, "COMPLETED": 0, "CANCELLED": 0})
    );
    assert_eq!(
        o["contribution_counts"],
        json!({"ATTEMPT": 0, "OBSERVATION": 0, "CLAIM": 0, "QUESTION": 0, "NOTE": 0})
    );
    assert_eq!(o["verdict_counts"], verdicts(0, 0, 0, 0));
    assert_eq!(o["latest_contributions"], json!([]));
    assert_eq!(o["pending_handoffs"], json!([]));
    assert_eq!(o["problem"]["id"], p);
    assert_eq!(o["problem"]["status"], "OPEN");
    assert_eq!(o["orbit_revision"], orbit_revision(&app, c.orbit).await);
    let keys: Vec<&String> = o.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        vec![
            "problem",
            "task_counts",
            "contribution_counts",
            "verdict_counts",
            "latest_contributions",
            "pending_handoffs",
            "orbit_revision"
        ]
    );
    app.get("/api/v1/problems/999999/overview", None)
        .await
        .assert_error(404, "not_found");
}

async fn problem_task(app: &TestApp, who: &Agent, orbit: i64, problem: i64, title: &str) -> i64 {
    let r = app
        .post_keyed(
            &format!("/api/v1/orbits/{orbit}/tasks"),
            &who.token,
            json!({"title": title, "problem_id": problem}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json["data"]["problem_id"], problem);
    r.json["data"]["id"].as_i64().unwrap()
}

#[tokio::test]
async fn the_overview_matches_a_seeded_orbit() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "seeded", 2).await;
    let (owner, a, b) = (&c.owner, &c.members[0], &c.members[1]);
    let p = problem(&app, owner, c.orbit, "the flaky deploy").await;
    let elsewhere = problem(&app, owner, c.orbit, "another problem").await;

    // Tasks in every state: 2 OPEN (one never leased, one whose lease ran out),
    // 2 LEASED (one with a pending handoff), 1 COMPLETED, 1 CANCELLED.
    let _open = problem_task(&app, owner, c.orbit, p, "open").await;
    let expired = problem_task(&app, owner, c.orbit, p, "expired").await;
    lease(&app, a, expired, 1).await;
    let leased = problem_task(&app, owner, c.orbit, p, "leased").await;
    lease(&app, a, leased, 900).await;
    let handed = problem_task(&app, owner, c.orbit, p, "handed").await;
    let (_, hv) = lease(&app, a, handed, 900).await;
    let ck = crate::work::checkpoint(&app, a, handed, hv, json!({"step": 1})).await;
    assert_eq!(ck.status, 201, "{}", ck.text);
    let offer = app
        .post_keyed(
            &format!("/api/v1/tasks/{handed}/handoffs"),
            &a.token,
            json!({"lease_version": hv, "checkpoint_id": ck.json["data"]["id"],
                   "message": "over to you"}),
        )
        .await;
    assert_eq!(offer.status, 201, "{}", offer.text);
    let handoff_id = offer.json["data"]["id"].as_i64().unwrap();

    let done = problem_task(&app, owner, c.orbit, p, "done").await;
    let (_, dv) = lease(&app, b, done, 900).await;
    let result = contribution(
        &app,
        b,
        c.orbit,
        json!({"kind": "ATTEMPT", "title": "fix", "body": "patched", "problem_id": p,
               "task_id": done}),
    )
    .await;
    let r = app
        .post_keyed(
            &format!("/api/v1/tasks/{done}/complete"),
            &b.token,
            json!({"lease_version": dv, "result_contribution_id": result}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["data"]["result_contribution_id"], result);
    let cancelled = problem_task(&app, owner, c.orbit, p, "cancelled").await;
    let r = app
        .post_keyed(
            &format!("/api/v1/tasks/{cancelled}/cancel"),
            &owner.token,
            json!({}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    // Not the problem's: a task without a problem and one of another problem.
    task(&app, owner, c.orbit, "unrelated").await;
    problem_task(&app, owner, c.orbit, elsewhere, "elsewhere").await;

    // Contributions: ATTEMPT ×2 (one above), OBSERVATION ×1, CLAIM ×2, QUESTION ×0,
    // NOTE ×1 in the problem; others outside it.
    let mut ids = vec![result];
    for (kind, title) in [
        ("CLAIM", "c1"),
        ("OBSERVATION", "o1"),
        ("ATTEMPT", "a2"),
        ("NOTE", "n1"),
        ("CLAIM", "c2"),
    ] {
        ids.push(
            contribution(
                &app,
                a,
                c.orbit,
                json!({"kind": kind, "title": title, "body": "", "problem_id": p}),
            )
            .await,
        );
    }
    contribution(
        &app,
        a,
        c.orbit,
        json!({"kind": "QUESTION", "title": "unrelated", "body": ""}),
    )
    .await;
    contribution(
        &app,
        a,
        c.orbit,
        json!({"kind": "QUESTION", "title": "elsewhere", "body": "", "problem_id": elsewhere}),
    )
    .await;
    // Verdicts on current revisions: SUPPORTS ×2, DISPUTES ×1; one assessment of a
    // revision that is no longer current is left out.
    assert_eq!(assess(&app, b, ids[1], 1, "SUPPORTS").await.status, 201);
    assert_eq!(assess(&app, owner, ids[1], 1, "SUPPORTS").await.status, 201);
    assert_eq!(assess(&app, b, ids[2], 1, "DISPUTES").await.status, 201);
    assert_eq!(assess(&app, b, ids[3], 1, "NEEDS_WORK").await.status, 201);
    let r = revise(
        &app,
        a,
        ids[3],
        json!({"base_revision": 1, "body": "again"}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);

    outlive(1).await;
    let o = overview(&app, p).await;
    assert_eq!(
        o["task_counts"],
        json!({"OPEN": 2, "LEASED": 2, "COMPLETED": 1, "CANCELLED": 1}),
        "{o}"
    );
    assert_eq!(
        o["contribution_counts"],
        json!({"ATTEMPT": 2, "OBSERVATION": 1, "CLAIM": 2, "QUESTION": 0, "NOTE": 1})
    );
    assert_eq!(o["verdict_counts"], verdicts(2, 1, 0, 0));
    let latest: Vec<i64> = o["latest_contributions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_i64().unwrap())
        .collect();
    let mut newest: Vec<i64> = ids.iter().rev().take(5).copied().collect();
    newest.truncate(5);
    assert_eq!(latest, newest, "the five newest, newest first");
    let revised = &o["latest_contributions"][2];
    assert_eq!(revised["id"], ids[3]);
    assert_eq!(revised["revision"], 2);
    assert_eq!(revised["verdict_counts"], verdicts(0, 0, 0, 0));
    let pending = o["pending_handoffs"].as_array().unwrap();
    assert_eq!(pending.len(), 1, "{o}");
    assert_eq!(pending[0]["id"], handoff_id);
    assert_eq!(pending[0]["status"], "PENDING");
    assert_eq!(o["orbit_revision"], orbit_revision(&app, c.orbit).await);

    // The other problem sees only its own.
    let e = overview(&app, elsewhere).await;
    assert_eq!(
        e["task_counts"],
        json!({"OPEN": 1, "LEASED": 0, "COMPLETED": 0, "CANCELLED": 0})
    );
    assert_eq!(e["contribution_counts"]["QUESTION"], 1);
    assert_eq!(e["pending_handoffs"], json!([]));

    // Filters of the contribution list.
    let list = |q: String| {
        let path = format!("/api/v1/orbits/{}/contributions?{q}", c.orbit);
        let app = &app;
        async move { app.get(&path, None).await }
    };
    assert_eq!(
        list(format!("problem_id={p}")).await.json["data"]
            .as_array()
            .unwrap()
            .len(),
        6
    );
    assert_eq!(
        list(format!("problem_id={p}&kind=CLAIM")).await.json["data"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let by_task = list(format!("task_id={done}")).await;
    assert_eq!(by_task.json["data"][0]["id"], result, "{}", by_task.text);
    assert_eq!(by_task.json["data"].as_array().unwrap().len(), 1);
    assert_eq!(
        list("kind=QUESTION".into()).await.json["data"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    list("kind=RUMOUR".into())
        .await
        .assert_error(422, "validation_failed");
}

#[tokio::test]
async fn artifact_bytes_round_trip_exactly_with_protective_headers() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "bytes", 0).await;
    let bytes: Vec<u8> = (0..=255u8).chain([0x00, 0xFF, 0x00]).collect();
    let sha = hex::encode(Sha256::digest(&bytes));
    let r = artifact(&app, &c.owner, c.orbit, &bytes, "text/html; charset=utf-8").await;
    assert_eq!(r.status, 201, "{}", r.text);
    let meta = &r.json["data"];
    assert_eq!(meta["size_bytes"], bytes.len());
    assert_eq!(meta["sha256"], sha);
    assert_eq!(meta["media_type"], "text/html; charset=utf-8");
    assert_eq!(meta["name"], "trace.bin");
    assert_eq!(meta["orbit_id"], c.orbit);
    assert_eq!(meta["created_by"]["id"], c.owner.id);
    assert!(meta["orbit_revision"].is_i64());
    let id = meta["id"].as_i64().unwrap();

    let got = app.get(&format!("/api/v1/artifacts/{id}"), None).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.json["data"]["sha256"], sha);
    assert!(got.json["data"].get("content").is_none());
    assert!(got.json["data"].get("orbit_revision").is_none());

    let path = format!("/api/v1/artifacts/{id}/content");
    let r = app.get(&path, None).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.bytes, bytes, "the bytes changed on the way");
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert!(
        r.header("content-disposition")
            .is_some_and(|v| v.starts_with("attachment")),
        "{:?}",
        r.header("content-disposition")
    );
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(r.header("content-security-policy"), Some("sandbox"));
    let etag = format!("\"{sha}\"");
    assert_eq!(r.header("etag"), Some(etag.as_str()));

    let r = app
        .send_raw(Method::GET, &path, None, &[("If-None-Match", &etag)], None)
        .await;
    assert_eq!(r.status, 304);
    assert!(r.bytes.is_empty());
    assert_eq!(r.header("etag"), Some(etag.as_str()));
    let r = app
        .send_raw(
            Method::GET,
            &path,
            None,
            &[("If-None-Match", "\"other\"")],
            None,
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.bytes, bytes);

    // The listing shows metadata only.
    let list = app
        .get(&format!("/api/v1/orbits/{}/artifacts", c.orbit), None)
        .await;
    assert_eq!(list.json["data"][0]["id"], id);

    // An empty file is a file.
    let r = artifact(&app, &c.owner, c.orbit, b"", "application/octet-stream").await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json["data"]["size_bytes"], 0);

    let artifacts = format!("/api/v1/orbits/{}/artifacts", c.orbit);
    let bad = |body: Value| app.post_keyed(&artifacts, &c.owner.token, body);
    let r = bad(json!({"name": "x", "media_type": "text/plain", "content_base64": "not base64!"}))
        .await;
    r.assert_error(422, "validation_failed");
    assert!(r.json["errors"]["content_base64"].is_array(), "{}", r.text);
    let r = bad(json!({"name": "x", "media_type": "text/plain", "content_base64": "QUJD\n"})).await;
    r.assert_error(422, "validation_failed");
    let r = bad(json!({"name": "x", "media_type": "plain", "content_base64": "QUJD"})).await;
    r.assert_error(422, "validation_failed");
    assert!(r.json["errors"]["media_type"].is_array(), "{}", r.text);
    let r = bad(json!({"name": "", "media_type": "text/plain", "content_base64": "QUJD"})).await;
    assert!(r.json["errors"]["name"].is_array(), "{}", r.text);

    app.get("/api/v1/artifacts/999999/content", None)
        .await
        .assert_error(404, "not_found");
}

#[tokio::test]
async fn memory_records_ignore_the_idempotency_key() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "memory", 0).await;
    let path = format!("/api/v1/orbits/{}/memory", c.orbit);
    let body = json!({"content": "the build needs 8 GiB", "tags": ["ci", "memory"]});
    let before = orbit_revision(&app, c.orbit).await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let r = app
            .send(
                Method::POST,
                &path,
                Some(&c.owner.token),
                Some("same-key"),
                Some(body.clone()),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        assert!(r.header("idempotency-replayed").is_none());
        assert_eq!(r.json["data"]["tags"], json!(["ci", "memory"]));
        assert_eq!(r.json["data"]["author"]["id"], c.owner.id);
        ids.push(r.json["data"]["id"].as_i64().unwrap());
    }
    assert_ne!(ids[0], ids[1], "the second POST replayed the first");
    assert_eq!(orbit_revision(&app, c.orbit).await, before + 2);
    // Without a key too.
    let r = app
        .post(&path, &c.owner.token, json!({"content": "untagged"}))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json["data"]["tags"], json!([]));

    let all = app.get(&path, None).await;
    assert_eq!(all.json["data"].as_array().unwrap().len(), 3);
    let tagged = app.get(&format!("{path}?tag=ci"), None).await;
    assert_eq!(tagged.status, 200, "{}", tagged.text);
    let tagged: Vec<i64> = tagged.json["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_i64().unwrap())
        .collect();
    assert_eq!(tagged, ids);
    assert_eq!(
        app.get(&format!("{path}?tag=nope"), None).await.json["data"],
        json!([])
    );

    let r = app
        .post(&path, &c.owner.token, json!({"content": "", "tags": [""]}))
        .await;
    r.assert_error(422, "validation_failed");
    assert!(r.json["errors"]["content"].is_array());
    assert!(r.json["errors"]["tags[0]"].is_array(), "{}", r.text);
    let many: Vec<String> = (0..33).map(|i| format!("t{i}")).collect();
    let r = app
        .post(&path, &c.owner.token, json!({"content": "x", "tags": many}))
        .await;
    assert!(r.json["errors"]["tags"].is_array(), "{}", r.text);
}

#[tokio::test]
async fn non_members_cannot_write_knowledge() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "members-only", 1).await;
    let member = &c.members[0];
    let outsider = app.agent("outsider").await;
    let p = problem(&app, &c.owner, c.orbit, "p").await;
    let id = contribution(
        &app,
        &c.owner,
        c.orbit,
        json!({"kind": "NOTE", "title": "t", "body": "b"}),
    )
    .await;
    let o = c.orbit;
    let writes: Vec<(String, Value)> = vec![
        (
            format!("/api/v1/orbits/{o}/problems"),
            json!({"title": "t", "statement": ""}),
        ),
        (
            format!("/api/v1/orbits/{o}/contributions"),
            json!({"kind": "NOTE", "title": "t", "body": ""}),
        ),
        (
            format!("/api/v1/contributions/{id}/revisions/1/assessments"),
            json!({"verdict": "SUPPORTS", "rationale": "r"}),
        ),
        (
            format!("/api/v1/contributions/{id}/revisions"),
            json!({"base_revision": 1, "body": "x"}),
        ),
        (
            format!("/api/v1/orbits/{o}/artifacts"),
            json!({"name": "n", "media_type": "text/plain", "content_base64": "QUJD"}),
        ),
        (
            format!("/api/v1/orbits/{o}/memory"),
            json!({"content": "c"}),
        ),
        (
            format!("/api/v1/problems/{p}/status"),
            json!({"status": "RESOLVED"}),
        ),
    ];
    let before = orbit_revision(&app, o).await;
    for (path, body) in &writes {
        let r = app.post_keyed(path, &outsider.token, body.clone()).await;
        r.assert_error(403, "not_a_member");
        let r = app
            .send(Method::POST, path, None, None, Some(body.clone()))
            .await;
        r.assert_error(401, "unauthorized");
    }
    assert_eq!(
        orbit_revision(&app, o).await,
        before,
        "a refused write wrote"
    );

    // A CONTRIBUTOR may not change a problem's status; the OWNER may.
    let status = format!("/api/v1/problems/{p}/status");
    app.post_keyed(&status, &member.token, json!({"status": "RESOLVED"}))
        .await
        .assert_error(403, "insufficient_role");
    let r = app
        .post_keyed(&status, &c.owner.token, json!({"status": "RESOLVED"}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["data"]["status"], "RESOLVED");
    assert_eq!(r.json["data"]["orbit_revision"], before + 1);
    let resolved = app
        .get(
            &format!("/api/v1/orbits/{o}/problems?status=RESOLVED"),
            None,
        )
        .await;
    assert_eq!(resolved.json["data"][0]["id"], p);
    let open = app
        .get(&format!("/api/v1/orbits/{o}/problems?status=OPEN"), None)
        .await;
    assert_eq!(open.json["data"], json!([]));

    // Keyed writes need their key.
    let r = app
        .post(
            &format!("/api/v1/orbits/{o}/contributions"),
            &member.token,
            json!({"kind": "NOTE", "title": "t", "body": ""}),
        )
        .await;
    r.assert_error(422, "idempotency_key_required");
}

#[tokio::test]
async fn ids_of_another_orbit_are_422_with_the_field_named() {
    let app = TestApp::spawn().await;
    let home = crew(&app, "home", 1).await;
    let away = crew(&app, "away", 0).await;
    let a = &home.members[0];
    let foreign_problem = problem(&app, &away.owner, away.orbit, "theirs").await;
    let foreign_task = task(&app, &away.owner, away.orbit, "theirs").await;
    let foreign_artifact = artifact(&app, &away.owner, away.orbit, b"x", "text/plain").await;
    let foreign_artifact = foreign_artifact.json["data"]["id"].as_i64().unwrap();
    let foreign_contribution = contribution(
        &app,
        &away.owner,
        away.orbit,
        json!({"kind": "NOTE", "title": "theirs", "body": ""}),
    )
    .await;
    let before = orbit_revision(&app, home.orbit).await;

    // A task naming another orbit's problem.
    let r = app
        .post_keyed(
            &format!("/api/v1/orbits/{}/tasks", home.orbit),
            &a.token,
            json!({"title": "t", "problem_id": foreign_problem}),
        )
        .await;
    r.assert_error(422, "validation_failed");
    assert!(r.json["errors"]["problem_id"].is_array(), "{}", r.text);

    // A contribution naming another orbit's problem, task and artifact.
    let r = contribute(
        &app,
        a,
        home.orbit,
        json!({"kind": "ATTEMPT", "title": "t", "body": "", "problem_id": foreign_problem,
               "task_id": foreign_task, "artifact_ids": [foreign_artifact]}),
    )
    .await;
    r.assert_error(422, "validation_failed");
    for field in ["problem_id", "task_id", "artifact_ids"] {
        assert!(r.json["errors"][field].is_array(), "{field}: {}", r.text);
    }
    let r = contribute(
        &app,
        a,
        home.orbit,
        json!({"kind": "ATTEMPT", "title": "t", "body": "", "problem_id": 999_999}),
    )
    .await;
    assert!(r.json["errors"]["problem_id"].is_array(), "{}", r.text);

    // A checkpoint naming another orbit's artifact; its own orbit's is fine.
    let t = task(&app, a, home.orbit, "work").await;
    let (_, v) = lease(&app, a, t, 900).await;
    let checkpoints = format!("/api/v1/tasks/{t}/checkpoints");
    let checkpoint = |ids: Vec<i64>| {
        app.post_keyed(
            &checkpoints,
            &a.token,
            json!({"lease_version": v, "summary": "s", "state": {}, "artifact_ids": ids}),
        )
    };
    let r = checkpoint(vec![foreign_artifact]).await;
    r.assert_error(422, "validation_failed");
    assert!(r.json["errors"]["artifact_ids"].is_array(), "{}", r.text);
    let own = artifact(&app, a, home.orbit, b"mine", "text/plain").await;
    let own = own.json["data"]["id"].as_i64().unwrap();
    let r = checkpoint(vec![own, own]).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = checkpoint(vec![own, foreign_artifact]).await;
    r.assert_error(422, "validation_failed");

    // Evidence from another orbit, and a result from another orbit.
    let mine = contribution(
        &app,
        a,
        home.orbit,
        json!({"kind": "CLAIM", "title": "t", "body": ""}),
    )
    .await;
    let r = app
        .post_keyed(
            &format!("/api/v1/contributions/{mine}/revisions/1/assessments"),
            &a.token,
            json!({"verdict": "SUPPORTS", "rationale": "r",
                   "evidence_contribution_ids": [foreign_contribution]}),
        )
        .await;
    r.assert_error(422, "validation_failed");
    assert!(r.json["errors"]["evidence_contribution_ids"].is_array());
    let r = revise(
        &app,
        a,
        mine,
        json!({"base_revision": 1, "artifact_ids": [foreign_artifact]}),
    )
    .await;
    assert!(r.json["errors"]["artifact_ids"].is_array(), "{}", r.text);
    let r = app
        .post_keyed(
            &format!("/api/v1/tasks/{t}/complete"),
            &a.token,
            json!({"lease_version": v, "result_contribution_id": foreign_contribution}),
        )
        .await;
    r.assert_error(422, "validation_failed");
    assert!(r.json["errors"]["result_contribution_id"].is_array());

    // Only the successful writes above advanced the revision: own artifact, task,
    // lease, one checkpoint and one contribution.
    assert_eq!(orbit_revision(&app, home.orbit).await, before + 5);
}

#[tokio::test]
async fn contribution_text_round_trips_exactly() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "verbatim", 0).await;
    let title = "  עברית with العربية 🧪 ";
    let body = "  leading and trailing spaces  \n\tשלום עולם — مرحبا بالعالم\u{200F}\n\
                👩🏽‍🔬 family: 👨‍👩‍👧‍👦 flag: 🇺🇳 combining: e\u{301} <script>alert(1)</script>\r\n  ";
    let r = contribute(
        &app,
        &c.owner,
        c.orbit,
        json!({"kind": "OBSERVATION", "title": title, "body": body}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json["data"]["title"], title);
    assert_eq!(r.json["data"]["body"], body);
    let id = r.json["data"]["id"].as_i64().unwrap();
    for path in [
        format!("/api/v1/contributions/{id}"),
        format!("/api/v1/contributions/{id}/revisions/1"),
    ] {
        let got = app.get(&path, None).await;
        assert_eq!(got.json["data"]["title"], title, "{path}");
        assert_eq!(got.json["data"]["body"], body, "{path}");
        assert!(
            got.text.contains("👨‍👩‍👧‍👦"),
            "emoji escaped or altered: {}",
            got.text
        );
    }
    // 200 characters (not bytes) is the title limit.
    let long = "é".repeat(200);
    let r = contribute(
        &app,
        &c.owner,
        c.orbit,
        json!({"kind": "NOTE", "title": long, "body": ""}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = contribute(
        &app,
        &c.owner,
        c.orbit,
        json!({"kind": "NOTE", "title": "é".repeat(201), "body": ""}),
    )
    .await;
    assert!(r.json["errors"]["title"].is_array(), "{}", r.text);
    // A NUL cannot be stored verbatim, so it is refused rather than altered.
    let r = contribute(
        &app,
        &c.owner,
        c.orbit,
        json!({"kind": "NOTE", "title": "t", "body": "a\u{0}b"}),
    )
    .await;
    r.assert_error(422, "validation_failed");
    assert!(r.json["errors"]["body"].is_array(), "{}", r.text);
}

#[tokio::test]
async fn a_replayed_contribution_create_returns_the_same_bytes() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "replay", 0).await;
    let path = format!("/api/v1/orbits/{}/contributions", c.orbit);
    let body = json!({"kind": "ATTEMPT", "title": "once", "body": "only once"});
    let send = |body: Value| {
        app.send(
            Method::POST,
            &path,
            Some(&c.owner.token),
            Some("create-once"),
            Some(body),
        )
    };
    let first = send(body.clone()).await;
    assert_eq!(first.status, 201, "{}", first.text);
    let revision = orbit_revision(&app, c.orbit).await;
    // Key order and whitespace do not matter.
    let again = app
        .send_raw(
            Method::POST,
            &path,
            Some(&c.owner.token),
            &[
                ("Idempotency-Key", "create-once"),
                ("Content-Type", "application/json"),
            ],
            Some(br#"{ "body": "only once", "title": "once", "kind": "ATTEMPT" }"#.to_vec()),
        )
        .await;
    assert_eq!(again.status, 201, "{}", again.text);
    assert_eq!(again.bytes, first.bytes, "the replay differs");
    assert_eq!(again.header("idempotency-replayed"), Some("true"));
    assert_eq!(orbit_revision(&app, c.orbit).await, revision);
    let list = app.get(&path, None).await;
    assert_eq!(list.json["data"].as_array().unwrap().len(), 1);

    let other = send(json!({"kind": "ATTEMPT", "title": "twice", "body": ""})).await;
    other.assert_error(409, "idempotency_key_reused");
}

#[tokio::test]
async fn every_knowledge_write_is_one_revision_with_its_change() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "feed", 1).await;
    let (owner, b) = (&c.owner, &c.members[0]);
    let start = orbit_revision(&app, c.orbit).await;
    let p = problem(&app, owner, c.orbit, "p").await;
    let status = app
        .post_keyed(
            &format!("/api/v1/problems/{p}/status"),
            &owner.token,
            json!({"status": "RESOLVED"}),
        )
        .await;
    assert_eq!(status.status, 200, "{}", status.text);
    let id = contribution(
        &app,
        owner,
        c.orbit,
        json!({"kind": "CLAIM", "title": "t", "body": "", "problem_id": p}),
    )
    .await;
    assert_eq!(
        revise(&app, owner, id, json!({"base_revision": 1}))
            .await
            .status,
        201
    );
    assert_eq!(assess(&app, b, id, 2, "SUPPORTS").await.status, 201);
    assert_eq!(
        artifact(&app, b, c.orbit, b"x", "text/plain").await.status,
        201
    );
    let m = app
        .post(
            &format!("/api/v1/orbits/{}/memory", c.orbit),
            &b.token,
            json!({"content": "m"}),
        )
        .await;
    assert_eq!(m.status, 201);

    let feed = app
        .get(
            &format!("/api/v1/orbits/{}/changes?after={start}", c.orbit),
            None,
        )
        .await;
    let changes = feed.json["data"].as_array().unwrap();
    let seen: Vec<(i64, &str, &str)> = changes
        .iter()
        .map(|c| {
            (
                c["revision"].as_i64().unwrap(),
                c["kind"].as_str().unwrap(),
                c["entity_type"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (start + 1, "problem.created", "problem"),
            (start + 2, "problem.updated", "problem"),
            (start + 3, "contribution.created", "contribution"),
            (start + 4, "contribution.revised", "contribution"),
            (start + 5, "assessment.created", "assessment"),
            (start + 6, "artifact.created", "artifact"),
            (start + 7, "memory.created", "memory"),
        ]
    );
    assert_eq!(changes[2]["entity_id"], id);
    assert_eq!(changes[3]["entity_id"], id);
    assert_eq!(m.json["data"]["orbit_revision"], start + 7);
}

#[tokio::test]
async fn concurrent_assessments_and_a_revision_keep_the_counts_exact() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "racing", 4).await;
    let p = problem(&app, &c.owner, c.orbit, "p").await;
    let id = contribution(
        &app,
        &c.owner,
        c.orbit,
        json!({"kind": "CLAIM", "title": "t", "body": "", "problem_id": p}),
    )
    .await;
    let verdict_names = ["SUPPORTS", "DISPUTES", "INCONCLUSIVE", "NEEDS_WORK"];
    let mut jobs = Vec::new();
    for i in 0..16 {
        let who = &c.members[i % 4];
        jobs.push(assess(&app, who, id, 1, verdict_names[i % 4]));
    }
    let (results, revised) = tokio::join!(
        futures::future::join_all(jobs),
        revise(
            &app,
            &c.owner,
            id,
            json!({"base_revision": 1, "body": "v2"})
        )
    );
    assert!(results.iter().all(|r| r.status == 201));
    assert_eq!(revised.status, 201, "{}", revised.text);
    // Some assessments of revision 1 may have landed before the revision, some
    // after: either way none counts now.
    let got = app.get(&format!("/api/v1/contributions/{id}"), None).await;
    assert_eq!(got.json["data"]["verdict_counts"], verdicts(0, 0, 0, 0));
    assert_eq!(
        overview(&app, p).await["verdict_counts"],
        verdicts(0, 0, 0, 0)
    );

    let jobs: Vec<_> = (0..12)
        .map(|i| assess(&app, &c.members[i % 4], id, 2, verdict_names[i % 4]))
        .collect();
    assert!(futures::future::join_all(jobs)
        .await
        .iter()
        .all(|r| r.status == 201));
    let got = app.get(&format!("/api/v1/contributions/{id}"), None).await;
    assert_eq!(got.json["data"]["verdict_counts"], verdicts(3, 3, 3, 3));
    assert_eq!(
        overview(&app, p).await["verdict_counts"],
        verdicts(3, 3, 3, 3)
    );
    let one = app
        .get(
            &format!("/api/v1/contributions/{id}/assessments?revision=1&limit=100"),
            None,
        )
        .await;
    assert_eq!(one.json["data"].as_array().unwrap().len(), 16);
}
