//! The problem overview: every key present from the start, and exact counts on a
//! seeded orbit.

use super::{assess, contribution, overview, problem, revise, verdicts};
use crate::harness::{Agent, TestApp};
use crate::work::{crew, lease, orbit_revision, outlive, task};

use serde_json::json;

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
