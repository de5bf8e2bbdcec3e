//! A local webhook receiver for the tests: a small actix server on a free port that
//! records every request it gets (headers, body, arrival) and answers as told:
//! a number of failures with a status, a number of hangs past the client's
//! timeout, a delay before each answer.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use orbit_commons::actix_web::{self, web, App, HttpRequest, HttpResponse, HttpServer};
use serde_json::Value;
use sha2::Sha256;

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Got {
    pub id: String,
    pub timestamp: String,
    pub signature: String,
    pub content_type: String,
    pub body: Vec<u8>,
    pub at: Instant,
}

impl Got {
    /// The revision in `webhook-id` (`<orbit>.<revision>`).
    pub fn revision(&self) -> i64 {
        self.id
            .rsplit_once('.')
            .and_then(|(_, r)| r.parse().ok())
            .unwrap_or_else(|| panic!("webhook-id {:?}", self.id))
    }

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
            delay: Duration::ZERO,
        }
    }
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
    shared.got.lock().unwrap().push(Got {
        id: header("webhook-id"),
        timestamp: header("webhook-timestamp"),
        signature: header("webhook-signature"),
        content_type: header("content-type"),
        body: body.to_vec(),
        at: Instant::now(),
    });
    let (wait, status) = {
        let mut plan = shared.plan.lock().unwrap();
        if plan.fail_next > 0 {
            plan.fail_next -= 1;
            (plan.delay, plan.fail_status)
        } else if plan.hang_next > 0 {
            plan.hang_next -= 1;
            (plan.hang, 200)
        } else {
            (plan.delay, 200)
        }
    };
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
    shared.in_flight.fetch_sub(1, Ordering::SeqCst);
    HttpResponse::build(actix_web::http::StatusCode::from_u16(status).unwrap()).body("ok")
}

impl Receiver {
    pub fn start() -> Receiver {
        Self::start_with(Plan::default())
    }

    pub fn start_with(plan: Plan) -> Receiver {
        let shared = Arc::new(Shared::default());
        *shared.plan.lock().unwrap() = plan;
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
                .bind("127.0.0.1:0")
                .expect("bind the receiver");
                let addr = server.addrs()[0];
                let server = server.run();
                tx.send((addr, server.handle())).expect("send addr");
                let _ = server.await;
            })
        });
        let (addr, handle) = rx.recv().expect("receiver started");
        Receiver {
            url: format!("http://{addr}/hook"),
            shared,
            handle,
            thread: Some(thread),
        }
    }

    pub fn got(&self) -> Vec<Got> {
        self.shared.got.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.shared.got.lock().unwrap().len()
    }

    /// Requests being answered right now.
    pub fn in_flight(&self) -> usize {
        self.shared
            .in_flight
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn set_plan(&self, plan: Plan) {
        *self.shared.plan.lock().unwrap() = plan;
    }

    /// Waits (at most `within`) until `done` holds for what arrived; returns it.
    pub async fn wait_for(&self, within: Duration, done: impl Fn(&[Got]) -> bool) -> Vec<Got> {
        let deadline = Instant::now() + within;
        loop {
            let got = self.got();
            if done(&got) {
                return got;
            }
            if Instant::now() > deadline {
                panic!(
                    "the receiver did not get what was expected within {within:?}; got {:?}",
                    got.iter().map(|g| g.id.clone()).collect::<Vec<_>>()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        futures::executor::block_on(self.handle.stop(false));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
