//! Orbit membership (contract section 4): the role rules, the last owner, and
//! that every write shows up once in the change feed.

use serde_json::{json, Value};

use crate::harness::{Agent, Resp, RowLock, TestApp};

async fn put_role(app: &TestApp, by: &Agent, orbit: &str, target: i64, role: &str) -> Resp {
    app.put(
        &format!("/api/v1/orbits/{orbit}/members/{target}"),
        &by.token,
        json!({ "role": role }),
    )
    .await
}

async fn remove(app: &TestApp, by: &Agent, orbit: &str, target: i64) -> Resp {
    app.delete(
        &format!("/api/v1/orbits/{orbit}/members/{target}"),
        &by.token,
    )
    .await
}

async fn revision(app: &TestApp, orbit: &str) -> i64 {
    let r = app.get(&format!("/api/v1/orbits/{orbit}"), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.json["data"]["revision"].as_i64().unwrap()
}

async fn role_of(app: &TestApp, orbit: &str, who: i64) -> Option<String> {
    let r = app
        .get(&format!("/api/v1/orbits/{orbit}/members?limit=100"), None)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.json["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["contributor"]["id"] == who)
        .map(|m| m["role"].as_str().unwrap().to_owned())
}

#[tokio::test]
async fn a_non_member_cannot_manage_members() {
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    let outsider = app.agent("outsider").await;
    let c = app.agent("c").await;
    app.orbit(&owner, "guarded").await;
    let r = put_role(&app, &outsider, "guarded", c.id, "CONTRIBUTOR").await;
    r.assert_envelope(403);
    let r = put_role(&app, &outsider, "guarded", outsider.id, "OWNER").await;
    r.assert_envelope(403);
    let r = remove(&app, &outsider, "guarded", owner.id).await;
    r.assert_envelope(403);
    assert_eq!(revision(&app, "guarded").await, 1);
    assert_eq!(role_of(&app, "guarded", c.id).await, None);
}

/// A membership that does not exist is 404 whoever asks to remove it: the owner, or
/// a non-member (itself or another): the contract's 404 before 403. (A probe,
/// 2026-12-07: the non-member leaving an orbit it was not in got 403.)
#[tokio::test]
async fn removing_a_membership_that_does_not_exist_is_404_for_everyone() {
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    let outsider = app.agent("outsider").await;
    let c = app.agent("c").await;
    app.orbit(&owner, "sparse").await;
    for (by, target) in [(&owner, c.id), (&outsider, outsider.id), (&outsider, c.id)] {
        let r = remove(&app, by, "sparse", target).await;
        r.assert_envelope(404);
        assert_eq!(r.json["code"], "not_found", "{}", r.text);
    }
    assert_eq!(revision(&app, "sparse").await, 1);
}

#[tokio::test]
async fn a_contributor_cannot_manage_members() {
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    let c = app.agent("c").await;
    let d = app.agent("d").await;
    let orbit = app.orbit(&owner, "flat").await;
    app.join(&c, orbit).await;
    app.join(&d, orbit).await;
    put_role(&app, &c, "flat", d.id, "CONTRIBUTOR")
        .await
        .assert_envelope(403);
    put_role(&app, &c, "flat", c.id, "MAINTAINER")
        .await
        .assert_envelope(403);
    remove(&app, &c, "flat", d.id).await.assert_envelope(403);
    assert_eq!(revision(&app, "flat").await, 3);
}

#[tokio::test]
async fn a_maintainer_manages_contributors_and_maintainers_but_not_owners() {
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    let m = app.agent("maintainer").await;
    let x = app.agent("x").await;
    let y = app.agent("y").await;
    app.orbit(&owner, "tiers").await;
    let r = put_role(&app, &owner, "tiers", m.id, "MAINTAINER").await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json["data"]["role"], "MAINTAINER");

    // Add a CONTRIBUTOR (201), promote it to MAINTAINER (200), demote it back (200).
    let r = put_role(&app, &m, "tiers", x.id, "CONTRIBUTOR").await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json["data"]["role"], "CONTRIBUTOR");
    let r = put_role(&app, &m, "tiers", x.id, "MAINTAINER").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["data"]["role"], "MAINTAINER");
    let r = put_role(&app, &m, "tiers", x.id, "CONTRIBUTOR").await;
    assert_eq!(r.status, 200, "{}", r.text);

    // OWNER is out of reach: granting it, to a new member or an existing one, or to
    // itself; and changing or removing the owner.
    let before = revision(&app, "tiers").await;
    put_role(&app, &m, "tiers", y.id, "OWNER")
        .await
        .assert_error(403, "insufficient_role");
    put_role(&app, &m, "tiers", x.id, "OWNER")
        .await
        .assert_error(403, "insufficient_role");
    put_role(&app, &m, "tiers", m.id, "OWNER")
        .await
        .assert_error(403, "insufficient_role");
    put_role(&app, &m, "tiers", owner.id, "MAINTAINER")
        .await
        .assert_error(403, "insufficient_role");
    remove(&app, &m, "tiers", owner.id)
        .await
        .assert_error(403, "insufficient_role");
    assert_eq!(revision(&app, "tiers").await, before);
    assert_eq!(role_of(&app, "tiers", y.id).await, None);
    assert_eq!(
        role_of(&app, "tiers", owner.id).await.as_deref(),
        Some("OWNER")
    );

    // It may remove a CONTRIBUTOR.
    let r = remove(&app, &m, "tiers", x.id).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(role_of(&app, "tiers", x.id).await, None);

    // The owner may grant OWNER.
    let r = put_role(&app, &owner, "tiers", m.id, "OWNER").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["data"]["role"], "OWNER");
}

#[tokio::test]
async fn put_answers_201_when_adding_and_200_when_changing() {
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    let b = app.agent("b").await;
    let orbit = app.orbit(&owner, "roles").await;
    let path = format!("/api/v1/orbits/{orbit}/members/{}", b.id);
    let r = app
        .put(&path, &owner.token, json!({"role": "CONTRIBUTOR"}))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json["data"]["orbit_revision"], 2);
    assert_eq!(r.json["data"]["contributor"]["id"], b.id);
    let r = app
        .put(&path, &owner.token, json!({"role": "MAINTAINER"}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["data"]["orbit_revision"], 3);
    assert_eq!(r.json["data"]["role"], "MAINTAINER");

    // Bad input.
    app.put(&path, &owner.token, json!({"role": "ADMIN"}))
        .await
        .assert_envelope(422);
    app.put(&path, &owner.token, json!({}))
        .await
        .assert_envelope(422);
    app.put(
        &format!("/api/v1/orbits/{orbit}/members/999999"),
        &owner.token,
        json!({"role": "CONTRIBUTOR"}),
    )
    .await
    .assert_error(404, "not_found");
    app.put(
        &format!("/api/v1/orbits/nope/members/{}", b.id),
        &owner.token,
        json!({"role": "CONTRIBUTOR"}),
    )
    .await
    .assert_error(404, "not_found");
    assert_eq!(revision(&app, "roles").await, 3);
}

#[tokio::test]
async fn the_last_owner_cannot_leave_or_be_demoted() {
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    let second = app.agent("second").await;
    app.orbit(&owner, "keep-owner").await;

    remove(&app, &owner, "keep-owner", owner.id)
        .await
        .assert_error(409, "last_owner");
    for role in ["MAINTAINER", "CONTRIBUTOR"] {
        put_role(&app, &owner, "keep-owner", owner.id, role)
            .await
            .assert_error(409, "last_owner");
    }
    assert_eq!(revision(&app, "keep-owner").await, 1);
    assert_eq!(
        role_of(&app, "keep-owner", owner.id).await.as_deref(),
        Some("OWNER")
    );

    // With a second owner, the first may step down, and then the second is last.
    let r = put_role(&app, &owner, "keep-owner", second.id, "OWNER").await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = put_role(&app, &owner, "keep-owner", owner.id, "MAINTAINER").await;
    assert_eq!(r.status, 200, "{}", r.text);
    remove(&app, &second, "keep-owner", second.id)
        .await
        .assert_error(409, "last_owner");
    put_role(&app, &second, "keep-owner", second.id, "CONTRIBUTOR")
        .await
        .assert_error(409, "last_owner");
    // An owner may remove another owner when one remains.
    let r = put_role(&app, &second, "keep-owner", owner.id, "OWNER").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = remove(&app, &second, "keep-owner", owner.id).await;
    assert_eq!(r.status, 200, "{}", r.text);
    remove(&app, &second, "keep-owner", second.id)
        .await
        .assert_error(409, "last_owner");
}

#[tokio::test]
async fn two_owners_demoting_each_other_at_once_leave_one_owner() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    let b = app.agent("b").await;
    let orbit = app.orbit(&a, "duel").await;
    let r = put_role(&app, &a, "duel", b.id, "OWNER").await;
    assert_eq!(r.status, 201, "{}", r.text);
    for _ in 0..5 {
        // Each owner leaves at the same moment: at most one may succeed.
        let (ra, rb) = tokio::join!(
            remove(&app, &a, "duel", a.id),
            remove(&app, &b, "duel", b.id)
        );
        let ok = [&ra, &rb].iter().filter(|r| r.status == 200).count();
        assert_eq!(ok, 1, "{} / {}", ra.text, rb.text);
        for r in [&ra, &rb] {
            if r.status != 200 {
                r.assert_error(409, "last_owner");
            }
        }
        let mut conn = app.db.conn();
        let owners = crate::harness::sql_i64(
            &mut conn,
            &format!(
                "SELECT count(*) AS n FROM memberships WHERE orbit_id = {orbit} AND role = 'OWNER'"
            ),
        );
        assert_eq!(owners, 1);
        // Restore the second owner for the next round.
        let (stayer, leaver) = if ra.status == 200 { (&b, &a) } else { (&a, &b) };
        let r = put_role(&app, stayer, "duel", leaver.id, "OWNER").await;
        assert_eq!(r.status, 201, "{}", r.text);
    }
}

#[tokio::test]
async fn any_member_may_remove_itself() {
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    let c = app.agent("c").await;
    let m = app.agent("m").await;
    let orbit = app.orbit(&owner, "exits").await;
    app.join(&c, orbit).await;
    assert_eq!(
        put_role(&app, &owner, "exits", m.id, "MAINTAINER")
            .await
            .status,
        201
    );
    for who in [&c, &m] {
        let r = remove(&app, who, "exits", who.id).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.json["data"]["contributor"]["id"], who.id);
        assert!(r.json["data"]["orbit_revision"].is_i64());
        assert_eq!(role_of(&app, "exits", who.id).await, None);
        // Gone: a second removal is 404 (no such membership), as for anyone.
        remove(&app, who, "exits", who.id)
            .await
            .assert_error(404, "not_found");
    }
    // Removing a non-member by a manager is 404.
    remove(&app, &owner, "exits", c.id)
        .await
        .assert_error(404, "not_found");
    // And the one who left may join again.
    let r = app.post_empty("/api/v1/orbits/exits/join", &c.token).await;
    assert_eq!(r.status, 201, "{}", r.text);
}

#[tokio::test]
async fn every_membership_write_returns_its_revision_and_appears_in_the_feed() {
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    let b = app.agent("b").await;
    let c = app.agent("c").await;

    let created = app
        .post(
            "/api/v1/orbits",
            &owner.token,
            json!({"slug": "ledger", "name": "L"}),
        )
        .await;
    let orbit = created.json["data"]["id"].as_i64().unwrap();
    let joined = app.post_empty("/api/v1/orbits/ledger/join", &b.token).await;
    let added = put_role(&app, &owner, "ledger", c.id, "CONTRIBUTOR").await;
    let changed = put_role(&app, &owner, "ledger", c.id, "MAINTAINER").await;
    // Refused writes in between advance nothing.
    put_role(&app, &b, "ledger", c.id, "OWNER")
        .await
        .assert_envelope(403);
    remove(&app, &owner, "ledger", owner.id)
        .await
        .assert_error(409, "last_owner");
    let removed = remove(&app, &c, "ledger", b.id).await;
    let left = remove(&app, &b, "ledger", b.id).await;
    left.assert_error(404, "not_found");
    let left = remove(&app, &c, "ledger", c.id).await;

    let writes = [
        (&created, 201, "orbit.created", "orbit", orbit, owner.id),
        (&joined, 201, "member.added", "member", b.id, b.id),
        (&added, 201, "member.added", "member", c.id, owner.id),
        (&changed, 200, "member.updated", "member", c.id, owner.id),
        (&removed, 200, "member.removed", "member", b.id, c.id),
        (&left, 200, "member.removed", "member", c.id, c.id),
    ];
    let feed = app
        .get(&format!("/api/v1/orbits/{orbit}/changes"), None)
        .await;
    assert_eq!(feed.status, 200, "{}", feed.text);
    let changes = feed.json["data"].as_array().unwrap();
    assert_eq!(changes.len(), writes.len(), "{}", feed.text);
    for (i, (resp, status, kind, entity_type, entity_id, actor)) in writes.iter().enumerate() {
        let rev = i as i64 + 1;
        assert_eq!(resp.status, *status, "write {rev}: {}", resp.text);
        assert_eq!(resp.json["data"]["orbit_revision"], rev, "{}", resp.text);
        let ch = &changes[i];
        assert_eq!(ch["revision"], rev);
        assert_eq!(ch["kind"], *kind);
        assert_eq!(ch["entity_type"], *entity_type);
        assert_eq!(ch["entity_id"], *entity_id);
        assert_eq!(ch["task_id"], Value::Null);
        assert_eq!(ch["contributor"]["id"], *actor);
        assert!(ch["summary"].as_str().is_some_and(|s| !s.is_empty()));
        crate::orbits::assert_timestamp(&ch["created_at"]);
    }
    assert_eq!(
        feed.json["meta"],
        json!({"next_after": writes.len(), "orbit_revision": writes.len()})
    );
    assert_eq!(revision(&app, "ledger").await, writes.len() as i64);
}

#[tokio::test]
async fn members_list_pages_by_contributor_id() {
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "crowd").await;
    let mut ids = vec![owner.id];
    for i in 0..4 {
        let a = app.agent(&format!("m{i}")).await;
        app.join(&a, orbit).await;
        ids.push(a.id);
    }
    let mut seen = Vec::new();
    let mut after = 0;
    loop {
        let r = app
            .get(
                &format!("/api/v1/orbits/crowd/members?limit=2&after={after}"),
                None,
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        seen.extend(
            r.json["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["contributor"]["id"].as_i64().unwrap()),
        );
        match r.json["meta"]["next_after"].as_i64() {
            Some(n) => after = n,
            None => break,
        }
    }
    assert_eq!(seen, ids);
    app.get("/api/v1/orbits/nope/members", None)
        .await
        .assert_error(404, "not_found");
}

/// The sessions of this test's database waiting for a lock now.
fn lock_waiters(conn: &mut diesel::PgConnection) -> i64 {
    crate::harness::sql_i64(
        conn,
        "SELECT count(*) AS n FROM pg_stat_activity \
         WHERE datname = current_database() AND wait_event_type = 'Lock'",
    )
}

/// An app with two write lanes per orbit: a write the test holds on a row stalls
/// its lane, and a membership change runs in the other, as it would on another
/// instance.
async fn two_lanes() -> TestApp {
    TestApp::spawn_with(|c| c.write_lanes = 2).await
}

/// Sends `write` (a member's write, which the test holds on a task row, `held`,
/// after its membership check) and, once it waits there, `change` (a membership
/// change); lets the task row go once the change has answered or waits for a lock
/// itself. Returns both answers (status, body).
async fn change_during_write(
    app: &TestApp,
    held: RowLock,
    write: reqwest::RequestBuilder,
    change: reqwest::RequestBuilder,
) -> ((u16, Value), (u16, Value)) {
    let send = |req: reqwest::RequestBuilder| {
        tokio::spawn(async move {
            let r = req.send().await.expect("send");
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.expect("a JSON answer"))
        })
    };
    let write = send(write);
    let mut monitor = app.db.conn();
    assert_eq!(
        held.waiters(&mut monitor),
        1,
        "the write never reached the task row"
    );
    let change = send(change);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !change.is_finished() && lock_waiters(&mut monitor) < 2 {
        assert!(std::time::Instant::now() < deadline, "the change never ran");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    held.release();
    (
        write.await.expect("the write"),
        change.await.expect("the change"),
    )
}

/// A keyed POST as a [`reqwest::RequestBuilder`], for [`change_during_write`].
fn keyed(app: &TestApp, path: &str, token: &str, body: Value) -> reqwest::RequestBuilder {
    app.client
        .post(app.url(path))
        .bearer_auth(token)
        .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
        .json(&body)
}

/// `by` removes `target` from `orbit`, as a [`reqwest::RequestBuilder`].
fn removal(app: &TestApp, by: &Agent, orbit: i64, target: i64) -> reqwest::RequestBuilder {
    app.client
        .delete(app.url(&format!("/api/v1/orbits/{orbit}/members/{target}")))
        .bearer_auth(&by.token)
}

/// The revision of the feed's one change of `kind`.
async fn revision_of(app: &TestApp, orbit: i64, kind: &str) -> i64 {
    let feed = crate::work::changes(app, orbit).await;
    let found: Vec<&Value> = feed.iter().filter(|c| c["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "{kind} in {feed:?}");
    found[0]["revision"].as_i64().expect("revision")
}

/// A member's write under way when the member is removed is ordered wholly before
/// the removal (contract section 4: "Writing inside an orbit needs membership";
/// "Removing a member releases its active leases ... in the same write"). The test
/// holds the member's lease acquire on the task's row, after its membership check,
/// and removes the member meanwhile: the removal waits for the acquire, then ends
/// the lease it took. (Were the membership not held by the write, the removal
/// would commit first and leave a non-member holding an active lease.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removal_waits_for_the_members_write_under_way_and_ends_its_lease() {
    let app = two_lanes().await;
    let c = crate::work::crew(&app, "removed-mid-write", 1).await;
    let member = &c.members[0];
    let task = crate::work::task(&app, &c.owner, c.orbit, "held").await;
    let held = RowLock::take(&app.db, task);
    let ((acquired, lease), (removed, _)) = change_during_write(
        &app,
        held,
        keyed(
            &app,
            &format!("/api/v1/tasks/{task}/leases"),
            &member.token,
            json!({"duration_seconds": 600}),
        ),
        removal(&app, &c.owner, c.orbit, member.id),
    )
    .await;
    assert_eq!(acquired, 201, "{lease}");
    assert_eq!(removed, 200);
    let version = lease["data"]["lease_version"].as_i64().unwrap();
    let removal = crate::work::last_change(&app, c.orbit).await;
    assert_eq!(removal["kind"], "member.removed", "{removal}");
    assert!(
        revision_of(&app, c.orbit, "lease.acquired").await < removal["revision"].as_i64().unwrap()
    );
    assert_eq!(
        removal["summary"],
        format!(
            "contributor {} removed; lease v{version} MEMBER_REMOVED on task {task}",
            member.id
        )
    );
    let active = crate::harness::sql_i64(
        &mut app.db.conn(),
        &format!("SELECT count(*) AS n FROM leases WHERE task_id = {task} AND end_reason IS NULL"),
    );
    assert_eq!(active, 0, "a non-member holds a lease");
    // The task is free for the members.
    let r = crate::work::acquire(&app, &c.owner, task, json!({})).await;
    assert_eq!(r.status, 201, "{}", r.text);
}

/// A MAINTAINER's write under way when it is demoted is ordered wholly before the
/// demotion (contract section 7: cancel needs MAINTAINER; the role is checked in the
/// write's transaction): no write that needs the old role commits after the change
/// that took it away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demotion_waits_for_the_maintainers_write_under_way() {
    let app = two_lanes().await;
    let c = crate::work::crew(&app, "demoted-mid-write", 1).await;
    let m = &c.members[0];
    let orbit = c.orbit.to_string();
    let r = put_role(&app, &c.owner, &orbit, m.id, "MAINTAINER").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let task = crate::work::task(&app, &c.owner, c.orbit, "held").await;
    let held = RowLock::take(&app.db, task);
    let ((cancelled, body), (demoted, _)) = change_during_write(
        &app,
        held,
        keyed(
            &app,
            &format!("/api/v1/tasks/{task}/cancel"),
            &m.token,
            json!({}),
        ),
        app.client
            .put(app.url(&format!("/api/v1/orbits/{orbit}/members/{}", m.id)))
            .bearer_auth(&c.owner.token)
            .json(&json!({"role": "CONTRIBUTOR"})),
    )
    .await;
    assert_eq!(cancelled, 200, "{body}");
    assert_eq!(demoted, 200);
    let demotion = crate::work::last_change(&app, c.orbit).await;
    assert_eq!(demotion["kind"], "member.updated", "{demotion}");
    assert!(
        body["data"]["orbit_revision"].as_i64().unwrap() < demotion["revision"].as_i64().unwrap()
    );
    // And after it, the role is gone.
    let other = crate::work::task(&app, &c.owner, c.orbit, "another").await;
    let r = app
        .post_keyed(
            &format!("/api/v1/tasks/{other}/cancel"),
            &m.token,
            json!({}),
        )
        .await;
    r.assert_error(403, "insufficient_role");
}

/// A handoff offered to a member while that member is being removed: the offer
/// holds the recipient's membership, so the removal comes after it and supersedes
/// the handoff (contract section 4) instead of leaving it PENDING to a non-member,
/// which would fence the giver until it ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removal_supersedes_a_handoff_offered_to_the_member_meanwhile() {
    let app = two_lanes().await;
    let c = crate::work::crew(&app, "recipient-removed", 2).await;
    let (giver, recipient) = (&c.members[0], &c.members[1]);
    let task = crate::work::task(&app, &c.owner, c.orbit, "held").await;
    let (_, version) = crate::work::lease(&app, giver, task, 600).await;
    let saved = crate::work::checkpoint(&app, giver, task, version, json!({})).await;
    assert_eq!(saved.status, 201, "{}", saved.text);
    let held = RowLock::take(&app.db, task);
    let ((offered, handoff), (removed, _)) = change_during_write(
        &app,
        held,
        keyed(
            &app,
            &format!("/api/v1/tasks/{task}/handoffs"),
            &giver.token,
            json!({
                "lease_version": version,
                "checkpoint_id": saved.created_id(),
                "to_contributor_id": recipient.id,
                "message": "over to you"
            }),
        ),
        removal(&app, &c.owner, c.orbit, recipient.id),
    )
    .await;
    assert_eq!(offered, 201, "{handoff}");
    assert_eq!(removed, 200);
    let id = handoff["data"]["id"].as_i64().unwrap();
    let r = app.get(&format!("/api/v1/handoffs/{id}"), None).await;
    assert_eq!(r.json["data"]["status"], "SUPERSEDED", "{}", r.text);
    // The giver is not fenced: it goes on with its lease.
    let r = crate::work::checkpoint(&app, giver, task, version, json!({})).await;
    assert_eq!(r.status, 201, "{}", r.text);
}

/// A membership change that is refused (here a CONTRIBUTOR removing another member)
/// takes no lock: it is answered 403 while the target has a write under way,
/// instead of waiting for that write with the target's writes queued behind it
/// (were it to lock first, it would wait here until the database's lock timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_membership_change_takes_no_lock() {
    let app = two_lanes().await;
    let c = crate::work::crew(&app, "refused-change", 2).await;
    let (member, other) = (&c.members[0], &c.members[1]);
    let task = crate::work::task(&app, &c.owner, c.orbit, "held").await;
    let held = RowLock::take(&app.db, task);
    let write = tokio::spawn(
        keyed(
            &app,
            &format!("/api/v1/tasks/{task}/leases"),
            &member.token,
            json!({}),
        )
        .send(),
    );
    let mut monitor = app.db.conn();
    assert_eq!(
        held.waiters(&mut monitor),
        1,
        "the write never reached the task row"
    );
    let refused = tokio::spawn(removal(&app, other, c.orbit, member.id).send());
    // Only the held write waits for a lock while the change is answered.
    let mut most = 0;
    while !refused.is_finished() {
        most = most.max(lock_waiters(&mut monitor));
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(most <= 1, "the refused change waited for a lock");
    let r = refused.await.expect("the change").expect("an answer");
    assert_eq!(r.status(), 403);
    let body: Value = r.json().await.expect("a JSON answer");
    assert_eq!(body["code"], "insufficient_role", "{body}");
    held.release();
    let written = write.await.expect("the write").expect("an answer");
    assert_eq!(written.status(), 201);
}
