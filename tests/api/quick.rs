//! Quick writes (src/perf/quick.rs): the lease cycle's successful case in one statement
//! answers exactly what the ordinary path would, and declines everything else to it.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::harness::{count_orbit_row_updates, orbit_row_updates, Agent, Resp, RowLock, TestApp};
use crate::work::{acquire, crew, task};

/// `(done, declined)` from `/metrics`.
async fn quick_counts(app: &TestApp) -> (u64, u64) {
    let [done, declined] = app
        .metrics([
            "orbit_quick_writes_total",
            "orbit_quick_writes_declined_total",
        ])
        .await;
    (done, declined)
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
    app.post_with_key(path, &who.token, key, body).await
}

/// The orbit's changes after revision `after`, each as the values of `fields`.
async fn changes_after<const N: usize>(
    app: &TestApp,
    orbit: i64,
    after: i64,
    fields: [&str; N],
) -> Vec<[Value; N]> {
    let feed = app
        .get(
            &format!("/api/v1/orbits/{orbit}/changes?after={after}"),
            None,
        )
        .await;
    assert_eq!(feed.status, 200, "{}", feed.text);
    feed.json["data"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|ch| fields.map(|f| ch[f].clone()))
        .collect()
}

#[tokio::test]
async fn quick_writes_answer_byte_for_byte_what_the_ordinary_reads_show() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "quick", 0).await;
    // A name and no model claim that exercise the JSON escaping of the rendering:
    // quotes, a backslash, emoji, right-to-left text.
    let r = app
        .register(json!({"type": "AGENT", "name": "Zoë \"q\" \\ 🚀 مرحبا"}))
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

/// Task and contribution creation in an orbit named by its id, with nothing more
/// to check, run the quick way and answer byte for byte what the ordinary reads
/// show; their keys replay the same bytes. A slug, a problem or a task to check
/// take the ordinary path without trying the quick one, and a non-member is
/// declined to it and refused there.
#[tokio::test]
async fn creations_run_the_quick_way_answered_as_the_ordinary_reads_show() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "quick-new", 1).await;
    let a = &c.members[0];
    let t0 = task(&app, a, c.orbit, "warm").await;
    let rev0 = crate::work::orbit_revision(&app, c.orbit).await;
    let before = quick_counts(&app).await;

    let tasks = format!("/api/v1/orbits/{}/tasks", c.orbit);
    let contributions = format!("/api/v1/orbits/{}/contributions", c.orbit);
    let title = "a \"quoted\" title \\ 🚀 مرحبا";
    let task_body = json!({"title": title, "description": "line 1\nline 2\t\u{1}"});
    let bare_body = json!({"title": "bare"});
    let note_body = json!({"kind": "CLAIM", "title": title, "body": "body 🚀 \u{7f}",
                           "artifact_ids": []});
    let made_task = keyed(&app, a, &tasks, "n-task", task_body.clone()).await;
    let made_bare = keyed(&app, a, &tasks, "n-bare", bare_body.clone()).await;
    let made_note = keyed(&app, a, &contributions, "n-note", note_body.clone()).await;
    for (made, revision) in [(&made_task, 1), (&made_bare, 2), (&made_note, 3)] {
        assert_eq!(made.status, 201, "{}", made.text);
        assert_eq!(made.json["data"]["orbit_revision"], rev0 + revision);
    }
    let (task_id, bare_id, note_id) = (
        made_task.json["data"]["id"].as_i64().unwrap(),
        made_bare.json["data"]["id"].as_i64().unwrap(),
        made_note.json["data"]["id"].as_i64().unwrap(),
    );
    let read = app.get(&format!("/api/v1/tasks/{task_id}"), None).await;
    assert_write_is_read_plus_revision(&made_task, &read);
    let read = app.get(&format!("/api/v1/tasks/{bare_id}"), None).await;
    assert_write_is_read_plus_revision(&made_bare, &read);
    assert_eq!(made_bare.json["data"]["description"], "");
    let read = app
        .get(&format!("/api/v1/contributions/{note_id}"), None)
        .await;
    assert_write_is_read_plus_revision(&made_note, &read);
    // The first revision is kept, as the ordinary creation keeps it.
    let first = app
        .get(
            &format!("/api/v1/contributions/{note_id}/revisions/1"),
            None,
        )
        .await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!(first.json["data"]["title"], title);
    assert_eq!(
        first.json["data"]["created_at"],
        made_note.json["data"]["created_at"]
    );
    let after = quick_counts(&app).await;
    assert_eq!((after.0 - before.0, after.1 - before.1), (3, 0));

    // Their changes, as the ordinary path words them.
    let fields = ["kind", "summary", "entity_id"];
    assert_eq!(
        changes_after(&app, c.orbit, rev0, fields).await,
        vec![
            [
                json!("task.created"),
                json!(format!("task {task_id} created")),
                json!(task_id)
            ],
            [
                json!("task.created"),
                json!(format!("task {bare_id} created")),
                json!(bare_id)
            ],
            [
                json!("contribution.created"),
                json!(format!("contribution {note_id} (CLAIM) created")),
                json!(note_id)
            ],
        ]
    );

    // Each key replays its bytes (a key seen before is declined to the ordinary
    // path, which replays it).
    for (path, key, body, first) in [
        (&tasks, "n-task", task_body, &made_task),
        (&tasks, "n-bare", bare_body, &made_bare),
        (&contributions, "n-note", note_body, &made_note),
    ] {
        let again = keyed(&app, a, path, key, body).await;
        assert_eq!(again.status, 201);
        assert_eq!(again.header("idempotency-replayed"), Some("true"));
        assert_eq!(again.bytes, first.bytes);
    }
    let replayed = quick_counts(&app).await;
    assert_eq!((replayed.0 - after.0, replayed.1 - after.1), (0, 3));

    // A slug, or a task to check, is the ordinary path's from the start.
    let by_slug = keyed(
        &app,
        a,
        "/api/v1/orbits/quick-new/tasks",
        "n-slug",
        json!({"title": "by slug"}),
    )
    .await;
    assert_eq!(by_slug.status, 201, "{}", by_slug.text);
    let on_task = keyed(
        &app,
        a,
        &contributions,
        "n-on-task",
        json!({"kind": "NOTE", "title": "on a task", "body": "", "task_id": t0}),
    )
    .await;
    assert_eq!(on_task.status, 201, "{}", on_task.text);
    assert_eq!(on_task.json["data"]["task_id"], t0);
    assert_eq!(quick_counts(&app).await, replayed);

    // An outsider is declined, then refused by the ordinary path; nothing changed.
    let outsider = app.agent("quick-new-outsider").await;
    app.get("/api/v1/me", Some(&outsider.token)).await;
    let rev = crate::work::orbit_revision(&app, c.orbit).await;
    keyed(&app, &outsider, &tasks, "o-task", json!({"title": "no"}))
        .await
        .assert_error(403, "not_a_member");
    keyed(
        &app,
        &outsider,
        &contributions,
        "o-note",
        json!({"kind": "NOTE", "title": "no", "body": ""}),
    )
    .await
    .assert_error(403, "not_a_member");
    let last = quick_counts(&app).await;
    assert_eq!((last.0 - replayed.0, last.1 - replayed.1), (0, 2));
    assert_eq!(crate::work::orbit_revision(&app, c.orbit).await, rev);
}

/// A contribution's next revision by its author, with no artifacts involved, runs
/// the quick way and answers byte for byte what the ordinary read shows: the
/// fields it keeps (title, body, kind) filled in from the row, the task it names,
/// the assessments of the earlier revision not counted. Its change is worded as the
/// ordinary path words it, and its key replays the same bytes. A stored text
/// holding U+0001 (what the text marks are made of), a contribution with a problem
/// or artifacts, another member, and a base that moved on are declined to the
/// ordinary path, which answers them as ever.
#[tokio::test]
async fn revisions_run_the_quick_way_answered_as_the_ordinary_reads_show() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "quick-rev", 2).await;
    let (a, b) = (&c.members[0], &c.members[1]);
    let t0 = task(&app, a, c.orbit, "warm").await;
    app.get("/api/v1/me", Some(&b.token)).await;
    let contributions = format!("/api/v1/orbits/{}/contributions", c.orbit);
    let title = "a \"quoted\" title \\ 🚀 مرحبا \u{7f} \n\t end";
    let made = keyed(
        &app,
        a,
        &contributions,
        "c-plain",
        json!({"kind": "CLAIM", "title": title, "body": "first body \u{2}"}),
    )
    .await;
    let on_task = keyed(
        &app,
        a,
        &contributions,
        "c-task",
        json!({"kind": "NOTE", "title": "on a task", "body": "b", "task_id": t0}),
    )
    .await;
    let odd = keyed(
        &app,
        a,
        &contributions,
        "c-odd",
        json!({"kind": "NOTE", "title": "x\"\u{1}4\u{1}", "body": "b"}),
    )
    .await;
    let (plain, on_task, odd) = (made.created_id(), on_task.created_id(), odd.created_id());
    let assessed = app
        .post_keyed(
            &format!("/api/v1/contributions/{plain}/revisions/1/assessments"),
            &b.token,
            json!({"verdict": "SUPPORTS", "rationale": "checked"}),
        )
        .await;
    assert_eq!(assessed.status, 201, "{}", assessed.text);
    let revise = |id: i64| format!("/api/v1/contributions/{id}/revisions");
    let read = |id: i64| format!("/api/v1/contributions/{id}");
    let rev0 = crate::work::orbit_revision(&app, c.orbit).await;
    let before = quick_counts(&app).await;

    // Body only, title only, both; and a contribution on a task.
    #[rustfmt::skip]
    let writes = [
        (plain, "r-body", json!({"base_revision": 1, "body": "second \"body\" 🚀"})),
        (plain, "r-title", json!({"base_revision": 2, "title": "new title \\ \u{3}"})),
        (plain, "r-both", json!({"base_revision": 3, "title": "t4", "body": ""})),
        (on_task, "r-task", json!({"base_revision": 1})),
    ];
    let mut answers = Vec::new();
    for (n, (id, key, body)) in writes.iter().enumerate() {
        let r = keyed(&app, a, &revise(*id), key, body.clone()).await;
        assert_eq!(r.status, 201, "{}", r.text);
        assert_eq!(r.json["data"]["orbit_revision"], rev0 + 1 + n as i64);
        assert_write_is_read_plus_revision(&r, &app.get(&read(*id), None).await);
        answers.push(r);
    }
    let after = quick_counts(&app).await;
    assert_eq!((after.0 - before.0, after.1 - before.1), (4, 0));
    assert_eq!(answers[0].json["data"]["title"], title);
    assert_eq!(answers[0].json["data"]["kind"], "CLAIM");
    assert_eq!(answers[0].json["data"]["verdict_counts"]["SUPPORTS"], 0);
    assert_eq!(answers[1].json["data"]["body"], "second \"body\" 🚀");
    assert_eq!(answers[3].json["data"]["task_id"], t0);
    assert_eq!(answers[3].json["data"]["revision"], 2);
    // The revision kept as written, and the assessment stays with revision 1.
    let kept = app.get(&format!("{}/revisions/2", read(plain)), None).await;
    assert_eq!(kept.json["data"]["title"], title);
    assert_eq!(kept.json["data"]["body"], "second \"body\" 🚀");
    let first = app.get(&format!("{}/revisions/1", read(plain)), None).await;
    assert_eq!(first.json["data"]["body"], "first body \u{2}");

    // Their changes, as the ordinary path words them, with the task named.
    let revised = |id: i64, n: i64, task: Value| {
        [
            json!("contribution.revised"),
            json!(format!("contribution {id} revised to revision {n}")),
            task,
        ]
    };
    assert_eq!(
        changes_after(&app, c.orbit, rev0, ["kind", "summary", "task_id"]).await,
        vec![
            revised(plain, 2, Value::Null),
            revised(plain, 3, Value::Null),
            revised(plain, 4, Value::Null),
            revised(on_task, 2, json!(t0)),
        ]
    );

    // A key replays its bytes (declined to the ordinary path, which replays it).
    let (id, key, body) = &writes[0];
    let again = keyed(&app, a, &revise(*id), key, body.clone()).await;
    assert_eq!(again.header("idempotency-replayed"), Some("true"));
    assert_eq!(again.bytes, answers[0].bytes);
    let replayed = quick_counts(&app).await;
    assert_eq!((replayed.0 - after.0, replayed.1 - after.1), (0, 1));

    // A kept title holding U+0001 is declined: this one holds the body's text mark
    // (the fifth mark of a revision that keeps both), which would be filled again
    // inside it. The ordinary path answers it, as the read shows.
    let r = keyed(&app, a, &revise(odd), "r-odd", json!({"base_revision": 1})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_write_is_read_plus_revision(&r, &app.get(&read(odd), None).await);
    assert_eq!(r.json["data"]["title"], "x\"\u{1}4\u{1}");
    let odd_done = quick_counts(&app).await;
    assert_eq!((odd_done.0 - replayed.0, odd_done.1 - replayed.1), (0, 1));

    // A problem to count, another member, a base that moved on: declined, then
    // decided by the ordinary path; artifacts in the request: the ordinary path's
    // from the start.
    let problem = app
        .post_keyed(
            &format!("/api/v1/orbits/{}/problems", c.orbit),
            &a.token,
            json!({"title": "p", "statement": "s"}),
        )
        .await
        .created_id();
    let of_problem = keyed(
        &app,
        a,
        &contributions,
        "c-problem",
        json!({"kind": "NOTE", "title": "on a problem", "body": "", "problem_id": problem}),
    )
    .await
    .created_id();
    let counted = quick_counts(&app).await;
    let r = keyed(
        &app,
        a,
        &revise(of_problem),
        "r-problem",
        json!({"base_revision": 1}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_write_is_read_plus_revision(&r, &app.get(&read(of_problem), None).await);
    let rev = crate::work::orbit_revision(&app, c.orbit).await;
    keyed(
        &app,
        b,
        &revise(plain),
        "b-rev",
        json!({"base_revision": 4, "body": "mine"}),
    )
    .await
    .assert_error(403, "not_author");
    let stale = keyed(
        &app,
        a,
        &revise(plain),
        "r-stale",
        json!({"base_revision": 3, "body": "x"}),
    )
    .await;
    stale.assert_error(409, "revision_conflict");
    assert_eq!(stale.json["details"]["current_revision"], 4);
    let last = quick_counts(&app).await;
    assert_eq!((last.0 - counted.0, last.1 - counted.1), (0, 3));
    assert_eq!(crate::work::orbit_revision(&app, c.orbit).await, rev);
    let r = keyed(
        &app,
        a,
        &revise(plain),
        "r-art",
        json!({"base_revision": 4, "artifact_ids": []}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(quick_counts(&app).await, last);
}

/// A quick write's body is rendered by the service with marks that the statement
/// fills (src/domain/marks.rs). A client's text that holds a mark sends the write
/// the ordinary way, answered as ever; a release after a renewal gets its
/// `renewed_at` filled from the lease's row.
#[tokio::test]
async fn a_mark_in_a_clients_text_goes_the_ordinary_way_and_every_mark_is_filled() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "marks", 1).await;
    let a = &c.members[0];
    let t = task(&app, &c.owner, c.orbit, "marks").await;
    let acquired = keyed(
        &app,
        a,
        &format!("/api/v1/tasks/{t}/leases"),
        "m-1",
        json!({}),
    )
    .await;
    assert_eq!(acquired.status, 201, "{}", acquired.text);
    let lease_id = acquired.json["data"]["id"].as_i64().unwrap();
    let start = quick_counts(&app).await;

    // The checkpoint's marks are its id (the first number mark), its orbit, its
    // sequence and its time (the fourth mark, 4 ms into year 1).
    let checkpoints = format!("/api/v1/tasks/{t}/checkpoints");
    for (key, summary, state) in [
        ("m-2", "-9223372036854775806", json!({})),
        ("m-3", "a time", json!({"at": "0001-01-01T00:00:00.004Z"})),
    ] {
        let body = json!({"lease_version": 1, "summary": summary, "state": state});
        let cp = keyed(&app, a, &checkpoints, key, body).await;
        assert_eq!(cp.status, 201, "{}", cp.text);
        assert_eq!(cp.json["data"]["summary"], summary);
        assert_eq!(cp.json["data"]["state"], state);
        let id = cp.json["data"]["id"].as_i64().unwrap();
        let read = app.get(&format!("/api/v1/checkpoints/{id}"), None).await;
        assert_write_is_read_plus_revision(&cp, &read);
    }
    // Neither was tried the quick way (nor declined by it).
    assert_eq!(quick_counts(&app).await, start);

    let renewed = keyed(
        &app,
        a,
        &format!("/api/v1/leases/{lease_id}/renew"),
        "m-4",
        json!({"lease_version": 1, "duration_seconds": 600}),
    )
    .await;
    assert_eq!(renewed.status, 200, "{}", renewed.text);
    let released = keyed(
        &app,
        a,
        &format!("/api/v1/leases/{lease_id}/release"),
        "m-5",
        json!({"lease_version": 1}),
    )
    .await;
    assert_eq!(released.status, 200, "{}", released.text);
    assert_eq!(
        released.json["data"]["renewed_at"],
        renewed.json["data"]["renewed_at"]
    );
    assert!(released.json["data"]["released_at"].is_string());
    let read = app.get(&format!("/api/v1/leases/{lease_id}"), None).await;
    assert_write_is_read_plus_revision(&released, &read);
    let end = quick_counts(&app).await;
    assert_eq!(
        (end.0 - start.0, end.1 - start.1),
        (1, 0),
        "the release went the quick way"
    );
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
    let (leases, checkpoints) = (
        format!("/api/v1/tasks/{t}/leases"),
        format!("/api/v1/tasks/{t}/checkpoints"),
    );
    let release = format!("/api/v1/leases/{lease_id}/release");
    let zombie = json!({"lease_version": 1, "summary": "zombie", "state": {}});
    let future = json!({"lease_version": 2, "summary": "future", "state": {}});
    #[rustfmt::skip]
    let refusals = [
        (b, &leases, "b1", json!({}), 409, "lease_conflict"),
        (a, &leases, "a2", json!({}), 409, "lease_already_held"),
        (b, &checkpoints, "b2", zombie, 409, "lease_not_held"),
        (a, &checkpoints, "a3", future, 422, "lease_version_not_issued"),
        (b, &release, "b3", json!({"lease_version": 1}), 409, "lease_not_held"),
        (a, &release, "a4", json!({"lease_version": 2}), 422, "lease_version_not_issued"),
    ];
    for (who, path, key, body, status, code) in refusals {
        keyed(&app, who, path, key, body)
            .await
            .assert_error(status, code);
    }
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
    let (second_token, _) = app.another_token(&a.token).await;
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

/// Acquires `task` for `who` (a quick write, which also points `who`'s later quick
/// writes at the task's orbit's queue); the lease's id.
async fn lease(app: &TestApp, who: &Agent, task: i64) -> i64 {
    let r = app
        .post_keyed(
            &format!("/api/v1/tasks/{task}/leases"),
            &who.token,
            json!({}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.json["data"]["id"].as_i64().unwrap()
}

/// Leases a warm-up task in its orbit for each of `who`: their later quick writes
/// are queued by that orbit.
async fn point_at(app: &TestApp, crew: &crate::work::Crew, who: &[&Agent]) {
    for agent in who {
        lease(
            app,
            agent,
            task(app, &crew.owner, crew.orbit, "warm-up").await,
        )
        .await;
    }
}

/// Sends the owner's acquire of `blocker`, which waits in the database on the test's
/// lock of it, and once it waits runs `meanwhile`, which must release the lock;
/// both answers.
async fn with_a_blocked_group<F: std::future::Future>(
    app: &TestApp,
    owner: &Agent,
    blocker: i64,
    meanwhile: impl FnOnce(RowLock) -> F,
) -> (Resp, F::Output) {
    let lock = RowLock::take(&app.db, blocker);
    let path = format!("/api/v1/tasks/{blocker}/leases");
    let first = app.post_with_key(&path, &owner.token, "blocked", json!({}));
    let rest = async {
        let mut monitor = app.db.conn();
        let deadline = Instant::now() + Duration::from_secs(20);
        while lock.waiting_now(&mut monitor) == 0 {
            assert!(
                Instant::now() < deadline,
                "the first group never reached the lock"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        meanwhile(lock).await
    };
    futures::future::join(first, rest).await
}

/// Waits (up to 20 s) until `n` quick writes wait in their queues, behind a group
/// the test holds on a lock: the moment to let that group go.
async fn until_quick_writes_wait(app: &TestApp, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while app.metrics(["orbit_quick_writes_waiting"]).await != [n] {
        assert!(Instant::now() < deadline, "the {n} writes never queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn writes_that_queue_meanwhile_commit_as_one_group_each_answered_as_alone() {
    // One queue and one lane, so no lane to borrow and one group at a time: the
    // writes that queue behind a blocked one deterministically form the next group.
    let app = TestApp::spawn_with(|c| {
        c.write_lanes = 1;
        c.quick_queues = Some(1);
    })
    .await;
    let c = crew(&app, "group", 7).await;
    let b = crew(&app, "group-b", 0).await;
    let m = &c.members;
    let t = |title: &'static str| task(&app, &c.owner, c.orbit, title);
    let (blocker, spare0, held, contested, dup) = (
        t("blocker").await,
        t("spare0").await,
        t("held").await,
        t("contested").await,
        t("dup").await,
    );
    // m0 holds a lease in orbit B and then writes in A: its queue is A's, and its
    // checkpoint in B goes in A's group, which then spans two orbits.
    app.join(&m[0], b.orbit).await;
    let b_task = task(&app, &b.owner, b.orbit, "in b").await;
    lease(&app, &m[0], b_task).await;
    lease(&app, &c.owner, spare0).await;
    let released = lease(&app, &m[1], t("released").await).await;
    let checkpointed = t("checkpointed").await;
    lease(&app, &m[2], checkpointed).await;
    lease(&app, &m[4], held).await;
    for who in [&m[0], &m[3], &m[5], &m[6]] {
        lease(&app, who, t("warm-up").await).await;
    }
    let (rev_a, rev_b) = (
        crate::work::orbit_revision(&app, c.orbit).await,
        crate::work::orbit_revision(&app, b.orbit).await,
    );
    count_orbit_row_updates(&app.db);
    let groups = "orbit_quick_write_groups_total";
    let [groups0] = app.metrics([groups]).await;
    let counts0 = quick_counts(&app).await;

    // The owner's acquire waits in the database on the test's lock of its task;
    // meanwhile eight more writes queue behind it.
    let (first, answers) = with_a_blocked_group(&app, &c.owner, blocker, |lock| async {
        let send = |who: &Agent, path: String, key: &'static str, body: Value| {
            let token = who.token.clone();
            let app = &app;
            async move { app.post_with_key(&path, &token, key, body).await }
        };
        #[rustfmt::skip]
        let writes = [
            (&m[0], format!("/api/v1/tasks/{b_task}/checkpoints"), "cp-b",
             json!({"lease_version": 1, "summary": "in b", "state": {"b": 1}})),
            (&m[1], format!("/api/v1/leases/{released}/release"), "release",
             json!({"lease_version": 1})),
            (&m[2], format!("/api/v1/tasks/{checkpointed}/checkpoints"), "cp-a",
             json!({"lease_version": 1, "summary": "in a", "state": [1, 2]})),
            (&m[3], format!("/api/v1/tasks/{held}/leases"), "conflict", json!({})),
            (&m[5], format!("/api/v1/tasks/{contested}/leases"), "contest", json!({})),
            (&m[6], format!("/api/v1/tasks/{contested}/leases"), "contest", json!({})),
            (&m[4], format!("/api/v1/tasks/{dup}/leases"), "twice", json!({})),
            (&m[4], format!("/api/v1/tasks/{dup}/leases"), "twice", json!({})),
        ];
        let queued = futures::future::join_all(
            writes
                .into_iter()
                .map(|(who, path, key, body)| send(who, path, key, body)),
        );
        let release = async {
            until_quick_writes_wait(&app, 8).await;
            lock.release();
        };
        futures::future::join(queued, release).await.0
    })
    .await;

    // Two groups: the blocked write alone, then the eight that queued behind it.
    let [groups1] = app.metrics([groups]).await;
    assert_eq!(groups1 - groups0, 2);
    assert_eq!(first.status, 201, "{}", first.text);
    assert_eq!(first.json["data"]["orbit_revision"], rev_a + 1);
    let [cp_b, release, cp_a, conflict, contest5, contest6, dup1, dup2]: [Resp; 8] =
        answers.try_into().ok().unwrap();
    assert_eq!(cp_b.status, 201, "{}", cp_b.text);
    assert_eq!(cp_b.json["data"]["orbit_revision"], rev_b + 1);
    assert_eq!(release.status, 200, "{}", release.text);
    assert_eq!(cp_a.status, 201, "{}", cp_a.text);
    // Declined in the group, decided by the ordinary path after it.
    conflict.assert_error(409, "lease_conflict");
    let (won, lost) = if contest5.status == 201 {
        (contest5, contest6)
    } else {
        (contest6, contest5)
    };
    assert_eq!(won.status, 201, "{}", won.text);
    lost.assert_error(409, "lease_conflict");
    // The same key twice in one group: executed once, replayed once.
    assert_eq!(dup1.status, 201, "{}", dup1.text);
    assert_eq!(dup2.status, 201, "{}", dup2.text);
    assert_eq!(dup1.bytes, dup2.bytes);
    let replayed = [&dup1, &dup2]
        .iter()
        .filter(|r| r.header("idempotency-replayed") == Some("true"))
        .count();
    assert_eq!(replayed, 1);
    let counts1 = quick_counts(&app).await;
    assert_eq!(
        (counts1.0 - counts0.0, counts1.1 - counts0.1),
        (6, 3),
        "six done in groups, three declined"
    );

    // Each response is what the ordinary read shows, and every change is in its
    // orbit's feed once, revisions dense.
    for (write, read) in [
        (
            &cp_b,
            format!("/api/v1/checkpoints/{}", cp_b.json["data"]["id"]),
        ),
        (
            &cp_a,
            format!("/api/v1/checkpoints/{}", cp_a.json["data"]["id"]),
        ),
        (&release, format!("/api/v1/leases/{released}")),
        (&won, format!("/api/v1/leases/{}", won.json["data"]["id"])),
        (&dup1, format!("/api/v1/leases/{}", dup1.json["data"]["id"])),
    ] {
        assert_write_is_read_plus_revision(write, &app.get(&read, None).await);
    }
    let feed = |orbit: i64, after: i64| {
        let app = &app;
        async move {
            let r = app
                .get(
                    &format!("/api/v1/orbits/{orbit}/changes?after={after}"),
                    None,
                )
                .await;
            r.json["data"]
                .as_array()
                .expect("changes")
                .iter()
                .map(|ch| {
                    (
                        ch["revision"].as_i64().unwrap(),
                        ch["kind"].as_str().unwrap().to_owned(),
                    )
                })
                .collect::<Vec<_>>()
        }
    };
    let mut expected_a: Vec<(i64, String)> = [
        (&first, "lease.acquired"),
        (&release, "lease.released"),
        (&cp_a, "checkpoint.created"),
        (&won, "lease.acquired"),
        (&dup1, "lease.acquired"),
    ]
    .iter()
    .map(|(r, kind)| {
        (
            r.json["data"]["orbit_revision"].as_i64().unwrap(),
            kind.to_string(),
        )
    })
    .collect();
    expected_a.sort();
    let revisions: Vec<i64> = expected_a.iter().map(|(r, _)| *r).collect();
    assert_eq!(revisions, (rev_a + 1..=rev_a + 5).collect::<Vec<_>>());
    assert_eq!(feed(c.orbit, rev_a).await, expected_a);
    assert_eq!(
        feed(b.orbit, rev_b).await,
        vec![(rev_b + 1, "checkpoint.created".to_owned())]
    );
    // A's four changes of the group took their revisions with one update of its
    // row (the blocked write alone took one more); B's one change, one.
    let mut conn = app.db.conn();
    assert_eq!(orbit_row_updates(&mut conn, c.orbit), 2);
    assert_eq!(orbit_row_updates(&mut conn, b.orbit), 1);
}

#[tokio::test]
async fn a_write_of_a_group_does_not_wait_for_a_lock_held_elsewhere() {
    // One group at a time (no lane to borrow), so the three writes queue together.
    let app = TestApp::spawn_with(|c| {
        c.write_lanes = 1;
        c.quick_queues = Some(1);
    })
    .await;
    let c = crew(&app, "group-nowait", 3).await;
    let m = &c.members;
    let t = |title: &'static str| task(&app, &c.owner, c.orbit, title);
    let (blocker, free, held1, held2) = (
        t("blocker").await,
        t("free").await,
        t("held1").await,
        t("held2").await,
    );
    // Every writer's queue is the orbit's.
    lease(&app, &c.owner, t("warm-up").await).await;
    for who in m {
        lease(&app, who, t("warm-up").await).await;
    }
    let declined0 = quick_counts(&app).await.1;
    let mut monitor = app.db.conn();
    let first_lock = RowLock::take(&app.db, blocker);
    let (lock1, lock2) = (RowLock::take(&app.db, held1), RowLock::take(&app.db, held2));
    let acquire = |who: &Agent, task: i64, key: &'static str| {
        let (app, token) = (&app, who.token.clone());
        async move {
            app.post_with_key(
                &format!("/api/v1/tasks/{task}/leases"),
                &token,
                key,
                json!({}),
            )
            .await
        }
    };
    let first = acquire(&c.owner, blocker, "first");
    let rest = async {
        let deadline = Instant::now() + Duration::from_secs(20);
        while first_lock.waiting_now(&mut monitor) == 0 {
            assert!(
                Instant::now() < deadline,
                "the first group never reached the lock"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Three writes queue for the next group; two of their tasks are locked here.
        let free_write = acquire(&m[0], free, "free");
        let held_writes = futures::future::join(
            acquire(&m[1], held1, "held1"),
            acquire(&m[2], held2, "held2"),
        );
        let steer = async {
            until_quick_writes_wait(&app, 3).await;
            first_lock.release();
            // The two held writes declined at once (their group answers only after
            // its commit) and now run the ordinary path, grouped (`perf::commits`):
            // the first of that group waits for its task's lock, the other waits
            // behind it; the free write's group committed meanwhile, not waiting for
            // them. (The group itself waits on each held task for 20 ms, so the
            // declines are awaited first.)
            while quick_counts(&app).await.1 - declined0 < 2 {
                assert!(Instant::now() < deadline, "the held writes never declined");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            while lock1.waiting_now(&mut app.db.conn()) + lock2.waiting_now(&mut app.db.conn()) == 0
            {
                assert!(Instant::now() < deadline, "the held writes are not waiting");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let leased = crate::harness::sql_i64(
                &mut app.db.conn(),
                &format!("SELECT count(*) AS n FROM leases WHERE task_id = {free}"),
            );
            assert_eq!(leased, 1, "the free write committed while the others wait");
            assert_eq!(quick_counts(&app).await.1 - declined0, 2);
            lock1.release();
            lock2.release();
        };
        let (free_done, held, ()) = futures::join!(free_write, held_writes, steer);
        (free_done, held)
    };
    let (first, (free_done, (held1_done, held2_done))) = futures::future::join(first, rest).await;
    for r in [&first, &free_done, &held1_done, &held2_done] {
        assert_eq!(r.status, 201, "{}", r.text);
    }
}

#[tokio::test]
async fn orbits_sharing_a_quick_queue_commit_their_writes_as_one_group() {
    // One queue for every orbit, one group at a time.
    let app = TestApp::spawn_with(|c| {
        c.write_lanes = 1;
        c.quick_queues = Some(1);
    })
    .await;
    let (a, b) = (
        crew(&app, "share-a", 1).await,
        crew(&app, "share-b", 2).await,
    );
    let blocker = task(&app, &a.owner, a.orbit, "blocker").await;
    point_at(&app, &a, &[&a.owner, &a.members[0]]).await;
    point_at(&app, &b, &[&b.members[0], &b.members[1]]).await;
    let in_a = task(&app, &a.owner, a.orbit, "in a").await;
    let in_b = [
        task(&app, &b.owner, b.orbit, "in b 0").await,
        task(&app, &b.owner, b.orbit, "in b 1").await,
    ];
    let (rev_a, rev_b) = (
        crate::work::orbit_revision(&app, a.orbit).await,
        crate::work::orbit_revision(&app, b.orbit).await,
    );
    count_orbit_row_updates(&app.db);
    let groups = "orbit_quick_write_groups_total";
    let [groups0] = app.metrics([groups]).await;

    let (first, answers) = with_a_blocked_group(&app, &a.owner, blocker, |lock| async {
        // B's writes queue behind A's blocked group, with one more of A's.
        let queued = futures::future::join3(
            acquire(&app, &b.members[0], in_b[0], json!({})),
            acquire(&app, &b.members[1], in_b[1], json!({})),
            acquire(&app, &a.members[0], in_a, json!({})),
        );
        let all_queued = async {
            until_quick_writes_wait(&app, 3).await;
            lock.release();
        };
        futures::future::join(queued, all_queued).await.0
    })
    .await;

    // Two groups: the blocked write alone, then the three of two orbits together.
    let [groups1] = app.metrics([groups]).await;
    assert_eq!(groups1 - groups0, 2);
    let (b0, b1, a0) = answers;
    for r in [&first, &b0, &b1, &a0] {
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let mut revisions_b = [&b0, &b1].map(|r| r.json["data"]["orbit_revision"].as_i64().unwrap());
    revisions_b.sort();
    assert_eq!(revisions_b, [rev_b + 1, rev_b + 2]);
    assert_eq!(a0.json["data"]["orbit_revision"], rev_a + 2);
    // B's two changes took their revisions with one update of its row.
    let mut conn = app.db.conn();
    assert_eq!(orbit_row_updates(&mut conn, b.orbit), 1);
    assert_eq!(orbit_row_updates(&mut conn, a.orbit), 2);
    for r in [&b0, &b1, &a0] {
        let read = app
            .get(&format!("/api/v1/leases/{}", r.json["data"]["id"]), None)
            .await;
        assert_write_is_read_plus_revision(r, &read);
    }
}

/// While the acquire of each `blocked` task waits in a group of its own on the
/// test's lock of it (the second, if any, sent once the first waits), `who`
/// acquires `task` and is answered; then the locks go. The answers, `who`'s last,
/// each 201, and all were quick writes: behind a blocked group, `who` would be
/// answered only once a blocked write gave up waiting at the lock timeout and
/// declined to the ordinary path.
async fn answered_while_groups_wait(
    app: &TestApp,
    blocked: &[(&Agent, i64)],
    who: &Agent,
    task: i64,
) -> Vec<Resp> {
    let counts0 = quick_counts(app).await;
    let still_waiting = |lock: &RowLock| {
        assert_eq!(
            lock.waiting_now(&mut app.db.conn()),
            1,
            "a blocked group still waits"
        )
    };
    let answers = match blocked {
        [(owner, blocker)] => {
            let (first, answer) = with_a_blocked_group(app, owner, *blocker, |lock| async {
                let answer = acquire(app, who, task, json!({})).await;
                still_waiting(&lock);
                lock.release();
                answer
            })
            .await;
            vec![first, answer]
        }
        [(owner, blocker), (second, blocker2)] => {
            let (first, (second, answer)) =
                with_a_blocked_group(app, owner, *blocker, |lock| async {
                    let both = with_a_blocked_group(app, second, *blocker2, |lock2| async {
                        let answer = acquire(app, who, task, json!({})).await;
                        still_waiting(&lock);
                        still_waiting(&lock2);
                        lock2.release();
                        answer
                    })
                    .await;
                    lock.release();
                    both
                })
                .await;
            vec![first, second, answer]
        }
        _ => unreachable!("one or two blocked groups"),
    };
    for r in &answers {
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let counts1 = quick_counts(app).await;
    let n = answers.len() as u64;
    assert_eq!(
        (counts1.0 - counts0.0, counts1.1 - counts0.1),
        (n, 0),
        "all quick"
    );
    answers
}

#[tokio::test]
async fn orbits_in_different_quick_queues_do_not_wait_for_each_other() {
    let app = TestApp::spawn_with(|c| {
        c.write_lanes = 1;
        c.quick_queues = Some(2);
    })
    .await;
    let a = crew(&app, "apart-a", 1).await;
    // An orbit in the other queue: the other parity.
    let mut b = crew(&app, "apart-b", 1).await;
    if b.orbit % 2 == a.orbit % 2 {
        b = crew(&app, "apart-c", 1).await;
    }
    assert_ne!(a.orbit % 2, b.orbit % 2);
    let blocker = task(&app, &a.owner, a.orbit, "blocker").await;
    point_at(&app, &a, &[&a.owner]).await;
    point_at(&app, &b, &[&b.members[0]]).await;
    let in_b = task(&app, &b.owner, b.orbit, "in b").await;
    // A's queue runs two groups, its own lane and the one it borrowed, both waiting
    // on the test's locks: the budget (two queues of one lane) is spent, so only a
    // queue of B's own answers B's write meanwhile.
    let second = task(&app, &a.owner, a.orbit, "second blocker").await;
    point_at(&app, &a, &[&a.members[0]]).await;
    let blocked = [(&a.owner, blocker), (&a.members[0], second)];
    answered_while_groups_wait(&app, &blocked, &b.members[0], in_b).await;
}

#[tokio::test]
async fn a_busy_queue_runs_a_second_group_while_the_other_queues_are_idle() {
    // Two queues of one lane each: a budget of two quick groups at once.
    let app = TestApp::spawn_with(|c| {
        c.write_lanes = 1;
        c.quick_queues = Some(2);
    })
    .await;
    let a = crew(&app, "borrow", 1).await;
    let blocker = task(&app, &a.owner, a.orbit, "blocker").await;
    point_at(&app, &a, &[&a.owner, &a.members[0]]).await;
    let next = task(&app, &a.owner, a.orbit, "next").await;
    let [groups0] = app.metrics(["orbit_quick_write_groups_total"]).await;

    // The orbit's first group waits on the lock; the other queue is idle, so the
    // member's write runs in a second group of the same queue and is answered first.
    let answers =
        answered_while_groups_wait(&app, &[(&a.owner, blocker)], &a.members[0], next).await;
    let (first, second) = (&answers[0], &answers[1]);
    let [groups1] = app.metrics(["orbit_quick_write_groups_total"]).await;
    assert_eq!(groups1 - groups0, 2);
    // Each took its own revision of the orbit, in the order they committed.
    let (r1, r2) = (
        first.json["data"]["orbit_revision"].as_i64().unwrap(),
        second.json["data"]["orbit_revision"].as_i64().unwrap(),
    );
    assert_eq!(r1, r2 + 1, "the borrowed group committed first");
}

/// The MCP tools of the quick writes take the quick path too (they ask the same
/// `quick_*_form` as their REST routes), and answer what the ordinary path would:
/// each result is the object as read afterwards, with its `orbit_revision`.
#[tokio::test]
async fn mcp_writes_take_the_quick_path_and_answer_as_rest() {
    use crate::mcp::{call, connect, ok};
    let app = TestApp::spawn().await;
    let c = crew(&app, "mcp-quick", 0).await;
    let a = &c.owner;
    let client = connect(&app, a).await;
    let key = || uuid::Uuid::new_v4().to_string();
    let (done, _) = quick_counts(&app).await;
    let read = |path: String| {
        let app = &app;
        async move { app.get(&path, Some(&a.token)).await }
    };
    let as_rest = |result: &Value, read: &Resp| {
        assert_eq!(read.status, 200, "{}", read.text);
        let mut expected = read.json.clone();
        let revision = result["data"]["orbit_revision"].clone();
        assert!(revision.is_i64(), "{result}");
        expected["data"]["orbit_revision"] = revision;
        assert_eq!(result, &expected);
    };

    let t = ok(&call(
        &client,
        "create_task",
        json!({"orbit": c.orbit, "title": "quick over mcp", "idempotency_key": key()}),
    )
    .await);
    let task = t["data"]["id"].as_i64().unwrap();
    as_rest(&t, &read(format!("/api/v1/tasks/{task}")).await);
    let l = ok(&call(
        &client,
        "acquire_lease",
        json!({"task_id": task, "idempotency_key": key()}),
    )
    .await);
    let (lease, v) = (
        l["data"]["id"].as_i64().unwrap(),
        l["data"]["lease_version"].as_i64().unwrap(),
    );
    as_rest(&l, &read(format!("/api/v1/leases/{lease}")).await);
    let k = ok(&call(
        &client,
        "write_checkpoint",
        json!({"task_id": task, "lease_version": v, "summary": "s", "state": {"n": 1},
               "idempotency_key": key()}),
    )
    .await);
    let ck = k["data"]["id"].as_i64().unwrap();
    as_rest(&k, &read(format!("/api/v1/checkpoints/{ck}")).await);
    let r = ok(&call(
        &client,
        "release_lease",
        json!({"lease_id": lease, "lease_version": v, "idempotency_key": key()}),
    )
    .await);
    as_rest(&r, &read(format!("/api/v1/leases/{lease}")).await);
    let n = ok(&call(
        &client,
        "create_contribution",
        json!({"orbit": c.orbit, "kind": "NOTE", "title": "t", "body": "b",
               "idempotency_key": key()}),
    )
    .await);
    let id = n["data"]["id"].as_i64().unwrap();
    as_rest(&n, &read(format!("/api/v1/contributions/{id}")).await);
    let rv = ok(&call(
        &client,
        "revise_contribution",
        json!({"contribution_id": id, "base_revision": 1, "body": "b2",
               "idempotency_key": key()}),
    )
    .await);
    as_rest(&rv, &read(format!("/api/v1/contributions/{id}")).await);

    let (after, _) = quick_counts(&app).await;
    assert_eq!(after - done, 6, "every one of the six writes went quick");
    client.cancel().await.ok();
}
