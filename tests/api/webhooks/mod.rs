//! Webhooks (contract section 15, issue 22) over real HTTP, delivered to a local
//! receiver (`orbit_commons::testkit::receiver`): signatures verified as a receiver would, revision
//! order, the kinds filter, retries with the same `webhook-id` after a 5xx and a
//! timeout, disabling and enabling, another contributor's 404, a subscription
//! deleted mid-delivery, URL safety, the limit, idempotent creation, and which
//! changes wake a claim pass. The crash test is in `reliability::webhooks`.

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::harness::{sql_i64, Agent, TestApp};
use orbit_commons::testkit::receiver::{Plan, Receiver};

const WAIT: Duration = Duration::from_secs(30);

/// An app whose webhooks may target the local receiver, with fast retries.
async fn app() -> TestApp {
    app_with(|_| {}).await
}

/// [`app`] with its configuration changed further by `tweak`.
async fn app_with(tweak: impl FnOnce(&mut orbit_commons::config::Config)) -> TestApp {
    TestApp::spawn_with(|c| {
        c.webhook_allow_private = true;
        c.webhook_retry_base_ms = 50;
        tweak(c);
    })
    .await
}

/// Creates a webhook; returns its JSON (`data`).
async fn subscribe(app: &TestApp, owner: &Agent, body: Value) -> Value {
    let r = app.post("/api/v1/me/webhooks", &owner.token, body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.json["data"].clone()
}

/// One write in the orbit (a problem); returns the revision it made.
async fn write(app: &TestApp, agent: &Agent, orbit: i64, n: usize) -> i64 {
    let r = app
        .post_keyed(
            &format!("/api/v1/orbits/{orbit}/problems"),
            &agent.token,
            json!({"title": format!("problem {n}"), "statement": ""}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.json["data"]["orbit_revision"].as_i64().expect("revision")
}

async fn webhook(app: &TestApp, owner: &Agent, id: i64) -> Value {
    let r = app
        .get(&format!("/api/v1/me/webhooks/{id}"), Some(&owner.token))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.json["data"].clone()
}

async fn deliveries(app: &TestApp, owner: &Agent, id: i64) -> Vec<Value> {
    let r = app
        .get(
            &format!("/api/v1/me/webhooks/{id}/deliveries"),
            Some(&owner.token),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.json["data"].as_array().expect("a list").clone()
}

/// Polls the subscription until `done` holds for it.
async fn wait_webhook(
    app: &TestApp,
    owner: &Agent,
    id: i64,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let w = webhook(app, owner, id).await;
        if done(&w) {
            return w;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "webhook never got there: {w}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn deliveries_are_signed_in_revision_order_with_the_change() {
    let app = app().await;
    let rx = Receiver::start().expect("start the webhook receiver");
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "hooked").await;
    let hook = subscribe(
        &app,
        &owner,
        json!({"orbit": "hooked", "url": rx.url, "description": "all of it"}),
    )
    .await;
    let secret = hook["secret"]
        .as_str()
        .expect("the secret, once")
        .to_owned();
    assert!(secret.starts_with("whsec_"), "{secret}");
    assert_eq!(hook["orbit"], json!({"id": orbit, "slug": "hooked"}));
    assert_eq!(hook["status"], "ACTIVE");
    assert_eq!(hook["kinds"], Value::Null);
    assert_eq!(hook["disabled_reason"], Value::Null);
    // It starts after the orbit's current revision (1: the orbit's creation).
    assert_eq!(hook["delivered_through"], 1);
    let id = hook["id"].as_i64().unwrap();

    let mut revisions = Vec::new();
    for n in 0..6 {
        revisions.push(write(&app, &owner, orbit, n).await);
    }
    let got = rx
        .wait_for(WAIT, |g| g.len() >= 6)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(got.len(), 6, "a change was sent twice: {got:?}");
    let seen: Vec<i64> = got.iter().map(|g| g.revision()).collect();
    assert_eq!(seen, revisions, "not in revision order");
    for g in &got {
        g.verify(&secret).unwrap_or_else(|e| panic!("{e}: {g:?}"));
        // A receiver given another secret refuses it.
        assert!(g.verify("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_err());
        assert_eq!(g.content_type, "application/json");
        assert_eq!(g.id, format!("{orbit}.{}", g.revision()));
        let body = g.json();
        assert_eq!(body["type"], "problem.created");
        let data = &body["data"];
        assert_eq!(data["revision"], g.revision());
        assert_eq!(data["kind"], "problem.created");
        assert_eq!(data["entity_type"], "problem");
        assert_eq!(data["contributor"]["id"], owner.id);
        assert_eq!(data["orbit"], json!({"id": orbit, "slug": "hooked"}));
        assert_eq!(body["timestamp"], data["created_at"]);
        // The Change exactly as the feed shows it, plus the orbit.
        let feed = app
            .get(
                &format!(
                    "/api/v1/orbits/{orbit}/changes?after={}&limit=1",
                    g.revision() - 1
                ),
                None,
            )
            .await;
        let mut change = feed.json["data"][0].clone();
        change["orbit"] = json!({"id": orbit, "slug": "hooked"});
        assert_eq!(data, &change);
    }
    let w = wait_webhook(&app, &owner, id, |w| w["delivered_through"] == revisions[5]).await;
    assert!(w.get("secret").is_none(), "the secret shown again: {w}");
    let log = deliveries(&app, &owner, id).await;
    assert_eq!(log.len(), 6, "{log:?}");
    for (entry, rev) in log.iter().zip(&revisions) {
        assert_eq!(entry["revision"], *rev);
        assert_eq!(entry["attempt"], 1);
        assert_eq!(entry["status_code"], 200);
        assert_eq!(entry["error"], Value::Null);
        assert!(entry["duration_ms"].as_i64().unwrap() >= 0);
        assert!(entry["attempted_at"].is_string());
    }
    let list = app.get("/api/v1/me/webhooks", Some(&owner.token)).await;
    assert_eq!(list.json["data"].as_array().unwrap().len(), 1);
    assert!(list.json["data"][0].get("secret").is_none());
    assert_eq!(list.json["meta"]["next_after"], Value::Null);
}

/// A URL is stored and shown in the standard form it is delivered to: a URL
/// parser reads `\` as `/`, resolves `..` and percent-encodes other characters, so
/// `http:\\host\x\..\hoök` showed as sent while its deliveries went to `/ho%C3%B6k`.
#[tokio::test]
async fn a_webhook_url_is_shown_as_it_is_delivered_to() {
    let app = app().await;
    let rx = Receiver::start().expect("start the webhook receiver");
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "standard").await;
    let base = rx.url.trim_end_matches("/hook");
    let sent = base.replacen("http://", "http:\\\\", 1) + "\\x\\..\\ho\u{f6}k";
    let hook = subscribe(&app, &owner, json!({"orbit": orbit, "url": sent})).await;
    let standard = format!("{base}/ho%C3%B6k");
    assert_eq!(hook["url"], standard.as_str(), "{hook}");
    let id = hook["id"].as_i64().unwrap();
    let read = app
        .get(&format!("/api/v1/me/webhooks/{id}"), Some(&owner.token))
        .await;
    assert_eq!(read.json["data"]["url"], standard.as_str(), "{}", read.text);
    write(&app, &owner, orbit, 0).await;
    let got = rx
        .wait_for(WAIT, |g| !g.is_empty())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(got[0].path, "/ho%C3%B6k");
    // A fragment is never sent: refused in a new subscription, and not shown for
    // one stored as sent before the standard form (its row written here so).
    let r = app
        .post(
            "/api/v1/me/webhooks",
            &owner.token,
            json!({"orbit": orbit, "url": format!("{base}/hook#part")}),
        )
        .await;
    r.assert_error(422, "validation_failed");
    assert!(
        r.json["errors"]["url"][0]
            .as_str()
            .is_some_and(|m| m.contains("#fragment")),
        "{}",
        r.text
    );
    use diesel::RunQueryDsl;
    let mut conn = app.db.conn();
    diesel::sql_query(format!(
        "UPDATE webhooks SET url = 'http:\\\\{}\\x\\..\\ho\u{f6}k#part' WHERE id = {id}",
        base.trim_start_matches("http://")
    ))
    .execute(&mut conn)
    .unwrap();
    let read = app
        .get(&format!("/api/v1/me/webhooks/{id}"), Some(&owner.token))
        .await;
    assert_eq!(read.json["data"]["url"], standard.as_str(), "{}", read.text);
}

#[tokio::test]
async fn the_kinds_filter_sends_exact_kinds_and_prefixes_only() {
    let app = app().await;
    let rx_exact = Receiver::start().expect("start the webhook receiver");
    let rx_prefix = Receiver::start().expect("start the webhook receiver");
    let owner = app.agent("owner").await;
    let member = app.agent("member").await;
    let orbit = app.orbit(&owner, "filtered").await;
    let exact = subscribe(
        &app,
        &owner,
        json!({"orbit": orbit, "url": rx_exact.url, "kinds": ["member.removed"]}),
    )
    .await;
    subscribe(
        &app,
        &owner,
        json!({"orbit": orbit, "url": rx_prefix.url, "kinds": ["member.*"]}),
    )
    .await;
    assert_eq!(exact["kinds"], json!(["member.removed"]));
    write(&app, &owner, orbit, 0).await; // problem.created: neither
    app.join(&member, orbit).await; // member.added: the prefix only
    let left = app
        .delete(
            &format!("/api/v1/orbits/{orbit}/members/{}", member.id),
            &member.token,
        )
        .await;
    assert_eq!(left.status, 200, "{}", left.text);
    let last = write(&app, &owner, orbit, 1).await; // neither

    let prefix = rx_prefix
        .wait_for(WAIT, |g| g.len() >= 2)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let kinds: Vec<Value> = prefix.iter().map(|g| g.json()["type"].clone()).collect();
    assert_eq!(kinds, vec![json!("member.added"), json!("member.removed")]);
    let got = rx_exact
        .wait_for(WAIT, |g| !g.is_empty())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(got[0].json()["type"], "member.removed");
    // Skipped changes are passed over: progress reaches the orbit's last revision.
    let id = exact["id"].as_i64().unwrap();
    wait_webhook(&app, &owner, id, |w| w["delivered_through"] == last).await;
    assert_eq!(rx_exact.count(), 1, "{:?}", rx_exact.got());
    assert_eq!(rx_prefix.count(), 2);
}

/// A 3xx answer is no delivery: retried, and logged in words that fit it (a
/// redirect is not followed; a 304 is no redirect at all).
#[tokio::test]
async fn a_3xx_answer_is_retried_and_logged_as_what_it_is() {
    let app = app().await;
    let owner = app.agent("owner").await;
    for (n, (status, words)) in [
        (302, "HTTP 302 Found: redirects are not followed"),
        (
            304,
            "HTTP 304 Not Modified: only a 2xx answer counts as delivered",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let rx = Receiver::start_with(Plan {
            fail_next: 1,
            fail_status: status,
            ..Plan::default()
        })
        .expect("start the webhook receiver");
        let orbit = app.orbit(&owner, &format!("three-{n}")).await;
        let hook = subscribe(&app, &owner, json!({"orbit": orbit, "url": rx.url})).await;
        let id = hook["id"].as_i64().unwrap();
        let rev = write(&app, &owner, orbit, 0).await;
        wait_webhook(&app, &owner, id, |w| w["delivered_through"] == rev).await;
        let log = deliveries(&app, &owner, id).await;
        assert_eq!(log.len(), 2, "{log:?}");
        assert_eq!(log[0]["status_code"], status);
        assert_eq!(log[0]["error"], words, "{log:?}");
        assert_eq!(log[1]["status_code"], 200);
    }
}

#[tokio::test]
async fn a_failed_delivery_is_retried_with_the_same_id_after_a_5xx_and_a_timeout() {
    let app = app_with(|c| c.webhook_timeout_ms = 500).await;
    let rx = Receiver::start_with(Plan {
        fail_next: 2,
        fail_status: 500,
        hang_next: 1,
        hang: Duration::from_secs(3),
        ..Plan::default()
    })
    .expect("start the webhook receiver");
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "retried").await;
    let hook = subscribe(&app, &owner, json!({"orbit": orbit, "url": rx.url})).await;
    let id = hook["id"].as_i64().unwrap();
    let first = write(&app, &owner, orbit, 0).await;
    let second = write(&app, &owner, orbit, 1).await;
    let got = rx
        .wait_for(WAIT, |g| g.len() >= 5)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let ids: Vec<&str> = got.iter().map(|g| g.id.as_str()).collect();
    let a = format!("{orbit}.{first}");
    let b = format!("{orbit}.{second}");
    // Four attempts at the first change (500, 500, timeout, 200), then the second:
    // it waited while the first was retried.
    assert_eq!(ids, vec![a.as_str(), &a, &a, &a, &b], "{got:?}");
    let secret = hook["secret"].as_str().unwrap();
    for g in &got {
        g.verify(secret).unwrap();
    }
    // The same body on every retry (only the timestamp and signature are new).
    assert!(got[..4].iter().all(|g| g.body == got[0].body));
    // Backoff: each retry waited at least the base, doubling.
    assert!(got[1].at - got[0].at >= Duration::from_millis(50));
    assert!(got[2].at - got[1].at >= Duration::from_millis(100));
    wait_webhook(&app, &owner, id, |w| w["delivered_through"] == second).await;
    let log = deliveries(&app, &owner, id).await;
    let summary: Vec<(i64, i64, Value)> = log
        .iter()
        .map(|d| {
            (
                d["revision"].as_i64().unwrap(),
                d["attempt"].as_i64().unwrap(),
                d["status_code"].clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (first, 1, json!(500)),
            (first, 2, json!(500)),
            (first, 3, Value::Null),
            (first, 4, json!(200)),
            (second, 1, json!(200)),
        ]
    );
    assert_eq!(log[0]["error"], "HTTP 500 Internal Server Error");
    assert!(
        log[2]["error"]
            .as_str()
            .unwrap()
            .contains("no answer within 500 ms"),
        "{}",
        log[2]
    );
    // `attempted_at` is when an attempt started: the log's gap between the timed-out
    // attempt and the next is the receiver's (recorded at the end, it was 500 ms
    // shorter).
    let at = |d: &Value| {
        chrono::DateTime::parse_from_rfc3339(d["attempted_at"].as_str().unwrap()).unwrap()
    };
    let logged = (at(&log[3]) - at(&log[2])).num_milliseconds();
    let received = (got[3].at - got[2].at).as_millis() as i64;
    assert!(
        (logged - received).abs() < 250,
        "attempted_at gap {logged} ms, receiver's {received} ms: {log:?}"
    );
}

/// A 2xx within the timeout is success, whatever the body does after it: a receiver
/// that answers 200 at once and then trickles its body past the timeout gets the
/// change once (it was counted a timeout and sent again and again).
#[tokio::test]
async fn a_prompt_2xx_is_success_even_when_its_body_trickles() {
    let app = app_with(|c| c.webhook_timeout_ms = 1000).await;
    let rx = Receiver::start_with(Plan {
        trickle_next: 1,
        hang: Duration::from_millis(100),
        ..Plan::default()
    })
    .expect("start the webhook receiver");
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "trickled").await;
    let hook = subscribe(&app, &owner, json!({"orbit": orbit, "url": rx.url})).await;
    let id = hook["id"].as_i64().unwrap();
    let first = write(&app, &owner, orbit, 0).await;
    wait_webhook(&app, &owner, id, |w| w["delivered_through"] == first).await;
    // Past the timeout and a backoff: still the one request.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(rx.count(), 1, "{:?}", rx.got());
    let log = deliveries(&app, &owner, id).await;
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0]["status_code"], 200, "{}", log[0]);
    assert!(log[0]["error"].is_null(), "{}", log[0]);
}

#[tokio::test]
async fn the_last_failed_attempt_disables_and_enable_resumes_after_delivered_through() {
    let app = app_with(|c| {
        c.webhook_retry_base_ms = 20;
        c.webhook_max_attempts = 3;
    })
    .await;
    let rx = Receiver::start_with(Plan {
        fail_next: usize::MAX,
        fail_status: 503,
        ..Plan::default()
    })
    .expect("start the webhook receiver");
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "disabled").await;
    let hook = subscribe(&app, &owner, json!({"orbit": orbit, "url": rx.url})).await;
    let id = hook["id"].as_i64().unwrap();
    let first = write(&app, &owner, orbit, 0).await;
    let second = write(&app, &owner, orbit, 1).await;
    let w = wait_webhook(&app, &owner, id, |w| w["status"] == "DISABLED").await;
    let reason = w["disabled_reason"].as_str().expect("a reason");
    assert!(
        reason.contains("3 failed attempts") && reason.contains("503"),
        "{reason}"
    );
    assert_eq!(w["delivered_through"], first - 1);
    // Exactly the three attempts, all at the first change.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let got = rx.got();
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(got.iter().all(|g| g.revision() == first));
    assert_eq!(deliveries(&app, &owner, id).await.len(), 3);
    // A third change while DISABLED is not sent.
    let third = write(&app, &owner, orbit, 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rx.count(), 3);

    rx.set_plan(Plan::default());
    let r = app
        .post_empty(&format!("/api/v1/me/webhooks/{id}/enable"), &owner.token)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["data"]["status"], "ACTIVE");
    assert_eq!(r.json["data"]["disabled_reason"], Value::Null);
    let got = rx
        .wait_for(WAIT, |g| g.len() >= 6)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let after: Vec<i64> = got[3..].iter().map(|g| g.revision()).collect();
    assert_eq!(after, vec![first, second, third]);
    wait_webhook(&app, &owner, id, |w| w["delivered_through"] == third).await;
    // Enabling an ACTIVE one changes nothing.
    let again = app
        .post_empty(&format!("/api/v1/me/webhooks/{id}/enable"), &owner.token)
        .await;
    assert_eq!(again.status, 200);
    assert_eq!(again.json["data"]["status"], "ACTIVE");
}

#[tokio::test]
async fn another_contributors_webhook_is_not_found() {
    let app = app().await;
    let rx = Receiver::start().expect("start the webhook receiver");
    let owner = app.agent("owner").await;
    let other = app.agent("other").await;
    let orbit = app.orbit(&owner, "mine").await;
    let hook = subscribe(&app, &owner, json!({"orbit": orbit, "url": rx.url})).await;
    let id = hook["id"].as_i64().unwrap();
    let base = format!("/api/v1/me/webhooks/{id}");
    app.get(&base, Some(&other.token))
        .await
        .assert_error(404, "not_found");
    app.get(&format!("{base}/deliveries"), Some(&other.token))
        .await
        .assert_error(404, "not_found");
    app.post_empty(&format!("{base}/enable"), &other.token)
        .await
        .assert_error(404, "not_found");
    app.delete(&base, &other.token)
        .await
        .assert_error(404, "not_found");
    let list = app.get("/api/v1/me/webhooks", Some(&other.token)).await;
    assert_eq!(list.json["data"], json!([]));
    app.get("/api/v1/me/webhooks/999999", Some(&owner.token))
        .await
        .assert_error(404, "not_found");
    // Without a token: 401, even for the owner's id.
    let anon = app.get(&base, None).await;
    assert_eq!(anon.status, 401);
    let anon = app
        .send(
            Method::POST,
            "/api/v1/me/webhooks",
            None,
            None,
            Some(json!({"orbit": orbit, "url": rx.url})),
        )
        .await;
    assert_eq!(anon.status, 401);
    // Still there for its owner.
    assert_eq!(webhook(&app, &owner, id).await["id"], id);
}

#[tokio::test]
async fn bad_input_and_forbidden_addresses_are_422_and_write_nothing() {
    // Private addresses not allowed: the default.
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "strict").await;
    let r = app
        .post(
            "/api/v1/me/webhooks",
            &owner.token,
            json!({"orbit": orbit, "url": "ftp://example.com/x", "kinds": ["task.made", "task.*"],
                   "description": "d".repeat(201)}),
        )
        .await;
    r.assert_error(422, "validation_failed");
    let errors = &r.json["errors"];
    assert!(errors["url"].is_array(), "{}", r.text);
    assert!(
        errors["kinds"][0].as_str().unwrap().contains("task.made"),
        "{}",
        r.text
    );
    assert!(errors["description"].is_array(), "{}", r.text);
    for body in [
        json!({"orbit": orbit, "url": "not a url"}),
        json!({"orbit": orbit, "url": format!("https://example.com/{}", "a".repeat(2000))}),
        json!({"orbit": orbit, "url": "https://example.com/", "kinds": []}),
        json!({"orbit": orbit, "url": "https://example.com/", "kinds": ["*"]}),
        json!({"orbit": orbit, "url": "https://example.com/", "kinds": ["task.*", "task.*"]}),
        json!({"orbit": orbit, "url": "https://user:pw@example.com/"}),
        json!({"orbit": orbit, "url": "https://example.com/", "extra": 1}),
        json!({"url": "https://example.com/"}),
        json!({"orbit": orbit, "url": "https://example.com:0/"}),
    ] {
        let r = app
            .post("/api/v1/me/webhooks", &owner.token, body.clone())
            .await;
        assert_eq!(r.status, 422, "{body}: {}", r.text);
    }
    // Past the most patterns the count is the one problem (the entries are not
    // each judged: a body can hold tens of thousands), and a pattern given three
    // times is named once.
    let many = vec!["task.*"; 20_000];
    let r = app
        .post(
            "/api/v1/me/webhooks",
            &owner.token,
            json!({"orbit": orbit, "url": "https://example.com/", "kinds": many}),
        )
        .await;
    r.assert_error(422, "validation_failed");
    assert_eq!(
        r.json["errors"]["kinds"].as_array().map(Vec::len),
        Some(1),
        "{}",
        r.text
    );
    let r = app
        .post(
            "/api/v1/me/webhooks",
            &owner.token,
            json!({"orbit": orbit, "url": "https://example.com/",
                   "kinds": ["task.*", "task.*", "task.*"]}),
        )
        .await;
    assert_eq!(
        r.json["errors"]["kinds"],
        json!(["\"task.*\" is given more than once: give it once"]),
        "{}",
        r.text
    );
    // A URL parser drops tabs and line breaks and trims spaces: such a URL would be
    // stored and shown as sent, and delivered elsewhere (`/ws\r\npath` to `/wspath`).
    for url in [
        " https://example.com/",
        "https://example.com/ ",
        "https://example.com/ws\r\npath",
        "https://example.com/a\tb",
        "https://example.com/\nX-Injected: 1",
        "https://exa mple.com/",
    ] {
        let r = app
            .post(
                "/api/v1/me/webhooks",
                &owner.token,
                json!({"orbit": orbit, "url": url}),
            )
            .await;
        r.assert_error(422, "validation_failed");
        assert!(
            r.json["errors"]["url"][0]
                .as_str()
                .is_some_and(|m| m.contains("control characters")),
            "{url:?}: {}",
            r.text
        );
    }
    let r = app
        .post(
            "/api/v1/me/webhooks",
            &owner.token,
            json!({"orbit": "no-such-orbit", "url": "https://example.com/"}),
        )
        .await;
    r.assert_error(422, "validation_failed");
    assert!(r.json["errors"]["orbit"].is_array(), "{}", r.text);
    // Neither an id nor a slug: in plain words, as search and the MCP tools say it
    // (not "data did not match any variant of untagged enum OrbitName"); a string
    // or a number no orbit can have is refused by the same check as search's
    // (`orbits::check_reference`).
    for orbit in [
        json!(true),
        json!(1.5),
        json!(null),
        json!([]),
        json!(""),
        json!("o".repeat(64)),
        json!(0),
        json!(-1),
    ] {
        let r = app
            .post(
                "/api/v1/me/webhooks",
                &owner.token,
                json!({"orbit": orbit, "url": "https://example.com/"}),
            )
            .await;
        r.assert_error(422, "validation_failed");
        assert_eq!(
            r.json["errors"]["orbit"],
            json!(["must be an orbit id or slug"]),
            "{orbit}: {}",
            r.text
        );
    }
    for url in [
        "http://127.0.0.1:9/x",
        "http://localhost/x",
        "http://10.1.2.3/",
        "http://192.168.0.1/",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/",
        "http://0.0.0.0/",
        "http://224.0.0.1/",
        "http://[::ffff:127.0.0.1]/",
    ] {
        let r = app
            .post(
                "/api/v1/me/webhooks",
                &owner.token,
                json!({"orbit": orbit, "url": url}),
            )
            .await;
        r.assert_error(422, "webhook_url_forbidden");
    }
    // A host that cannot resolve (RFC 6761 keeps `.invalid` out of DNS): the reason
    // on `url`, as agents.md says.
    let r = app
        .post(
            "/api/v1/me/webhooks",
            &owner.token,
            json!({"orbit": orbit, "url": "https://hooks.example.invalid/in"}),
        )
        .await;
    r.assert_error(422, "validation_failed");
    let why = r.json["errors"]["url"][0].as_str().unwrap_or_default();
    assert!(
        why.starts_with("the host hooks.example.invalid d") && why.contains("resolve"),
        "{}",
        r.text
    );
    let list = app.get("/api/v1/me/webhooks", Some(&owner.token)).await;
    assert_eq!(list.json["data"], json!([]));
    assert_eq!(
        sql_i64(&mut app.db.conn(), "SELECT count(*) AS n FROM webhooks"),
        0
    );
}

/// One contributor's creations at once: exactly ten are made and the rest are 409
/// `webhook_limit`, never a 5xx. Until 2026-12-06 the limit's lock on the
/// contributor's row (`FOR UPDATE`) met the `FOR KEY SHARE` that each write's key
/// claim had already taken on it (its foreign key): two such writes waited for
/// each other, deadlocks and lock timeouts answered 503 and 500, and other
/// clients waited for the pool.
#[tokio::test]
async fn one_contributors_creations_at_once_make_ten_and_no_5xx() {
    let app = app().await;
    let owner = app.agent("racer").await;
    let orbit = app.orbit(&owner, "raced").await;
    let creations = (0..24).map(|i| {
        let (app, token) = (&app, owner.token.clone());
        async move {
            let body = json!({"orbit": orbit, "url": format!("http://127.0.0.1:9/hook/{i}")});
            app.post_with_key("/api/v1/me/webhooks", &token, &format!("race-{i}"), body)
                .await
        }
    });
    let answers = futures::future::join_all(creations).await;
    let statuses: Vec<u16> = answers.iter().map(|r| r.status.as_u16()).collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 201).count(),
        10,
        "{statuses:?}"
    );
    for r in &answers {
        if r.status != 201 {
            r.assert_error(409, "webhook_limit");
        }
    }
    assert_eq!(
        sql_i64(&mut app.db.conn(), "SELECT count(*) AS n FROM webhooks"),
        10
    );
}

#[tokio::test]
async fn create_is_idempotent_and_a_contributor_has_at_most_ten() {
    let app = app().await;
    let rx = Receiver::start().expect("start the webhook receiver");
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "limited").await;
    let body = json!({"orbit": orbit, "url": rx.url, "description": "keyed"});
    let send = |key: &'static str, body: Value| {
        let app = &app;
        let token = owner.token.clone();
        async move {
            app.post_with_key("/api/v1/me/webhooks", &token, key, body)
                .await
        }
    };
    let first = send("hook-1", body.clone()).await;
    assert_eq!(first.status, 201, "{}", first.text);
    let again = send("hook-1", body.clone()).await;
    assert_eq!(again.status, 201);
    assert_eq!(again.header("idempotency-replayed"), Some("true"));
    assert_eq!(again.bytes, first.bytes, "not replayed byte for byte");
    send("hook-1", json!({"orbit": orbit, "url": rx.url}))
        .await
        .assert_error(409, "idempotency_key_reused");
    for n in 1..10 {
        let r = app
            .post(
                "/api/v1/me/webhooks",
                &owner.token,
                json!({"orbit": orbit, "url": rx.url, "description": format!("{n}")}),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let over = app
        .post(
            "/api/v1/me/webhooks",
            &owner.token,
            json!({"orbit": orbit, "url": rx.url}),
        )
        .await;
    over.assert_error(409, "webhook_limit");
    let list = app
        .get("/api/v1/me/webhooks?limit=100", Some(&owner.token))
        .await;
    assert_eq!(list.json["data"].as_array().unwrap().len(), 10);
    // The replay of the first still answers, and made nothing new.
    let replay = send("hook-1", body).await;
    assert_eq!(replay.status, 201);
    assert_eq!(replay.bytes, first.bytes);
    assert_eq!(
        sql_i64(&mut app.db.conn(), "SELECT count(*) AS n FROM webhooks"),
        10
    );
    // One deleted makes room for one more.
    let id = first.json["data"]["id"].as_i64().unwrap();
    let gone = app
        .delete(&format!("/api/v1/me/webhooks/{id}"), &owner.token)
        .await;
    assert_eq!(gone.status, 200, "{}", gone.text);
    assert_eq!(gone.json["data"]["id"], id);
    let r = app
        .post(
            "/api/v1/me/webhooks",
            &owner.token,
            json!({"orbit": orbit, "url": rx.url}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
}

#[tokio::test]
async fn a_subscription_deleted_while_a_delivery_is_in_flight_gets_nothing_more() {
    let app = app().await;
    let rx = Receiver::start_with(Plan {
        hang_next: 1,
        hang: Duration::from_millis(1500),
        ..Plan::default()
    })
    .expect("start the webhook receiver");
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "deleted").await;
    let hook = subscribe(&app, &owner, json!({"orbit": orbit, "url": rx.url})).await;
    let id = hook["id"].as_i64().unwrap();
    write(&app, &owner, orbit, 0).await;
    rx.wait_for(WAIT, |g| !g.is_empty())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rx.in_flight(), 1, "the delivery is not in flight");
    let started = std::time::Instant::now();
    let gone = app
        .delete(&format!("/api/v1/me/webhooks/{id}"), &owner.token)
        .await;
    assert_eq!(gone.status, 200, "{}", gone.text);
    assert!(
        started.elapsed() < Duration::from_millis(1000),
        "the delete waited for the delivery"
    );
    // The delivery in flight completes; nothing more is sent, nothing recorded.
    let deadline = std::time::Instant::now() + WAIT;
    while rx.in_flight() > 0 {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for n in 1..4 {
        write(&app, &owner, orbit, n).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(rx.count(), 1, "{:?}", rx.got());
    app.get(&format!("/api/v1/me/webhooks/{id}"), Some(&owner.token))
        .await
        .assert_error(404, "not_found");
    let mut conn = app.db.conn();
    assert_eq!(sql_i64(&mut conn, "SELECT count(*) AS n FROM webhooks"), 0);
    assert_eq!(
        sql_i64(&mut conn, "SELECT count(*) AS n FROM webhook_deliveries"),
        0
    );
}

/// Changes in an orbit without a subscription wake no claim pass (only the sweep,
/// once a second here, claims); changes in a subscribed orbit do, at once, on the
/// instance where the subscription was made.
#[tokio::test]
async fn only_changes_in_an_orbit_with_a_subscription_wake_a_claim_pass() {
    // A retry base of 5 s makes the sweep its longest: once a second.
    let app = app_with(|c| c.webhook_retry_base_ms = 5000).await;
    let rx = Receiver::start().expect("start the webhook receiver");
    let owner = app.agent("owner").await;
    let quiet = app.orbit(&owner, "unwatched").await;
    let hooked = app.orbit(&owner, "watched").await;
    let passes = || app.metrics(["orbit_webhook_claim_passes_total"]);
    let twenty_writes = |orbit: i64| {
        let (app, owner) = (&app, &owner);
        async move {
            let mut last = 0;
            for n in 0..20 {
                last = write(app, owner, orbit, n).await;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            last
        }
    };

    let [before] = passes().await;
    let started = std::time::Instant::now();
    twenty_writes(quiet).await;
    let [after] = passes().await;
    let sweeps = started.elapsed().as_secs() + 2;
    assert!(
        after - before <= sweeps,
        "20 changes in an orbit without subscriptions ran {} claim passes in {:?}",
        after - before,
        started.elapsed()
    );

    let hook = subscribe(&app, &owner, json!({"orbit": "watched", "url": rx.url})).await;
    let id = hook["id"].as_i64().unwrap();
    let [before] = passes().await;
    let started = std::time::Instant::now();
    let last = twenty_writes(hooked).await;
    let [after] = passes().await;
    assert!(
        after - before > started.elapsed().as_secs() + 2,
        "20 changes in a subscribed orbit ran only {} claim passes in {:?}",
        after - before,
        started.elapsed()
    );
    wait_webhook(&app, &owner, id, |w| w["delivered_through"] == last).await;
    let got = rx
        .wait_for(WAIT, |g| g.len() >= 20)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(got.len(), 20, "{got:?}");
}

/// `webhook_renew`, which the engine asks before an attempt that might not end
/// inside its claim: it extends the claim only while no other claim was made since
/// (run out or not: with no new `claim_seq` nobody else can be sending), and not
/// for a subscription that is no longer ACTIVE.
#[tokio::test]
async fn a_claim_is_renewed_only_while_no_other_claim_was_made() {
    use diesel::RunQueryDsl;
    use orbit_commons::store::webhooks::renew;
    let app = app().await;
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "renewed").await;
    // Nothing to deliver (it starts at the orbit's revision): the engine leaves it be.
    let id = subscribe(
        &app,
        &owner,
        json!({"orbit": orbit, "url": "http://127.0.0.1:9/hook"}),
    )
    .await["id"]
        .as_i64()
        .unwrap();
    let mut conn = app.db.conn();
    let claim = |who: &str, until: &str| {
        diesel::sql_query(format!(
            "UPDATE webhooks SET claimed_by = '{who}', claim_seq = claim_seq + 1, \
             claim_until = {until} WHERE id = {id}"
        ))
        .execute(&mut app.db.conn())
        .unwrap();
        crate::harness::sql_i64(
            &mut app.db.conn(),
            &format!("SELECT claim_seq AS n FROM webhooks WHERE id = {id}"),
        )
    };
    let seconds_left = |conn: &mut diesel::PgConnection| {
        crate::harness::sql_i64(
            conn,
            &format!(
                "SELECT extract(epoch FROM claim_until - now())::bigint AS n \
                 FROM webhooks WHERE id = {id}"
            ),
        )
    };
    let a = claim("a", "now() + interval '1 hour'");
    assert!(renew(&mut conn, id, "a", a, 60_000).unwrap());
    let left = seconds_left(&mut conn);
    assert!((55..=60).contains(&left), "{left} s left");
    // Another claim since: the first holder may not send.
    let b = claim("b", "now() + interval '1 hour'");
    assert!(!renew(&mut conn, id, "a", a, 60_000).unwrap());
    assert!(renew(&mut conn, id, "b", b, 60_000).unwrap());
    // Run out, but nobody claimed since: still b's.
    claim("b", "now() - interval '1 second'");
    let b = b + 1;
    assert!(renew(&mut conn, id, "b", b, 60_000).unwrap());
    // Not ACTIVE any more: not renewed.
    diesel::sql_query(format!(
        "UPDATE webhooks SET status = 'DISABLED', disabled_reason = 'test' WHERE id = {id}"
    ))
    .execute(&mut conn)
    .unwrap();
    assert!(!renew(&mut conn, id, "b", b, 60_000).unwrap());
}

/// A delivery's record asked again (its first answer lost, `deliver::persisting`)
/// is DELIVERED again and logs nothing twice: one log row per attempt made.
#[tokio::test]
async fn a_delivery_recorded_twice_is_logged_once() {
    use diesel::RunQueryDsl;
    use orbit_commons::store::webhooks::{record, Attempt, Policy};
    let app = app().await;
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "recorded-twice").await;
    // Nothing to deliver (it starts at the orbit's revision): the engine leaves it be.
    let hook = subscribe(
        &app,
        &owner,
        json!({"orbit": orbit, "url": "http://127.0.0.1:9/hook"}),
    )
    .await;
    let id = hook["id"].as_i64().unwrap();
    let mut conn = app.db.conn();
    diesel::sql_query(format!(
        "UPDATE webhooks SET claimed_by = 'a', claim_seq = claim_seq + 1, \
         claim_until = now() + interval '1 hour' WHERE id = {id}"
    ))
    .execute(&mut conn)
    .unwrap();
    let seq = sql_i64(
        &mut conn,
        &format!("SELECT claim_seq AS n FROM webhooks WHERE id = {id}"),
    );
    let through = sql_i64(
        &mut conn,
        &format!("SELECT delivered_through AS n FROM webhooks WHERE id = {id}"),
    );
    let attempt = Attempt {
        revision: through + 1,
        ok: Some(true),
        status: Some(200),
        error: None,
        duration_ms: 5,
    };
    let policy = Policy {
        retry_base_ms: 50,
        max_attempts: 5,
        claim_ms: 60_000,
    };
    for _ in 0..2 {
        let outcome = record(&mut conn, (id, "a", seq), &attempt, policy).unwrap();
        assert_eq!(outcome, "DELIVERED");
    }
    let logged = sql_i64(
        &mut conn,
        &format!(
            "SELECT count(*) AS n FROM webhook_deliveries WHERE webhook_id = {id} \
             AND revision = {}",
            through + 1
        ),
    );
    assert_eq!(logged, 1, "the attempt logged {logged} times");
    assert_eq!(deliveries(&app, &owner, id).await.len(), 1);
}

/// A database backend that stops answering on a connection the engine took from
/// the pool (a probe's `SIGSTOP`: no error, no closed connection) costs the engine
/// that connection and `db::deadline`, not its loop: the next claim pass takes
/// another, and deliveries go on. Until 2026-12-07 the engine's wait had no end and
/// that instance delivered nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_backend_that_stopped_answering_does_not_stop_deliveries() {
    let (_pg, url) = crate::reliability::fleet::migrated_cluster("oc-hookfrozen");
    let mut config = crate::harness::test_config();
    config.webhook_allow_private = true;
    config.webhook_retry_base_ms = 50;
    // `db::deadline` is 4 s.
    config.db_timeout_ms = 1000;
    let app = TestApp::spawn_on(crate::harness::TestDb::at(&url), config);
    let rx = Receiver::start().expect("start the webhook receiver");
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "frozen-pool").await;
    subscribe(&app, &owner, json!({"orbit": "frozen-pool", "url": rx.url})).await;
    let first = write(&app, &owner, orbit, 0).await;
    rx.wait_for(WAIT, |g| g.len() == 1)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    // Every pooled connection's backend stops; the engine's next pass (a sweep
    // comes every 50 ms) waits on one of them.
    let mut conn = app.db.conn();
    let _frozen = crate::harness::Frozen::stop(crate::harness::backends(&mut conn, None, 1));
    tokio::time::sleep(Duration::from_millis(500)).await;

    // A write, sent again under its key while it meets a stopped backend (503):
    // each such request holds one of them, and the pool opens new connections.
    let started = std::time::Instant::now();
    let second = loop {
        let r = app
            .post_with_key(
                &format!("/api/v1/orbits/{orbit}/problems"),
                &owner.token,
                "after-the-freeze",
                json!({"title": "after the freeze", "statement": ""}),
            )
            .await;
        if r.status == 201 {
            break r.json["data"]["orbit_revision"].as_i64().expect("revision");
        }
        assert_eq!(r.status, 503, "{}", r.text);
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no write got through"
        );
    };
    assert_eq!(second, first + 1);
    let got = rx
        .wait_for(Duration::from_secs(60), |g| g.len() == 2)
        .await
        .unwrap_or_else(|e| panic!("the engine stayed stuck: {e}"));
    assert_eq!(got[1].revision(), second);
}
