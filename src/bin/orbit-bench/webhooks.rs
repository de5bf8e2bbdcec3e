//! The `webhooks` scenario (issue 22): N clients run the write mix, each in its own
//! orbit, and each orbit has a webhook to a local receiver. The row counts the
//! deliveries that arrived during the window (deliveries/s) and their latency:
//! arrival at the receiver minus the change's `created_at` (the database clock of
//! the same machine), so it covers commit, wake-up, claim, signing and the POST.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use orbit_commons::actix_web::{self, web, App, HttpResponse, HttpServer};
use serde_json::{json, Value};

use crate::client::{Api, Method};
use crate::scenarios::clients::write_mix_client;
use crate::scenarios::measure::{measure, Rec, RunCfg};
use crate::seed::World;

#[derive(Default)]
struct Arrivals(Mutex<Vec<(Instant, u32)>>);

async fn receive(body: web::Bytes, arrivals: web::Data<Arrivals>) -> HttpResponse {
    let now = Instant::now();
    let latency_us = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| {
            let at = v["data"]["created_at"].as_str()?.to_owned();
            chrono::DateTime::parse_from_rfc3339(&at).ok()
        })
        .map(|at| {
            let ms = (chrono::Utc::now() - at.with_timezone(&chrono::Utc)).num_microseconds();
            ms.unwrap_or(0).clamp(0, u32::MAX as i64) as u32
        })
        .unwrap_or(u32::MAX);
    if let Ok(mut a) = arrivals.0.lock() {
        a.push((now, latency_us));
    }
    HttpResponse::NoContent().finish()
}

/// The local receiver: an actix server on its own thread.
struct Receiver {
    url: String,
    arrivals: Arc<Arrivals>,
    handle: actix_web::dev::ServerHandle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Receiver {
    fn start() -> Result<Receiver, String> {
        let arrivals = Arc::new(Arrivals::default());
        let data = web::Data::from(arrivals.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                let server = HttpServer::new(move || {
                    App::new()
                        .app_data(data.clone())
                        .default_service(web::to(receive))
                })
                .workers(1)
                .shutdown_timeout(1)
                .bind("127.0.0.1:0");
                let server = match server {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let addr = server.addrs()[0];
                let server = server.run();
                let _ = tx.send(Ok((addr, server.handle())));
                let _ = server.await;
            })
        });
        let (addr, handle) = rx
            .recv()
            .map_err(|e| format!("the webhook receiver did not start: {e}"))??;
        Ok(Receiver {
            url: format!("http://{addr}/hook"),
            arrivals,
            handle,
            thread: Some(thread),
        })
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        // The stop command is sent when `stop` is called; its future only waits.
        drop(self.handle.stop(false));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
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
    let arrivals = receiver
        .arrivals
        .0
        .lock()
        .map(|a| a.clone())
        .unwrap_or_default();
    for (at, latency_us) in arrivals {
        rec.all += 1;
        if at >= rec.window.from && at < rec.window.until {
            rec.latencies_us.push(latency_us);
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
