//! Findings 1, 6, 7 and 8 on what HTTP shows: made-up methods and paths never
//! become metric labels, HEAD answers like GET, artifacts stay same-origin, and
//! `/metrics` can be guarded or moved.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::harness::TestApp;

/// Resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .expect("VmRSS in /proc/<pid>/status")
}

/// Sends `method` to `url`; returns the status and body.
async fn send_method(client: &reqwest::Client, method: &str, url: &str) -> (u16, String) {
    let method = Method::from_bytes(method.as_bytes()).expect("method");
    let r = client
        .request(method, url)
        .send()
        .await
        .expect("request sent");
    (r.status().as_u16(), r.text().await.unwrap_or_default())
}

/// Finding 1: made-up methods never become labels, so neither `/metrics` nor the
/// process grows with them. The service runs as its own process, so its RSS is
/// its own and not that of the tests running beside this one.
#[tokio::test]
async fn made_up_methods_leave_metrics_and_memory_flat() {
    let db = crate::harness::TestDb::new();
    let scratch = orbit_commons::testkit::process::Scratch::new("oc-methods").expect("scratch dir");
    let serve = crate::reliability::fleet::start_serve(
        &scratch.dir,
        "methods",
        &crate::reliability::fleet::load_env(&db.url),
    )
    .await;
    let client = reqwest::Client::new();
    let healthz = format!("{}/healthz", serve.base());
    let metrics = format!("{}/metrics", serve.base());
    // Warm up every series the flood can touch (the first /metrics read adds its own).
    for m in ["QZZWARM1".to_owned(), "Q".repeat(60 * 1024)] {
        assert_eq!(send_method(&client, &m, &healthz).await.0, 405);
    }
    send_method(&client, "GET", &metrics).await;
    let (_, before) = send_method(&client, "GET", &metrics).await;
    let rss_before = rss_kib(serve.pid());
    for i in 0..2000 {
        // Long unique methods are refused before any bookkeeping.
        let long = format!("{i:06}{}", "Q".repeat(60 * 1024));
        let (status, body) = send_method(&client, &long, &healthz).await;
        assert_eq!(status, 405, "{body}");
        assert!(body.contains("method_not_allowed"), "{body}");
        // Short unique methods reach routing and are counted as OTHER.
        let (status, _) = send_method(&client, &format!("QZZ{i:05}"), &healthz).await;
        assert_eq!(status, 405);
    }
    let (_, after) = send_method(&client, "GET", &metrics).await;
    let rss_after = rss_kib(serve.pid());
    assert!(
        !after.contains("QZZ0") && !after.contains("QQQQ"),
        "a made-up method became a label"
    );
    assert!(
        after.contains(r#"route="/healthz",method="OTHER",status="405""#),
        "{after}"
    );
    // Only counter values changed: the same lines, about the same size.
    assert_eq!(
        before.lines().count(),
        after.lines().count(),
        "new series:\n{after}"
    );
    assert!(
        after.len() < before.len() + 1024,
        "/metrics grew from {} to {} bytes",
        before.len(),
        after.len()
    );
    // Without the fix the labels alone hold 2000 × 60 KiB ≈ 117 MiB.
    assert!(
        rss_after < rss_before + 32 * 1024,
        "RSS grew from {rss_before} KiB to {rss_after} KiB"
    );
}

/// Finding 1: the route label is the matched template, never the path sent.
#[tokio::test]
async fn route_labels_are_templates_never_paths() {
    let app = TestApp::spawn().await;
    for i in 0..50 {
        let r = app
            .get(&format!("/api/v1/orbits/probe-{i}-zz/members"), None)
            .await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
        let r = app.get(&format!("/no/such/route/zz{i}"), None).await;
        r.assert_error(404, "not_found");
    }
    let text = app.get("/metrics", None).await.text;
    assert!(!text.contains("zz"), "a path became a label:\n{text}");
    assert!(
        text.contains(r#"route="/api/v1/orbits/{orbit}/members",method="GET",status="404""#),
        "{text}"
    );
}

/// Finding 7: HEAD answers like GET, without a body.
#[tokio::test]
async fn head_answers_like_get_without_a_body() {
    let app = TestApp::spawn().await;
    let owner = app.agent("head").await;
    let orbit = app.orbit(&owner, "head-orbit").await;
    for path in [
        "/healthz".to_owned(),
        "/api/v1/orbits".to_owned(),
        format!("/api/v1/orbits/{orbit}"),
        format!("/api/v1/orbits/{orbit}/changes?after=0"),
    ] {
        let get = app.get(&path, None).await;
        assert_eq!(get.status, StatusCode::OK, "{path}: {}", get.text);
        let head = app.send(Method::HEAD, &path, None, None, None).await;
        assert_eq!(head.status, StatusCode::OK, "HEAD {path}: {}", head.text);
        assert!(head.bytes.is_empty(), "HEAD {path} sent a body");
        assert_eq!(
            head.header("content-type"),
            get.header("content-type"),
            "{path}"
        );
    }
    // HEAD where there is no GET is 405 like GET is, and Allow names HEAD with GET.
    let r = app
        .send(Method::HEAD, "/api/v1/contributors", None, None, None)
        .await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    let r = app
        .send(
            Method::DELETE,
            "/api/v1/orbits",
            Some(&owner.token),
            None,
            None,
        )
        .await;
    assert!(
        r.header("allow").is_some_and(|a| a.contains("HEAD")),
        "{r:?}"
    );
}

/// Finding 6: artifacts cannot be embedded by other sites, and download names
/// carry no bidi or control characters.
#[tokio::test]
async fn artifacts_are_same_origin_and_download_names_are_plain() {
    let app = TestApp::spawn().await;
    let c = crate::work::crew(&app, "artifact-names", 0).await;
    // "evil<RLO>sj.txt<BEL>" would display as "eviltxt.js".
    let name = "evil\u{202E}sj.txt\u{0007}\u{2066}";
    let r = app
        .post_keyed(
            &format!("/api/v1/orbits/{}/artifacts", c.orbit),
            &c.owner.token,
            json!({"name": name, "media_type": "application/javascript",
                   "content_base64": "YWxlcnQoMSk="}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let id = r.json["data"]["id"].as_i64().expect("artifact id");
    // The metadata keeps the name as sent (content is stored verbatim).
    assert_eq!(r.json["data"]["name"], name);
    let path = format!("/api/v1/artifacts/{id}/content");
    let r = app.get(&path, None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.header("cross-origin-resource-policy"),
        Some("same-origin")
    );
    let disposition = r.header("content-disposition").expect("a disposition");
    assert_eq!(
        disposition,
        "attachment; filename=\"evilsj.txt\"; filename*=UTF-8''evilsj.txt"
    );
    let etag = r.header("etag").expect("etag").to_owned();
    let r = app
        .send_raw(Method::GET, &path, None, &[("if-none-match", &etag)], None)
        .await;
    assert_eq!(r.status, StatusCode::NOT_MODIFIED);
    assert_eq!(
        r.header("cross-origin-resource-policy"),
        Some("same-origin")
    );
}

/// Finding 8: `/metrics` can be restricted to a bearer token.
#[tokio::test]
async fn metrics_can_require_a_token() {
    const SECRET: &str = "metrics-secret-0123456789";
    let app = TestApp::spawn_with(|c| c.metrics_token = Some(SECRET.to_owned())).await;
    let someone = app.agent("scraper").await;
    for token in [
        None,
        Some("wrong-secret-0123456789"),
        Some(someone.token.as_str()),
    ] {
        let r = app.get("/metrics", token).await;
        r.assert_error(401, "unauthorized");
        assert!(r.header("www-authenticate").is_some());
    }
    let r = app.get("/metrics", Some(SECRET)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(r.text.contains("orbit_http_requests_total"), "{}", r.text);
    // The secret on one of two Authorization lines presents no one token.
    let bearer = format!("Bearer {SECRET}");
    let r = app
        .send_raw(
            reqwest::Method::GET,
            "/metrics",
            None,
            &[
                ("authorization", &bearer),
                ("authorization", "Bearer other"),
            ],
            None,
        )
        .await;
    r.assert_error(401, "unauthorized");
    // Everything else is unchanged.
    let r = app.get("/api/v1/orbits", None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
}

/// Finding 8: `/metrics` can be served only on a separate address, which serves
/// nothing else.
#[tokio::test]
async fn metrics_can_be_served_on_a_separate_address() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let at: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().expect("address");
    let app = TestApp::spawn_with(|c| c.metrics_bind = Some(at)).await;
    let r = app.get("/metrics", None).await;
    r.assert_error(404, "not_found");
    let metrics = |path: &str| format!("http://{at}{path}");
    let r = app
        .client
        .get(metrics("/metrics"))
        .send()
        .await
        .expect("metrics listener");
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r
        .text()
        .await
        .unwrap_or_default()
        .contains("orbit_http_requests_total"));
    for path in ["/healthz", "/api/v1/orbits", "/openapi.json"] {
        let r = app.client.get(metrics(path)).send().await.expect("request");
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
        let r = app.get(path, None).await;
        assert_eq!(r.status, StatusCode::OK, "{path}");
    }
}
