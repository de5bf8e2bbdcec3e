//! Webhooks survive a killed instance (issue 22): two `orbit-commons serve`
//! processes on one database, one subscription, a burst of changes delivered to a
//! slow local receiver; the instance holding the subscription's claim is SIGKILLed
//! while a delivery is in flight. The other instance takes the subscription over
//! once the claim runs out: every change reaches the receiver at least once, in
//! revision order, and only the change in flight at the kill is sent twice. And a
//! PostgreSQL restart: the same instance's engine delivers again afterwards, the
//! changes of before and after in order.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use orbit_commons::testkit::{PrivateCluster, Scratch, Service};
use serde_json::{json, Value};

use super::fleet::{load_env, migrated_cluster, start_serve};
use crate::harness::TestDb;
use orbit_commons::testkit::receiver::{Plan, Receiver};

/// A client of one instance, with one token.
struct Client {
    http: reqwest::Client,
    token: String,
}

impl Client {
    async fn register(base: &str) -> Client {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        let r: Value = http
            .post(format!("{base}/api/v1/contributors"))
            .json(&json!({"type": "AGENT", "name": "hooker"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        Client {
            http,
            token: r["data"]["token"].as_str().unwrap().to_owned(),
        }
    }

    async fn post(&self, url: String, key: Option<String>, body: Value) -> (u16, Value) {
        let mut req = self.http.post(url).bearer_auth(&self.token).json(&body);
        if let Some(k) = key {
            req = req.header("Idempotency-Key", k);
        }
        let r = req.send().await.expect("request sent");
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    /// A new agent, its new orbit `slug`, and its subscription of the orbit's
    /// changes to `rx` (the create answer).
    async fn subscribed(base: &str, slug: &str, rx: &Receiver) -> (Client, i64, Value) {
        let client = Client::register(base).await;
        let (status, orbit) = client
            .post(
                format!("{base}/api/v1/orbits"),
                None,
                json!({"slug": slug, "name": slug}),
            )
            .await;
        assert_eq!(status, 201, "{orbit}");
        let orbit = orbit["data"]["id"].as_i64().unwrap();
        let (status, hook) = client
            .post(
                format!("{base}/api/v1/me/webhooks"),
                None,
                json!({"orbit": orbit, "url": rx.url}),
            )
            .await;
        assert_eq!(status, 201, "{hook}");
        (client, orbit, hook)
    }

    /// One problem created through `base`; its revision.
    async fn write(&self, base: &str, orbit: i64, n: usize) -> i64 {
        let (status, body) = self
            .post(
                format!("{base}/api/v1/orbits/{orbit}/problems"),
                Some(format!("burst-{n}")),
                json!({"title": format!("burst {n}"), "statement": ""}),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        body["data"]["orbit_revision"].as_i64().unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_survive_a_killed_delivering_instance() {
    let started = Instant::now();
    let db = TestDb::new();
    let logs = Scratch::new("oc-rel-hooks").expect("create a temporary directory");
    let mut env = load_env(&db.url);
    env.push(("ORBIT_WEBHOOK_ALLOW_PRIVATE", "true".into()));
    env.push(("ORBIT_WEBHOOK_RETRY_BASE_MS", "100".into()));
    // A claim lasts one attempt's timeout plus 5 s: 6 s here.
    env.push(("ORBIT_WEBHOOK_TIMEOUT_MS", "1000".into()));
    let mut serves = [
        start_serve(&logs.dir, "instance-0", &env).await,
        start_serve(&logs.dir, "instance-1", &env).await,
    ];
    let bases: Vec<String> = serves.iter().map(|s| s.base()).collect();
    let rx = Receiver::start_with(Plan {
        delay: Duration::from_millis(150),
        ..Plan::default()
    })
    .expect("start the webhook receiver");
    let client = Client::register(&bases[0]).await;
    let (status, orbit) = client
        .post(
            format!("{}/api/v1/orbits", bases[0]),
            None,
            json!({"slug": "burst", "name": "burst"}),
        )
        .await;
    assert_eq!(status, 201, "{orbit}");
    let orbit = orbit["data"]["id"].as_i64().unwrap();
    let (status, hook) = client
        .post(
            format!("{}/api/v1/me/webhooks", bases[1]),
            None,
            json!({"orbit": orbit, "url": rx.url}),
        )
        .await;
    assert_eq!(status, 201, "{hook}");
    let secret = hook["data"]["secret"].as_str().unwrap().to_owned();

    // The first part of the burst, through both instances.
    let mut revisions = Vec::new();
    for n in 0..20 {
        revisions.push(client.write(&bases[n % 2], orbit, n).await);
    }
    // Wait until a few were delivered and one is in flight, then kill the instance
    // that holds the claim.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut conn = db.conn();
    let (victim, in_flight) = loop {
        assert!(
            Instant::now() < deadline,
            "no delivery in flight: {:?}",
            rx.got().len()
        );
        if rx.count() >= 4 && rx.in_flight() == 1 {
            let holder = claimed_by(&mut conn);
            let pid: u32 = holder
                .as_deref()
                .and_then(|h| h.split(':').next()?.parse().ok())
                .unwrap_or(0);
            if let Some(i) = serves.iter().position(|s| s.pid() == pid) {
                let status = serves[i].sigkill().expect("kill -9");
                assert_eq!(status.signal(), Some(libc::SIGKILL));
                let last = rx.got().last().unwrap().revision();
                break (i, last);
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let survivor = &bases[1 - victim];
    let killed_at = started.elapsed();
    // The rest of the burst, through the survivor.
    for n in 20..30 {
        revisions.push(client.write(survivor, orbit, n).await);
    }
    let last = *revisions.last().unwrap();
    let got = rx
        .wait_for(Duration::from_secs(60), |g| {
            g.last().is_some_and(|l| l.revision() == last)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // Let anything stray arrive before counting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got = if rx.count() > got.len() {
        rx.got()
    } else {
        got
    };

    let seen: Vec<i64> = got.iter().map(|g| g.revision()).collect();
    assert!(
        seen.windows(2).all(|w| w[0] <= w[1]),
        "out of order: {seen:?}"
    );
    let mut counts = BTreeMap::new();
    for r in &seen {
        *counts.entry(*r).or_insert(0) += 1;
    }
    for r in &revisions {
        assert!(
            counts.contains_key(r),
            "revision {r} never arrived: {seen:?}"
        );
    }
    let twice: Vec<i64> = counts
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(r, _)| *r)
        .collect();
    assert_eq!(
        twice,
        vec![in_flight],
        "only the change in flight may come twice: {seen:?}"
    );
    assert_eq!(counts[&in_flight], 2);
    assert_eq!(seen.len(), revisions.len() + 1);
    for g in &got {
        g.verify(&secret).unwrap();
    }
    // The survivor delivered the rest, and the subscription's progress is complete.
    assert!(serves[1 - victim].alive());
    let through = crate::harness::sql_i64(&mut conn, "SELECT delivered_through AS n FROM webhooks");
    assert_eq!(through, last);
    println!(
        "RELIABILITY webhooks_survive_a_killed_delivering_instance: {} changes, instance-{victim} \
         SIGKILLed {:.1} s in with revision {in_flight} in flight; {} deliveries received, \
         in order, revision {in_flight} twice; {:.1} s",
        revisions.len(),
        killed_at.as_secs_f64(),
        seen.len(),
        started.elapsed().as_secs_f64()
    );
}

/// The instance that holds the (only) subscription's claim, if any.
fn claimed_by(conn: &mut diesel::PgConnection) -> Option<String> {
    use diesel::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct Row {
        #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
        claimed_by: Option<String>,
    }
    diesel::sql_query(
        "SELECT claimed_by FROM webhooks WHERE claim_until > clock_timestamp() LIMIT 1",
    )
    .get_result::<Row>(conn)
    .ok()
    .and_then(|r| r.claimed_by)
}

/// One instance on a private cluster of its own (to stop and restart), delivering to
/// local receivers, retrying after 100 ms, its database timeout 1 s.
async fn on_its_own_cluster(prefix: &str) -> (PrivateCluster, Service) {
    let (pg, url) = migrated_cluster(prefix);
    let mut env = load_env(&url);
    env.push(("ORBIT_WEBHOOK_ALLOW_PRIVATE", "true".into()));
    env.push(("ORBIT_WEBHOOK_RETRY_BASE_MS", "100".into()));
    env.push(("ORBIT_DB_TIMEOUT_MS", "1000".into()));
    let serve = start_serve(pg.dir(), "serve", &env).await;
    (pg, serve)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_delivery_resumes_after_a_database_restart() {
    let (pg, mut serve) = on_its_own_cluster("oc-rel-hookpg").await;
    let base = serve.base();
    let rx = Receiver::start().expect("start the webhook receiver");
    let (client, orbit, hook) = Client::subscribed(&base, "restarted", &rx).await;
    let mut revisions = Vec::new();
    for n in 0..3 {
        revisions.push(client.write(&base, orbit, n).await);
    }
    rx.wait_for(Duration::from_secs(30), |g| g.len() >= 3)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    tokio::task::block_in_place(|| pg.cluster().stop_now()).expect("stop PostgreSQL");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(serve.alive(), "the service died with the database");
    tokio::task::block_in_place(|| pg.cluster().restart()).expect("restart PostgreSQL");
    serve
        .wait_ready(Duration::from_secs(30))
        .await
        .expect("ready again");
    for n in 3..6 {
        revisions.push(client.write(&base, orbit, n).await);
    }
    let last = *revisions.last().unwrap();
    let got = rx
        .wait_for(Duration::from_secs(30), |g| {
            g.last().is_some_and(|l| l.revision() == last)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let seen: Vec<i64> = got.iter().map(|g| g.revision()).collect();
    assert!(
        seen.windows(2).all(|w| w[0] <= w[1]),
        "out of order: {seen:?}"
    );
    for r in &revisions {
        assert!(seen.contains(r), "revision {r} never arrived: {seen:?}");
    }
    let secret = hook["data"]["secret"].as_str().unwrap();
    for g in &got {
        g.verify(secret).unwrap();
    }
}

/// A database restart while a delivery is out: the receiver answers while the
/// database is down, so the attempt cannot be recorded at once. The live instance
/// records it as soon as the database answers again (its claim is still its own),
/// so the change is not sent twice and the next ones follow at once, instead of
/// waiting for the claim to run out (15 s here). (A probe, 2026-12-07: deliveries
/// stalled for up to 15 s after the database was back, and the change in flight
/// was sent again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_answered_during_a_database_restart_is_recorded_when_it_returns() {
    let (pg, mut serve) = on_its_own_cluster("oc-rel-hookrec").await;
    let base = serve.base();
    let rx = Receiver::start_with(Plan {
        delay: Duration::from_millis(1500),
        ..Plan::default()
    })
    .expect("start the webhook receiver");
    let (client, orbit, _) = Client::subscribed(&base, "recorded", &rx).await;
    let first = client.write(&base, orbit, 0).await;
    let out = Instant::now();
    while rx.in_flight() == 0 {
        assert!(out.elapsed() < Duration::from_secs(20), "nothing was sent");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The receiver holds it 1.5 s; the database is down before it answers.
    tokio::task::block_in_place(|| pg.cluster().stop_now()).expect("stop PostgreSQL");
    rx.set_plan(Plan::default());
    tokio::time::sleep(Duration::from_secs(3)).await;
    tokio::task::block_in_place(|| pg.cluster().restart()).expect("restart PostgreSQL");
    serve
        .wait_ready(Duration::from_secs(30))
        .await
        .expect("ready again");
    let back = Instant::now();
    let mut last = 0;
    for n in 1..3 {
        last = client.write(&base, orbit, n).await;
    }
    let got = rx
        .wait_for(Duration::from_secs(30), |g| {
            g.last().is_some_and(|l| l.revision() == last)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let waited = back.elapsed();
    let seen: Vec<i64> = got.iter().map(|g| g.revision()).collect();
    assert!(
        waited < Duration::from_secs(6),
        "the next changes waited {waited:?} after the database was back: {seen:?}\n{}",
        serve.log_tail()
    );
    assert_eq!(
        seen.iter().filter(|r| **r == first).count(),
        1,
        "the change in flight was sent again: {seen:?}"
    );
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "out of order: {seen:?}"
    );
}
