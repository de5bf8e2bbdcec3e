//! One async fn per virtual client: each loops while its record's window is open.

use std::sync::Arc;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use serde_json::json;

use super::measure::Rec;
use crate::client::{Agent, Api, Method, Resp};
use crate::events::WriteLog;
use crate::seed::{Chain, TaskPool};

/// The lease cycle's state: with a [`WriteLog`], every write's `orbit_revision` and
/// the instant its response arrived are logged (the `events` scenario).
pub type LeaseCycle = (Api, Agent, TaskPool, Option<Arc<WriteLog>>);

pub async fn lease_cycle_client(
    (api, agent, pool, log): LeaseCycle,
    mut rec: Rec,
) -> (LeaseCycle, Rec) {
    let wrote = |resp: &Resp, at: Instant| {
        if let Some(log) = &log {
            log.wrote(resp, at);
        }
    };
    let mut step = 0u64;
    while rec.running() {
        let Some(task) = pool.take() else {
            // A fresh pool ran out: the row seeded too few tasks for its rate.
            rec.done(Instant::now(), Err("no never-leased task left".into()));
            break;
        };
        let t0 = Instant::now();
        let r = api
            .post_keyed(
                &format!("/api/v1/tasks/{task}/leases"),
                &agent.token,
                &json!({"duration_seconds": 900}),
            )
            .await;
        let at = Instant::now();
        let Some(resp) = rec.check(t0, r, 201, false) else {
            continue;
        };
        wrote(&resp, at);
        let v = resp.json();
        let (Some(lease), Some(version)) = (
            v["data"]["id"].as_i64(),
            v["data"]["lease_version"].as_i64(),
        ) else {
            continue;
        };
        step += 1;
        let t0 = Instant::now();
        let r = api
            .post_keyed(
                &format!("/api/v1/tasks/{task}/checkpoints"),
                &agent.token,
                &json!({"lease_version": version, "summary": "bench step",
                        "state": {"step": step, "notes": "checkpoint from orbit-bench"}}),
            )
            .await;
        let at = Instant::now();
        if let Some(resp) = rec.check(t0, r, 201, false) {
            wrote(&resp, at);
        }
        // Always release, even past the window, so the task is free for a later run.
        let t0 = Instant::now();
        let r = api
            .post_keyed(
                &format!("/api/v1/leases/{lease}/release"),
                &agent.token,
                &json!({"lease_version": version}),
            )
            .await;
        let at = Instant::now();
        if let Some(resp) = rec.check(t0, r, 200, false) {
            wrote(&resp, at);
        }
    }
    ((api, agent, pool, log), rec)
}

/// One hot-orbit writer of every ordinary write kind (issue 25's `write-mix`): each
/// cycle creates a task, creates a contribution and revises it, and saves a
/// checkpoint under the lease the client took on its first task (each a quick
/// write, `perf::quick`, when nothing declines it).
pub async fn write_mix_client(
    (api, agent, orbit): (Api, Agent, i64),
    mut rec: Rec,
) -> ((Api, Agent, i64), Rec) {
    let mut lease: Option<(i64, i64)> = None;
    let mut step = 0u64;
    while rec.running() {
        step += 1;
        let t0 = Instant::now();
        let r = api
            .post_keyed(
                &format!("/api/v1/orbits/{orbit}/tasks"),
                &agent.token,
                &json!({"title": format!("mix {step}")}),
            )
            .await;
        let Some(resp) = rec.check(t0, r, 201, false) else {
            continue;
        };
        let task = resp.json()["data"]["id"].as_i64();
        if lease.is_none() {
            if let Some(task) = task {
                let r = api
                    .post_keyed(
                        &format!("/api/v1/tasks/{task}/leases"),
                        &agent.token,
                        &json!({"duration_seconds": 3600}),
                    )
                    .await;
                if let Ok(r) = r {
                    lease = r.json()["data"]["lease_version"]
                        .as_i64()
                        .map(|v| (task, v));
                }
            }
        }
        let t0 = Instant::now();
        let r = api
            .post_keyed(
                &format!("/api/v1/orbits/{orbit}/contributions"),
                &agent.token,
                &json!({"kind": "NOTE", "title": format!("note {step}"),
                        "body": "what this writer found, step by step"}),
            )
            .await;
        let contribution = rec
            .check(t0, r, 201, false)
            .and_then(|resp| resp.json()["data"]["id"].as_i64());
        if let Some(c) = contribution {
            let t0 = Instant::now();
            let r = api
                .post_keyed(
                    &format!("/api/v1/contributions/{c}/revisions"),
                    &agent.token,
                    &json!({"base_revision": 1, "body": "revised once"}),
                )
                .await;
            rec.check(t0, r, 201, false);
        }
        if let Some((task, version)) = lease {
            let t0 = Instant::now();
            let r = api
                .post_keyed(
                    &format!("/api/v1/tasks/{task}/checkpoints"),
                    &agent.token,
                    &json!({"lease_version": version, "summary": "mix step",
                            "state": {"step": step}}),
                )
                .await;
            rec.check(t0, r, 201, false);
        }
    }
    ((api, agent, orbit), rec)
}

/// Re-reads a chain's task after an error: who holds it now, under which version.
pub async fn resync_chain(api: &Api, chain: &mut Chain) {
    let Ok(r) = api
        .get(&format!("/api/v1/tasks/{}", chain.task), None)
        .await
    else {
        return;
    };
    let v = r.json();
    let lease = &v["data"]["active_lease"];
    if let (Some(who), Some(version)) = (
        lease["contributor"]["id"].as_i64(),
        lease["lease_version"].as_i64(),
    ) {
        if let Some(h) = chain.agents.iter().position(|a| a.id == who) {
            chain.holder = h;
            chain.version = version;
            return;
        }
    }
    // Nobody holds it: the first agent takes it again.
    if let Ok(r) = api
        .post_keyed(
            &format!("/api/v1/tasks/{}/leases", chain.task),
            &chain.agents[0].token,
            &json!({"duration_seconds": 3600}),
        )
        .await
    {
        if let Some(version) = r.json()["data"]["lease_version"].as_i64() {
            chain.holder = 0;
            chain.version = version;
        }
    }
}

pub async fn handoff_chain_client(
    (api, mut chain): (Api, Chain),
    mut rec: Rec,
) -> ((Api, Chain), Rec) {
    while rec.running() {
        let giver = chain.agents[chain.holder].clone();
        let taker = chain.agents[1 - chain.holder].clone();
        let t0 = Instant::now();
        let r = api
            .post_keyed(
                &format!("/api/v1/tasks/{}/handoffs", chain.task),
                &giver.token,
                &json!({"lease_version": chain.version, "checkpoint_id": chain.checkpoint,
                        "to_contributor_id": taker.id, "message": "your turn"}),
            )
            .await;
        let Some(handoff) = rec
            .check(t0, r, 201, false)
            .and_then(|r| r.json()["data"]["id"].as_i64())
        else {
            resync_chain(&api, &mut chain).await;
            continue;
        };
        let t0 = Instant::now();
        let r = api
            .post_keyed(
                &format!("/api/v1/handoffs/{handoff}/accept"),
                &taker.token,
                &json!({"duration_seconds": 3600}),
            )
            .await;
        match rec
            .check(t0, r, 200, false)
            .and_then(|r| r.json()["data"]["lease"]["lease_version"].as_i64())
        {
            Some(v) => {
                chain.version = v;
                chain.holder = 1 - chain.holder;
            }
            None => resync_chain(&api, &mut chain).await,
        }
    }
    ((api, chain), rec)
}

pub async fn replay_client(
    (api, agent, path, key): (Api, Agent, String, String),
    mut rec: Rec,
) -> ((Api, Agent, String, String), Rec) {
    let body = json!({"title": "replayed task"});
    while rec.running() {
        let t0 = Instant::now();
        let r = api
            .send(
                Method::Post,
                &path,
                Some(&agent.token),
                Some(&key),
                Some(&body),
            )
            .await;
        rec.check(t0, r, 201, true);
    }
    ((api, agent, path, key), rec)
}

/// Anonymous or authenticated GETs of a rotating set of paths.
pub async fn get_client(
    (api, token, paths, seed): (Api, Option<String>, Arc<Vec<String>>, u64),
    mut rec: Rec,
) -> ((Api, Option<String>, Arc<Vec<String>>, u64), Rec) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    while rec.running() {
        let path = &paths[rng.gen_range(0..paths.len())];
        let t0 = Instant::now();
        let r = api.get(path, token.as_deref()).await;
        rec.check(t0, r, 200, false);
    }
    ((api, token, paths, seed), rec)
}

/// Pages of the change feed from a random `after`.
pub async fn feed_client(
    (api, orbit, revision, seed): (Api, i64, i64, u64),
    mut rec: Rec,
) -> ((Api, i64, i64, u64), Rec) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let top = (revision - 100).max(0);
    while rec.running() {
        let after = rng.gen_range(0..=top);
        let t0 = Instant::now();
        let r = api
            .get(
                &format!("/api/v1/orbits/{orbit}/changes?after={after}&limit=100"),
                None,
            )
            .await;
        rec.check(t0, r, 200, false);
    }
    ((api, orbit, revision, seed), rec)
}
