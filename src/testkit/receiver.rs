//! A local webhook receiver, for the webhook tests and the bench's `webhooks`
//! scenario: a small actix server on a free port that records every request it gets
//! (headers, body, arrival by both clocks) and answers as told: a number of failures
//! with a status, a number of hangs past the client's timeout, a number of 200s
//! whose body trickles in after them, a delay before each answer.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Got {
    pub id: String,
    pub timestamp: String,
    pub signature: String,
    pub content_type: String,
    /// The request's path as it arrived (percent-encoded).
    pub path: String,
    pub body: Vec<u8>,
    pub at: Instant,
    /// The arrival by the wall clock, to compare with a change's `created_at`.
    pub at_wall: chrono::DateTime<chrono::Utc>,
}

impl Got {
    /// The revision in `webhook-id` (`<orbit>.<revision>`).
    /// Panics on an id of another form (a test's finding, never the bench's).
    pub fn revision(&self) -> i64 {
        self.id
            .rsplit_once('.')
            .and_then(|(_, r)| r.parse().ok())
            .unwrap_or_else(|| panic!("webhook-id {:?}", self.id))
    }

    /// The body as JSON; panics if it is not JSON (a test's finding).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }

    /// Verifies the request as a receiver would (Standard Webhooks): the timestamp
    /// is recent, and one of the `v1,` signatures is the HMAC-SHA256 of
    /// `<id>.<timestamp>.<body>` keyed with the secret's decoded bytes.
    pub fn verify(&self, secret: &str) -> Result<(), String> {
        let ts: i64 = self.timestamp.parse().map_err(|_| "bad timestamp")?;
        let now = chrono::Utc::now().timestamp();
        if (now - ts).abs() > 300 {
            return Err(format!("timestamp {ts} too far from {now}"));
        }
        let key = STANDARD
            .decode(secret.strip_prefix("whsec_").ok_or("secret prefix")?)
            .map_err(|e| e.to_string())?;
        let mut signed = Vec::new();
        signed.extend_from_slice(self.id.as_bytes());
        signed.push(b'.');
        signed.extend_from_slice(self.timestamp.as_bytes());
        signed.push(b'.');
        signed.extend_from_slice(&self.body);
        for sig in self.signature.split(' ') {
            let Some(b64) = sig.strip_prefix("v1,") else {
                continue;
            };
            let Ok(given) = STANDARD.decode(b64) else {
                continue;
            };
            let mut mac = Hmac::<Sha256>::new_from_slice(&key).map_err(|e| e.to_string())?;
            mac.update(&signed);
            if mac.verify_slice(&given).is_ok() {
                return Ok(());
            }
        }
        Err(format!("no valid signature in {:?}", self.signature))
    }
}

/// How the receiver answers.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The next this many requests get `fail_status`.
    pub fail_next: usize,
    pub fail_status: u16,
    /// The next this many requests (after the failures) are held for `hang`.
    pub hang_next: usize,
    pub hang: Duration,
    /// The next this many requests (after the hangs) get their 200 at once and then
    /// a body of 100 chunks, one each `hang`.
    pub trickle_next: usize,
    /// Every answer waits this long.
    pub delay: Duration,
}

impl Default for Plan {
    fn default() -> Plan {
        Plan {
            fail_next: 0,
            fail_status: 500,
            hang_next: 0,
            hang: Duration::from_secs(5),
            trickle_next: 0,
            delay: Duration::ZERO,
        }
    }
}

/// A lock that a panicked holder did not poison for good.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[derive(Default)]
struct Shared {
    got: Mutex<Vec<Got>>,
    plan: Mutex<Plan>,
    in_flight: std::sync::atomic::AtomicUsize,
}

pub struct Receiver {
    pub url: String,
    shared: Arc<Shared>,
    handle: actix_web::dev::ServerHandle,
    thread: Option<std::thread::JoinHandle<()>>,
}

async fn receive(req: HttpRequest, body: web::Bytes, shared: web::Data<Shared>) -> HttpResponse {
    use std::sync::atomic::Ordering;
    let header = |n: &str| {
        req.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    shared.in_flight.fetch_add(1, Ordering::SeqCst);
    lock(&shared.got).push(Got {
        id: header("webhook-id"),
        timestamp: header("webhook-timestamp"),
        signature: header("webhook-signature"),
        content_type: header("content-type"),
        path: req.path().to_owned(),
        body: body.to_vec(),
        at: Instant::now(),
        at_wall: chrono::Utc::now(),
    });
    let (wait, status, trickle) = {
        let mut plan = lock(&shared.plan);
        if plan.fail_next > 0 {
            plan.fail_next -= 1;
            (plan.delay, plan.fail_status, None)
        } else if plan.hang_next > 0 {
            plan.hang_next -= 1;
            (plan.hang, 200, None)
        } else if plan.trickle_next > 0 {
            plan.trickle_next -= 1;
            (Duration::ZERO, 200, Some(plan.hang))
        } else {
            (plan.delay, 200, None)
        }
    };
    if let Some(every) = trickle {
        shared.in_flight.fetch_sub(1, Ordering::SeqCst);
        let chunks = futures_util::stream::unfold(0u32, move |n| async move {
            if n >= 100 {
                return None;
            }
            tokio::time::sleep(every).await;
            Some((
                Ok::<_, std::convert::Infallible>(web::Bytes::from_static(b"0123456789")),
                n + 1,
            ))
        });
        return HttpResponse::Ok().streaming(chunks);
    }
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
    shared.in_flight.fetch_sub(1, Ordering::SeqCst);
    let status = actix_web::http::StatusCode::from_u16(status)
        .unwrap_or(actix_web::http::StatusCode::INTERNAL_SERVER_ERROR);
    HttpResponse::build(status).body("ok")
}

impl Receiver {
    /// A receiver that answers 200 to everything.
    pub fn start() -> Result<Receiver, String> {
        Self::start_with(Plan::default())
    }

    pub fn start_with(plan: Plan) -> Result<Receiver, String> {
        let shared = Arc::new(Shared::default());
        *lock(&shared.plan) = plan;
        let data = web::Data::from(shared.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                let server = HttpServer::new(move || {
                    App::new()
                        .app_data(data.clone())
                        .default_service(web::to(receive))
                })
                .workers(2)
                .shutdown_timeout(1)
                .bind("127.0.0.1:0");
                let server = match server {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = tx.send(Err(format!("bind the webhook receiver: {e}")));
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
            shared,
            handle,
            thread: Some(thread),
        })
    }

    pub fn got(&self) -> Vec<Got> {
        lock(&self.shared.got).clone()
    }

    pub fn count(&self) -> usize {
        lock(&self.shared.got).len()
    }

    /// Requests being answered right now.
    pub fn in_flight(&self) -> usize {
        self.shared
            .in_flight
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn set_plan(&self, plan: Plan) {
        *lock(&self.shared.plan) = plan;
    }

    /// Waits (at most `within`) until `done` holds for what arrived; returns it, or
    /// says what arrived instead.
    pub async fn wait_for(
        &self,
        within: Duration,
        done: impl Fn(&[Got]) -> bool,
    ) -> Result<Vec<Got>, String> {
        let deadline = Instant::now() + within;
        loop {
            let got = self.got();
            if done(&got) {
                return Ok(got);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the receiver did not get what was expected within {within:?}; got {:?}",
                    got.iter().map(|g| g.id.clone()).collect::<Vec<_>>()
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        // The stop command is sent when `stop` is called; its future only waits (the
        // join below does that).
        drop(self.handle.stop(false));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
