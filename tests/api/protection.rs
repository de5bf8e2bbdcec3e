//! Protection (issue 7): body limit, rate limits with standard headers, security
//! headers, metrics, and secrets that never reach a log line.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use reqwest::Method;
use serde_json::json;

use crate::harness::TestApp;
use crate::work::{crew, lease, release, task};

/// Sends a body with `Transfer-Encoding: chunked` over a raw connection, with
/// `extra` headers; returns the response as text (head and body, read until the
/// server closes or the body's `Content-Length` has arrived).
pub async fn chunked_post(
    app: &TestApp,
    path: &str,
    token: &str,
    extra: &[(&str, &str)],
    body: &[u8],
) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(app.addr)
        .await
        .expect("connect");
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
    );
    for (name, value) in extra {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.expect("head");
    for chunk in body.chunks(16 * 1024) {
        let mut frame = format!("{:x}\r\n", chunk.len()).into_bytes();
        frame.extend_from_slice(chunk);
        frame.extend_from_slice(b"\r\n");
        // The server may answer and close before the whole body is sent.
        if stream.write_all(&frame).await.is_err() {
            break;
        }
    }
    let _ = stream.write_all(b"0\r\n\r\n").await;
    let mut response = Vec::new();
    let mut buf = vec![0u8; 4096];
    loop {
        let read = stream.read(&mut buf);
        let n = match tokio::time::timeout(std::time::Duration::from_secs(5), read).await {
            Ok(Ok(n)) if n > 0 => n,
            _ => break,
        };
        response.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&response);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head.lines().find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse::<usize>().ok())?
            });
            if length.is_some_and(|n| body.len() >= n) {
                break;
            }
        }
    }
    String::from_utf8_lossy(&response).into_owned()
}

fn ratelimit(r: &crate::harness::Resp) -> (String, String) {
    (
        r.header("ratelimit-policy").unwrap_or_default().to_owned(),
        r.header("ratelimit").unwrap_or_default().to_owned(),
    )
}

#[tokio::test]
async fn a_300_kib_body_is_413_with_or_without_content_length_and_writes_nothing() {
    let app = TestApp::spawn().await;
    let a = app.agent("big").await;
    let big = format!(r#"{{"slug": "big", "name": "{}"}}"#, "x".repeat(300 * 1024));
    // With Content-Length: refused before the body is read.
    let r = app
        .post_raw(
            "/api/v1/orbits",
            Some(&a.token),
            &[("content-type", "application/json")],
            big.clone().into_bytes(),
        )
        .await;
    r.assert_error(413, "payload_too_large");
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    // Chunked, without Content-Length: refused once the limit is passed.
    let status = chunked_post(&app, "/api/v1/orbits", &a.token, &[], big.as_bytes()).await;
    assert!(status.starts_with("HTTP/1.1 413"), "{status}");
    // Nothing was written, and the service still answers.
    let r = app.get("/api/v1/orbits", None).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json["data"].as_array().unwrap().len(), 0);
}

#[tokio::test]
async fn anonymous_requests_are_limited_per_address_with_standard_headers() {
    let app = TestApp::spawn_with(|c| c.anon_rate_limit_per_minute = 3).await;
    for remaining in [2, 1, 0] {
        let r = app.get("/api/v1/orbits", None).await;
        assert_eq!(r.status, 200);
        let (policy, now) = ratelimit(&r);
        assert_eq!(policy, "\"anon\";q=3;w=60");
        assert!(
            now.starts_with(&format!("\"anon\";r={remaining};t=")),
            "{now}"
        );
    }
    let r = app.get("/api/v1/orbits", None).await;
    r.assert_error(429, "rate_limited");
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!(
        (1..=20).contains(&retry),
        "one request comes back every 20 s: {retry}"
    );
    let (_, now) = ratelimit(&r);
    assert_eq!(now, format!("\"anon\";r=0;t={retry}"));
    // Probes are not limited.
    assert_eq!(app.get("/healthz", None).await.status, 200);
    let m = app.get("/metrics", None).await.text;
    assert!(
        m.contains("orbit_rate_limited_total{limiter=\"anon\"} 1"),
        "{m}"
    );
}

#[tokio::test]
async fn a_verified_token_gets_its_own_bucket_and_unverified_ones_count_against_the_address() {
    let app = TestApp::spawn_with(|c| {
        c.rate_limit_per_minute = 3;
        c.anon_rate_limit_per_minute = 50;
    })
    .await;
    let a = app.agent("limited").await;
    // First use: not yet verified, counted against the address.
    let r = app.get("/api/v1/me", Some(&a.token)).await;
    assert_eq!(r.status, 200);
    assert!(ratelimit(&r).0.starts_with("\"anon\""));
    for remaining in [2, 1, 0] {
        let r = app.get("/api/v1/me", Some(&a.token)).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(ratelimit(&r).0, "\"token\";q=3;w=60");
        assert!(ratelimit(&r)
            .1
            .starts_with(&format!("\"token\";r={remaining};")));
    }
    let r = app.get("/api/v1/me", Some(&a.token)).await;
    r.assert_error(429, "rate_limited");
    assert!(r.header("retry-after").is_some());
    // Random well-formed tokens never mint buckets: they use the address's.
    let fake = format!("occ_{}_{}", "0".repeat(16), "A".repeat(43));
    let r = app.get("/api/v1/me", Some(&fake)).await;
    r.assert_error(401, "unauthorized");
    assert!(ratelimit(&r).0.starts_with("\"anon\""));
}

#[tokio::test]
async fn registration_is_limited_per_address_per_hour() {
    let app = TestApp::spawn_with(|c| c.register_rate_limit_per_hour = 2).await;
    app.agent("one").await;
    app.agent("two").await;
    let r = app
        .register(json!({"type": "HUMAN", "name": "three"}))
        .await;
    r.assert_error(429, "rate_limited");
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!(retry > 60, "{retry}");
    // The refusal names the limit that refused, in its message and its headers
    // (not the address budget, which had room).
    let message = r.json["message"].as_str().unwrap();
    assert!(
        message.contains("registrations") && message.contains(&format!("{retry} s")),
        "{message}"
    );
    assert_eq!(
        ratelimit(&r),
        (
            "\"register\";q=2;w=3600".to_owned(),
            format!("\"register\";r=0;t={retry}")
        )
    );
    // The next request of another kind is judged by the address budget again.
    let r = app.get("/api/v1/orbits", None).await;
    assert_eq!(r.status, 200);
    assert!(
        ratelimit(&r).1.starts_with("\"anon\";r="),
        "{:?}",
        ratelimit(&r)
    );
}

#[tokio::test]
async fn authenticated_json_is_not_cached_and_nothing_is_sniffed() {
    let app = TestApp::spawn().await;
    let a = app.agent("headers").await;
    let r = app.get("/api/v1/me", Some(&a.token)).await;
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    let r = app.get("/api/v1/orbits", None).await;
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    let r = app.get("/nowhere", None).await;
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
}

#[tokio::test]
async fn metrics_count_requests_conflicts_replays_and_the_token_cache() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "metrics", 2).await;
    let (a, b) = (&c.members[0], &c.members[1]);
    let t = task(&app, a, c.orbit, "t").await;
    lease(&app, a, t, 900).await;
    let path = format!("/api/v1/tasks/{t}/leases");
    app.post_with_key(&path, &b.token, "k1", json!({}))
        .await
        .assert_error(409, "lease_conflict");
    let create = || {
        app.post_with_key(
            "/api/v1/orbits",
            &a.token,
            "o1",
            json!({"slug": "m2", "name": "m"}),
        )
    };
    let first = create().await;
    assert_eq!(first.status, 201);
    let again = create().await;
    assert_eq!(again.status, 201);
    let m = app.get("/metrics", None).await;
    assert_eq!(m.status, 200);
    assert!(m.header("content-type").unwrap().starts_with("text/plain"));
    let text = m.text;
    for needle in [
        "orbit_lease_conflicts_total 1",
        "orbit_idempotency_replays_total 1",
        "orbit_http_requests_total{route=\"/api/v1/tasks/{task}/leases\",method=\"POST\",status=\"409\"} 1",
        "orbit_http_request_duration_seconds_bucket{route=\"/api/v1/orbits\",le=\"+Inf\"}",
        "orbit_db_pool_connections{state=\"idle\"}",
        "orbit_db_pool_connections{state=\"waiting\"}",
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
    let value = |name: &str| -> u64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    assert!(value("orbit_token_cache_hits_total") > 0);
    assert!(value("orbit_token_cache_misses_total") > 0);
    // No label carries an id or a secret: routes are templates.
    assert!(!text.contains(&a.token[..20]));
    assert!(!text.contains(&format!("/tasks/{t}/")));
}

/// Captures every log line of this test process.
fn captured() -> &'static Arc<Mutex<Vec<u8>>> {
    static BUF: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    BUF.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = buf.clone();
        let _ = tracing_subscriber::fmt()
            .with_env_filter("debug")
            .with_writer(move || Sink(sink.clone()))
            .try_init();
        buf
    })
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn no_log_line_ever_contains_a_token_or_its_hash() {
    let logs = captured();
    let app = TestApp::spawn().await;
    let c = crew(&app, "secrets", 1).await;
    let a = &c.members[0];
    let t = task(&app, a, c.orbit, "t").await;
    let (lease_id, v) = lease(&app, a, t, 900).await;
    release(&app, a, lease_id, v).await;
    let (new_token, token_id) = app.another_token(&a.token).await;
    app.send(
        Method::DELETE,
        &format!("/api/v1/me/tokens/{token_id}"),
        Some(&a.token),
        None,
        None,
    )
    .await;
    app.get("/api/v1/me", Some(&new_token))
        .await
        .assert_error(401, "unauthorized");
    let bad = format!("{}x", &a.token[..a.token.len() - 1]);
    app.get("/api/v1/me", Some(&bad)).await;
    app.get("/api/v1/me", Some("garbage")).await;

    let mut conn = app.db.conn();
    #[derive(diesel::QueryableByName)]
    struct H {
        #[diesel(sql_type = diesel::sql_types::Text)]
        secret_hash: String,
    }
    use diesel::RunQueryDsl;
    let hashes: Vec<H> = diesel::sql_query("SELECT secret_hash FROM tokens")
        .load(&mut conn)
        .unwrap();
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    assert!(
        text.contains("request"),
        "the capture must see the service's logs"
    );
    for secret in [
        a.token.as_str(),
        new_token.as_str(),
        c.owner.token.as_str(),
        bad.as_str(),
    ] {
        let (_, tail) = secret.split_at(21);
        assert!(!text.contains(tail), "a token secret reached the log");
    }
    for h in hashes {
        assert!(
            !text.contains(&h.secret_hash),
            "a token hash reached the log"
        );
        let digest = h.secret_hash.rsplit('$').next().unwrap();
        assert!(!text.contains(digest), "a token hash reached the log");
    }
}
