//! Idempotency-Key (contract section 5, issue 3), exercised on the foundation's
//! keyed route, `POST /api/v1/orbits`.
//!
//! The checks are written against `Keyed`, a description of any route that honours
//! the header, so the write routes of later issues reuse them: build a `Keyed` for
//! the route and call the `assert_*` helpers with two different valid bodies.

use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use futures::future::join_all;
use reqwest::header::HeaderValue;
use reqwest::Method;
use serde_json::{json, Value};

use crate::harness::{sql_i64, Agent, Resp, TestApp};

/// A route that honours `Idempotency-Key`.
pub struct Keyed<'a> {
    pub app: &'a TestApp,
    pub method: Method,
    /// The concrete path requests go to.
    pub path: String,
    /// What `idempotency_keys.operation` holds for it: `METHOD /route/template`.
    pub operation: &'static str,
}

impl Keyed<'_> {
    /// `POST /api/v1/orbits`.
    pub fn create_orbit(app: &TestApp) -> Keyed<'_> {
        Keyed {
            app,
            method: Method::POST,
            path: "/api/v1/orbits".into(),
            operation: "POST /api/v1/orbits",
        }
    }

    pub async fn send(&self, token: &str, key: Option<&str>, body: &Value) -> Resp {
        self.app
            .send(
                self.method.clone(),
                &self.path,
                Some(token),
                key,
                Some(body.clone()),
            )
            .await
    }

    /// Sends the body text exactly as given.
    pub async fn send_text(&self, token: &str, key: &str, body: &str) -> Resp {
        self.app
            .send_raw(
                self.method.clone(),
                &self.path,
                Some(token),
                &[
                    ("content-type", "application/json"),
                    ("idempotency-key", key),
                ],
                Some(body.as_bytes().to_vec()),
            )
            .await
    }

    /// How many key rows the contributor has stored for this operation.
    pub fn stored_by(&self, contributor: i64) -> i64 {
        let mut conn = self.app.db.conn();
        sql_i64(
            &mut conn,
            &format!(
                "SELECT count(*) AS n FROM idempotency_keys WHERE contributor_id = {contributor} \
                 AND operation = '{}'",
                self.operation
            ),
        )
    }

    /// How many key rows (contributor, this operation, key) are stored.
    pub fn stored(&self, contributor: i64, key: &str) -> i64 {
        let mut conn = self.app.db.conn();
        sql_i64(
            &mut conn,
            &format!(
                "SELECT count(*) AS n FROM idempotency_keys WHERE contributor_id = {contributor} \
                 AND operation = '{}' AND key = '{}'",
                self.operation,
                key.replace('\'', "''")
            ),
        )
    }
}

pub fn new_key() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// `replay` is `original` again: same status, same bytes, marked as replayed.
#[track_caller]
pub fn assert_replay_of(original: &Resp, replay: &Resp) {
    assert_eq!(replay.status, original.status, "{}", replay.text);
    assert_eq!(
        replay.bytes, original.bytes,
        "replay differs:\n{}\n{}",
        original.text, replay.text
    );
    assert_eq!(replay.header("idempotency-replayed"), Some("true"));
    assert!(replay
        .header("content-type")
        .is_some_and(|c| c.starts_with("application/json")));
}

#[track_caller]
pub fn assert_executed(r: &Resp) {
    assert!(r.status.is_success(), "{}", r.text);
    assert!(
        r.header("idempotency-replayed").is_none(),
        "unexpected replay: {}",
        r.text
    );
}

/// Executes `body` under a new key, then sends it twice more: both are replays.
/// Returns the key and the original response.
pub async fn assert_replays_byte_for_byte(
    w: &Keyed<'_>,
    who: &Agent,
    body: &Value,
) -> (String, Resp) {
    let key = new_key();
    let first = w.send(&who.token, Some(&key), body).await;
    assert_executed(&first);
    assert_eq!(w.stored(who.id, &key), 1);
    for _ in 0..2 {
        let again = w.send(&who.token, Some(&key), body).await;
        assert_replay_of(&first, &again);
    }
    (key, first)
}

/// The key of an executed `body` sent with `other` is 409 `idempotency_key_reused`.
pub async fn assert_reused_key_is_refused(w: &Keyed<'_>, who: &Agent, body: &Value, other: &Value) {
    let key = new_key();
    let first = w.send(&who.token, Some(&key), body).await;
    assert_executed(&first);
    let r = w.send(&who.token, Some(&key), other).await;
    r.assert_error(409, "idempotency_key_reused");
    assert!(r.header("idempotency-replayed").is_none());
    // The original is still replayable.
    assert_replay_of(&first, &w.send(&who.token, Some(&key), body).await);
}

/// Keys outside `^[!-~]{1,128}$` are 422 `idempotency_key_invalid` and store
/// nothing; the edges of the range are accepted (`accepted` gives a fresh valid body
/// per call).
pub async fn assert_malformed_keys_are_refused(
    w: &Keyed<'_>,
    who: &Agent,
    body: &Value,
    mut accepted: impl FnMut(usize) -> Value,
) {
    let stored_before = w.stored_by(who.id);
    let long = "k".repeat(129);
    let bad = [
        HeaderValue::from_static("has space"),
        HeaderValue::from_str(&long).unwrap(),
        HeaderValue::from_static(""),
        HeaderValue::from_static("tab\there"),
        // Not ASCII at all.
        HeaderValue::from_bytes("clé".as_bytes()).unwrap(),
    ];
    for key in bad {
        let req = w
            .app
            .client
            .request(w.method.clone(), w.app.url(&w.path))
            .bearer_auth(&who.token)
            .header("idempotency-key", key)
            .json(body);
        let r = Resp::from(req.send().await.expect("request sent")).await;
        r.assert_error(422, "idempotency_key_invalid");
    }
    assert_eq!(
        w.stored_by(who.id),
        stored_before,
        "a refused key was stored"
    );
    let max = "~".repeat(128);
    for (i, key) in ["!", max.as_str(), "a-Z_0.9:/+=@{}"]
        .into_iter()
        .enumerate()
    {
        let r = w.send(&who.token, Some(key), &accepted(i)).await;
        assert_executed(&r);
        assert_eq!(w.stored(who.id, key), 1);
    }
}

/// `n` requests with one key at once: exactly one executes; every other answer is
/// the same success replayed or 409 `idempotency_key_in_flight` with Retry-After.
/// Returns the executed response.
pub async fn assert_one_execution_under_concurrency(
    w: &Keyed<'_>,
    who: &Agent,
    body: &Value,
    n: usize,
) -> Resp {
    let key = new_key();
    let responses = join_all((0..n).map(|_| w.send(&who.token, Some(&key), body))).await;
    let executed: Vec<&Resp> = responses
        .iter()
        .filter(|r| r.status.is_success() && r.header("idempotency-replayed").is_none())
        .collect();
    assert_eq!(
        executed.len(),
        1,
        "{} executions: {:?}",
        executed.len(),
        responses.iter().map(|r| &r.text).collect::<Vec<_>>()
    );
    let original = executed[0];
    for r in &responses {
        if std::ptr::eq(r, original) {
            continue;
        }
        if r.status == 409 {
            r.assert_error(409, "idempotency_key_in_flight");
            assert!(
                r.header("retry-after").is_some(),
                "in-flight 409 without Retry-After"
            );
        } else {
            assert_replay_of(original, r);
        }
    }
    assert_eq!(w.stored(who.id, &key), 1);
    original.clone()
}

fn count(app: &TestApp, sql: &str) -> i64 {
    sql_i64(&mut app.db.conn(), sql)
}

fn orbit_body(slug: &str) -> Value {
    json!({"slug": slug, "name": format!("Orbit {slug}")})
}

#[tokio::test]
async fn a_replay_returns_the_original_status_and_bytes_even_after_state_moved_on() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    let b = app.agent("b").await;
    let w = Keyed::create_orbit(&app);
    let body = orbit_body("replayed");
    let key = new_key();
    let first = w.send(&a.token, Some(&key), &body).await;
    assert_eq!(first.status, 201, "{}", first.text);
    assert_executed(&first);
    let orbit = first.json["data"]["id"].as_i64().unwrap();

    // State moves on: someone joins, so the orbit's revision is now 2.
    app.join(&b, orbit).await;
    let again = w.send(&a.token, Some(&key), &body).await;
    assert_replay_of(&first, &again);
    assert_eq!(again.json["data"]["revision"], 1);
    assert_eq!(count(&app, "SELECT count(*) AS n FROM orbits"), 1);
    assert_eq!(count(&app, "SELECT count(*) AS n FROM changes"), 2);

    // The generic check, on a second orbit.
    assert_replays_byte_for_byte(&w, &a, &orbit_body("replayed-two")).await;
    assert_eq!(count(&app, "SELECT count(*) AS n FROM orbits"), 2);
}

#[tokio::test]
async fn without_a_key_orbit_creation_is_not_deduplicated() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    let w = Keyed::create_orbit(&app);
    let first = w.send(&a.token, None, &orbit_body("unkeyed")).await;
    assert_eq!(first.status, 201, "{}", first.text);
    w.send(&a.token, None, &orbit_body("unkeyed"))
        .await
        .assert_error(409, "slug_taken");
    assert_eq!(count(&app, "SELECT count(*) AS n FROM idempotency_keys"), 0);
}

#[tokio::test]
async fn the_same_key_with_a_different_body_is_409_reused() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    let w = Keyed::create_orbit(&app);
    assert_reused_key_is_refused(&w, &a, &orbit_body("reused"), &orbit_body("reused-other")).await;
    assert_eq!(count(&app, "SELECT count(*) AS n FROM orbits"), 1);

    // Defaults are not filled in: naming the default value is another request.
    let key = new_key();
    let plain = json!({"slug": "defaults", "name": "D"});
    assert_executed(&w.send(&a.token, Some(&key), &plain).await);
    let explicit = json!({"slug": "defaults", "name": "D", "join_policy": "OPEN"});
    w.send(&a.token, Some(&key), &explicit)
        .await
        .assert_error(409, "idempotency_key_reused");
    let described = json!({"slug": "defaults", "name": "D", "description": ""});
    w.send(&a.token, Some(&key), &described)
        .await
        .assert_error(409, "idempotency_key_reused");
    assert_eq!(count(&app, "SELECT count(*) AS n FROM orbits"), 2);
}

#[tokio::test]
async fn key_order_and_whitespace_do_not_change_the_fingerprint() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    let w = Keyed::create_orbit(&app);
    let key = new_key();
    let first = w
        .send_text(
            &a.token,
            &key,
            r#"{"slug":"shape","name":"Shape","description":"d"}"#,
        )
        .await;
    assert_eq!(first.status, 201, "{}", first.text);
    for text in [
        r#"{"name":"Shape","description":"d","slug":"shape"}"#,
        "{\n  \"description\" : \"d\",\n\t\"slug\": \"shape\",   \"name\":\"Shape\"\n}\n",
        r#"{"slug":"sh\u0061pe","name":"Shape","description":"d"}"#,
    ] {
        let again = w.send_text(&a.token, &key, text).await;
        assert_replay_of(&first, &again);
    }
    // A different value is a different request.
    w.send_text(
        &a.token,
        &key,
        r#"{"slug":"shape","name":"Shape","description":"D"}"#,
    )
    .await
    .assert_error(409, "idempotency_key_reused");
    assert_eq!(count(&app, "SELECT count(*) AS n FROM orbits"), 1);
}

#[tokio::test]
async fn keys_are_scoped_per_contributor() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    let b = app.agent("b").await;
    let w = Keyed::create_orbit(&app);
    let key = new_key();
    let ra = w.send(&a.token, Some(&key), &orbit_body("mine")).await;
    let rb = w.send(&b.token, Some(&key), &orbit_body("yours")).await;
    assert_executed(&ra);
    assert_executed(&rb);
    assert_eq!(ra.json["data"]["created_by"]["id"], a.id);
    assert_eq!(rb.json["data"]["created_by"]["id"], b.id);
    assert_eq!(w.stored(a.id, &key), 1);
    assert_eq!(w.stored(b.id, &key), 1);

    // The same key and body from another contributor executes (and here fails on
    // the slug) instead of replaying someone else's response.
    let key = new_key();
    let first = w.send(&a.token, Some(&key), &orbit_body("shared")).await;
    assert_executed(&first);
    let other = w.send(&b.token, Some(&key), &orbit_body("shared")).await;
    other.assert_error(409, "slug_taken");
    assert!(other.header("idempotency-replayed").is_none());
    assert_eq!(w.stored(b.id, &key), 0);
    assert_eq!(count(&app, "SELECT count(*) AS n FROM orbits"), 3);
}

#[tokio::test]
async fn keys_are_scoped_per_operation() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    let w = Keyed::create_orbit(&app);
    let key = new_key();
    // The same contributor used this key for another operation.
    let mut conn = app.db.conn();
    conn.batch_execute(&format!(
        "INSERT INTO idempotency_keys (contributor_id, operation, key, fingerprint, \
             response_status, response_body, expires_at) \
         VALUES ({}, 'POST /api/v1/orbits/{{orbit}}/problems', '{key}', 'elsewhere', 201, \
             '{{\"data\":{{}}}}'::bytea, clock_timestamp() + interval '1 day')",
        a.id
    ))
    .unwrap();
    let r = w.send(&a.token, Some(&key), &orbit_body("per-op")).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_executed(&r);
    assert_eq!(w.stored(a.id, &key), 1);
    assert_eq!(
        sql_i64(
            &mut conn,
            &format!("SELECT count(*) AS n FROM idempotency_keys WHERE key = '{key}'")
        ),
        2
    );
    assert_replay_of(
        &r,
        &w.send(&a.token, Some(&key), &orbit_body("per-op")).await,
    );

    // Routes that ignore the header neither replay nor store it.
    let b = app.agent("b").await;
    let orbit = r.json["data"]["id"].as_i64().unwrap();
    let join = app
        .send(
            Method::POST,
            &format!("/api/v1/orbits/{orbit}/join"),
            Some(&b.token),
            Some(&key),
            None,
        )
        .await;
    assert_eq!(join.status, 201, "{}", join.text);
    assert!(join.header("idempotency-replayed").is_none());
    assert_eq!(
        sql_i64(
            &mut conn,
            &format!(
                "SELECT count(*) AS n FROM idempotency_keys WHERE contributor_id = {}",
                b.id
            )
        ),
        0
    );
    // Not even read: a key no keyed route would take is no error there.
    let c = app.agent("c").await;
    let bad = "x".repeat(200);
    let join = app
        .send(
            Method::POST,
            &format!("/api/v1/orbits/{orbit}/join"),
            Some(&c.token),
            Some(&bad),
            None,
        )
        .await;
    assert_eq!(join.status, 201, "{}", join.text);
}

#[tokio::test]
async fn twenty_concurrent_requests_with_one_key_create_one_orbit() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    // Verify the token once, so the requests race on the key and not on argon2.
    assert_eq!(app.get("/api/v1/me", Some(&a.token)).await.status, 200);
    let w = Keyed::create_orbit(&app);
    let original = assert_one_execution_under_concurrency(&w, &a, &orbit_body("once"), 20).await;
    assert_eq!(original.status, 201);
    assert_eq!(count(&app, "SELECT count(*) AS n FROM orbits"), 1);
    assert_eq!(
        count(&app, "SELECT count(*) AS n FROM orbits WHERE slug = 'once'"),
        1
    );
    assert_eq!(count(&app, "SELECT count(*) AS n FROM changes"), 1);
    assert_eq!(count(&app, "SELECT count(*) AS n FROM memberships"), 1);
    assert_eq!(count(&app, "SELECT count(*) AS n FROM idempotency_keys"), 1);
}

#[tokio::test]
async fn a_handler_failure_stores_no_key_and_a_retry_runs_again() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    let b = app.agent("b").await;
    let w = Keyed::create_orbit(&app);
    app.orbit(&a, "contested").await;

    let key = new_key();
    let body = orbit_body("contested");
    for _ in 0..2 {
        // Not stored: the retry runs again and fails again, not replayed.
        let r = w.send(&b.token, Some(&key), &body).await;
        r.assert_error(409, "slug_taken");
        assert!(r.header("idempotency-replayed").is_none());
        assert_eq!(w.stored(b.id, &key), 0);
    }
    // Once the obstacle is gone, the retry with the same key succeeds.
    app.db
        .conn()
        .batch_execute("UPDATE orbits SET slug = 'renamed' WHERE slug = 'contested'")
        .unwrap();
    let r = w.send(&b.token, Some(&key), &body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_executed(&r);
    assert_eq!(w.stored(b.id, &key), 1);
    assert_replay_of(&r, &w.send(&b.token, Some(&key), &body).await);

    // Validation failures are not stored either, and do not burn the key.
    let key = new_key();
    w.send(
        &b.token,
        Some(&key),
        &json!({"slug": "Bad Slug", "name": "n"}),
    )
    .await
    .assert_error(422, "validation_failed");
    assert_eq!(w.stored(b.id, &key), 0);
    assert_executed(&w.send(&b.token, Some(&key), &orbit_body("good-slug")).await);
}

#[tokio::test]
async fn a_malformed_key_is_422_and_the_checks_before_it_win() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    let w = Keyed::create_orbit(&app);
    assert_malformed_keys_are_refused(&w, &a, &orbit_body("malformed"), |i| {
        orbit_body(&format!("edge-{i}"))
    })
    .await;
    assert_eq!(count(&app, "SELECT count(*) AS n FROM orbits"), 3);

    // 401 before the key is looked at.
    let r = app
        .send(
            Method::POST,
            "/api/v1/orbits",
            None,
            Some("has space"),
            Some(orbit_body("anon")),
        )
        .await;
    r.assert_error(401, "unauthorized");
}

#[tokio::test]
async fn expired_keys_are_purged_and_then_execute_anew() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    let w = Keyed::create_orbit(&app);
    let key = new_key();
    let first = w.send(&a.token, Some(&key), &orbit_body("expiring")).await;
    assert_executed(&first);
    // Kept for the configured retention (24 hours by default).
    assert_eq!(
        count(
            &app,
            "SELECT count(*) AS n FROM idempotency_keys \
             WHERE expires_at - created_at = interval '24 hours'"
        ),
        1
    );
    // An unexpired key survives a purge.
    let mut conn = app.db.conn();
    assert_eq!(
        orbit_commons::domain::idempotency::purge_expired(&mut conn).unwrap(),
        0
    );
    assert_eq!(w.stored(a.id, &key), 1);

    conn.batch_execute(&format!(
        "UPDATE idempotency_keys SET expires_at = clock_timestamp() - interval '1 hour' \
         WHERE key = '{key}'"
    ))
    .unwrap();
    let purged = orbit_commons::domain::idempotency::purge_expired(&mut conn).unwrap();
    assert_eq!(purged, 1);
    assert_eq!(w.stored(a.id, &key), 0);

    // The same request runs again (and meets its own orbit: not a replay) ...
    let again = w.send(&a.token, Some(&key), &orbit_body("expiring")).await;
    again.assert_error(409, "slug_taken");
    // ... and the key is free for a new intent.
    let fresh = w
        .send(&a.token, Some(&key), &orbit_body("expiring-2"))
        .await;
    assert_eq!(fresh.status, 201, "{}", fresh.text);
    assert_executed(&fresh);
    assert_eq!(w.stored(a.id, &key), 1);
}

#[tokio::test]
async fn an_expired_key_not_yet_purged_executes_anew() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    let w = Keyed::create_orbit(&app);
    let key = new_key();
    assert_executed(&w.send(&a.token, Some(&key), &orbit_body("stale-a")).await);
    app.db
        .conn()
        .batch_execute(&format!(
            "UPDATE idempotency_keys SET expires_at = clock_timestamp() - interval '1 second' \
             WHERE key = '{key}'"
        ))
        .unwrap();
    let r = w.send(&a.token, Some(&key), &orbit_body("stale-b")).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_executed(&r);
    assert_eq!(w.stored(a.id, &key), 1);
    assert_replay_of(
        &r,
        &w.send(&a.token, Some(&key), &orbit_body("stale-b")).await,
    );
}

#[tokio::test]
async fn purge_deletes_in_batches_until_none_are_left() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    let mut conn = app.db.conn();
    conn.batch_execute(&format!(
        "INSERT INTO idempotency_keys (contributor_id, operation, key, fingerprint, \
             response_status, response_body, expires_at) \
         SELECT {}, 'POST /api/v1/orbits', 'k' || g, 'f', 201, ''::bytea, \
             clock_timestamp() - interval '1 minute' \
         FROM generate_series(1, 1234) AS g",
        a.id
    ))
    .unwrap();
    let w = Keyed::create_orbit(&app);
    assert_executed(&w.send(&a.token, Some("live"), &orbit_body("live")).await);
    assert_eq!(
        orbit_commons::domain::idempotency::purge_expired(&mut conn).unwrap(),
        1234
    );
    assert_eq!(count(&app, "SELECT count(*) AS n FROM idempotency_keys"), 1);
}

#[tokio::test]
async fn a_request_killed_mid_transaction_leaves_no_key() {
    // A long lock timeout, so the request is still waiting when we kill it.
    let app = TestApp::spawn_with(|c| c.db_timeout_ms = 30_000).await;
    let a = app.agent("a").await;
    assert_eq!(app.get("/api/v1/me", Some(&a.token)).await.status, 200);
    let w = Keyed::create_orbit(&app);
    let key = new_key();
    let body = orbit_body("killed");

    let mut locker = app.db.conn();
    locker
        .batch_execute("BEGIN; LOCK TABLE orbits IN EXCLUSIVE MODE")
        .unwrap();
    let killer = async {
        let mut monitor = app.db.conn();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let blocked = sql_i64(
                &mut monitor,
                "SELECT coalesce(max(pid), 0)::bigint AS n FROM pg_stat_activity \
                 WHERE datname = current_database() AND wait_event_type = 'Lock' \
                 AND pid <> pg_backend_pid()",
            );
            if blocked != 0 {
                let killed = sql_i64(
                    &mut monitor,
                    &format!("SELECT pg_terminate_backend({blocked})::int::bigint AS n"),
                );
                assert_eq!(killed, 1);
                return blocked;
            }
            assert!(Instant::now() < deadline, "the keyed create never blocked");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let (r, _) = tokio::join!(w.send(&a.token, Some(&key), &body), killer);
    locker.batch_execute("ROLLBACK").unwrap();

    r.assert_error(503, "service_unavailable");
    assert!(
        !r.text.contains("terminat"),
        "a 5xx body leaks the cause: {}",
        r.text
    );
    assert_eq!(w.stored(a.id, &key), 0);
    assert_eq!(count(&app, "SELECT count(*) AS n FROM orbits"), 0);
    assert_eq!(count(&app, "SELECT count(*) AS n FROM changes"), 0);

    let retry = w.send(&a.token, Some(&key), &body).await;
    assert_eq!(retry.status, 201, "{}", retry.text);
    assert_executed(&retry);
    assert_eq!(w.stored(a.id, &key), 1);
    assert_eq!(count(&app, "SELECT count(*) AS n FROM orbits"), 1);
}

#[tokio::test]
async fn a_stored_response_with_quotes_backslashes_and_emoji_replays_byte_for_byte() {
    // The response is stored by a statement whose values travel as SQL literals
    // (sent together with the COMMIT): quotes, backslashes, escapes and non-ASCII
    // text must come back exactly as they were sent the first time.
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    let w = Keyed::create_orbit(&app);
    let name = "it's a \\ 'test' \\x41 \"quoted\" $$ 🚀 שלום \u{0007}";
    let (_, first) =
        assert_replays_byte_for_byte(&w, &a, &json!({"slug": "quoted-orbit", "name": name})).await;
    assert_eq!(first.json["data"]["name"], name);
    let revision = first.json["data"]["orbit_revision"].as_i64().unwrap();
    assert_eq!(revision, 1);
}

/// Two `Idempotency-Key` lines are one comma-joined value, which no key is: 422
/// and nothing written (taking one line would let a reordered retry run twice).
/// Two `Authorization` lines name no one caller: 401.
#[tokio::test]
async fn a_header_sent_twice_is_refused() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    let body = serde_json::to_vec(&orbit_body("twice")).unwrap();
    let r = app
        .post_raw(
            "/api/v1/orbits",
            Some(&a.token),
            &[
                ("content-type", "application/json"),
                ("idempotency-key", "key-one"),
                ("idempotency-key", "key-two"),
            ],
            body.clone(),
        )
        .await;
    r.assert_error(422, "idempotency_key_invalid");
    assert_eq!(count(&app, "SELECT count(*) AS n FROM orbits"), 0);
    assert_eq!(count(&app, "SELECT count(*) AS n FROM idempotency_keys"), 0);
    let r = app
        .post_raw(
            "/api/v1/orbits",
            None,
            &[
                ("content-type", "application/json"),
                ("authorization", &format!("Bearer {}", a.token)),
                ("authorization", &format!("Bearer {}", a.token)),
            ],
            body,
        )
        .await;
    r.assert_error(401, "unauthorized");
    assert_eq!(count(&app, "SELECT count(*) AS n FROM orbits"), 0);
}
