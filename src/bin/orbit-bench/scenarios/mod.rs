//! The scenarios: their shapes, and one measured row of one of them.

pub mod clients;
pub mod measure;

use std::sync::Arc;

use crate::cli::{RefKind, Scenario};
use crate::client::Api;
use crate::report::Row;
use crate::seed::{TaskPool, World};
use clients::{
    feed_client, get_client, handoff_chain_client, lease_cycle_client, replay_client,
    write_mix_client,
};
use measure::{measure, percentile, Rec, RunCfg};

/// The shapes of a scenario, each with a reason when it cannot run.
pub fn shapes_of(scenario: Scenario, world: &World) -> Vec<(String, Option<String>)> {
    match scenario {
        Scenario::LeaseCycle => vec![("spread".into(), None), ("hot".into(), None)],
        Scenario::LeaseCycleFresh => vec![(
            "hot".into(),
            world.fresh_orbit.is_none().then(|| {
                "not available: its tasks are seeded per row (needs the database)".to_owned()
            }),
        )],
        Scenario::BigOrbit => ["lease-cycle", "write-mix"]
            .iter()
            .map(|shape| {
                let missing = world.big_orbit.is_none().then(|| {
                    "not available: the million-task orbit is not seeded (needs the database)"
                        .to_owned()
                });
                (shape.to_string(), missing)
            })
            .collect(),
        Scenario::HandoffChain => vec![("spread".into(), None)],
        Scenario::IdempotentReplay => vec![("spread".into(), None)],
        Scenario::PublicGet => vec![
            ("task".into(), None),
            ("contribution".into(), None),
            ("list".into(), None),
        ],
        Scenario::AuthedGet => vec![("me".into(), None)],
        Scenario::WriteMix => ["spread", "hot", "two-hot"]
            .iter()
            .map(|shape| (shape.to_string(), None))
            .collect(),
        Scenario::Webhooks => vec![("spread".into(), None)],
        Scenario::Events => vec![
            (crate::events::WITHOUT.into(), None),
            (crate::events::WITH.into(), None),
        ],
        Scenario::Search => ["mixed", "100k-word"]
            .iter()
            .map(|shape| {
                let missing = (!world.search_seeded).then(|| {
                    "not available: search data set not seeded (needs the database)".to_owned()
                });
                (shape.to_string(), missing)
            })
            .collect(),
        Scenario::OrbitPage => vec![(
            "1k-tasks".into(),
            (!world.orbit_page_seeded).then(|| {
                "not available: orbit-page data set not seeded (needs the database)".to_owned()
            }),
        )],
        Scenario::ChangesFeed => ["1k", "100k"]
            .iter()
            .map(|label| {
                let missing = (!world.big.iter().any(|b| b.label == *label))
                    .then(|| "not available: orbit not seeded (needs DATABASE_URL)".to_owned());
                (label.to_string(), missing)
            })
            .collect(),
        Scenario::Overview => [("small", "1k"), ("large", "100k")]
            .iter()
            .map(|(shape, label)| {
                let missing = if world.knowledge == Some(false) {
                    Some(
                        "not available: GET /api/v1/problems/{id}/overview is not a route yet"
                            .to_owned(),
                    )
                } else if !world
                    .big
                    .iter()
                    .any(|b| b.label == *label && b.problem.is_some())
                {
                    Some("not available: orbit not seeded (needs DATABASE_URL)".to_owned())
                } else {
                    None
                };
                (shape.to_string(), missing)
            })
            .collect(),
    }
}

pub fn make_row(
    scenario: Scenario,
    shape: &str,
    clients: usize,
    cfg: &RunCfg,
    mut rec: Rec,
    kind: RefKind,
    reference: Option<f64>,
) -> Row {
    rec.latencies_us.sort_unstable();
    let n = rec.latencies_us.len() as u64;
    let rps = n as f64 / cfg.duration.as_secs_f64();
    Row {
        scenario: scenario.name().into(),
        shape: shape.into(),
        clients,
        repeat: 1,
        requests: n,
        requests_per_s: Some(rps),
        p50_ms: percentile(&rec.latencies_us, 0.50),
        p99_ms: percentile(&rec.latencies_us, 0.99),
        errors: rec.errors,
        error_kinds: rec.kinds,
        reference: Some(kind.name().into()),
        reference_tps: reference,
        ratio: reference.filter(|t| *t > 0.0).map(|t| rps / t),
        note: None,
        profile: None,
        events: rec.events.take(),
    }
}

/// The lease cycle of `clients` agents taking tasks from one shared pool.
async fn shared_lease_cycle(
    api: &Api,
    world: &World,
    pool: TaskPool,
    clients: usize,
    cfg: &RunCfg,
) -> Rec {
    let states: Vec<_> = (0..clients)
        .map(|i| (api.clone(), world.agents[i].clone(), pool.clone(), None))
        .collect();
    measure(cfg, states, lease_cycle_client).await.1
}

pub async fn run_one(
    api: &Api,
    world: &mut World,
    scenario: Scenario,
    shape: &str,
    clients: usize,
    cfg: &RunCfg,
) -> Result<Rec, String> {
    let seed = |i: usize| 0x5eed_u64.wrapping_mul(i as u64 + 1) ^ clients as u64;
    match scenario {
        Scenario::LeaseCycle => {
            let pools = if shape == "hot" {
                &world.hot_pools
            } else {
                &world.spread_pools
            };
            let states: Vec<_> = (0..clients)
                .map(|i| (api.clone(), world.agents[i].clone(), pools[i].clone(), None))
                .collect();
            let (_, rec) = measure(cfg, states, lease_cycle_client).await;
            Ok(rec)
        }
        Scenario::LeaseCycleFresh => {
            let pool = world.fresh_pool.take().ok_or("no fresh tasks seeded")?;
            Ok(shared_lease_cycle(api, world, pool, clients, cfg).await)
        }
        Scenario::BigOrbit => {
            let (orbit, pool) = world.big_orbit.clone().ok_or("no big orbit")?;
            if shape == "lease-cycle" {
                return Ok(shared_lease_cycle(api, world, pool, clients, cfg).await);
            }
            let states: Vec<_> = (0..clients)
                .map(|i| (api.clone(), world.agents[i].clone(), orbit))
                .collect();
            let (_, rec) = measure(cfg, states, write_mix_client).await;
            Ok(rec)
        }
        Scenario::WriteMix => {
            let states: Vec<_> = (0..clients)
                .map(|i| {
                    // `two-hot`: the even clients in the hot orbit, the odd in a second.
                    let orbit = match shape {
                        "hot" => world.hot_orbit.ok_or("no hot orbit"),
                        "two-hot" if i % 2 == 0 => world.hot_orbit.ok_or("no hot orbit"),
                        "two-hot" => world.second_hot_orbit.ok_or("no second hot orbit"),
                        _ => world.spread_orbits.get(i).copied().ok_or("no spread orbit"),
                    }?;
                    Ok((api.clone(), world.agents[i].clone(), orbit))
                })
                .collect::<Result<_, &str>>()?;
            let (_, rec) = measure(cfg, states, write_mix_client).await;
            Ok(rec)
        }
        Scenario::Webhooks => crate::webhooks::run(api, world, clients, cfg).await,
        Scenario::Events => crate::events::run(api, world, shape, clients, cfg).await,
        Scenario::Search => {
            let states: Vec<_> = (0..clients)
                .map(|i| {
                    let paths = Arc::new(crate::search::paths(shape, 4096, seed(i)));
                    (api.clone(), None, paths, seed(i))
                })
                .collect();
            let (_, rec) = measure(cfg, states, get_client).await;
            Ok(rec)
        }
        Scenario::OrbitPage => {
            let paths = Arc::new(vec![crate::orbit_page::PATH.to_owned()]);
            let states: Vec<_> = (0..clients)
                .map(|i| (api.clone(), None, paths.clone(), seed(i)))
                .collect();
            let (_, rec) = measure(cfg, states, get_client).await;
            Ok(rec)
        }
        Scenario::HandoffChain => {
            let states: Vec<_> = (0..clients)
                .map(|i| (api.clone(), world.chains[i].clone()))
                .collect();
            let (states, rec) = measure(cfg, states, handoff_chain_client).await;
            for (i, (_, chain)) in states.into_iter().enumerate() {
                world.chains[i] = chain;
            }
            Ok(rec)
        }
        Scenario::IdempotentReplay => {
            let states: Vec<_> = (0..clients)
                .map(|i| {
                    let (orbit, key) = &world.replay[i];
                    (
                        api.clone(),
                        world.agents[i].clone(),
                        format!("/api/v1/orbits/{orbit}/tasks"),
                        key.clone(),
                    )
                })
                .collect();
            let (_, rec) = measure(cfg, states, replay_client).await;
            Ok(rec)
        }
        Scenario::PublicGet => {
            let hot = world.hot_orbit.ok_or("no hot orbit")?;
            let paths: Vec<String> = if shape == "list" {
                vec![format!("/api/v1/orbits/{hot}/tasks")]
            } else if shape == "contribution" {
                world
                    .hot_contributions
                    .iter()
                    .map(|c| format!("/api/v1/contributions/{c}"))
                    .collect()
            } else {
                let tasks: Vec<i64> = world
                    .hot_pools
                    .iter()
                    .flat_map(|p| p.tasks.iter().take(32).copied())
                    .collect();
                if tasks.is_empty() {
                    let r = api
                        .get(&format!("/api/v1/orbits/{hot}/tasks?limit=100"), None)
                        .await?;
                    r.json()["data"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|t| t["id"].as_i64())
                        .map(|t| format!("/api/v1/tasks/{t}"))
                        .collect()
                } else {
                    tasks.iter().map(|t| format!("/api/v1/tasks/{t}")).collect()
                }
            };
            if paths.is_empty() {
                return Err("public-get: no tasks to read".into());
            }
            let paths = Arc::new(paths);
            let states: Vec<_> = (0..clients)
                .map(|i| (api.clone(), None, paths.clone(), seed(i)))
                .collect();
            let (_, rec) = measure(cfg, states, get_client).await;
            Ok(rec)
        }
        Scenario::AuthedGet => {
            let paths = Arc::new(vec!["/api/v1/me".to_owned()]);
            let states: Vec<_> = (0..clients)
                .map(|i| {
                    (
                        api.clone(),
                        Some(world.agents[i].token.clone()),
                        paths.clone(),
                        seed(i),
                    )
                })
                .collect();
            let (_, rec) = measure(cfg, states, get_client).await;
            Ok(rec)
        }
        Scenario::ChangesFeed => {
            let big = world
                .big
                .iter()
                .find(|b| b.label == shape)
                .ok_or("orbit not seeded")?;
            let states: Vec<_> = (0..clients)
                .map(|i| (api.clone(), big.orbit, big.revision, seed(i)))
                .collect();
            let (_, rec) = measure(cfg, states, feed_client).await;
            Ok(rec)
        }
        Scenario::Overview => {
            let label = if shape == "small" { "1k" } else { "100k" };
            let problem = world
                .big
                .iter()
                .find(|b| b.label == label)
                .and_then(|b| b.problem)
                .ok_or("problem not seeded")?;
            let paths = Arc::new(vec![format!("/api/v1/problems/{problem}/overview")]);
            let states: Vec<_> = (0..clients)
                .map(|i| (api.clone(), None, paths.clone(), seed(i)))
                .collect();
            let (_, rec) = measure(cfg, states, get_client).await;
            Ok(rec)
        }
    }
}
