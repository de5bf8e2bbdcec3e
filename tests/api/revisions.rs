//! The orbit revision (contract section 4): dense, gap-free and strictly ordered per
//! orbit, however many writers meet.

use diesel::PgConnection;
use futures::future::join_all;
use futures::stream::{self, StreamExt};
use reqwest::Method;
use serde_json::json;

use crate::harness::{sql_i64, Agent, TestApp};

/// Registers `n` agents and verifies each token once, so the concurrent part of a
/// test measures the writes and not argon2.
async fn agents(app: &TestApp, n: usize) -> Vec<Agent> {
    stream::iter(0..n)
        .map(|i| async move {
            let a = app.agent(&format!("w{i}")).await;
            assert_eq!(app.get("/api/v1/me", Some(&a.token)).await.status, 200);
            a
        })
        .buffered(4)
        .collect()
        .await
}

/// Reads the whole feed with small pages and returns the revisions in order.
async fn feed_revisions(app: &TestApp, orbit: i64, page: usize) -> Vec<i64> {
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let r = app
            .get(
                &format!("/api/v1/orbits/{orbit}/changes?after={after}&limit={page}"),
                None,
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        let data = r.json["data"].as_array().unwrap();
        assert!(data.len() <= page);
        let next = r.json["meta"]["next_after"].as_i64().expect("never null");
        if data.is_empty() {
            assert_eq!(next, after);
            return out;
        }
        out.extend(data.iter().map(|c| c["revision"].as_i64().unwrap()));
        assert_eq!(Some(next), out.last().copied());
        after = next;
    }
}

/// Asserts the `changes` table and the orbit's counter hold exactly 1..=n.
fn assert_dense_in_database(conn: &mut PgConnection, orbit: i64, n: i64) {
    let q = |what: &str| format!("SELECT {what} AS n FROM changes WHERE orbit_id = {orbit}");
    assert_eq!(sql_i64(conn, &q("count(*)")), n);
    assert_eq!(sql_i64(conn, &q("count(DISTINCT revision)")), n);
    assert_eq!(sql_i64(conn, &q("min(revision)")), 1);
    assert_eq!(sql_i64(conn, &q("max(revision)")), n);
    assert_eq!(
        sql_i64(
            conn,
            &format!("SELECT revision AS n FROM orbits WHERE id = {orbit}")
        ),
        n
    );
}

#[tokio::test]
async fn fifty_concurrent_joins_yield_revisions_one_to_n_without_gap_or_repeat() {
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "busy").await;
    let joiners = agents(&app, 50).await;

    let path = format!("/api/v1/orbits/{orbit}/join");
    let responses = join_all(joiners.iter().map(|a| app.post_empty(&path, &a.token))).await;
    let mut revisions: Vec<i64> = responses
        .iter()
        .map(|r| {
            assert_eq!(r.status, 201, "{}", r.text);
            r.json["data"]["orbit_revision"].as_i64().unwrap()
        })
        .collect();
    revisions.sort_unstable();
    assert_eq!(revisions, (2..=51).collect::<Vec<_>>());

    assert_eq!(
        feed_revisions(&app, orbit, 7).await,
        (1..=51).collect::<Vec<_>>()
    );
    assert_dense_in_database(&mut app.db.conn(), orbit, 51);

    // The feed names each joiner exactly once, at the revision its response named.
    let r = app
        .get(&format!("/api/v1/orbits/{orbit}/changes?limit=500"), None)
        .await;
    let changes = r.json["data"].as_array().unwrap();
    for (a, resp) in joiners.iter().zip(&responses) {
        let rev = resp.json["data"]["orbit_revision"].as_i64().unwrap();
        let ch = &changes[(rev - 1) as usize];
        assert_eq!(ch["revision"], rev);
        assert_eq!(ch["kind"], "member.added");
        assert_eq!(ch["contributor"]["id"], a.id);
    }
}

#[tokio::test]
async fn fifty_concurrent_mixed_membership_writes_stay_dense() {
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "mixed").await;
    let people = agents(&app, 40).await;
    // Twenty are members already (revisions 2..=21).
    for a in &people[..20] {
        app.join(a, orbit).await;
    }
    assert_eq!(app.get("/api/v1/me", Some(&owner.token)).await.status, 200);

    // At once: the owner promotes ten members and adds ten newcomers, ten members
    // leave, ten newcomers join, and a few writes that must fail.
    let mut requests = Vec::new();
    for a in &people[..10] {
        requests.push((
            Method::PUT,
            format!("/api/v1/orbits/{orbit}/members/{}", a.id),
            owner.token.clone(),
            Some(json!({"role": "MAINTAINER"})),
            200,
        ));
    }
    for a in &people[10..20] {
        requests.push((
            Method::DELETE,
            format!("/api/v1/orbits/{orbit}/members/{}", a.id),
            a.token.clone(),
            None,
            200,
        ));
    }
    for a in &people[20..30] {
        requests.push((
            Method::PUT,
            format!("/api/v1/orbits/{orbit}/members/{}", a.id),
            owner.token.clone(),
            Some(json!({"role": "CONTRIBUTOR"})),
            201,
        ));
    }
    for a in &people[30..40] {
        requests.push((
            Method::POST,
            format!("/api/v1/orbits/{orbit}/join"),
            a.token.clone(),
            None,
            201,
        ));
    }
    for a in &people[30..35] {
        // Not members yet when sent (or members by the time they run): never 2xx.
        requests.push((
            Method::PUT,
            format!("/api/v1/orbits/{orbit}/members/{}", owner.id),
            a.token.clone(),
            Some(json!({"role": "CONTRIBUTOR"})),
            403,
        ));
    }
    let responses = join_all(requests.iter().map(|(m, path, token, body, _)| {
        app.send(m.clone(), path, Some(token), None, body.clone())
    }))
    .await;
    let mut revisions = Vec::new();
    for ((m, path, _, _, expected), r) in requests.iter().zip(&responses) {
        assert_eq!(r.status.as_u16(), *expected, "{m} {path}: {}", r.text);
        if r.status.is_success() {
            revisions.push(r.json["data"]["orbit_revision"].as_i64().unwrap());
        }
    }
    revisions.sort_unstable();
    assert_eq!(revisions, (22..=61).collect::<Vec<_>>());
    assert_eq!(
        feed_revisions(&app, orbit, 9).await,
        (1..=61).collect::<Vec<_>>()
    );
    assert_dense_in_database(&mut app.db.conn(), orbit, 61);
}

#[tokio::test]
async fn revisions_are_counted_per_orbit() {
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    let people = agents(&app, 10).await;
    let first = app.orbit(&owner, "first").await;
    let second = app.orbit(&owner, "second").await;
    let paths = [first, second].map(|o| format!("/api/v1/orbits/{o}/join"));
    let responses = join_all(
        people
            .iter()
            .enumerate()
            .map(|(i, a)| app.post_empty(&paths[i % 2], &a.token)),
    )
    .await;
    assert!(responses.iter().all(|r| r.status == 201));
    let mut conn = app.db.conn();
    assert_dense_in_database(&mut conn, first, 6);
    assert_dense_in_database(&mut conn, second, 6);
    assert_eq!(
        feed_revisions(&app, first, 4).await,
        (1..=6).collect::<Vec<_>>()
    );
}
