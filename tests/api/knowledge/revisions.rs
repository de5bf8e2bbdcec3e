//! Revisioned contributions and exact-revision assessments.

use super::{artifact, assess, contribute, contribution, overview, problem, revise, verdicts};
use crate::harness::TestApp;
use crate::work::{crew, orbit_revision};
use serde_json::{json, Value};

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
    assert!(r.text.contains("has moved on since"), "{}", r.text);
    let r = revise(
        &app,
        author,
        id,
        json!({"base_revision": 7, "body": "ahead"}),
    )
    .await;
    r.assert_error(409, "revision_conflict");
    assert_eq!(r.json["details"]["current_revision"], 2);
    // No one moved on from a revision that never was: the message says what it is.
    assert!(r.text.contains("is ahead of"), "{}", r.text);

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
    // Revision numbers start at 1: 0 is a bad path, not a lookup.
    assess(&app, b, id, 0, "SUPPORTS")
        .await
        .assert_error(422, "invalid_path");
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
    let send = |body: Value| app.post_with_key(&path, &c.owner.token, "create-once", body);
    let first = send(body.clone()).await;
    assert_eq!(first.status, 201, "{}", first.text);
    let revision = orbit_revision(&app, c.orbit).await;
    // Key order and whitespace do not matter.
    let again = app
        .post_raw(
            &path,
            Some(&c.owner.token),
            &[
                ("Idempotency-Key", "create-once"),
                ("Content-Type", "application/json"),
            ],
            br#"{ "body": "only once", "title": "once", "kind": "ATTEMPT" }"#.to_vec(),
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
