//! Finding 3 on long polls: one shared feed read per wake-up, no wait past the
//! revision, and a cap per client that a poll whose client left gives back at once
//! (over REST and MCP);
//! and a write whose client left still wakes them.

use reqwest::StatusCode;
use serde_json::json;

use crate::harness::TestApp;

/// Finding 3: however many long polls wait on an orbit, a write costs one shared
/// feed read, and every poll gets the write.
#[tokio::test]
async fn long_polls_share_one_feed_read_per_wake_up() {
    const POLLERS: usize = 60;
    let app = TestApp::spawn_with(|c| c.long_polls_per_client = 1000).await;
    let owner = app.agent("feed-owner").await;
    let orbit = app.orbit(&owner, "shared-feed").await;
    let path = format!("/api/v1/orbits/{orbit}/changes?after=1&wait=25");
    let polls: Vec<_> = (0..POLLERS)
        .map(|_| {
            let client = app.client.clone();
            let url = app.url(&path);
            tokio::spawn(async move {
                let r = client.get(url).send().await.expect("long poll");
                assert_eq!(r.status(), StatusCode::OK);
                r.json::<serde_json::Value>().await.expect("json")
            })
        })
        .collect();
    // Wait until every poll waits.
    let started = std::time::Instant::now();
    loop {
        let [waiting] = app.metrics(["orbit_long_polls_waiting"]).await;
        if waiting == POLLERS as u64 {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "only {waiting} of {POLLERS} polls waiting"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let [shared_before, own_before] = app
        .metrics([
            "orbit_feed_shared_reads_total",
            "orbit_feed_own_reads_total",
        ])
        .await;
    let r = app
        .post_keyed(
            &format!("/api/v1/orbits/{orbit}/tasks"),
            &owner.token,
            json!({"title": "wake everyone"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    for p in polls {
        let page = p.await.expect("poll task");
        assert_eq!(page["data"][0]["kind"], "task.created", "{page}");
        assert_eq!(page["meta"]["next_after"], 2, "{page}");
    }
    let [shared_after, own_after] = app
        .metrics([
            "orbit_feed_shared_reads_total",
            "orbit_feed_own_reads_total",
        ])
        .await;
    // One write, one wake-up (a second only if the NOTIFY echo comes in apart).
    assert!(
        shared_after - shared_before <= 2,
        "{} shared reads for one write",
        shared_after - shared_before
    );
    assert_eq!(own_after, own_before, "polls read the feed alone");
    let [waiting] = app.metrics(["orbit_long_polls_waiting"]).await;
    assert_eq!(waiting, 0);
}

/// Finding 3: a poll past the orbit's revision is answered at once, not held.
#[tokio::test]
async fn a_long_poll_past_the_revision_answers_at_once() {
    let app = TestApp::spawn().await;
    let owner = app.agent("ahead").await;
    let orbit = app.orbit(&owner, "ahead").await;
    let r = app
        .get(
            &format!("/api/v1/orbits/{orbit}/changes?after=50&wait=30"),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        r.json,
        json!({"data": [], "meta": {"next_after": 50, "orbit_revision": 1}})
    );
    let [waiting, shared] = app
        .metrics(["orbit_long_polls_waiting", "orbit_feed_shared_reads_total"])
        .await;
    assert_eq!((waiting, shared), (0, 0), "the poll waited");
}

/// Finding 3: a client may have only so many long polls waiting; beyond, 429.
#[tokio::test]
async fn long_polls_per_client_are_capped() {
    let app = TestApp::spawn_with(|c| c.long_polls_per_client = 2).await;
    let owner = app.agent("capped").await;
    let other = app.agent("other").await;
    let orbit = app.orbit(&owner, "capped").await;
    let path = format!("/api/v1/orbits/{orbit}/changes?after=1&wait=25");
    let polls: Vec<_> = (0..2)
        .map(|_| {
            let req = app.client.get(app.url(&path)).bearer_auth(&owner.token);
            tokio::spawn(async move { req.send().await.expect("poll").status() })
        })
        .collect();
    let started = std::time::Instant::now();
    while app.metrics(["orbit_long_polls_waiting"]).await[0] < 2 {
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let r = app.get(&path, Some(&owner.token)).await;
    r.assert_error(429, "rate_limited");
    // When the first waiting poll answers at the latest (its `wait` of 25 s and a
    // second for its last read), not 1 s, after which the same poll was refused
    // again (a probe, 2026-12-07).
    let after: u64 = r
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .unwrap();
    assert!((20..=26).contains(&after), "Retry-After {after}");
    let message = r.json["message"].as_str().unwrap();
    assert!(message.contains(&format!("within {after} s")), "{message}");
    // A refused poll gives no place back: the next ones are refused too (until
    // 2026-12-05 each refusal freed a place, and this poll waited its second).
    let short = format!("/api/v1/orbits/{orbit}/changes?after=1&wait=1");
    for _ in 0..3 {
        app.get(&short, Some(&owner.token))
            .await
            .assert_error(429, "rate_limited");
    }
    // Another client, and a poll that does not wait, are not affected.
    let r = app
        .get(
            &format!("/api/v1/orbits/{orbit}/changes?after=0"),
            Some(&owner.token),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let other_poll = {
        let req = app.client.get(app.url(&path)).bearer_auth(&other.token);
        tokio::spawn(async move { req.send().await.expect("poll").status() })
    };
    while app.metrics(["orbit_long_polls_waiting"]).await[0] < 3 {
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // A write answers every waiting poll; the places are given back.
    app.post_keyed(
        &format!("/api/v1/orbits/{orbit}/tasks"),
        &owner.token,
        json!({"title": "answer them"}),
    )
    .await;
    for p in polls {
        assert_eq!(p.await.expect("poll"), StatusCode::OK);
    }
    assert_eq!(other_poll.await.expect("poll"), StatusCode::OK);
    let r = app
        .get(
            &format!("/api/v1/orbits/{orbit}/changes?after=2&wait=1"),
            Some(&owner.token),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}

/// A long poll whose client gave up ends then, giving its place under the cap back
/// at once, not at its deadline (a probe, 2026-12-07: a client whose HTTP timeout
/// was shorter than `wait` locked itself out for up to 30 s).
#[tokio::test]
async fn a_long_poll_whose_client_left_gives_its_place_back() {
    let app = TestApp::spawn_with(|c| c.long_polls_per_client = 2).await;
    let owner = app.agent("impatient").await;
    let orbit = app.orbit(&owner, "impatient").await;
    let path = format!("/api/v1/orbits/{orbit}/changes?after=1&wait=30");
    let polls: Vec<_> = (0..2)
        .map(|_| {
            let req = app
                .client
                .get(app.url(&path))
                .bearer_auth(&owner.token)
                .timeout(std::time::Duration::from_millis(1500));
            tokio::spawn(async move { req.send().await })
        })
        .collect();
    let started = std::time::Instant::now();
    while app.metrics(["orbit_long_polls_waiting"]).await[0] < 2 {
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // Both clients give up (their connections close).
    for p in polls {
        assert!(p.await.expect("poll task").is_err(), "a poll was answered");
    }
    let left = std::time::Instant::now();
    while app.metrics(["orbit_long_polls_waiting"]).await[0] > 0 {
        assert!(
            left.elapsed() < std::time::Duration::from_secs(10),
            "the abandoned polls kept their places"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Their places are free: two new polls wait, and a write answers them.
    let again: Vec<_> = (0..2)
        .map(|_| {
            let req = app.client.get(app.url(&path)).bearer_auth(&owner.token);
            tokio::spawn(async move { req.send().await.expect("poll").status() })
        })
        .collect();
    while app.metrics(["orbit_long_polls_waiting"]).await[0] < 2 {
        assert!(
            left.elapsed() < std::time::Duration::from_secs(20),
            "a new poll did not wait"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    app.post_keyed(
        &format!("/api/v1/orbits/{orbit}/tasks"),
        &owner.token,
        json!({"title": "for the ones still there"}),
    )
    .await;
    for p in again {
        assert_eq!(p.await.expect("poll"), StatusCode::OK);
    }
}

/// Over MCP too: a `read_changes` whose client gave up ends then and gives its
/// place back (it waited out its `wait` until 2026-12-07: the SDK's transport
/// keeps the request from the tool, so the tool gets a watch taken beforehand).
#[tokio::test]
async fn an_mcp_long_poll_whose_client_left_gives_its_place_back() {
    let app = TestApp::spawn_with(|c| c.long_polls_per_client = 1).await;
    let owner = app.agent("impatient-mcp").await;
    let orbit = app.orbit(&owner, "impatient-mcp").await;
    let call = |id: u64, wait: u64| {
        app.client
            .post(app.url("/mcp"))
            .bearer_auth(&owner.token)
            .header("accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": "read_changes",
                    "arguments": {"orbit": orbit, "after": 1, "wait": wait}}}))
    };
    let poll = call(1, 30).timeout(std::time::Duration::from_millis(1500));
    let poll = tokio::spawn(async move { poll.send().await });
    let started = std::time::Instant::now();
    while app.metrics(["orbit_long_polls_waiting"]).await[0] < 1 {
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        poll.await.expect("poll task").is_err(),
        "the poll was answered"
    );
    let left = std::time::Instant::now();
    while app.metrics(["orbit_long_polls_waiting"]).await[0] > 0 {
        assert!(
            left.elapsed() < std::time::Duration::from_secs(10),
            "the abandoned MCP poll kept its place"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Its place is free: a new poll waits its second and answers, not a refusal.
    let r = call(2, 1).send().await.expect("second poll");
    assert_eq!(r.status(), StatusCode::OK);
    let body: serde_json::Value = r.json().await.expect("json");
    assert_eq!(body["result"]["isError"], false, "{body}");
}

/// A write whose client gave up while it waited still wakes the orbit's long polls
/// when it commits: its handler runs to its end, and the change hub's publish comes
/// after the commit. (`h1_allow_half_closed(false)`, tried on 2026-12-05, cancelled
/// the handler at the client's EOF, and the poll slept to its deadline.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_client_left_still_wakes_long_polls() {
    let app = TestApp::spawn().await;
    let owner = app.agent("leaver").await;
    let orbit = app.orbit(&owner, "leaver").await;
    let poll = {
        let req = app
            .client
            .get(app.url(&format!("/api/v1/orbits/{orbit}/changes?after=1&wait=25")))
            .bearer_auth(&owner.token);
        tokio::spawn(async move {
            let r = req.send().await.expect("poll");
            (
                std::time::Instant::now(),
                r.json::<serde_json::Value>().await,
            )
        })
    };
    // The write waits on the orbit's row (its revision), then its client gives up.
    let lock = crate::harness::RowLock::on(&app.db, "orbits", orbit, "UPDATE");
    let write = app
        .client
        .post(app.url(&format!("/api/v1/orbits/{orbit}/tasks")))
        .bearer_auth(&owner.token)
        .header("Idempotency-Key", "left-before-its-answer")
        .json(&json!({"title": "committed after its client left"}))
        .timeout(std::time::Duration::from_millis(1500))
        .send();
    let write = tokio::spawn(write);
    let mut monitor = app.db.conn();
    assert!(lock.waiters(&mut monitor) > 0, "the write never waited");
    assert!(
        write.await.expect("write task").is_err(),
        "the write answered"
    );
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let released = std::time::Instant::now();
    lock.release();
    let (answered, body) = poll.await.expect("poll task");
    let body = body.expect("poll body");
    assert_eq!(body["data"][0]["kind"], "task.created", "{body}");
    // Woken by the write, not by its 25 s deadline.
    assert!(
        answered.duration_since(released) < std::time::Duration::from_secs(10),
        "the poll slept to its deadline"
    );
}
