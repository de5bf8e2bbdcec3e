//! The change feed (contract section 4): paging, `next_after`, parameter ranges and
//! the long poll.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::{backends, test_config, Frozen, TestApp, TestDb};

#[tokio::test]
async fn a_long_poll_started_before_a_write_returns_that_write() {
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    let b = app.agent("b").await;
    let orbit = app.orbit(&owner, "watched").await;

    let path = format!("/api/v1/orbits/{orbit}/changes?after=1&wait=20");
    let started = Instant::now();
    let poll = app.get(&path, None);
    let write = async {
        // Let the poll find the feed empty and start waiting.
        tokio::time::sleep(Duration::from_millis(700)).await;
        app.join(&b, orbit).await;
        Instant::now()
    };
    let (r, written_at) = tokio::join!(poll, write);
    let elapsed = started.elapsed();
    assert_eq!(r.status, 200, "{}", r.text);
    let data = r.json["data"].as_array().unwrap();
    assert_eq!(data.len(), 1, "{}", r.text);
    assert_eq!(data[0]["revision"], 2);
    assert_eq!(data[0]["kind"], "member.added");
    assert_eq!(data[0]["contributor"]["id"], b.id);
    assert_eq!(
        r.json["meta"],
        json!({"next_after": 2, "orbit_revision": 2})
    );
    // It waited for the write (which happened after 700 ms), and came back well
    // before the 20 s wait ran out.
    assert!(
        elapsed >= Duration::from_millis(600),
        "returned after {elapsed:?}, before the write"
    );
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
    assert!(written_at.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_long_poll_on_one_instance_wakes_for_a_write_on_another() {
    let app = TestApp::spawn().await;
    let other = app.another_instance();
    let owner = app.agent("owner").await;
    let b = app.agent("b").await;
    let orbit = app.orbit(&owner, "two-instances").await;

    let started = Instant::now();
    let poll = other.get("/api/v1/orbits/two-instances/changes?after=1&wait=20", None);
    let write = async {
        tokio::time::sleep(Duration::from_millis(700)).await;
        app.join(&b, orbit).await;
    };
    let (r, ()) = tokio::join!(poll, write);
    let elapsed = started.elapsed();
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["data"][0]["revision"], 2, "{}", r.text);
    assert!(elapsed >= Duration::from_millis(600), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
}

/// With the backends named `name` stopped (`expected` of them), on a cluster of the
/// test's own (on this machine, so they can be): a write on one instance, `write_after`
/// into a long poll of 30 s on the other, still answers that poll well before its
/// deadline.
async fn a_stopped_backend_still_lets_writes_wake_polls(
    name: &str,
    expected: usize,
    write_after: Duration,
) {
    let (_pg, url) = crate::reliability::fleet::migrated_cluster("oc-frozen");
    let app = TestApp::spawn_on(TestDb::at(&url), test_config());
    let other = app.another_instance();
    let owner = app.agent("owner").await;
    let b = app.agent("b").await;
    let orbit = app.orbit(&owner, "frozen").await;
    let mut conn = app.db.conn();
    let _frozen = Frozen::stop(backends(&mut conn, Some(name), expected));

    let started = Instant::now();
    let poll = other.get("/api/v1/orbits/frozen/changes?after=1&wait=30", None);
    let write = async {
        tokio::time::sleep(write_after).await;
        app.join(&b, orbit).await;
    };
    let (r, ()) = tokio::join!(poll, write);
    let elapsed = started.elapsed();
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["data"][0]["revision"], 2, "{}", r.text);
    assert!(
        elapsed < Duration::from_secs(20),
        "the poll waited for its deadline: {elapsed:?}"
    );
}

/// A listener whose server backend stops answering while the rest of the database
/// works (no error, no closed connection: a probe's `SIGSTOP`) is replaced by a new
/// one on a new connection, so writes on one instance still wake long polls on the
/// other: before 2026-12-07 they waited for their deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_whose_backend_stopped_answering_is_replaced() {
    // Both instances' listeners; they block at their next ping (every 5 s), and the
    // write comes after that.
    a_stopped_backend_still_lets_writes_wake_polls("orbit-listen", 2, Duration::from_secs(6)).await;
}

/// The same for the notifier of the instance that writes: its batch stuck on a
/// backend that stopped answering, a new notifier wakes every waiter of the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notifier_whose_backend_stopped_answering_is_replaced() {
    // Only the writing instance's notifier has connected (with its first batch).
    a_stopped_backend_still_lets_writes_wake_polls("orbit-notify", 1, Duration::from_millis(500))
        .await;
}

#[tokio::test]
async fn a_long_poll_with_nothing_new_returns_empty_when_the_wait_ends() {
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "quiet").await;
    let started = Instant::now();
    let r = app
        .get(
            &format!("/api/v1/orbits/{orbit}/changes?after=1&wait=1"),
            None,
        )
        .await;
    let elapsed = started.elapsed();
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.json,
        json!({"data": [], "meta": {"next_after": 1, "orbit_revision": 1}})
    );
    assert!(elapsed >= Duration::from_millis(900), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");

    // A poll whose page is not empty answers at once, however long it may wait.
    let started = Instant::now();
    let r = app
        .get(
            &format!("/api/v1/orbits/{orbit}/changes?after=0&wait=30"),
            None,
        )
        .await;
    assert_eq!(r.json["data"].as_array().unwrap().len(), 1);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn an_empty_page_gives_next_after_equal_to_after() {
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "empty-page").await;
    for after in [1, 5, 1000] {
        let r = app
            .get(
                &format!("/api/v1/orbits/{orbit}/changes?after={after}"),
                None,
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(
            r.json,
            json!({"data": [], "meta": {"next_after": after, "orbit_revision": 1}})
        );
    }
}

#[tokio::test]
async fn the_feed_pages_in_revision_order_by_id_or_slug() {
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "paged").await;
    for i in 0..4 {
        let a = app.agent(&format!("a{i}")).await;
        app.join(&a, orbit).await;
    }
    let r = app
        .get("/api/v1/orbits/paged/changes?after=1&limit=2", None)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let revs: Vec<i64> = r.json["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["revision"].as_i64().unwrap())
        .collect();
    assert_eq!(revs, [2, 3]);
    assert_eq!(
        r.json["meta"],
        json!({"next_after": 3, "orbit_revision": 5})
    );
    let by_id = app
        .get(
            &format!("/api/v1/orbits/{orbit}/changes?after=1&limit=2"),
            None,
        )
        .await;
    assert_eq!(by_id.json, r.json);
    // Defaults: after=0, limit=100.
    let all = app.get("/api/v1/orbits/paged/changes", None).await;
    assert_eq!(all.json["data"].as_array().unwrap().len(), 5);
    assert_eq!(all.json["meta"]["next_after"], 5);
    let c = &all.json["data"][0];
    let mut keys: Vec<&str> = c.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "contributor",
            "created_at",
            "entity_id",
            "entity_type",
            "kind",
            "revision",
            "summary",
            "task_id"
        ]
    );
    app.get("/api/v1/orbits/nope/changes", None)
        .await
        .assert_error(404, "not_found");
    app.get("/api/v1/orbits/nope/changes?wait=5", None)
        .await
        .assert_error(404, "not_found");
}

#[tokio::test]
async fn limit_after_and_wait_out_of_range_are_422() {
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "ranges").await;
    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("limit=-3", "limit"),
        ("limit=abc", "limit"),
        ("after=-1", "after"),
        ("after=x", "after"),
        ("wait=31", "wait"),
        ("wait=-1", "wait"),
        ("wait=1.5", "wait"),
    ] {
        let started = Instant::now();
        let r = app
            .get(&format!("/api/v1/orbits/{orbit}/changes?{query}"), None)
            .await;
        r.assert_envelope(422);
        let numeric = query.split('=').nth(1).unwrap().parse::<i64>().is_ok();
        // A value that is not an integer at all is reported by the query extractor,
        // which does not know the field's name; a range problem names it.
        assert!(
            if numeric {
                r.json["errors"][field].is_array()
            } else {
                r.json["errors"].is_object()
            },
            "{query}: expected errors.{field}: {}",
            r.text
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    for ok in ["limit=1", "limit=500", "wait=0", "wait=30&after=0"] {
        let r = app
            .get(&format!("/api/v1/orbits/{orbit}/changes?{ok}"), None)
            .await;
        assert_eq!(r.status, 200, "{ok}: {}", r.text);
    }
    let r = app
        .get(&format!("/api/v1/orbits/{orbit}/changes?since=1"), None)
        .await;
    r.assert_envelope(422);
}
