//! Knowledge (issue 6): problems and their overview, revisioned contributions,
//! exact-revision assessments, artifacts and memory records.
//!
//! Revisions and assessments are in [`revisions`], the problem overview in
//! [`overview`]; artifacts, memory records, membership and cross-orbit ids here.

mod overview;
mod revisions;

use base64::Engine as _;
use reqwest::Method;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::harness::{Agent, Resp, TestApp};
use crate::work::{crew, lease, orbit_revision, task};

async fn problem(app: &TestApp, who: &Agent, orbit: i64, title: &str) -> i64 {
    let path = format!("/api/v1/orbits/{orbit}/problems");
    let body = json!({"title": title, "statement": "why it matters"});
    app.post_keyed(&path, &who.token, body).await.created_id()
}

async fn contribute(app: &TestApp, who: &Agent, orbit: i64, body: Value) -> Resp {
    let path = format!("/api/v1/orbits/{orbit}/contributions");
    app.post_keyed(&path, &who.token, body).await
}

/// Posts a contribution and returns its id.
async fn contribution(app: &TestApp, who: &Agent, orbit: i64, body: Value) -> i64 {
    contribute(app, who, orbit, body).await.created_id()
}

async fn revise(app: &TestApp, who: &Agent, id: i64, body: Value) -> Resp {
    let path = format!("/api/v1/contributions/{id}/revisions");
    app.post_keyed(&path, &who.token, body).await
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
            .post_with_key(&path, &c.owner.token, "same-key", body.clone())
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
    // Past the limit the count is the one problem: ten thousand bad tags are not
    // each named (the answer stays small).
    let r = app
        .post(
            &path,
            &c.owner.token,
            json!({"content": "x", "tags": vec![""; 10_000]}),
        )
        .await;
    r.assert_error(422, "validation_failed");
    assert_eq!(
        r.json["errors"],
        json!({"tags": ["at most 32 tags"]}),
        "{}",
        r.text
    );
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
