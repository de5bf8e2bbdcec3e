//! Finding 11: expected declines of quick writes stay out of the PostgreSQL log.

use reqwest::StatusCode;
use serde_json::json;

/// Finding 11: expected declines of quick writes write nothing at ERROR level in
/// the PostgreSQL log.
#[tokio::test]
async fn expected_quick_declines_stay_out_of_the_database_log() {
    let (pg, url) = crate::reliability::fleet::migrated_cluster("oc-h11");
    let serve = crate::reliability::fleet::start_serve(
        pg.dir(),
        "serve",
        &crate::reliability::fleet::load_env(&url),
    )
    .await;
    let base = serve.base();
    let client = reqwest::Client::new();
    let remote = crate::harness::Remote::new(client.clone(), base.clone());
    let owner = remote.register("owner").await;
    let a = remote.register("a").await;
    let b = remote.register("b").await;
    let orbit = remote.orbit(&owner, "declines").await;
    for who in [&a, &b] {
        remote.join(who, orbit).await;
    }
    let t: serde_json::Value = client
        .post(format!("{base}/api/v1/orbits/{orbit}/tasks"))
        .bearer_auth(&owner.token)
        .header("Idempotency-Key", "task")
        .json(&json!({"title": "contested"}))
        .send()
        .await
        .expect("task")
        .json()
        .await
        .expect("json");
    let t = t["data"]["id"].as_i64().expect("task id");
    let metric = |name: &'static str| {
        let client = client.clone();
        let url = format!("{base}/metrics");
        async move {
            let text = client
                .get(url)
                .send()
                .await
                .expect("metrics")
                .text()
                .await
                .expect("text");
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<u64>().ok())
                .expect("metric")
        }
    };
    let write = |who: &crate::harness::Agent, path: String, key: &str, body: serde_json::Value| {
        client
            .post(format!("{base}{path}"))
            .bearer_auth(&who.token)
            .header("Idempotency-Key", key)
            .json(&body)
            .send()
    };
    let declined_before = metric("orbit_quick_writes_declined_total").await;
    // The quick path is taken for a token this instance verified.
    let acquire = format!("/api/v1/tasks/{t}/leases");
    let r = write(&a, acquire.clone(), "a1", json!({}))
        .await
        .expect("acquire");
    assert_eq!(r.status(), StatusCode::CREATED);
    let lease: serde_json::Value = r.json().await.expect("json");
    let lease = lease["data"]["id"].as_i64().expect("lease id");
    for _ in 0..3 {
        client
            .get(format!("{base}/api/v1/me"))
            .bearer_auth(&b.token)
            .send()
            .await
            .expect("me");
        // Expected declines: a replayed key, a lease held by another, a version
        // never issued, a release of another's lease; each a group of one.
        let r = write(&a, acquire.clone(), "a1", json!({}))
            .await
            .expect("replay");
        assert_eq!(r.status(), StatusCode::CREATED);
        assert_eq!(
            r.headers()
                .get("idempotency-replayed")
                .and_then(|v| v.to_str().ok()),
            Some("true")
        );
        let key = uuid::Uuid::new_v4().to_string();
        let r = write(&b, acquire.clone(), &key, json!({}))
            .await
            .expect("conflict");
        assert_eq!(r.status(), StatusCode::CONFLICT);
        let key = uuid::Uuid::new_v4().to_string();
        let r = write(
            &a,
            format!("/api/v1/tasks/{t}/checkpoints"),
            &key,
            json!({"lease_version": 2, "summary": "stale", "state": {}}),
        )
        .await
        .expect("stale");
        // A version never issued (issue 24): 422 lease_version_not_issued.
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let key = uuid::Uuid::new_v4().to_string();
        let r = write(
            &b,
            format!("/api/v1/leases/{lease}/release"),
            &key,
            json!({"lease_version": 1}),
        )
        .await
        .expect("not held");
        assert_eq!(r.status(), StatusCode::CONFLICT);
    }
    let declined = metric("orbit_quick_writes_declined_total").await - declined_before;
    assert!(declined >= 8, "only {declined} quick writes declined");
    let log_path = pg.dir().join("postgres/data/server.log");
    let log = std::fs::read_to_string(&log_path).expect("the server log");
    let errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("quick_declined"))
        .collect();
    assert!(
        errors.is_empty(),
        "{} lines such as {:?}",
        errors.len(),
        errors.first()
    );
}
