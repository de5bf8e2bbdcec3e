//! Shared helpers for task, lease, checkpoint and handoff tests.

use serde_json::{json, Value};

use crate::harness::{Agent, Resp, TestApp};

/// An orbit with an owner and `n` more members who joined.
pub struct Crew {
    pub orbit: i64,
    pub owner: Agent,
    pub members: Vec<Agent>,
}

pub async fn crew(app: &TestApp, slug: &str, n: usize) -> Crew {
    let owner = app.agent(&format!("{slug}-owner")).await;
    let orbit = app.orbit(&owner, slug).await;
    let mut members = Vec::new();
    for i in 0..n {
        let a = app.agent(&format!("{slug}-m{i}")).await;
        app.join(&a, orbit).await;
        members.push(a);
    }
    Crew {
        orbit,
        owner,
        members,
    }
}

pub async fn task(app: &TestApp, who: &Agent, orbit: i64, title: &str) -> i64 {
    let path = format!("/api/v1/orbits/{orbit}/tasks");
    app.post_keyed(&path, &who.token, json!({"title": title}))
        .await
        .created_id()
}

pub async fn acquire(app: &TestApp, who: &Agent, task: i64, body: Value) -> Resp {
    app.post_keyed(&format!("/api/v1/tasks/{task}/leases"), &who.token, body)
        .await
}

/// Acquires and returns (lease id, version).
pub async fn lease(app: &TestApp, who: &Agent, task: i64, seconds: i64) -> (i64, i64) {
    let r = acquire(app, who, task, json!({"duration_seconds": seconds})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    (
        r.json["data"]["id"].as_i64().expect("lease id"),
        r.json["data"]["lease_version"].as_i64().expect("version"),
    )
}

pub async fn checkpoint(app: &TestApp, who: &Agent, task: i64, version: i64, state: Value) -> Resp {
    app.post_keyed(
        &format!("/api/v1/tasks/{task}/checkpoints"),
        &who.token,
        json!({"lease_version": version, "summary": "progress", "state": state}),
    )
    .await
}

pub async fn orbit_revision(app: &TestApp, orbit: i64) -> i64 {
    let r = app.get(&format!("/api/v1/orbits/{orbit}"), None).await;
    r.json["data"]["revision"].as_i64().expect("revision")
}

/// Lets a lease of `seconds` run out (test builds allow 1-second leases).
pub async fn outlive(seconds: u64) {
    tokio::time::sleep(std::time::Duration::from_millis(seconds * 1000 + 300)).await;
}

/// The fence check of `who` on `task` at `version` (sent without a key).
pub async fn fence(app: &TestApp, who: &Agent, task: i64, version: i64) -> Resp {
    app.post(
        &format!("/api/v1/tasks/{task}/fence"),
        &who.token,
        json!({"lease_version": version}),
    )
    .await
}

/// `who` releases `lease` at `version`.
pub async fn release(app: &TestApp, who: &Agent, lease: i64, version: i64) -> Resp {
    app.post_keyed(
        &format!("/api/v1/leases/{lease}/release"),
        &who.token,
        json!({"lease_version": version}),
    )
    .await
}

/// The orbit's change feed (up to 500 entries), oldest first.
pub async fn changes(app: &TestApp, orbit: i64) -> Vec<Value> {
    let feed = app
        .get(&format!("/api/v1/orbits/{orbit}/changes?limit=500"), None)
        .await;
    match feed.json["data"].as_array() {
        Some(entries) => entries.clone(),
        None => panic!("no change feed: {}", feed.text),
    }
}

/// The newest entry of the orbit's change feed.
pub async fn last_change(app: &TestApp, orbit: i64) -> Value {
    changes(app, orbit).await.pop().expect("a change")
}
