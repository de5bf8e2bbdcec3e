//! Test 4 of docs/RELIABILITY.md. Slow clients hold neither a worker nor a database
//! connection: stalled connections against one worker, normal requests answered
//! meanwhile, and the server closing each stalled one after about the client timeout.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use diesel::PgConnection;
use orbit_commons::testkit::{short_id, Scratch};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::fleet::{load_env, start_serve, with_setting};
use super::load::{seed_small, Net};
use crate::harness::{sql_i64, TestDb};

const TIMEOUT_S: u64 = 2;
/// The service's pool size in this test.
const POOL: i64 = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_client_does_not_hold_a_worker() {
    let started = Instant::now();
    let db = TestDb::new();
    let logs = Scratch::new("oc-rel-slow").expect("create a temporary directory");
    let mut env = with_setting(load_env(&db.url), "ORBIT_DB_POOL_SIZE", POOL);
    env.push(("ORBIT_CLIENT_TIMEOUT_SECONDS", TIMEOUT_S.to_string()));
    let mut serve = start_serve(&logs.dir, "serve", &env).await;
    let user = User::of(&serve.base()).await;
    user.warm_the_pool().await;
    let mut monitor = db.conn();
    let baseline = backends(&mut monitor, &db.name, "");

    let opened = Instant::now();
    let stalled = stall(&serve.addr(), &user.token).await;

    // Meanwhile the single worker answers everyone else promptly, and the database
    // sees no more connections than the service may hold without them (its pool of
    // POOL and the change hub's two: the listener, and the notifier, which the first
    // write opens; the pool fills lazily, so a request or the webhook sweep may open
    // its second connection meanwhile), none of them in a transaction. Each of the
    // 24 stalled clients holding one would show far more.
    let worst = user.twelve_normal_requests().await;
    assert!(
        worst < Duration::from_secs(TIMEOUT_S),
        "a normal request waited {worst:?} behind slow clients"
    );
    let during = backends(&mut monitor, &db.name, "");
    let busy = busy_backends(&mut monitor, &db.name).await;
    assert!(
        during <= (POOL + 2).max(baseline),
        "database connections grew while clients stalled: {baseline} -> {during} \
         (pool {POOL} + the hub's listener and notifier)"
    );
    assert_eq!(busy, 0, "a stalled client holds a database connection");

    // The server closes each stalled connection after about the timeout.
    let closes = closed_by_the_server(stalled, opened).await;
    for (what, (first, _, _)) in &closes {
        assert!(
            *first >= Duration::from_millis(TIMEOUT_S * 1000 / 2),
            "{what}: closed after {first:?}, long before the timeout"
        );
    }
    assert!(serve.alive(), "the service exited");
    let r = user
        .http
        .get(format!("{}/api/v1/orbits", user.base))
        .send()
        .await
        .expect("after");
    assert_eq!(r.status(), 200);
    eprintln!(
        "RELIABILITY slow_client_does_not_hold_a_worker: {:.1} s; 28 stalled connections \
         (16 partial headers, 8 stalled bodies, 4 idle keep-alive) against 1 worker; 12 normal \
         requests answered meanwhile, worst {} ms; db connections {baseline} before, {during} \
         during, {busy} busy; closed by the server (first..last, how): {:?}; violations 0",
        started.elapsed().as_secs_f64(),
        worst.as_millis(),
        closes
            .iter()
            .map(|(k, (a, b, how))| format!(
                "{k}: {:.1}..{:.1} s ({how})",
                a.as_secs_f64(),
                b.as_secs_f64()
            ))
            .collect::<Vec<_>>(),
    );
}

/// An ordinary, prompt client with an agent's token.
struct User {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl User {
    async fn of(base: &str) -> User {
        let net = Net::new(vec![base.to_owned()]);
        let (workers, _world) = seed_small(&net).await;
        User {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("client"),
            base: base.to_owned(),
            token: workers[0].token.clone(),
        }
    }

    /// Warms the instance's pool to its size (before the baseline is taken).
    async fn warm_the_pool(&self) {
        let warm: Vec<_> = (0..6)
            .map(|_| {
                self.http
                    .get(format!("{}/api/v1/me", self.base))
                    .bearer_auth(&self.token)
                    .send()
            })
            .collect();
        for r in futures::future::join_all(warm).await {
            assert_eq!(r.expect("warm-up").status(), 200);
        }
    }

    /// Twelve requests (public read, authenticated read, write) one after another;
    /// the slowest one's time.
    async fn twelve_normal_requests(&self) -> Duration {
        let (client, base, token) = (&self.http, &self.base, &self.token);
        let mut worst = Duration::ZERO;
        for i in 0..12 {
            let t = Instant::now();
            let r =
                match i % 3 {
                    0 => client.get(format!("{base}/api/v1/orbits")).send().await,
                    1 => {
                        client
                            .get(format!("{base}/api/v1/me"))
                            .bearer_auth(token)
                            .send()
                            .await
                    }
                    _ => client
                        .post(format!("{base}/api/v1/orbits"))
                        .bearer_auth(token)
                        .json(&json!({"slug": format!("rel-slow-{i}-{}", short_id()), "name": "x"}))
                        .send()
                        .await,
                }
                .expect("a normal request while slow clients stall");
            assert!(r.status().is_success(), "{}", r.status());
            worst = worst.max(t.elapsed());
        }
        worst
    }
}

/// 16 clients stop in the middle of their headers; 8 send whole headers of a write
/// and stall in its body; 4 finish one request and then idle on keep-alive.
async fn stall(addr: &str, token: &str) -> Vec<(&'static str, TcpStream)> {
    let mut stalled = Vec::new();
    for i in 0..16 {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(
            format!("GET /api/v1/orbits HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow-{i}: ").as_bytes(),
        )
        .await
        .expect("partial head");
        stalled.push(("partial headers", s));
    }
    for _ in 0..8 {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        let head = format!(
            "POST /api/v1/orbits HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"slug\": "
        );
        s.write_all(head.as_bytes()).await.expect("partial body");
        stalled.push(("stalled body", s));
    }
    for _ in 0..4 {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .expect("request");
        let mut buf = [0u8; 1024];
        let n = s.read(&mut buf).await.expect("response");
        assert!(
            buf[..n].starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&buf[..n])
        );
        stalled.push(("idle keep-alive", s));
    }
    stalled
}

/// Per kind of stalled connection: when the first and the last were closed (since
/// `opened`), and how. Panics on one still open well past the timeout.
async fn closed_by_the_server(
    stalled: Vec<(&'static str, TcpStream)>,
    opened: Instant,
) -> BTreeMap<&'static str, (Duration, Duration, String)> {
    let mut closes = BTreeMap::<&str, (Duration, Duration, String)>::new();
    let limit = Duration::from_secs(TIMEOUT_S + 3);
    for (what, mut s) in stalled {
        let left = limit.saturating_sub(opened.elapsed());
        let how = until_closed(&mut s, left).await;
        let at = opened.elapsed();
        let how = how.unwrap_or_else(|| {
            panic!("a connection with {what} was still open {at:?} after it stalled (timeout {TIMEOUT_S} s)")
        });
        let e = closes
            .entry(what)
            .or_insert((Duration::MAX, Duration::ZERO, how.clone()));
        e.0 = e.0.min(at);
        e.1 = e.1.max(at);
    }
    closes
}

/// The database's busy client connections. A stalled client holding a connection
/// would keep it busy; the instance's own background statements (a coalesced NOTIFY
/// after the writes above, the purge) are busy only for a moment, so look a few times.
async fn busy_backends(monitor: &mut PgConnection, db: &str) -> i64 {
    let mut busy = 0;
    for _ in 0..20 {
        busy = backends(
            monitor,
            db,
            "AND state IN ('active', 'idle in transaction', 'idle in transaction (aborted)')",
        );
        if busy == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    busy
}

/// How a stalled connection ended: closed (EOF or reset), or answered 408 and closed.
async fn until_closed(stream: &mut TcpStream, limit: Duration) -> Option<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => {
                let text = String::from_utf8_lossy(&got);
                return Some(text.lines().next().unwrap_or("closed").to_owned());
            }
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

fn backends(conn: &mut PgConnection, db: &str, states: &str) -> i64 {
    sql_i64(
        conn,
        &format!(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = '{db}' \
             AND pid <> pg_backend_pid() AND backend_type = 'client backend' {states}"
        ),
    )
}
