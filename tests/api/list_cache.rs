//! The list cache (src/listcache.rs): a repeated public list read is answered from
//! memory only while one statement shows the page still exact; the bytes are always
//! the ones an instance without the cache answers.

use reqwest::Method;
use serde_json::{json, Value};

use crate::harness::{Resp, TestApp};
use crate::work::{crew, lease, orbit_revision, outlive, task};

/// `(hits, misses)` from `/metrics`.
async fn cache_counts(app: &TestApp) -> (u64, u64) {
    let [hits, misses] = app
        .metrics([
            "orbit_list_cache_hits_total",
            "orbit_list_cache_misses_total",
        ])
        .await;
    (hits, misses)
}

/// The same service without the cache, on the same database: the uncached path.
fn uncached(app: &TestApp) -> TestApp {
    app.another_instance_with(|c| c.list_cache_bytes = 0)
}

/// A GET answered 200 with exactly `expected`'s body and content headers.
#[track_caller]
fn assert_same_answer(got: &Resp, expected: &Resp) {
    assert_eq!(got.status, 200, "{}", got.text);
    assert_eq!(expected.status, 200, "{}", expected.text);
    assert_eq!(got.text, expected.text);
    for name in [
        "content-type",
        "content-length",
        "x-content-type-options",
        "cache-control",
    ] {
        assert_eq!(got.header(name), expected.header(name), "header {name}");
    }
}

/// Reads `path` on the cached app twice and on the uncached one: all three are
/// the same answer, and the second cached read was a hit.
async fn assert_cached_read(app: &TestApp, plain: &TestApp, path: &str) -> Resp {
    let first = app.get(path, None).await;
    let (hits, _) = cache_counts(app).await;
    let second = app.get(path, None).await;
    assert_eq!(cache_counts(app).await.0, hits + 1, "{path} was not a hit");
    assert_eq!(first.bytes, second.bytes);
    assert_same_answer(&second, &plain.get(path, None).await);
    second
}

fn ids(r: &Resp) -> Vec<i64> {
    r.json["data"]
        .as_array()
        .expect("a page")
        .iter()
        .map(|t| t["id"].as_i64().expect("id"))
        .collect()
}

#[tokio::test]
async fn list_cache_answers_a_repeated_read_with_the_same_bytes_and_counts_a_hit() {
    let app = TestApp::spawn().await;
    let plain = uncached(&app);
    let c = crew(&app, "cached", 1).await;
    let worker = &c.members[0];
    let t1 = task(&app, &c.owner, c.orbit, "first \"quoted\" 🚀").await;
    task(&app, &c.owner, c.orbit, "second").await;
    lease(&app, worker, t1, 900).await;
    let r = app
        .post_keyed(
            &format!("/api/v1/orbits/{}/contributions", c.orbit),
            &worker.token,
            json!({"kind": "NOTE", "title": "a note", "body": "text"}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);

    let path = format!("/api/v1/orbits/{}/tasks", c.orbit);
    let before = cache_counts(&app).await;
    let first = app.get(&path, None).await;
    let after_first = cache_counts(&app).await;
    assert_eq!(
        after_first,
        (before.0, before.1 + 1),
        "the first read is a miss"
    );
    let page = assert_cached_read(&app, &plain, &path).await;
    assert_eq!(page.bytes, first.bytes);
    assert!(page.json["data"][0]["active_lease"].is_object());

    // The same page named another way: by slug, with the defaults spelled out, with
    // a valid token (which also gets `Cache-Control: no-store`, as uncached).
    let (hits, misses) = cache_counts(&app).await;
    for other in [
        "/api/v1/orbits/cached/tasks".to_owned(),
        format!("{path}?limit=50&after=0"),
    ] {
        let r = app.get(&other, None).await;
        assert_same_answer(&r, &page);
    }
    let authed = app.get(&path, Some(&worker.token)).await;
    assert_eq!(authed.bytes, page.bytes);
    assert_same_answer(&authed, &plain.get(&path, Some(&worker.token)).await);
    assert_eq!(authed.header("cache-control"), Some("no-store"));
    assert_eq!(cache_counts(&app).await, (hits + 3, misses));

    // Filters and pages are pages of their own.
    for query in [
        "?status=OPEN&leased=false",
        "?leased=true",
        "?limit=1&after=0",
    ] {
        assert_cached_read(&app, &plain, &format!("{path}{query}")).await;
    }
    assert_eq!(
        ids(&app.get(&format!("{path}?leased=true"), None).await),
        vec![t1]
    );
    // The contributions list is cached the same way.
    let contributions = format!("/api/v1/orbits/{}/contributions", c.orbit);
    let r = assert_cached_read(&app, &plain, &contributions).await;
    assert_eq!(r.json["data"][0]["title"], "a note");
    assert_cached_read(&app, &plain, &format!("{contributions}?kind=CLAIM")).await;
    let [entries, bytes] = app
        .metrics(["orbit_list_cache_entries", "orbit_list_cache_bytes"])
        .await;
    assert!(entries == 6 && bytes > 0, "{entries} pages, {bytes} bytes");
}

#[tokio::test]
async fn list_cache_shows_every_write_at_once_on_every_instance() {
    let app = TestApp::spawn().await;
    let other = app.another_instance();
    let plain = uncached(&app);
    let c = crew(&app, "writes", 1).await;
    let worker = &c.members[0];
    let t1 = task(&app, &c.owner, c.orbit, "one").await;
    let path = format!("/api/v1/orbits/{}/tasks", c.orbit);
    let open = format!("{path}?status=OPEN&leased=false");
    let leased = format!("{path}?leased=true");
    for p in [&path, &open, &leased] {
        assert_cached_read(&app, &plain, p).await;
    }

    // Each write goes through the other instance; this one learns of it only from
    // the database, on its next read.
    let t2 = task(&other, &c.owner, c.orbit, "two").await;
    let r = app.get(&path, None).await;
    assert_eq!(ids(&r), vec![t1, t2]);
    assert_same_answer(&r, &plain.get(&path, None).await);

    let (lease_id, version) = lease(&other, worker, t1, 900).await;
    let r = app.get(&leased, None).await;
    assert_eq!(ids(&r), vec![t1]);
    assert_eq!(r.json["data"][0]["active_lease"]["id"], lease_id);
    assert_same_answer(&r, &plain.get(&leased, None).await);
    assert_eq!(ids(&app.get(&open, None).await), vec![t2]);
    // The single GET of the task says the same as its row in the list.
    let single = app.get(&format!("/api/v1/tasks/{t1}"), None).await;
    assert_eq!(single.json["data"], r.json["data"][0]);
    assert_cached_read(&app, &plain, &path).await;

    // A checkpoint changes the task's `updated_at`.
    let r = crate::work::checkpoint(&other, worker, t1, version, json!({"step": 1})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = app.get(&path, None).await;
    let single = app.get(&format!("/api/v1/tasks/{t1}"), None).await;
    assert_eq!(single.json["data"], r.json["data"][0]);
    assert_same_answer(&r, &plain.get(&path, None).await);

    let r = other
        .post_keyed(
            &format!("/api/v1/tasks/{t1}/complete"),
            &worker.token,
            json!({"lease_version": version, "summary": "done"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = app.get(&path, None).await;
    assert_eq!(r.json["data"][0]["status"], "COMPLETED");
    assert_eq!(r.json["data"][0]["active_lease"], Value::Null);
    assert_same_answer(&r, &plain.get(&path, None).await);
    assert_eq!(ids(&app.get(&leased, None).await), Vec::<i64>::new());
    assert_eq!(ids(&app.get(&open, None).await), vec![t2]);

    // Contributions: a new one, then an assessment that changes its counts.
    let contributions = format!("/api/v1/orbits/{}/contributions", c.orbit);
    assert_cached_read(&app, &plain, &contributions).await;
    let r = other
        .post_keyed(
            &contributions,
            &worker.token,
            json!({"kind": "CLAIM", "title": "claim", "body": "b"}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let cid = r.json["data"]["id"].as_i64().unwrap();
    let r = app.get(&contributions, None).await;
    assert_eq!(ids(&r), vec![cid]);
    assert_cached_read(&app, &plain, &contributions).await;
    let r = other
        .post_keyed(
            &format!("/api/v1/contributions/{cid}/revisions/1/assessments"),
            &c.owner.token,
            json!({"verdict": "SUPPORTS", "rationale": "checked"}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = app.get(&contributions, None).await;
    assert_eq!(
        r.json["data"][0]["verdict_counts"]["SUPPORTS"], 1,
        "{}",
        r.text
    );
    assert_same_answer(&r, &plain.get(&contributions, None).await);
}

#[tokio::test]
async fn list_cache_drops_a_page_when_a_lease_runs_out_without_a_write() {
    let app = TestApp::spawn().await;
    let plain = uncached(&app);
    let c = crew(&app, "expiry", 1).await;
    let worker = &c.members[0];
    let t1 = task(&app, &c.owner, c.orbit, "short").await;
    let t2 = task(&app, &c.owner, c.orbit, "free").await;
    lease(&app, worker, t1, 2).await;
    let path = format!("/api/v1/orbits/{}/tasks", c.orbit);
    let leased = format!("{path}?leased=true");
    let free = format!("{path}?leased=false");
    // A page that does not show the short lease's task still depends on it.
    let r = assert_cached_read(&app, &plain, &free).await;
    assert_eq!(ids(&r), vec![t2]);
    let r = assert_cached_read(&app, &plain, &leased).await;
    assert_eq!(ids(&r), vec![t1]);
    let r = assert_cached_read(&app, &plain, &path).await;
    assert!(r.json["data"][0]["active_lease"].is_object());
    let revision = orbit_revision(&app, c.orbit).await;

    outlive(2).await;
    assert_eq!(orbit_revision(&app, c.orbit).await, revision, "no write");
    let (hits, _) = cache_counts(&app).await;
    let r = app.get(&leased, None).await;
    assert_eq!(ids(&r), Vec::<i64>::new(), "{}", r.text);
    let r = app.get(&free, None).await;
    assert_eq!(ids(&r), vec![t1, t2], "{}", r.text);
    let r = app.get(&path, None).await;
    assert_eq!(r.json["data"][0]["active_lease"], Value::Null, "{}", r.text);
    assert_same_answer(&r, &plain.get(&path, None).await);
    assert_eq!(cache_counts(&app).await.0, hits, "no page was a hit");
    // With no active lease left, the new pages are cached again.
    assert_cached_read(&app, &plain, &free).await;
}

#[tokio::test]
async fn list_cache_never_answers_for_an_orbit_that_cannot_be_read() {
    // Every orbit is publicly readable (API.md section 2, INVITE orbits too); what
    // refuses a read is a path that names no orbit. A cached page of the same
    // parameters for another orbit never answers it.
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    let r = app
        .post(
            "/api/v1/orbits",
            &owner.token,
            json!({"slug": "closed", "name": "closed", "join_policy": "INVITE"}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let orbit = r.json["data"]["id"].as_i64().unwrap();
    task(&app, &owner, orbit, "t").await;
    let plain = uncached(&app);
    for list in ["tasks", "contributions"] {
        let path = format!("/api/v1/orbits/{orbit}/{list}");
        assert_cached_read(&app, &plain, &path).await;
        assert_cached_read(&app, &plain, &format!("/api/v1/orbits/closed/{list}")).await;
        let (hits, _) = cache_counts(&app).await;
        for missing in [
            format!("/api/v1/orbits/{}/{list}", orbit + 1),
            format!("/api/v1/orbits/closed2/{list}"),
            format!("/api/v1/orbits/0/{list}"),
        ] {
            let r = app.get(&missing, None).await;
            assert_eq!(r.assert_envelope(404), "not_found", "{missing}");
        }
        assert_eq!(cache_counts(&app).await.0, hits);
    }
}

#[tokio::test]
async fn list_cache_still_refuses_a_bad_token_on_a_cached_page() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "tokens", 0).await;
    task(&app, &c.owner, c.orbit, "t").await;
    let (spare, spare_id) = app.another_token(&c.owner.token).await;
    let path = format!("/api/v1/orbits/{}/tasks", c.orbit);
    // Cached, and read once with the token so its verification is cached too.
    let page = app.get(&path, None).await;
    assert_eq!(app.get(&path, Some(&spare)).await.bytes, page.bytes);
    let r = app
        .delete(&format!("/api/v1/me/tokens/{spare_id}"), &c.owner.token)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);

    let (hits, _) = cache_counts(&app).await;
    let malformed = app
        .send_raw(
            Method::GET,
            &path,
            None,
            &[("Authorization", "Bearer not-a-token")],
            None,
        )
        .await;
    // The owner's token with its last character changed: well formed, unknown.
    let (head, last) = c.owner.token.split_at(c.owner.token.len() - 1);
    let unknown = format!("{head}{}", if last == "x" { "y" } else { "x" });
    for r in [
        malformed,
        app.get(&path, Some(&unknown)).await,
        app.get(&path, Some(&spare)).await,
        app.get(
            &format!("/api/v1/orbits/{}/contributions", c.orbit),
            Some(&spare),
        )
        .await,
    ] {
        assert_eq!(r.assert_envelope(401), "unauthorized");
    }
    assert_eq!(cache_counts(&app).await.0, hits, "a refused read is no hit");
    // The page itself is still cached for everyone else.
    assert_eq!(app.get(&path, None).await.bytes, page.bytes);
    assert_eq!(cache_counts(&app).await.0, hits + 1);
}
