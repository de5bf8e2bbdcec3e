//! Hardening (issue 26): what a hostile-input probe and a chaos run found, each
//! finding with the test that shows it fixed. docs/SECURITY.md ("Hardening") and
//! docs/RELIABILITY.md list them.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::harness::TestApp;

/// Resident memory of this process (the test apps run in it), in KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .expect("VmRSS in /proc/self/status")
}

/// Finding 1: made-up methods never become labels, so neither `/metrics` nor the
/// process grows with them.
#[tokio::test]
async fn made_up_methods_leave_metrics_and_memory_flat() {
    let app = TestApp::spawn().await;
    // Warm up every series the flood can touch.
    for m in ["QZZWARM1", &"Q".repeat(60 * 1024)] {
        let method = Method::from_bytes(m.as_bytes()).expect("method");
        let r = app.send(method, "/healthz", None, None, None).await;
        r.assert_error(405, "method_not_allowed");
    }
    // The first read of /metrics adds its own series.
    app.get("/metrics", None).await;
    let before = app.get("/metrics", None).await.text;
    let rss_before = rss_kib();
    for i in 0..2000 {
        // Long unique methods are refused before any bookkeeping.
        let long = format!("{i:06}{}", "Q".repeat(60 * 1024));
        let method = Method::from_bytes(long.as_bytes()).expect("method");
        let r = app.send(method, "/healthz", None, None, None).await;
        r.assert_error(405, "method_not_allowed");
        // Short unique methods reach routing and are counted as OTHER.
        let short = format!("QZZ{i:05}");
        let method = Method::from_bytes(short.as_bytes()).expect("method");
        let r = app.send(method, "/healthz", None, None, None).await;
        r.assert_error(405, "method_not_allowed");
    }
    let after = app.get("/metrics", None).await.text;
    let rss_after = rss_kib();
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
        rss_after < rss_before + 64 * 1024,
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
    let _ = json!({});
}
