//! Read groups (src/readgroup.rs): `GET /me` requests of verified tokens that queue
//! while a group is in the database are answered by one statement, each exactly as
//! the ordinary path answers it alone.

use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;

use crate::harness::{sql_i64, Agent, Resp, TestApp};

/// `(groups, reads, waiting)` from `/metrics`.
async fn group_counts(app: &TestApp) -> (u64, u64, u64) {
    let [groups, reads, waiting] = app
        .metrics([
            "orbit_read_groups_total",
            "orbit_grouped_reads_total",
            "orbit_grouped_reads_waiting",
        ])
        .await;
    (groups, reads, waiting)
}

async fn me(app: &TestApp, token: &str) -> Resp {
    app.get("/api/v1/me", Some(token)).await
}

/// Sends a GET in the background.
fn spawn_get(app: &TestApp, path: &str, token: Option<&str>) -> tokio::task::JoinHandle<Resp> {
    let mut request = app.client.get(app.url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    tokio::spawn(async move { Resp::from(request.send().await.expect("request")).await })
}

/// Sessions of the test's database waiting for a lock (other than the caller's).
fn lock_waiters(monitor: &mut diesel::PgConnection) -> i64 {
    sql_i64(
        monitor,
        "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() \
         AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()",
    )
}

/// Polls until `done` holds (20 s at most).
async fn until<F: std::future::Future<Output = bool>>(what: &str, mut done: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn me_reads_that_queue_meanwhile_are_answered_by_one_group_each_as_alone() {
    // One lane (the default), and a lock wait (half the timeout) longer than the
    // test may hold its lock (its polls give up after 20 s).
    let app = TestApp::spawn_with(|c| {
        c.read_lanes = 1;
        c.db_timeout_ms = 60_000;
    })
    .await;
    // The same database read by an instance that answers each request alone.
    let alone = app.another_instance_with(|c| c.read_lanes = 0);

    // Contributors with no, one and two memberships, and one whose token will be
    // revoked (through the other instance) after this one has verified it.
    let owner = app.agent("owner").await;
    let first = app.orbit(&owner, "rg-one").await;
    let second = app.orbit(&owner, "rg-two").await;
    let none = app.agent("no orbits").await;
    let one = app.agent("one orbit").await;
    app.join(&one, second).await;
    let two = app.agent("two orbits").await;
    app.join(&two, second).await;
    app.join(&two, first).await;
    let revoked = app.agent("revoked").await;
    app.join(&revoked, first).await;
    // Each token's first request verifies it (the ordinary path, argon2); later ones
    // may be grouped.
    for a in [&owner, &none, &one, &two, &revoked] {
        assert_eq!(me(&app, &a.token).await.status, 200);
    }
    let tokens = alone.get("/api/v1/me/tokens", Some(&revoked.token)).await;
    let token_id = tokens.json["data"][0]["id"].as_i64().expect("token id");
    let r = alone
        .delete(&format!("/api/v1/me/tokens/{token_id}"), &revoked.token)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);

    let before = group_counts(&app).await;
    assert_eq!(before.2, 0);
    // Hold the lane: its next statement waits for this lock.
    let mut locker = app.db.conn();
    locker
        .batch_execute("BEGIN; LOCK TABLE memberships IN ACCESS EXCLUSIVE MODE")
        .expect("lock memberships");
    let mut monitor = app.db.conn();
    let held = spawn_get(&app, "/api/v1/me", Some(&owner.token));
    until("the first group waits for the lock", || {
        let n = lock_waiters(&mut monitor);
        async move { n == 1 }
    })
    .await;

    // These queue behind it: one token twice, and the revoked one.
    let queued: Vec<&Agent> = vec![&none, &one, &two, &one, &revoked, &owner];
    let sent: Vec<_> = queued
        .iter()
        .map(|a| spawn_get(&app, "/api/v1/me", Some(&a.token)))
        .collect();
    until("every read is queued", || async {
        group_counts(&app).await.2 == queued.len() as u64
    })
    .await;
    locker.batch_execute("COMMIT").expect("release the lock");

    let first_answer = held.await.expect("held read");
    let mut answers = Vec::new();
    for s in sent {
        answers.push(s.await.expect("queued read"));
    }
    // Two groups: the one that waited, and everything that queued meanwhile.
    let after = group_counts(&app).await;
    assert_eq!(
        (after.0 - before.0, after.1 - before.1, after.2),
        (2, 1 + queued.len() as u64, 0)
    );

    // Each answer is the ordinary path's answer for its token, byte for byte.
    let expected = me(&alone, &owner.token).await;
    assert_eq!(first_answer.status, 200, "{}", first_answer.text);
    assert_eq!(first_answer.text, expected.text);
    for (a, got) in queued.iter().zip(&answers) {
        let expected = me(&alone, &a.token).await;
        assert_eq!(got.status, expected.status, "{}", got.text);
        assert_eq!(got.text, expected.text);
    }
    // The answers are each token's own: memberships in orbit order.
    let orbits = |r: &Resp| -> Vec<i64> {
        r.json["data"]["memberships"]
            .as_array()
            .expect("memberships")
            .iter()
            .map(|m| m["orbit_id"].as_i64().expect("orbit_id"))
            .collect()
    };
    assert_eq!(answers[0].json["data"]["contributor"]["id"], none.id);
    assert_eq!(orbits(&answers[0]), Vec::<i64>::new());
    assert_eq!(answers[1].json["data"]["contributor"]["id"], one.id);
    assert_eq!(orbits(&answers[1]), vec![second]);
    assert_eq!(answers[2].json["data"]["contributor"]["id"], two.id);
    assert_eq!(orbits(&answers[2]), vec![first, second]);
    assert_eq!(answers[3].text, answers[1].text);
    // Revoked on the other instance after this one cached it: refused here too.
    answers[4].assert_error(401, "unauthorized");
    assert!(answers[4].text.contains("revoked"), "{}", answers[4].text);
    assert_eq!(answers[5].json["data"]["contributor"]["id"], owner.id);
    assert_eq!(orbits(&answers[5]), vec![first, second]);

    // The revoked token is no longer cached: its next request is verified again
    // (the ordinary path), and still refused.
    let before = group_counts(&app).await;
    let again = me(&app, &revoked.token).await;
    again.assert_error(401, "unauthorized");
    assert_eq!(group_counts(&app).await.1, before.1);
}

#[tokio::test]
async fn a_token_used_by_a_group_records_its_use_and_a_deleted_token_is_refused() {
    let app = TestApp::spawn_with(|c| c.read_lanes = 1).await;
    let a = app.agent("user").await;
    assert_eq!(me(&app, &a.token).await.status, 200);
    // Make the token's last use old: the next read, grouped, records it again.
    let mut conn = app.db.conn();
    conn.batch_execute(&format!(
        "UPDATE tokens SET last_used_at = now() - interval '1 hour' WHERE contributor_id = {}",
        a.id
    ))
    .unwrap();
    let before = group_counts(&app).await;
    let r = me(&app, &a.token).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(group_counts(&app).await.1, before.1 + 1);
    let recent = sql_i64(
        &mut conn,
        &format!(
            "SELECT count(*) AS n FROM tokens WHERE contributor_id = {} \
             AND last_used_at > now() - interval '1 minute'",
            a.id
        ),
    );
    assert_eq!(recent, 1);

    // A token row that is gone (deleted by hand) is refused by the group, and
    // forgotten: the next request goes the ordinary way and is refused too.
    conn.batch_execute(&format!(
        "DELETE FROM tokens WHERE contributor_id = {}",
        a.id
    ))
    .unwrap();
    let before = group_counts(&app).await;
    me(&app, &a.token).await.assert_error(401, "unauthorized");
    assert_eq!(group_counts(&app).await.1, before.1 + 1);
    me(&app, &a.token).await.assert_error(401, "unauthorized");
    assert_eq!(group_counts(&app).await.1, before.1 + 1);
}

#[tokio::test]
async fn anonymous_task_and_contribution_reads_that_queue_share_one_group_per_kind() {
    let app = TestApp::spawn_with(|c| {
        c.read_lanes = 1;
        c.db_timeout_ms = 60_000;
    })
    .await;
    let alone = app.another_instance_with(|c| c.read_lanes = 0);
    let c = crate::work::crew(&app, "rg-work", 1).await;
    let worker = &c.members[0];
    let leased = crate::work::task(&app, &c.owner, c.orbit, "leased \"q\" 🚀").await;
    let free = crate::work::task(&app, &c.owner, c.orbit, "free").await;
    crate::work::lease(&app, worker, leased, 900).await;
    let mut contributions = Vec::new();
    for title in ["a note", "another"] {
        let r = app
            .post_keyed(
                &format!("/api/v1/orbits/{}/contributions", c.orbit),
                &worker.token,
                serde_json::json!({"kind": "NOTE", "title": title, "body": "text"}),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        contributions.push(r.json["data"]["id"].as_i64().expect("id"));
    }
    let missing = 9_999_999;

    let before = group_counts(&app).await;
    // Every kind joins contributors: one lock holds a group of each.
    let mut locker = app.db.conn();
    locker
        .batch_execute("BEGIN; LOCK TABLE contributors IN ACCESS EXCLUSIVE MODE")
        .expect("lock contributors");
    let mut monitor = app.db.conn();
    let held = [
        format!("/api/v1/tasks/{leased}"),
        format!("/api/v1/contributions/{}", contributions[0]),
    ];
    let held_sent: Vec<_> = held.iter().map(|p| spawn_get(&app, p, None)).collect();
    until("a group of each kind waits for the lock", || {
        let n = lock_waiters(&mut monitor);
        async move { n == 2 }
    })
    .await;
    let queued = [
        format!("/api/v1/tasks/{free}"),
        format!("/api/v1/tasks/{leased}"),
        format!("/api/v1/tasks/{missing}"),
        format!("/api/v1/tasks/{free}"),
        format!("/api/v1/contributions/{}", contributions[1]),
        format!("/api/v1/contributions/{missing}"),
        format!("/api/v1/contributions/{}", contributions[0]),
    ];
    let sent: Vec<_> = queued.iter().map(|p| spawn_get(&app, p, None)).collect();
    until("every read is queued", || async {
        group_counts(&app).await.2 == queued.len() as u64
    })
    .await;
    locker.batch_execute("COMMIT").expect("release the lock");

    let mut answers = Vec::new();
    for s in held_sent.into_iter().chain(sent) {
        answers.push(s.await.expect("read"));
    }
    // Four groups: the two that waited, and one more of each kind.
    let after = group_counts(&app).await;
    assert_eq!(
        (after.0 - before.0, after.1 - before.1, after.2),
        (4, (held.len() + queued.len()) as u64, 0)
    );
    // Each answer is the ordinary path's, byte for byte: found, leased or not, or 404.
    for (path, got) in held.iter().chain(&queued).zip(&answers) {
        let expected = alone.get(path, None).await;
        assert_eq!(
            (got.status, &got.text),
            (expected.status, &expected.text),
            "{path}"
        );
    }
    assert_eq!(answers[0].json["data"]["id"], leased);
    assert_eq!(
        answers[0].json["data"]["active_lease"]["contributor"]["id"],
        worker.id
    );
    assert_eq!(answers[2].json["data"]["id"], free);
    assert_eq!(
        answers[2].json["data"]["active_lease"],
        serde_json::Value::Null
    );
    answers[4].assert_error(404, "not_found");
    assert_eq!(answers[6].json["data"]["title"], "another");
    answers[7].assert_error(404, "not_found");

    // A read with a token checks the token on the ordinary path: no group.
    let before = group_counts(&app).await;
    let r = app
        .get(&format!("/api/v1/tasks/{free}"), Some(&worker.token))
        .await;
    assert_eq!(r.json["data"], answers[2].json["data"]);
    // A well-formed token with a wrong secret: refused, even on a public read.
    let mut wrong = worker.token.clone();
    let last = wrong.pop().expect("a token");
    wrong.push(if last == 'A' { 'B' } else { 'A' });
    let r = app
        .get(&format!("/api/v1/tasks/{free}"), Some(&wrong))
        .await;
    r.assert_error(401, "unauthorized");
    assert_eq!(group_counts(&app).await.1, before.1);
}
