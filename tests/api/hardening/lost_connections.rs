//! Finding 9: connections lost under writes of every kind answer 503, never 500.

use reqwest::StatusCode;
use serde_json::json;

/// What the writers of `lost_connections_are_503_never_500` saw.
#[derive(Default)]
struct Outcomes {
    /// (what, status, body) of every answer that was neither 2xx nor 503.
    odd: Vec<(String, u16, String)>,
    unavailable: usize,
    ok: usize,
}

/// One keyed write, retried with the same key after a 503, a lost connection or a
/// key still in flight, as a client should; every answer is recorded.
async fn keyed_write(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    what: &str,
    path: &str,
    body: serde_json::Value,
    seen: &std::sync::Mutex<Outcomes>,
) -> Option<serde_json::Value> {
    let key = uuid::Uuid::new_v4().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        let sent = client
            .post(format!("{base}{path}"))
            .bearer_auth(token)
            .header("Idempotency-Key", &key)
            .json(&body)
            .send()
            .await;
        let Ok(r) = sent else {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        };
        let status = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        {
            let mut seen_now = seen.lock().unwrap_or_else(|p| p.into_inner());
            match status {
                200 | 201 => {
                    seen_now.ok += 1;
                    return Some(json);
                }
                503 => seen_now.unavailable += 1,
                409 if json["code"] == "idempotency_key_in_flight" => {}
                _ => {
                    seen_now.odd.push((what.to_owned(), status, text));
                    return None;
                }
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let mut seen_now = seen.lock().unwrap_or_else(|p| p.into_inner());
    seen_now
        .odd
        .push((what.to_owned(), 0, "no answer within 60 s".to_owned()));
    None
}

/// One pass through every kind of write: task create, acquire, checkpoint, renew,
/// handoff offer, accept, complete, acquire and release, contribution create and
/// revision, assessment, memory. `None` as soon as one is refused.
async fn every_kind_of_write(
    client: &reqwest::Client,
    base: &str,
    giver: &crate::harness::Agent,
    taker: &crate::harness::Agent,
    orbit: i64,
    seen: &std::sync::Mutex<Outcomes>,
) -> Option<()> {
    let w = |who: &crate::harness::Agent, what: &'static str, path: String, body| {
        let token = who.token.clone();
        async move { keyed_write(client, base, &token, what, &path, body, seen).await }
    };
    let t = w(
        giver,
        "task",
        format!("/api/v1/orbits/{orbit}/tasks"),
        json!({"title": "t"}),
    )
    .await?;
    let t = t["data"]["id"].as_i64()?;
    let l = w(
        giver,
        "acquire",
        format!("/api/v1/tasks/{t}/leases"),
        json!({"duration_seconds": 600}),
    )
    .await?;
    let (lease, v) = (
        l["data"]["id"].as_i64()?,
        l["data"]["lease_version"].as_i64()?,
    );
    let c = w(
        giver,
        "checkpoint",
        format!("/api/v1/tasks/{t}/checkpoints"),
        json!({"lease_version": v, "summary": "s", "state": {"n": 1}}),
    )
    .await?;
    let checkpoint = c["data"]["id"].as_i64()?;
    w(
        giver,
        "renew",
        format!("/api/v1/leases/{lease}/renew"),
        json!({"lease_version": v, "duration_seconds": 600}),
    )
    .await?;
    let h = w(
        giver,
        "offer",
        format!("/api/v1/tasks/{t}/handoffs"),
        json!({"lease_version": v, "checkpoint_id": checkpoint, "message": "yours",
               "to_contributor_id": taker.id}),
    )
    .await?;
    let h = h["data"]["id"].as_i64()?;
    let a = w(
        taker,
        "accept",
        format!("/api/v1/handoffs/{h}/accept"),
        json!({"duration_seconds": 600}),
    )
    .await?;
    let v2 = a["data"]["lease"]["lease_version"].as_i64()?;
    w(
        taker,
        "complete",
        format!("/api/v1/tasks/{t}/complete"),
        json!({"lease_version": v2, "summary": "done"}),
    )
    .await?;
    let t2 = w(
        giver,
        "task",
        format!("/api/v1/orbits/{orbit}/tasks"),
        json!({"title": "t2"}),
    )
    .await?;
    let t2 = t2["data"]["id"].as_i64()?;
    let l2 = w(
        taker,
        "acquire",
        format!("/api/v1/tasks/{t2}/leases"),
        json!({}),
    )
    .await?;
    let (lease2, v3) = (
        l2["data"]["id"].as_i64()?,
        l2["data"]["lease_version"].as_i64()?,
    );
    w(
        taker,
        "release",
        format!("/api/v1/leases/{lease2}/release"),
        json!({"lease_version": v3}),
    )
    .await?;
    let k = w(
        giver,
        "contribution",
        format!("/api/v1/orbits/{orbit}/contributions"),
        json!({"kind": "NOTE", "title": "n", "body": "b"}),
    )
    .await?;
    let k = k["data"]["id"].as_i64()?;
    w(
        giver,
        "revision",
        format!("/api/v1/contributions/{k}/revisions"),
        json!({"base_revision": 1, "body": "b2"}),
    )
    .await?;
    w(
        taker,
        "assessment",
        format!("/api/v1/contributions/{k}/revisions/2/assessments"),
        json!({"verdict": "SUPPORTS", "rationale": "r"}),
    )
    .await?;
    w(
        giver,
        "memory",
        format!("/api/v1/orbits/{orbit}/memory"),
        json!({"content": "m"}),
    )
    .await?;
    Some(())
}

/// Finding 9: connections lost under writes of every kind (backends terminated by
/// an administrator, then the cluster stopped and started) answer 503, never 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_connections_are_503_never_500() {
    use diesel::{Connection, RunQueryDsl};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    let (pg, url) = crate::reliability::fleet::migrated_cluster("oc-h9");
    let mut env = crate::reliability::fleet::load_env(&url);
    env.push(("ORBIT_DB_TIMEOUT_MS", "1000".into()));
    let serve = crate::reliability::fleet::start_serve(pg.dir(), "serve", &env).await;
    let base = serve.base();
    let app_like = |path: &str| format!("{base}{path}");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client");

    // Four pairs of agents in one orbit.
    let remote = crate::harness::Remote::new(client.clone(), base.clone());
    let owner = remote.register("owner").await;
    let orbit = remote.orbit(&owner, "outages").await;
    let mut pairs = Vec::new();
    for i in 0..4 {
        let mut pair = Vec::new();
        for side in ["giver", "taker"] {
            let a = remote.register(&format!("{side}-{i}")).await;
            remote.join(&a, orbit).await;
            pair.push(a);
        }
        pairs.push(pair);
    }

    let seen = Arc::new(Mutex::new(Outcomes::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = pairs
        .into_iter()
        .map(|pair| {
            let (client, base, seen, stop) =
                (client.clone(), base.clone(), seen.clone(), stop.clone());
            tokio::spawn(async move {
                let mut passes = 0;
                while !stop.load(Ordering::Relaxed) {
                    if every_kind_of_write(&client, &base, &pair[0], &pair[1], orbit, &seen)
                        .await
                        .is_some()
                    {
                        passes += 1;
                    }
                }
                passes
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // An administrator terminates the service's connections, again and again.
    let admin_url = url.clone();
    tokio::task::spawn_blocking(move || {
        let mut admin = diesel::PgConnection::establish(&admin_url).expect("admin connection");
        for _ in 0..25 {
            let _ = diesel::sql_query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid() \
                 AND backend_type = 'client backend'",
            )
            .execute(&mut admin);
            std::thread::sleep(Duration::from_millis(120));
        }
    })
    .await
    .expect("terminator");
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Then the cluster goes away and comes back.
    tokio::task::block_in_place(|| pg.cluster().stop_now()).expect("stop PostgreSQL");
    tokio::time::sleep(Duration::from_secs(2)).await;
    tokio::task::block_in_place(|| pg.cluster().restart()).expect("restart PostgreSQL");
    let up = std::time::Instant::now();
    loop {
        let ready = client.get(app_like("/readyz")).send().await;
        if ready.is_ok_and(|r| r.status() == StatusCode::OK) {
            break;
        }
        assert!(
            up.elapsed() < Duration::from_secs(30),
            "/readyz not 200 after the restart"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    let mut passes = 0;
    for w in writers {
        passes += w.await.expect("writer");
    }
    let seen = seen.lock().unwrap_or_else(|p| p.into_inner());
    let five_hundreds: Vec<_> = seen.odd.iter().filter(|(_, s, _)| *s >= 500).collect();
    assert!(
        five_hundreds.is_empty(),
        "5xx other than 503 ({} of {} answers): {five_hundreds:?}\n{}",
        five_hundreds.len(),
        seen.ok + seen.unavailable + seen.odd.len(),
        serve.log_tail()
    );
    assert!(seen.odd.is_empty(), "unexpected refusals: {:?}", seen.odd);
    assert!(seen.unavailable > 0, "no outage was seen");
    assert!(passes > 0, "no pass through every kind of write completed");
    // Nothing a refused or retried write did broke the feed.
    let mut conn = diesel::PgConnection::establish(&url).expect("connect");
    let gaps = crate::harness::sql_i64(
        &mut conn,
        "SELECT count(*) AS n FROM orbits o WHERE o.revision <> (SELECT count(*) FROM changes c WHERE c.orbit_id = o.id)",
    );
    assert_eq!(gaps, 0, "revisions not dense");
    eprintln!(
        "HARDENING lost_connections_are_503_never_500: {} ok, {} 503, {passes} passes",
        seen.ok, seen.unavailable
    );
}
