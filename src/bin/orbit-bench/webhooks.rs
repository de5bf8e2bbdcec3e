//! The `webhooks` scenario (issue 22): N clients run the write mix, each in its own
//! orbit, and each orbit has a webhook to a local receiver. The row counts the
//! deliveries that arrived during the window (deliveries/s) and their latency:
//! arrival at the receiver minus the change's `created_at` (the database clock of
//! the same machine), so it covers commit, wake-up, claim, signing and the POST.

use std::time::Duration;

use orbit_commons::testkit::receiver::{Got, Receiver};
use serde_json::{json, Value};

use crate::client::{Api, Method};
use crate::scenarios::clients::write_mix_client;
use crate::scenarios::measure::{measure, Rec, RunCfg};
use crate::seed::World;

/// The delivery's latency: its arrival at the receiver minus the change's
/// `created_at`, in µs (`u32::MAX` if the body names no time).
fn latency_us(got: &Got) -> u32 {
    serde_json::from_slice::<Value>(&got.body)
        .ok()
        .and_then(|v| {
            let at = v["data"]["created_at"].as_str()?.to_owned();
            chrono::DateTime::parse_from_rfc3339(&at).ok()
        })
        .map(|at| {
            let us = (got.at_wall - at.with_timezone(&chrono::Utc)).num_microseconds();
            us.unwrap_or(0).clamp(0, u32::MAX as i64) as u32
        })
        .unwrap_or(u32::MAX)
}

/// One row: `clients` writers (the write mix) in their own orbits, one webhook on
/// each orbit; the record holds the deliveries that arrived in the window.
pub async fn run(
    api: &Api,
    world: &mut World,
    clients: usize,
    cfg: &RunCfg,
) -> Result<Rec, String> {
    let receiver = Receiver::start()?;
    let subscriber = api
        .register(&format!("bench-hooks-{}", uuid::Uuid::new_v4().simple()))
        .await?;
    let orbits: Vec<i64> = (0..clients)
        .map(|i| world.spread_orbits.get(i).copied().ok_or("no spread orbit"))
        .collect::<Result<_, _>>()?;
    // A contributor has at most 10 webhooks: another subscriber per ten orbits.
    let mut hooks = Vec::new();
    let mut owner = subscriber;
    for (i, orbit) in orbits.iter().enumerate() {
        if i > 0 && i % 10 == 0 {
            owner = api
                .register(&format!(
                    "bench-hooks-{i}-{}",
                    uuid::Uuid::new_v4().simple()
                ))
                .await?;
        }
        let r = api
            .send(
                Method::Post,
                "/api/v1/me/webhooks",
                Some(&owner.token),
                None,
                Some(&json!({"orbit": orbit, "url": receiver.url})),
            )
            .await?;
        if r.status != 201 {
            return Err(format!(
                "webhooks: cannot subscribe ({}): {} (the service needs \
                 ORBIT_WEBHOOK_ALLOW_PRIVATE=true for a local receiver)",
                r.status,
                String::from_utf8_lossy(&r.body)
            ));
        }
        let id = r.json()["data"]["id"].as_i64().unwrap_or(0);
        hooks.push((owner.clone(), id));
    }
    let states: Vec<_> = (0..clients)
        .map(|i| (api.clone(), world.agents[i].clone(), orbits[i]))
        .collect();
    let (_, writes) = measure(cfg, states, write_mix_client).await;
    let mut rec = Rec::new(writes.window);
    // Deliveries still on their way at the window's end count only if they arrive
    // inside it: wait a moment, then read what arrived.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for got in receiver.got() {
        rec.all += 1;
        if got.at >= rec.window.from && got.at < rec.window.until {
            rec.latencies_us.push(latency_us(&got));
        }
    }
    rec.errors = writes.errors;
    rec.kinds = writes.kinds;
    eprintln!(
        "  webhooks: {} writes in the window by {clients} client(s), {} deliveries",
        writes.latencies_us.len(),
        rec.latencies_us.len()
    );
    for (owner, id) in hooks {
        let _ = api
            .send(
                Method::Delete,
                &format!("/api/v1/me/webhooks/{id}"),
                Some(&owner.token),
                None,
                None,
            )
            .await;
    }
    Ok(rec)
}
