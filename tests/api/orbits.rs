//! Orbits (contract section 4): create, read by id or slug, list, join.

use reqwest::Method;
use serde_json::{json, Value};

use crate::harness::{Agent, Resp, TestApp};

/// RFC 3339 UTC with milliseconds, e.g. `2026-07-30T10:58:13.829Z`.
#[track_caller]
pub fn assert_timestamp(v: &Value) {
    let s = v.as_str().unwrap_or_else(|| panic!("not a timestamp: {v}"));
    let b = s.as_bytes();
    let ok = b.len() == 24
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'.',
            23 => *c == b'Z',
            _ => c.is_ascii_digit(),
        });
    assert!(ok, "not RFC 3339 UTC with milliseconds: {s}");
}

async fn create(app: &TestApp, owner: &Agent, body: Value) -> Resp {
    app.post("/api/v1/orbits", &owner.token, body).await
}

async fn join(app: &TestApp, agent: &Agent, orbit: &str) -> Resp {
    app.post_empty(&format!("/api/v1/orbits/{orbit}/join"), &agent.token)
        .await
}

#[tokio::test]
async fn creating_an_orbit_makes_the_creator_owner_at_revision_one() {
    let app = TestApp::spawn().await;
    let a = app.agent("founder").await;
    let r = create(
        &app,
        &a,
        json!({"slug": "graph-theory", "name": "Graph theory", "description": "Edges."}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let d = &r.json["data"];
    assert!(d["id"].as_i64().unwrap() > 0);
    assert_eq!(d["slug"], "graph-theory");
    assert_eq!(d["name"], "Graph theory");
    assert_eq!(d["description"], "Edges.");
    assert_eq!(d["join_policy"], "OPEN");
    assert_eq!(d["revision"], 1);
    assert_eq!(d["orbit_revision"], 1);
    assert_eq!(
        d["created_by"],
        json!({"id": a.id, "type": "AGENT", "name": "founder", "model_claim": "test-model"})
    );
    assert_timestamp(&d["created_at"]);
    assert!(r.header("idempotency-replayed").is_none());

    let members = app.get("/api/v1/orbits/graph-theory/members", None).await;
    assert_eq!(members.status, 200, "{}", members.text);
    let list = members.json["data"].as_array().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["contributor"]["id"], a.id);
    assert_eq!(list[0]["role"], "OWNER");

    let me = app.get("/api/v1/me", Some(&a.token)).await;
    assert_eq!(
        me.json["data"]["memberships"][0]["orbit_slug"],
        "graph-theory"
    );
    assert_eq!(me.json["data"]["memberships"][0]["role"], "OWNER");

    // Defaults: empty description, INVITE when asked.
    let r = create(
        &app,
        &a,
        json!({"slug": "closed", "name": "Closed", "join_policy": "INVITE"}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json["data"]["description"], "");
    assert_eq!(r.json["data"]["join_policy"], "INVITE");
}

#[tokio::test]
async fn an_orbit_reads_the_same_by_id_and_by_slug() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    let id = app.orbit(&a, "by-either").await;
    let by_id = app.get(&format!("/api/v1/orbits/{id}"), None).await;
    let by_slug = app.get("/api/v1/orbits/by-either", None).await;
    assert_eq!(by_id.status, 200, "{}", by_id.text);
    assert_eq!(by_slug.status, 200, "{}", by_slug.text);
    assert_eq!(by_id.json, by_slug.json);
    assert_eq!(by_id.json["data"]["id"], id);
    assert_eq!(by_id.json["data"]["revision"], 1);
    // A read is not a write: no orbit_revision.
    assert!(by_id.json["data"].get("orbit_revision").is_none());

    app.get("/api/v1/orbits/no-such-orbit", None)
        .await
        .assert_error(404, "not_found");
    app.get(&format!("/api/v1/orbits/{}", id + 100), None)
        .await
        .assert_error(404, "not_found");
    // One spelling of an id: a sign or a leading zero names no orbit.
    for other in [format!("%2B{id}"), format!("0{id}")] {
        app.get(&format!("/api/v1/orbits/{other}"), None)
            .await
            .assert_error(404, "not_found");
        app.get(&format!("/api/v1/orbits/{other}/tasks"), None)
            .await
            .assert_error(404, "not_found");
    }
}

#[tokio::test]
async fn a_taken_slug_is_409_and_changes_nothing() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    let b = app.agent("b").await;
    app.orbit(&a, "unique").await;
    for who in [&a, &b] {
        let r = create(&app, who, json!({"slug": "unique", "name": "again"})).await;
        r.assert_error(409, "slug_taken");
    }
    let mut conn = app.db.conn();
    assert_eq!(
        crate::harness::sql_i64(&mut conn, "SELECT count(*) AS n FROM orbits"),
        1
    );
    assert_eq!(
        crate::harness::sql_i64(&mut conn, "SELECT count(*) AS n FROM changes"),
        1
    );
    let me = app.get("/api/v1/me", Some(&b.token)).await;
    assert_eq!(me.json["data"]["memberships"], json!([]));
}

#[tokio::test]
async fn a_bad_slug_or_name_is_422_with_the_field_named() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    let long = format!("a{}", "b".repeat(63));
    for slug in [
        "",
        "a",
        "Upper",
        "1digit",
        "-dash",
        "under_score",
        "space d",
        "ünï",
        long.as_str(),
    ] {
        let r = create(&app, &a, json!({"slug": slug, "name": "n"})).await;
        r.assert_error(422, "validation_failed");
        assert!(r.json["errors"]["slug"].is_array(), "{slug}: {}", r.text);
    }
    // The edges that are allowed.
    let max = format!("a{}", "b".repeat(62));
    for slug in ["ab", "a-", "a1-z", max.as_str()] {
        let r = create(&app, &a, json!({"slug": slug, "name": "n"})).await;
        assert_eq!(r.status, 201, "{slug}: {}", r.text);
    }
    let r = create(&app, &a, json!({"slug": "no-name", "name": ""})).await;
    r.assert_error(422, "validation_failed");
    assert!(r.json["errors"]["name"].is_array(), "{}", r.text);
    let r = create(
        &app,
        &a,
        json!({"slug": "bad-policy", "name": "n", "join_policy": "CLOSED"}),
    )
    .await;
    r.assert_envelope(422);
    assert!(r.json["errors"]["join_policy"].is_array(), "{}", r.text);
}

#[tokio::test]
async fn orbit_list_pages_with_limit_and_after() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(app.orbit(&a, &format!("page-{i}")).await);
    }
    let mut seen = Vec::new();
    let mut after = 0;
    let mut pages = 0;
    loop {
        let r = app
            .get(&format!("/api/v1/orbits?limit=2&after={after}"), None)
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        pages += 1;
        let data = r.json["data"].as_array().unwrap();
        assert!(data.len() <= 2);
        seen.extend(data.iter().map(|o| o["id"].as_i64().unwrap()));
        match r.json["meta"]["next_after"].as_i64() {
            Some(n) => {
                assert_eq!(Some(n), seen.last().copied());
                after = n;
            }
            None => {
                assert_eq!(r.json["meta"]["next_after"], Value::Null);
                break;
            }
        }
    }
    assert_eq!(seen, ids);
    assert_eq!(pages, 3);

    // A page that ends exactly at the last item says so: next_after null.
    let r = app.get("/api/v1/orbits?limit=5", None).await;
    assert_eq!(r.json["data"].as_array().unwrap().len(), 5);
    assert_eq!(r.json["meta"]["next_after"], Value::Null);
    // The default page holds them all.
    let r = app.get("/api/v1/orbits", None).await;
    assert_eq!(r.json["data"].as_array().unwrap().len(), 5);
    // Past the end: empty, null.
    let r = app
        .get(&format!("/api/v1/orbits?after={}", ids[4]), None)
        .await;
    assert_eq!(r.json, json!({"data": [], "meta": {"next_after": null}}));

    for bad in ["limit=0", "limit=101", "limit=-1", "after=-1", "limit=abc"] {
        let r = app.get(&format!("/api/v1/orbits?{bad}"), None).await;
        r.assert_envelope(422);
    }
    let r = app.get("/api/v1/orbits?limit=100", None).await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn joining_an_open_orbit_adds_a_contributor() {
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    let b = app.agent("b").await;
    let orbit = app.orbit(&owner, "open-door").await;
    let r = join(&app, &b, "open-door").await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json["data"]["orbit_id"], orbit);
    assert_eq!(r.json["data"]["contributor"]["id"], b.id);
    assert_eq!(r.json["data"]["role"], "CONTRIBUTOR");
    assert_eq!(r.json["data"]["orbit_revision"], 2);
    assert_timestamp(&r.json["data"]["joined_at"]);

    join(&app, &b, "open-door")
        .await
        .assert_error(409, "already_member");
    join(&app, &owner, &orbit.to_string())
        .await
        .assert_error(409, "already_member");
    join(&app, &b, "no-such-orbit")
        .await
        .assert_error(404, "not_found");
    let anonymous = app
        .send(
            Method::POST,
            "/api/v1/orbits/open-door/join",
            None,
            None,
            None,
        )
        .await;
    anonymous.assert_error(401, "unauthorized");

    let o = app.get("/api/v1/orbits/open-door", None).await;
    assert_eq!(o.json["data"]["revision"], 2);
}

#[tokio::test]
async fn joining_an_invite_orbit_is_403() {
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    let b = app.agent("b").await;
    let r = create(
        &app,
        &owner,
        json!({"slug": "members-only", "name": "M", "join_policy": "INVITE"}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = join(&app, &b, "members-only").await;
    r.assert_envelope(403);
    let o = app.get("/api/v1/orbits/members-only", None).await;
    assert_eq!(o.json["data"]["revision"], 1);
    // The way in is an add by a MAINTAINER or OWNER.
    let added = app
        .put(
            &format!("/api/v1/orbits/members-only/members/{}", b.id),
            &owner.token,
            json!({"role": "CONTRIBUTOR"}),
        )
        .await;
    assert_eq!(added.status, 201, "{}", added.text);
    // Contract precedence puts 403 before the handler's 409s: joining an INVITE
    // orbit is refused as such even for a member.
    join(&app, &b, "members-only")
        .await
        .assert_error(403, "invite_only");
}

#[tokio::test]
async fn join_accepts_no_body_an_empty_body_and_an_empty_object_only() {
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    app.orbit(&owner, "bodies").await;
    let b = app.agent("b").await;
    let c = app.agent("c").await;
    let d = app.agent("d").await;
    let e = app.agent("e").await;
    let path = "/api/v1/orbits/bodies/join";
    let r = app.post_raw(path, Some(&b.token), &[], Vec::new()).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = app
        .post_raw(
            path,
            Some(&c.token),
            &[("content-type", "application/json")],
            Vec::new(),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = app.post(path, &d.token, json!({})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = app.post(path, &e.token, json!({"role": "OWNER"})).await;
    r.assert_error(422, "validation_failed");
    assert!(r.json["errors"]["role"].is_array(), "{}", r.text);
}
