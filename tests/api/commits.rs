//! Group commit for the ordinary write path (`perf::commits`): writes of one orbit
//! that queue while a group runs share one transaction and one commit, each under
//! its own savepoint, and each is answered exactly as alone.

use serde_json::json;

use crate::harness::{sql_i64, TestApp};

/// Sixteen agents create tasks in one orbit while its row is locked elsewhere: the
/// first write waits on the lock, the other fifteen queue behind it and then commit
/// as one group; every write is answered once, with its own dense revision, and a
/// write refused inside the group changes nothing.
#[actix_web::test]
async fn writes_that_queue_on_one_orbit_commit_together() {
    let app = TestApp::spawn_with(|c| c.write_lanes = 1).await;
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "hot").await;
    let path = format!("/api/v1/orbits/{orbit}/tasks");
    let mut agents = Vec::new();
    for i in 0..16 {
        let a = app.agent(&format!("agent-{i}")).await;
        app.join(&a, orbit).await;
        // One write each, so the instance knows which orbit the token writes to.
        let r = app
            .post_keyed(&path, &a.token, json!({"title": format!("warm {i}")}))
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        agents.push(a);
    }
    let [groups_before, writes_before] = app
        .metrics(["orbit_write_groups_total", "orbit_grouped_writes_total"])
        .await;
    let mut monitor = app.db.conn();
    let revision_before = sql_i64(
        &mut monitor,
        &format!("SELECT revision AS n FROM orbits WHERE id = {orbit}"),
    );

    // Hold the orbit's row: the lane's first write waits on it.
    let mut lock = app.db.conn();
    let locker = sql_i64(&mut lock, "SELECT pg_backend_pid()::bigint AS n");
    {
        use diesel::connection::SimpleConnection;
        lock.batch_execute(&format!(
            "BEGIN; SELECT 1 FROM orbits WHERE id = {orbit} FOR UPDATE"
        ))
        .unwrap();
    }
    let blocked = format!(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE {locker} = ANY(pg_blocking_pids(pid))"
    );
    let first = app.post_keyed(&path, &agents[0].token, json!({"title": "first"}));
    let rest = futures::future::join_all(agents.iter().enumerate().skip(1).map(|(i, a)| {
        // Agent 3 names a problem of no orbit: refused inside its group.
        let body = if i == 3 {
            json!({"title": "refused", "problem_id": 999_999_999})
        } else {
            json!({"title": format!("grouped {i}")})
        };
        app.post_keyed(&path, &a.token, body)
    }));
    let release = async {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while sql_i64(&mut monitor, &blocked) < 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "the first write never waited"
            );
            actix_web::rt::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let rest = rest;
        let wait_for_queue = async {
            loop {
                let [waiting] = app.metrics(["orbit_grouped_writes_waiting"]).await;
                if waiting == 15 {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "{waiting} writes queued"
                );
                actix_web::rt::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            drop(lock);
        };
        let (rest, ()) = futures::join!(rest, wait_for_queue);
        rest
    };
    let (first, rest) = futures::join!(first, release);

    assert_eq!(first.status, 201, "{}", first.text);
    let mut revisions = vec![first.json["data"]["orbit_revision"].as_i64().unwrap()];
    for (i, r) in rest.into_iter().enumerate().map(|(i, r)| (i + 1, r)) {
        if i == 3 {
            assert_eq!(r.status, 422, "{}", r.text);
            continue;
        }
        assert_eq!(r.status, 201, "{}", r.text);
        revisions.push(r.json["data"]["orbit_revision"].as_i64().unwrap());
    }
    revisions.sort_unstable();
    let expected: Vec<i64> = (revision_before + 1..=revision_before + 15).collect();
    assert_eq!(revisions, expected, "one dense revision per accepted write");
    assert_eq!(
        sql_i64(
            &mut monitor,
            &format!(
                "SELECT count(*) AS n FROM tasks WHERE orbit_id = {orbit} AND title = 'refused'"
            ),
        ),
        0
    );
    let [groups, writes] = app
        .metrics(["orbit_write_groups_total", "orbit_grouped_writes_total"])
        .await;
    assert_eq!(writes - writes_before, 16);
    assert_eq!(
        groups - groups_before,
        2,
        "the first write alone, then one group of 15"
    );
}

/// With `ORBIT_QUICK_WRITES=false` the lease cycle runs the ordinary path, in its
/// orbit's write groups, with the same answers.
#[actix_web::test]
async fn without_quick_writes_the_lease_cycle_runs_in_write_groups() {
    let app = TestApp::spawn_with(|c| c.quick_writes = false).await;
    let c = crate::work::crew(&app, "no-quick", 1).await;
    let who = &c.members[0];
    let warm = crate::work::task(&app, who, c.orbit, "warm").await;
    crate::work::lease(&app, who, warm, 60).await;
    let task = crate::work::task(&app, who, c.orbit, "cycle").await;
    let [groups0, writes0] = app
        .metrics(["orbit_write_groups_total", "orbit_grouped_writes_total"])
        .await;
    let (lease, version) = crate::work::lease(&app, who, task, 60).await;
    let cp = crate::work::checkpoint(&app, who, task, version, json!({"n": 1})).await;
    assert_eq!(cp.status, 201, "{}", cp.text);
    let rel = app
        .post_keyed(
            &format!("/api/v1/leases/{lease}/release"),
            &who.token,
            json!({"lease_version": version}),
        )
        .await;
    assert_eq!(rel.status, 200, "{}", rel.text);
    let [quick, groups, writes] = app
        .metrics([
            "orbit_quick_writes_total",
            "orbit_write_groups_total",
            "orbit_grouped_writes_total",
        ])
        .await;
    assert_eq!(quick, 0, "no quick write ran");
    assert_eq!(
        writes - writes0,
        3,
        "acquire, checkpoint and release were grouped"
    );
    assert_eq!(groups - groups0, 3);
}
