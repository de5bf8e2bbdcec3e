//! Group commit for the ordinary write path (`perf::commits`): writes of one orbit
//! that queue while a group runs share one transaction and one commit, each under
//! its own savepoint, and each is answered exactly as alone.

use serde_json::json;

use std::time::{Duration, Instant};

use diesel::PgConnection;

use crate::harness::{count_orbit_row_updates, orbit_row_updates, sql_i64, RowLock, TestApp};
use crate::work::release;

/// How long a test waits for the state it steers the service into.
const STEER: Duration = Duration::from_secs(20);

/// An instance whose orbits have one write lane and whose lease cycle takes the
/// write groups too (no quick writes): what it groups is what the test steers.
async fn one_lane_no_quick_writes() -> TestApp {
    TestApp::spawn_with(|c| {
        c.write_lanes = 1;
        c.quick_writes = false;
    })
    .await
}

/// Waits until `n` writes queue for their next group.
async fn until_queued(app: &TestApp, n: u64) {
    let deadline = Instant::now() + STEER;
    loop {
        let [waiting] = app.metrics(["orbit_grouped_writes_waiting"]).await;
        if waiting == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{waiting} writes queued, not {n}"
        );
        actix_web::rt::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until a session waits for `lock` (the service's write `what`).
async fn until_waiting(lock: &RowLock, monitor: &mut PgConnection, what: &str) {
    let deadline = Instant::now() + STEER;
    while lock.waiting_now(monitor) < 1 {
        assert!(Instant::now() < deadline, "{what} never waited");
        actix_web::rt::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Sixteen agents create tasks in one orbit while its row is locked elsewhere: the
/// first write waits on the lock, the other fifteen queue behind it and then commit
/// as one group; every write is answered once, with its own dense revision, and a
/// write refused inside the group changes nothing. (A task with no problem is a
/// quick write, `tests/api/quick.rs`; here the quick form is off, so that every
/// creation takes the ordinary groups this test is about.)
#[actix_web::test]
async fn writes_that_queue_on_one_orbit_commit_together() {
    let app = one_lane_no_quick_writes().await;
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

    count_orbit_row_updates(&app.db);

    // Hold the orbit's row: the lane's first write waits on it.
    let lock = RowLock::on(&app.db, "orbits", orbit, "UPDATE");
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
        until_waiting(&lock, &mut monitor, "the first write").await;
        let wait_for_queue = async {
            until_queued(&app, 15).await;
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
        // Each answer is its own write's (the group's changes are applied in one
        // statement), with the revision of its own change.
        assert_eq!(r.json["data"]["title"], format!("grouped {i}"));
        let revision = r.json["data"]["orbit_revision"].as_i64().unwrap();
        let task = r.json["data"]["id"].as_i64().unwrap();
        assert_eq!(
            sql_i64(
                &mut monitor,
                &format!(
                    "SELECT revision AS n FROM changes WHERE orbit_id = {orbit} \
                     AND entity_type = 'task' AND entity_id = {task}"
                ),
            ),
            revision
        );
        revisions.push(revision);
    }
    revisions.sort_unstable();
    let expected: Vec<i64> = (revision_before + 1..=revision_before + 15).collect();
    assert_eq!(revisions, expected, "one dense revision per accepted write");
    assert_eq!(
        orbit_row_updates(&mut monitor, orbit),
        2,
        "the first write's own update, then one for the group's fourteen changes"
    );
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
    let rel = release(&app, who, lease, version).await;
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

/// A later write of a group that would wait for a lock held elsewhere gives up at
/// once, is rolled back to its savepoint (its statement failed inside the group's
/// transaction), and runs alone after the group's commit, where it waits as the
/// ordinary path does; the rest of the group commits without it.
#[actix_web::test]
async fn a_later_write_that_meets_a_held_lock_runs_alone_after_the_group() {
    let app = one_lane_no_quick_writes().await;
    let c = crate::work::crew(&app, "held-later", 3).await;
    let path = format!("/api/v1/orbits/{}/tasks", c.orbit);
    let held = crate::work::task(&app, &c.members[1], c.orbit, "held").await;
    for m in &c.members {
        // One write each, so each token has the orbit as its hint.
        crate::work::task(&app, m, c.orbit, "warm").await;
    }
    let mut monitor = app.db.conn();
    let mut orbit_lock = app.db.conn();
    let locker = sql_i64(&mut orbit_lock, "SELECT pg_backend_pid()::bigint AS n");
    {
        use diesel::connection::SimpleConnection;
        orbit_lock
            .batch_execute(&format!(
                "BEGIN; SELECT 1 FROM orbits WHERE id = {} FOR UPDATE",
                c.orbit
            ))
            .unwrap();
    }
    let task_lock = crate::harness::RowLock::take(&app.db, held);
    let [writes0] = app.metrics(["orbit_grouped_writes_total"]).await;
    let first = app.post_keyed(&path, &c.members[0].token, json!({"title": "first"}));
    let steer = async {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let [w] = app.metrics(["orbit_grouped_writes_waiting"]).await;
            let in_lane = sql_i64(
                &mut monitor,
                &format!(
                    "SELECT count(*) AS n FROM pg_stat_activity \
                     WHERE {locker} = ANY(pg_blocking_pids(pid))"
                ),
            );
            if w == 0 && in_lane >= 1 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the first write never waited"
            );
            actix_web::rt::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        // Queued behind it, in this order: a task creation, then an acquire of the
        // task whose row is held.
        let second = app.post_keyed(&path, &c.members[2].token, json!({"title": "second"}));
        let acquire = async {
            loop {
                let [w] = app.metrics(["orbit_grouped_writes_waiting"]).await;
                if w == 1 {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "{w} writes queued");
                actix_web::rt::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            crate::work::acquire(&app, &c.members[1], held, json!({})).await
        };
        let release = async {
            loop {
                let [w] = app.metrics(["orbit_grouped_writes_waiting"]).await;
                if w == 2 {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "{w} writes queued");
                actix_web::rt::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            drop(orbit_lock);
            // The group commits the task creation while the acquire waits alone
            // (it gave up its wait inside the group after 10 ms, a moment this
            // loop may see too): were it waiting inside the group, the group would
            // not commit before the task's row is released.
            loop {
                let waiting = task_lock.waiting_now(&mut app.db.conn());
                let committed = sql_i64(
                    &mut app.db.conn(),
                    &format!(
                        "SELECT count(*) AS n FROM tasks WHERE orbit_id = {} AND title = 'second'",
                        c.orbit
                    ),
                );
                if committed == 1 && waiting > 0 {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "the group never committed while the acquire waited alone \
                     (second committed: {committed}, waiting on the task: {waiting})"
                );
                actix_web::rt::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            task_lock.release();
        };
        let (second, acquire, ()) = futures::join!(second, acquire, release);
        (second, acquire)
    };
    let (first, (second, acquire)) = futures::join!(first, steer);
    assert_eq!(first.status, 201, "{}", first.text);
    assert_eq!(second.status, 201, "{}", second.text);
    assert_eq!(acquire.status, 201, "{}", acquire.text);
    let [writes] = app.metrics(["orbit_grouped_writes_total"]).await;
    assert_eq!(writes - writes0, 3);
}

/// A group applies its writes' changes after all their work, so it takes the
/// orbit's row only for the applies and the commit: here the orbit's row is held
/// elsewhere while a group of fifteen task creations runs, and when the group waits
/// for it, every one of the fifteen has already made its task (drawn its id).
/// Released, each is answered once, with its own dense revision.
#[actix_web::test]
async fn a_group_takes_the_orbit_row_only_after_every_write_has_run() {
    let app = one_lane_no_quick_writes().await;
    let c = crate::work::crew(&app, "applies-last", 17).await;
    let path = format!("/api/v1/orbits/{}/tasks", c.orbit);
    let held = crate::work::task(&app, &c.members[16], c.orbit, "held").await;
    crate::work::lease(&app, &c.members[16], held, 600).await;
    for m in &c.members[..16] {
        // One write each, so each token has the orbit as its hint.
        crate::work::task(&app, m, c.orbit, "warm").await;
    }
    let mut monitor = app.db.conn();
    let last_task = "SELECT max(id) AS n FROM tasks";
    let drawn = "SELECT last_value AS n FROM tasks_id_seq";
    let ids_before = sql_i64(&mut monitor, drawn);
    assert_eq!(ids_before, sql_i64(&mut monitor, last_task));
    let revision_before = sql_i64(
        &mut monitor,
        &format!("SELECT revision AS n FROM orbits WHERE id = {}", c.orbit),
    );

    // The lane's first write, an acquire of a leased task, waits on the task's row
    // and is then refused (no change to apply); fifteen task creations queue
    // behind it and run as one group while the orbit's row is held.
    let task_lock = RowLock::take(&app.db, held);
    // The lock an apply's `UPDATE orbits` takes (a task's insert, which checks its
    // orbit's key, does not wait for it).
    let orbit_lock = RowLock::on(&app.db, "orbits", c.orbit, "NO KEY UPDATE");
    let first = crate::work::acquire(&app, &c.members[0], held, json!({}));
    let rest = async {
        until_waiting(&task_lock, &mut monitor, "the first write").await;
        let rest = futures::future::join_all(c.members[1..16].iter().enumerate().map(|(i, m)| {
            app.post_keyed(&path, &m.token, json!({"title": format!("grouped {i}")}))
        }));
        let steer = async {
            until_queued(&app, 15).await;
            task_lock.release();
            let deadline = Instant::now() + STEER;
            // The group's applies, all in one statement (`db::apply_all`; a write
            // alone would send `EXECUTE orbit_apply`).
            let blocked_apply = format!(
                "SELECT count(*) AS n FROM pg_stat_activity \
                 WHERE {} = ANY(pg_blocking_pids(pid)) \
                 AND query LIKE '%apply_change(%'",
                orbit_lock.pid()
            );
            while sql_i64(&mut monitor, &blocked_apply) < 1 {
                assert!(
                    Instant::now() < deadline,
                    "the group never waited for the orbit's row"
                );
                actix_web::rt::time::sleep(Duration::from_millis(10)).await;
            }
            let drawn_while_waiting = sql_i64(&mut monitor, drawn) - ids_before;
            orbit_lock.release();
            drawn_while_waiting
        };
        futures::join!(rest, steer)
    };
    let (first, (rest, drawn_while_waiting)) = futures::join!(first, rest);

    assert_eq!(first.status, 409, "{}", first.text);
    assert_eq!(
        drawn_while_waiting, 15,
        "every write of the group had run when its first change was applied"
    );
    let mut revisions = Vec::new();
    for r in rest {
        assert_eq!(r.status, 201, "{}", r.text);
        revisions.push(r.json["data"]["orbit_revision"].as_i64().unwrap());
    }
    revisions.sort_unstable();
    let expected: Vec<i64> = (revision_before + 1..=revision_before + 15).collect();
    assert_eq!(revisions, expected, "one dense revision per write");
}

/// Ten requests under one key that queue into one group: the first of them runs,
/// the others find its key claimed but not yet answered (its change is applied at
/// the end of the group), run alone after the group's commit and replay it. One
/// task, one revision, ten identical answers.
#[actix_web::test]
async fn one_key_sent_ten_times_into_one_group_executes_once() {
    let app = one_lane_no_quick_writes().await;
    let c = crate::work::crew(&app, "one-key", 2).await;
    let path = format!("/api/v1/orbits/{}/tasks", c.orbit);
    for m in &c.members {
        crate::work::task(&app, m, c.orbit, "warm").await;
    }
    let [groups_before, writes_before] = app
        .metrics(["orbit_write_groups_total", "orbit_grouped_writes_total"])
        .await;
    let mut monitor = app.db.conn();
    let revision_before = sql_i64(
        &mut monitor,
        &format!("SELECT revision AS n FROM orbits WHERE id = {}", c.orbit),
    );
    // The lane's first write (another agent's) waits for the orbit's row; the ten
    // queue behind it.
    let lock = RowLock::on(&app.db, "orbits", c.orbit, "UPDATE");
    let first = app.post_keyed(&path, &c.members[0].token, json!({"title": "first"}));
    let key = uuid::Uuid::new_v4().to_string();
    let ten = async {
        until_waiting(&lock, &mut monitor, "the first write").await;
        let ten = futures::future::join_all((0..10).map(|_| {
            app.post_with_key(&path, &c.members[1].token, &key, json!({"title": "once"}))
        }));
        let release = async {
            until_queued(&app, 10).await;
            lock.release();
        };
        futures::join!(ten, release).0
    };
    let (first, ten) = futures::join!(first, ten);

    assert_eq!(first.status, 201, "{}", first.text);
    let executed: Vec<_> = ten
        .iter()
        .filter(|r| r.header("idempotency-replayed").is_none())
        .collect();
    assert_eq!(executed.len(), 1, "one of the ten executed");
    for r in &ten {
        assert_eq!(r.status, 201, "{}", r.text);
        assert_eq!(r.text, executed[0].text, "every answer is the same bytes");
    }
    assert_eq!(
        sql_i64(
            &mut app.db.conn(),
            &format!(
                "SELECT count(*) AS n FROM tasks WHERE orbit_id = {} AND title = 'once'",
                c.orbit
            ),
        ),
        1
    );
    assert_eq!(
        sql_i64(
            &mut app.db.conn(),
            &format!("SELECT revision AS n FROM orbits WHERE id = {}", c.orbit),
        ),
        revision_before + 2,
        "the first write and the one execution"
    );
    let [groups, writes] = app
        .metrics(["orbit_write_groups_total", "orbit_grouped_writes_total"])
        .await;
    assert_eq!(writes - writes_before, 11);
    assert_eq!(
        groups - groups_before,
        2,
        "the first write alone, then the ten"
    );
}

/// A group reads its writes' tokens in one statement, and each write checks its
/// own row there as alone: a token revoked after its last use (still verified in
/// this instance's cache) is refused inside the group with 401 and writes nothing,
/// while the group's other writes commit with dense revisions.
#[actix_web::test]
async fn a_token_revoked_while_cached_is_refused_inside_its_group() {
    use diesel::connection::SimpleConnection;

    let app = one_lane_no_quick_writes().await;
    let c = crate::work::crew(&app, "revoked-in-group", 6).await;
    let path = format!("/api/v1/orbits/{}/tasks", c.orbit);
    for m in &c.members {
        // One write each: the token is verified (cached) and has the orbit as hint.
        crate::work::task(&app, m, c.orbit, "warm").await;
    }
    let revoked = &c.members[3];
    let mut monitor = app.db.conn();
    monitor
        .batch_execute(&format!(
            "UPDATE tokens SET revoked_at = now() WHERE contributor_id = {}",
            revoked.id
        ))
        .unwrap();
    let revision_before = sql_i64(
        &mut monitor,
        &format!("SELECT revision AS n FROM orbits WHERE id = {}", c.orbit),
    );
    let [groups_before] = app.metrics(["orbit_write_groups_total"]).await;

    let lock = RowLock::on(&app.db, "orbits", c.orbit, "UPDATE");
    let first = app.post_keyed(&path, &c.members[0].token, json!({"title": "first"}));
    let rest = async {
        until_waiting(&lock, &mut monitor, "the first write").await;
        let rest = futures::future::join_all(c.members[1..].iter().enumerate().map(|(i, m)| {
            app.post_keyed(
                &path,
                &m.token,
                json!({"title": format!("grouped {}", i + 1)}),
            )
        }));
        let release = async {
            until_queued(&app, 5).await;
            lock.release();
        };
        futures::join!(rest, release).0
    };
    let (first, rest) = futures::join!(first, rest);

    assert_eq!(first.status, 201, "{}", first.text);
    for (i, r) in rest.iter().enumerate().map(|(i, r)| (i + 1, r)) {
        if i == 3 {
            r.assert_envelope(401);
            assert!(r.text.contains("revoked"), "{}", r.text);
        } else {
            assert_eq!(r.status, 201, "{}", r.text);
        }
    }
    let [groups] = app.metrics(["orbit_write_groups_total"]).await;
    assert_eq!(
        groups - groups_before,
        2,
        "the first write alone, then the five"
    );
    let mut conn = app.db.conn();
    assert_eq!(
        sql_i64(
            &mut conn,
            &format!(
                "SELECT count(*) AS n FROM tasks WHERE orbit_id = {} AND created_by = {} \
                 AND title LIKE 'grouped%'",
                c.orbit, revoked.id
            ),
        ),
        0
    );
    assert_eq!(
        sql_i64(
            &mut conn,
            &format!("SELECT revision AS n FROM orbits WHERE id = {}", c.orbit),
        ),
        revision_before + 5,
        "the first write and the four accepted ones"
    );
    // Refused once, the token stays refused (it left the cache).
    let again = app
        .post_keyed(&path, &revoked.token, json!({"title": "again"}))
        .await;
    assert_eq!(again.status, 401, "{}", again.text);
}
