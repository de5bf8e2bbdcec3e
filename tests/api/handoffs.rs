//! Handoffs (issue 5): the drafter → reviewer story and every way a handoff ends.

use futures::future::join_all;
use reqwest::Method;
use serde_json::{json, Value};

use crate::harness::{Agent, Resp, TestApp};
use crate::work::{
    acquire, changes, checkpoint, crew, fence, last_change, lease, outlive, release, task,
};

async fn offer(app: &TestApp, giver: &Agent, task: i64, body: Value) -> Resp {
    app.post_keyed(
        &format!("/api/v1/tasks/{task}/handoffs"),
        &giver.token,
        body,
    )
    .await
}

async fn accept(app: &TestApp, who: &Agent, handoff: i64, body: Option<Value>) -> Resp {
    let key = uuid::Uuid::new_v4().to_string();
    app.send(
        Method::POST,
        &format!("/api/v1/handoffs/{handoff}/accept"),
        Some(&who.token),
        Some(&key),
        body,
    )
    .await
}

/// A task leased by `giver` with one checkpoint: (task, lease id, version, checkpoint id).
async fn worked_task(app: &TestApp, giver: &Agent, orbit: i64) -> (i64, i64, i64, i64) {
    let t = task(app, giver, orbit, "plans/rollout.md").await;
    let (lease_id, v) = lease(app, giver, t, 900).await;
    let r = checkpoint(
        app,
        giver,
        t,
        v,
        json!({"version": 4, "file": "plans/rollout.md"}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    (t, lease_id, v, r.json["data"]["id"].as_i64().unwrap())
}

#[tokio::test]
async fn drafter_hands_the_plan_to_the_reviewer_and_cannot_write_it_again() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "rollout", 2).await;
    let (drafter, reviewer) = (&c.members[0], &c.members[1]);
    let (t, drafter_lease, v1, ckpt) = worked_task(&app, drafter, c.orbit).await;

    let r = offer(
        &app,
        drafter,
        t,
        json!({
            "lease_version": v1, "checkpoint_id": ckpt, "to_contributor_id": reviewer.id,
            "message": "Smoke passed, needs review of the canary percentages."
        }),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let handoff = r.json["data"]["id"].as_i64().unwrap();
    assert_eq!(r.json["data"]["status"], "PENDING");
    assert_eq!(r.json["data"]["to_contributor"]["id"], reviewer.id);
    assert!(r.json["data"]["orbit_revision"].is_i64());

    // The drafter is fenced: its next checkpoint, renewal, completion and fence check
    // are refused, naming the handoff; nothing is written.
    let r = checkpoint(&app, drafter, t, v1, json!({"version": 5})).await;
    r.assert_error(409, "handed_off");
    assert_eq!(r.json["details"]["handoff_id"], handoff);
    assert_eq!(r.json["details"]["to_contributor_id"], reviewer.id);
    app.post_keyed(
        &format!("/api/v1/leases/{drafter_lease}/renew"),
        &drafter.token,
        json!({"lease_version": v1}),
    )
    .await
    .assert_error(409, "handed_off");
    app.post_keyed(
        &format!("/api/v1/tasks/{t}/complete"),
        &drafter.token,
        json!({"lease_version": v1}),
    )
    .await
    .assert_error(409, "handed_off");
    fence(&app, drafter, t, v1)
        .await
        .assert_error(409, "handed_off");

    // The reviewer finds it in its inbox and accepts with a 600 s lease.
    let r = app
        .get("/api/v1/handoffs?box=inbox", Some(&reviewer.token))
        .await;
    assert_eq!(r.json["data"][0]["id"], handoff, "{}", r.text);
    let r = accept(
        &app,
        reviewer,
        handoff,
        Some(json!({"duration_seconds": 600})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let d = &r.json["data"];
    assert_eq!(d["task_id"], t);
    assert!(d["orbit_revision"].is_i64());
    assert_eq!(d["handoff"]["status"], "ACCEPTED");
    assert_eq!(d["handoff"]["accepted_by"]["id"], reviewer.id);
    assert!(d["handoff"]["accepted_at"].is_string());
    assert_eq!(d["lease"]["lease_version"], 2);
    assert_eq!(d["lease"]["contributor"]["id"], reviewer.id);
    assert_eq!(d["lease"]["is_active"], true);
    assert!(d["lease"]["renewed_at"].is_null() && d["lease"]["released_at"].is_null());

    // The drafter's lease ended HANDED_OFF; its old version is now stale.
    let r = app
        .get(&format!("/api/v1/leases/{drafter_lease}"), None)
        .await;
    assert_eq!(r.json["data"]["end_reason"], "HANDED_OFF");
    checkpoint(&app, drafter, t, v1, json!({"version": 5}))
        .await
        .assert_error(409, "stale_lease_version");

    // The reviewer resumes from the checkpoint and writes under v2.
    let r = app.get(&format!("/api/v1/checkpoints/{ckpt}"), None).await;
    assert_eq!(r.json["data"]["state"]["version"], 4);
    let r = checkpoint(
        &app,
        reviewer,
        t,
        2,
        json!({"version": 5, "reviewed": true}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json["data"]["author"]["id"], reviewer.id);

    let accepted = changes(&app, c.orbit)
        .await
        .iter()
        .find(|c| c["kind"] == "handoff.accepted")
        .unwrap()
        .clone();
    let summary = accepted["summary"].as_str().unwrap();
    assert!(
        summary.contains("v1") && summary.contains("HANDED_OFF") && summary.contains("v2"),
        "{summary}"
    );
}

#[tokio::test]
async fn open_handoff_is_accepted_by_any_other_member_and_a_target_is_enforced() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "open", 3).await;
    let (giver, named, third) = (&c.members[0], &c.members[1], &c.members[2]);
    let (t, _, v, ckpt) = worked_task(&app, giver, c.orbit).await;

    // Targeted: a non-target, the giver and a non-member are refused.
    let r = offer(&app, giver, t, json!({"lease_version": v, "checkpoint_id": ckpt, "to_contributor_id": named.id, "message": "yours"})).await;
    let targeted = r.json["data"]["id"].as_i64().unwrap();
    accept(&app, third, targeted, None)
        .await
        .assert_error(403, "not_recipient");
    accept(&app, giver, targeted, None)
        .await
        .assert_error(403, "own_handoff");
    // Declining: the giver is told to withdraw, another member to leave it.
    let decline = async |who: &Agent, id: i64| {
        let path = format!("/api/v1/handoffs/{id}/decline");
        app.post_keyed(&path, &who.token, json!({})).await
    };
    let r = decline(giver, targeted).await;
    r.assert_error(403, "own_handoff");
    assert!(
        r.json["message"].as_str().unwrap().contains("withdraw"),
        "{}",
        r.text
    );
    decline(third, targeted)
        .await
        .assert_error(403, "not_recipient");
    let outsider = app.agent("outsider").await;
    accept(&app, &outsider, targeted, None)
        .await
        .assert_error(403, "not_a_member");

    // A new open offer supersedes the targeted one.
    let r = offer(
        &app,
        giver,
        t,
        json!({"lease_version": v, "checkpoint_id": ckpt, "message": "anyone"}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let open = r.json["data"]["id"].as_i64().unwrap();
    assert!(r.json["data"]["to_contributor"].is_null());
    let r = app.get(&format!("/api/v1/handoffs/{targeted}"), None).await;
    assert_eq!(r.json["data"]["status"], "SUPERSEDED");
    accept(&app, named, targeted, None)
        .await
        .assert_error(409, "handoff_not_pending");

    // Open handoffs cannot be declined (the giver is told to withdraw); a third
    // member accepts it.
    decline(third, open)
        .await
        .assert_error(403, "not_recipient");
    decline(giver, open).await.assert_error(403, "own_handoff");
    let r = accept(&app, third, open, None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["data"]["lease"]["lease_version"], v + 1);
    assert_eq!(r.json["data"]["lease"]["contributor"]["id"], third.id);
}

#[tokio::test]
async fn two_members_accepting_at_once_yield_exactly_one_lease() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "double", 3).await;
    let giver = &c.members[0];
    let (t, _, v, ckpt) = worked_task(&app, giver, c.orbit).await;
    let r = offer(
        &app,
        giver,
        t,
        json!({"lease_version": v, "checkpoint_id": ckpt, "message": "open"}),
    )
    .await;
    let h = r.json["data"]["id"].as_i64().unwrap();
    let results = join_all([&c.members[1], &c.members[2]].map(|m| accept(&app, m, h, None))).await;
    assert_eq!(results.iter().filter(|r| r.status == 200).count(), 1);
    let loser = results.iter().find(|r| r.status != 200).unwrap();
    loser.assert_error(409, "handoff_not_pending");
    assert_eq!(loser.json["details"]["current_status"], "ACCEPTED");
    let r = app.get(&format!("/api/v1/tasks/{t}/leases"), None).await;
    assert_eq!(r.json["data"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn accept_replays_with_the_same_key_and_refuses_another_body() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "acceptkey", 2).await;
    let (giver, taker) = (&c.members[0], &c.members[1]);
    let (t, _, v, ckpt) = worked_task(&app, giver, c.orbit).await;
    let r = offer(&app, giver, t, json!({"lease_version": v, "checkpoint_id": ckpt, "to_contributor_id": taker.id, "message": "m"})).await;
    let h = r.json["data"]["id"].as_i64().unwrap();
    let path = format!("/api/v1/handoffs/{h}/accept");
    let accept_once = || {
        app.send(
            Method::POST,
            &path,
            Some(&taker.token),
            Some("accept-1"),
            None,
        )
    };
    let first = accept_once().await;
    assert_eq!(first.status, 200, "{}", first.text);
    let again = accept_once().await;
    assert_eq!(again.status, 200);
    assert_eq!(again.bytes, first.bytes);
    assert_eq!(again.header("idempotency-replayed"), Some("true"));
    // An empty body and {} are the same request; a different body is not.
    let same = app
        .post_with_key(&path, &taker.token, "accept-1", json!({}))
        .await;
    assert_eq!(same.status, 200);
    app.post_with_key(
        &path,
        &taker.token,
        "accept-1",
        json!({"duration_seconds": 900}),
    )
    .await
    .assert_error(409, "idempotency_key_reused");
    // A fresh key is a new intent: the handoff has left PENDING.
    accept(&app, taker, h, None)
        .await
        .assert_error(409, "handoff_not_pending");
    // Unknown fields and out-of-range durations are 422 before anything else.
    accept(
        &app,
        taker,
        h,
        Some(json!({"duration_seconds": 900, "note": "x"})),
    )
    .await
    .assert_error(422, "validation_failed");
    accept(&app, taker, h, Some(json!({"duration_seconds": 7200})))
        .await
        .assert_error(422, "validation_failed");
    // The fixed contract types it as an integer: null is refused, not the default.
    let r = accept(&app, taker, h, Some(json!({"duration_seconds": null}))).await;
    r.assert_error(422, "validation_failed");
    assert!(
        r.json["errors"]["duration_seconds"].is_array(),
        "{}",
        r.text
    );
    let r = app.post_empty(&path, &taker.token).await;
    r.assert_error(422, "idempotency_key_required");
    let r = app.send(Method::POST, &path, None, Some("k"), None).await;
    r.assert_error(401, "unauthorized");
    accept(&app, taker, 99_999, None)
        .await
        .assert_error(404, "not_found");
}

#[tokio::test]
async fn expired_handoff_cannot_be_accepted_and_unfences_the_giver() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "expired", 2).await;
    let (giver, taker) = (&c.members[0], &c.members[1]);
    let (t, _, v, ckpt) = worked_task(&app, giver, c.orbit).await;
    let r = offer(&app, giver, t, json!({"lease_version": v, "checkpoint_id": ckpt, "to_contributor_id": taker.id, "message": "m", "expires_in_seconds": 1})).await;
    let h = r.json["data"]["id"].as_i64().unwrap();
    outlive(1).await;
    let r = app.get(&format!("/api/v1/handoffs/{h}"), None).await;
    assert_eq!(r.json["data"]["status"], "EXPIRED");
    accept(&app, taker, h, None)
        .await
        .assert_error(409, "handoff_expired");
    // The fence ended with the expiry: the giver writes again.
    assert_eq!(
        checkpoint(&app, giver, t, v, json!({"after": "expiry"}))
            .await
            .status,
        201
    );
}

/// `who` sends `verb` (`withdraw`, `decline`) on `handoff`, with a new key and an
/// empty body.
async fn verb(app: &TestApp, who: &Agent, handoff: i64, verb: &str) -> Resp {
    app.post_keyed(
        &format!("/api/v1/handoffs/{handoff}/{verb}"),
        &who.token,
        json!({}),
    )
    .await
}

/// A giver whose handoff has left PENDING (declined, or run out) and who still
/// holds the task's lease is told so when it withdraws, with the lease: its one
/// reaction is to go on with it (`recover: continue`), not to choose other work
/// and leave a task its lease keeps from everyone else. So is a recipient that
/// took the task itself once the handoff was over.
#[tokio::test]
async fn a_giver_withdrawing_a_finished_handoff_learns_it_still_holds_the_task() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "giver-holds", 2).await;
    let (giver, taker) = (&c.members[0], &c.members[1]);
    let (t, lease_id, v, ckpt) = worked_task(&app, giver, c.orbit).await;
    let body = |seconds: i64| {
        json!({"lease_version": v, "checkpoint_id": ckpt, "to_contributor_id": taker.id,
               "message": "m", "expires_in_seconds": seconds})
    };
    let holds = |r: &Resp| {
        assert_eq!(r.json["details"]["lease_id"], lease_id, "{}", r.text);
        assert_eq!(r.json["details"]["lease_version"], v, "{}", r.text);
        let message = r.json["message"].as_str().unwrap();
        assert!(message.contains("you hold the task's lease"), "{}", r.text);
    };

    let declined = offer(&app, giver, t, body(3600)).await.created_id();
    let r = verb(&app, taker, declined, "decline").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = verb(&app, giver, declined, "withdraw").await;
    r.assert_error(409, "handoff_not_pending");
    assert_eq!(r.json["details"]["current_status"], "DECLINED");
    holds(&r);
    // The recipient is not the giver: the plain answer.
    let r = verb(&app, taker, declined, "decline").await;
    r.assert_error(409, "handoff_not_pending");
    assert!(r.json["details"].get("lease_id").is_none(), "{}", r.text);

    // Fenced by a newer offer of its own, the giver holds nothing to go on with.
    let first = offer(&app, giver, t, body(3600)).await.created_id();
    let second = offer(&app, giver, t, body(3600)).await.created_id();
    let r = verb(&app, giver, first, "withdraw").await;
    r.assert_error(409, "handoff_not_pending");
    assert_eq!(r.json["details"]["current_status"], "SUPERSEDED");
    assert!(r.json["details"].get("lease_id").is_none(), "{}", r.text);
    let r = verb(&app, giver, second, "withdraw").await;
    assert_eq!(r.status, 200, "{}", r.text);

    let expired = offer(&app, giver, t, body(1)).await.created_id();
    outlive(1).await;
    let r = verb(&app, giver, expired, "withdraw").await;
    r.assert_error(409, "handoff_expired");
    assert_eq!(r.json["details"]["current_status"], "EXPIRED");
    holds(&r);

    // Once the giver's lease has ended, there is nothing to go on with.
    let r = release(&app, giver, lease_id, v).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = verb(&app, giver, expired, "withdraw").await;
    r.assert_error(409, "handoff_expired");
    assert!(r.json["details"].get("lease_id").is_none(), "{}", r.text);
    assert!(r.text.contains("Choose other work"), "{}", r.text);

    // The recipient that acquired the task itself since is told it holds it, not
    // to choose other work (a probe following every `recover`, 2026-12-07).
    let (taken, taken_v) = crate::work::lease(&app, taker, t, 600).await;
    let r = app
        .post_keyed(
            &format!("/api/v1/handoffs/{expired}/accept"),
            &taker.token,
            json!({}),
        )
        .await;
    r.assert_error(409, "handoff_expired");
    assert_eq!(r.json["details"]["lease_id"], taken, "{}", r.text);
    assert_eq!(r.json["details"]["lease_version"], taken_v, "{}", r.text);
    assert!(r.text.contains("you hold the task's lease"), "{}", r.text);
}

#[tokio::test]
async fn decline_and_withdraw_unfence_the_giver_and_happen_once() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "decline", 2).await;
    let (giver, taker) = (&c.members[0], &c.members[1]);
    let (t, lease_id, v, ckpt) = worked_task(&app, giver, c.orbit).await;
    let body = json!({"lease_version": v, "checkpoint_id": ckpt, "to_contributor_id": taker.id, "message": "m"});

    let h1 = offer(&app, giver, t, body.clone()).await.json["data"]["id"]
        .as_i64()
        .unwrap();
    app.post_keyed(
        &format!("/api/v1/handoffs/{h1}/withdraw"),
        &taker.token,
        json!({}),
    )
    .await
    .assert_error(403, "not_giver");
    let path = format!("/api/v1/handoffs/{h1}/decline");
    let r = app
        .post_with_key(&path, &taker.token, "dec-1", json!({"reason": "busy"}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["data"]["status"], "DECLINED");
    let replay = app
        .post_with_key(&path, &taker.token, "dec-1", json!({"reason": "busy"}))
        .await;
    assert_eq!(replay.bytes, r.bytes);
    app.post_keyed(&path, &taker.token, json!({}))
        .await
        .assert_error(409, "handoff_not_pending");
    assert_eq!(
        checkpoint(&app, giver, t, v, json!({"n": 2})).await.status,
        201
    );

    let h2 = offer(&app, giver, t, body).await.json["data"]["id"]
        .as_i64()
        .unwrap();
    // A giver cannot lift its own fence by releasing and re-acquiring.
    let r = release(&app, giver, lease_id, v).await;
    assert_eq!(r.status, 200, "release stays allowed: {}", r.text);
    acquire(&app, giver, t, json!({}))
        .await
        .assert_error(409, "handed_off");
    let r = verb(&app, giver, h2, "withdraw").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["data"]["status"], "WITHDRAWN");
    assert_eq!(acquire(&app, giver, t, json!({})).await.status, 201);
}

#[tokio::test]
async fn acquiring_supersedes_a_pending_handoff_that_reserved_nothing() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "reserve", 3).await;
    let (giver, named, other) = (&c.members[0], &c.members[1], &c.members[2]);
    let t = task(&app, giver, c.orbit, "t").await;
    let (lease_id, v) = lease(&app, giver, t, 900).await;
    let ckpt = checkpoint(&app, giver, t, v, json!({})).await.json["data"]["id"]
        .as_i64()
        .unwrap();
    let h = offer(&app, giver, t, json!({"lease_version": v, "checkpoint_id": ckpt, "to_contributor_id": named.id, "message": "m"}))
        .await.json["data"]["id"].as_i64().unwrap();
    release(&app, giver, lease_id, v).await;
    let r = acquire(&app, other, t, json!({})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = app.get(&format!("/api/v1/handoffs/{h}"), None).await;
    assert_eq!(r.json["data"]["status"], "SUPERSEDED");
    let r = accept(&app, named, h, None).await;
    r.assert_error(409, "handoff_not_pending");
    assert_eq!(r.json["details"]["current_status"], "SUPERSEDED");
}

#[tokio::test]
async fn offer_validates_checkpoint_and_target() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "offerval", 1).await;
    let giver = &c.members[0];
    let (t, _, v, ckpt) = worked_task(&app, giver, c.orbit).await;
    let (t2, _, _, other_ckpt) = worked_task(&app, giver, c.orbit).await;
    let _ = t2;
    let outsider = app.agent("outsider").await;
    for (body, field) in [
        (
            json!({"lease_version": v, "checkpoint_id": other_ckpt, "message": "m"}),
            "checkpoint_id",
        ),
        (
            json!({"lease_version": v, "checkpoint_id": ckpt, "to_contributor_id": outsider.id, "message": "m"}),
            "to_contributor_id",
        ),
        (
            json!({"lease_version": v, "checkpoint_id": ckpt, "to_contributor_id": giver.id, "message": "m"}),
            "to_contributor_id",
        ),
        (
            json!({"lease_version": v, "checkpoint_id": ckpt, "message": ""}),
            "message",
        ),
        (
            json!({"lease_version": v, "checkpoint_id": ckpt, "message": "m", "expires_in_seconds": 90000}),
            "expires_in_seconds",
        ),
    ] {
        let r = offer(&app, giver, t, body).await;
        r.assert_error(422, "validation_failed");
        assert!(r.json["errors"][field].is_array(), "{field}: {}", r.text);
    }
}

#[tokio::test]
async fn removing_a_member_ends_its_lease_and_supersedes_its_handoffs() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "removal", 2).await;
    let (giver, taker) = (&c.members[0], &c.members[1]);
    let (t, lease_id, v, ckpt) = worked_task(&app, giver, c.orbit).await;
    let h = offer(&app, giver, t, json!({"lease_version": v, "checkpoint_id": ckpt, "to_contributor_id": taker.id, "message": "m"}))
        .await.json["data"]["id"].as_i64().unwrap();
    let r = app
        .send(
            Method::DELETE,
            &format!("/api/v1/orbits/{}/members/{}", c.orbit, giver.id),
            Some(&c.owner.token),
            None,
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        app.get(&format!("/api/v1/handoffs/{h}"), None).await.json["data"]["status"],
        "SUPERSEDED"
    );
    assert_eq!(
        app.get(&format!("/api/v1/leases/{lease_id}"), None)
            .await
            .json["data"]["end_reason"],
        "MEMBER_REMOVED"
    );
    let last = last_change(&app, c.orbit).await;
    assert_eq!(last["kind"], "member.removed");
    assert!(
        last["summary"]
            .as_str()
            .unwrap()
            .contains(&format!("handoff {h} superseded")),
        "{last}"
    );
}

/// A removal ends all of a member's leases and handoffs at one instant, read once
/// after the removal's locks (not once per statement, row or expression).
#[tokio::test]
async fn removing_a_member_ends_all_its_work_at_one_instant() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "instant", 2).await;
    let (member, other) = (&c.members[0], &c.members[1]);
    for i in 0..40 {
        let t = task(&app, member, c.orbit, &format!("t{i}")).await;
        lease(&app, member, t, 900).await;
    }
    for _ in 0..2 {
        let (t, _, v, ckpt) = worked_task(&app, member, c.orbit).await;
        let body = json!({"lease_version": v, "checkpoint_id": ckpt,
                          "to_contributor_id": other.id, "message": "m"});
        assert_eq!(offer(&app, member, t, body).await.status, 201);
    }
    let r = app
        .send(
            Method::DELETE,
            &format!("/api/v1/orbits/{}/members/{}", c.orbit, member.id),
            Some(&c.owner.token),
            None,
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let mut conn = app.db.conn();
    let leases = format!(
        "FROM leases WHERE contributor_id = {} AND end_reason = 'MEMBER_REMOVED'",
        member.id
    );
    let handoffs = format!(
        "FROM handoffs WHERE from_contributor = {} AND status = 'SUPERSEDED'",
        member.id
    );
    let n = |conn: &mut diesel::PgConnection, sql: String| crate::harness::sql_i64(conn, &sql);
    assert_eq!(n(&mut conn, format!("SELECT count(*) AS n {leases}")), 42);
    assert_eq!(n(&mut conn, format!("SELECT count(*) AS n {handoffs}")), 2);
    let instants = format!(
        "SELECT count(DISTINCT at) AS n FROM (SELECT released_at AS at {leases} \
         UNION ALL SELECT ended_at {handoffs}) x"
    );
    assert_eq!(n(&mut conn, instants), 1);
}

#[tokio::test]
async fn mailboxes_list_inbox_and_outbox() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "mail", 3).await;
    let (giver, named, bystander) = (&c.members[0], &c.members[1], &c.members[2]);
    let (t, _, v, ckpt) = worked_task(&app, giver, c.orbit).await;
    let h = offer(&app, giver, t, json!({"lease_version": v, "checkpoint_id": ckpt, "to_contributor_id": named.id, "message": "m"}))
        .await.json["data"]["id"].as_i64().unwrap();
    let ids = |r: &Resp| {
        r.json["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["id"].as_i64().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ids(&app.get("/api/v1/handoffs", Some(&named.token)).await),
        vec![h]
    );
    assert!(ids(&app.get("/api/v1/handoffs", Some(&bystander.token)).await).is_empty());
    assert!(ids(&app
        .get("/api/v1/handoffs?box=inbox", Some(&giver.token))
        .await)
    .is_empty());
    assert_eq!(
        ids(&app
            .get("/api/v1/handoffs?box=outbox", Some(&giver.token))
            .await),
        vec![h]
    );
    assert_eq!(
        ids(&app
            .get(
                "/api/v1/handoffs?box=outbox&status=PENDING",
                Some(&giver.token)
            )
            .await),
        vec![h]
    );
    assert!(ids(&app
        .get(
            "/api/v1/handoffs?box=outbox&status=ACCEPTED",
            Some(&giver.token)
        )
        .await)
    .is_empty());
    assert_eq!(
        ids(&app.get(&format!("/api/v1/tasks/{t}/handoffs"), None).await),
        vec![h]
    );
    app.get("/api/v1/handoffs", None)
        .await
        .assert_error(401, "unauthorized");
    app.get("/api/v1/handoffs?box=sideways", Some(&named.token))
        .await
        .assert_error(422, "validation_failed");
}

/// A replay answers what the first request was told, even after its recipient left
/// the orbit (contract section 5: "even if state has moved on since"); a new
/// request naming them is the 422, and beside another problem both are reported.
#[tokio::test]
async fn an_offer_replays_after_its_recipient_left() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "left", 2).await;
    let (giver, named) = (&c.members[0], &c.members[1]);
    let (t, _, v, ckpt) = worked_task(&app, giver, c.orbit).await;
    let body = json!({"lease_version": v, "checkpoint_id": ckpt,
                      "to_contributor_id": named.id, "message": "m"});
    let path = format!("/api/v1/tasks/{t}/handoffs");
    let first = app
        .post_with_key(&path, &giver.token, "offer-once", body.clone())
        .await;
    assert_eq!(first.status, 201, "{}", first.text);
    let r = app
        .send(
            Method::DELETE,
            &format!("/api/v1/orbits/{}/members/{}", c.orbit, named.id),
            Some(&named.token),
            None,
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let again = app
        .post_with_key(&path, &giver.token, "offer-once", body.clone())
        .await;
    assert_eq!(again.status, 201, "{}", again.text);
    assert_eq!(again.header("idempotency-replayed"), Some("true"));
    assert_eq!(again.text, first.text);
    // A new request: the recipient is no member now.
    let r = app
        .post_with_key(&path, &giver.token, "offer-new", body.clone())
        .await;
    r.assert_error(422, "validation_failed");
    assert_eq!(
        r.json["errors"]["to_contributor_id"],
        json!(["must be a member of this orbit"]),
        "{}",
        r.text
    );
    // Beside another problem, every problem at once.
    let mut both = body;
    both["checkpoint_id"] = json!(999_999);
    let r = app
        .post_with_key(&path, &giver.token, "offer-both", both)
        .await;
    r.assert_error(422, "validation_failed");
    assert!(
        r.json["errors"]["to_contributor_id"].is_array()
            && r.json["errors"]["checkpoint_id"].is_array(),
        "{}",
        r.text
    );
}
