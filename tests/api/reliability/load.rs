//! The load: agents that acquire, checkpoint, release, hand off and accept, with an
//! Idempotency-Key on every write and the same key on every retry; and the seeding
//! of their world (agents, orbits, tasks) through the API.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use orbit_commons::testkit::short_id;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::Method;
use serde_json::{json, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    CreateTask,
    Acquire,
    Checkpoint,
    Release,
    Offer,
    Accept,
}

pub const KINDS: [Kind; 6] = [
    Kind::CreateTask,
    Kind::Acquire,
    Kind::Checkpoint,
    Kind::Release,
    Kind::Offer,
    Kind::Accept,
];

impl Kind {
    /// The idempotency scope (method + route template) of this write.
    pub fn operation(self) -> &'static str {
        match self {
            Kind::CreateTask => "POST /api/v1/orbits/{orbit}/tasks",
            Kind::Acquire => "POST /api/v1/tasks/{task}/leases",
            Kind::Checkpoint => "POST /api/v1/tasks/{task}/checkpoints",
            Kind::Release => "POST /api/v1/leases/{lease}/release",
            Kind::Offer => "POST /api/v1/tasks/{task}/handoffs",
            Kind::Accept => "POST /api/v1/handoffs/{handoff}/accept",
        }
    }

    /// The change-feed kind each execution of this write appends.
    pub fn change(self) -> &'static str {
        match self {
            Kind::CreateTask => "task.created",
            Kind::Acquire => "lease.acquired",
            Kind::Checkpoint => "checkpoint.created",
            Kind::Release => "lease.released",
            Kind::Offer => "handoff.offered",
            Kind::Accept => "handoff.accepted",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::CreateTask => "create_task",
            Kind::Acquire => "acquire",
            Kind::Checkpoint => "checkpoint",
            Kind::Release => "release",
            Kind::Offer => "offer",
            Kind::Accept => "accept",
        }
    }
}

/// A write the client saw answered 2xx.
#[derive(Debug, Clone)]
pub struct Ack {
    pub kind: Kind,
    pub key: String,
    pub agent: i64,
    pub data: Value,
}

#[derive(Default)]
pub struct Stats {
    /// Writes intended (one key each).
    pub writes: AtomicU64,
    /// Reads (inbox) intended.
    pub reads: AtomicU64,
    /// HTTP requests actually sent, retries included.
    pub attempts: AtomicU64,
    /// Retries after a connection error or timeout (same key, another instance).
    pub transport_retries: AtomicU64,
    /// Retries after 503 or 409 `idempotency_key_in_flight`.
    pub busy_retries: AtomicU64,
    /// 5xx other than 503 (each a bug).
    pub server_errors: AtomicU64,
    /// Responses with `Idempotency-Replayed: true`.
    pub replays: AtomicU64,
    /// Requests whose first answer was lost and whose retry replayed the stored one.
    pub recovered_by_replay: AtomicU64,
    /// Requests given up on (never answered).
    pub unresolved: AtomicU64,
    pub conflicts: Mutex<BTreeMap<String, u64>>,
    pub acks: Mutex<Vec<Ack>>,
}

impl Stats {
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    pub fn conflicts_total(&self) -> u64 {
        self.conflicts.lock().unwrap().values().sum()
    }
}

pub struct Reply {
    pub status: u16,
    pub json: Value,
}

#[derive(Clone)]
pub struct Net {
    pub client: reqwest::Client,
    pub bases: Arc<Vec<String>>,
    pub stats: Arc<Stats>,
}

impl Net {
    pub fn new(bases: Vec<String>) -> Net {
        Net {
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(8))
                .connect_timeout(Duration::from_secs(2))
                .build()
                .expect("client"),
            bases: Arc::new(bases),
            stats: Arc::new(Stats::default()),
        }
    }

    /// Registers the contributor `body` describes through the instance `home`;
    /// returns its id and token.
    pub async fn register(&self, home: &mut usize, body: &Value) -> (i64, String) {
        let r = self
            .call(
                home,
                Method::POST,
                "/api/v1/contributors",
                None,
                None,
                Some(body),
            )
            .await
            .expect("register");
        assert_eq!(r.status, 201, "{}", r.json);
        (
            r.json["data"]["contributor"]["id"]
                .as_i64()
                .expect("contributor id"),
            r.json["data"]["token"].as_str().expect("token").to_owned(),
        )
    }

    /// Sends a request to the agent's home instance. A connection error or timeout
    /// moves the agent to the next instance and retries with the same key; 503, 5xx
    /// and 409 `idempotency_key_in_flight` retry with the same key after a pause.
    pub async fn call(
        &self,
        home: &mut usize,
        method: Method,
        path: &str,
        token: Option<&str>,
        key: Option<&str>,
        body: Option<&Value>,
    ) -> Option<Reply> {
        let started = Instant::now();
        let mut lost_once = false;
        for _ in 0..80 {
            if started.elapsed() > Duration::from_secs(40) {
                break;
            }
            let base = &self.bases[*home % self.bases.len()];
            let mut req = self.client.request(method.clone(), format!("{base}{path}"));
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            if let Some(k) = key {
                req = req.header("Idempotency-Key", k);
            }
            if let Some(b) = body {
                req = req.json(b);
            }
            self.stats.attempts.fetch_add(1, Ordering::Relaxed);
            let answer = match req.send().await {
                Ok(r) => {
                    let status = r.status().as_u16();
                    let replayed = r
                        .headers()
                        .get("idempotency-replayed")
                        .is_some_and(|v| v == "true");
                    r.bytes().await.ok().map(|b| (status, replayed, b))
                }
                Err(_) => None,
            };
            let Some((status, replayed, bytes)) = answer else {
                lost_once = true;
                self.stats.transport_retries.fetch_add(1, Ordering::Relaxed);
                *home += 1;
                tokio::time::sleep(Duration::from_millis(30)).await;
                continue;
            };
            let json: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            if status == 503 || (status == 409 && json["code"] == "idempotency_key_in_flight") {
                self.stats.busy_retries.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            if status >= 500 {
                self.stats.server_errors.fetch_add(1, Ordering::Relaxed);
                eprintln!(
                    "server error {status} on {method} {path}: {}",
                    String::from_utf8_lossy(&bytes)
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            if replayed {
                self.stats.replays.fetch_add(1, Ordering::Relaxed);
                if lost_once {
                    self.stats
                        .recovered_by_replay
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
            if status == 409 {
                let code = json["code"].as_str().unwrap_or("?").to_owned();
                *self
                    .stats
                    .conflicts
                    .lock()
                    .unwrap()
                    .entry(code)
                    .or_default() += 1;
            }
            return Some(Reply { status, json });
        }
        self.stats.unresolved.fetch_add(1, Ordering::Relaxed);
        eprintln!("gave up on {method} {path} (key {key:?})");
        None
    }

    /// A keyed write; records the acknowledgement when it is 2xx.
    #[allow(clippy::too_many_arguments)]
    pub async fn write(
        &self,
        home: &mut usize,
        kind: Kind,
        agent: i64,
        token: &str,
        key: &str,
        path: &str,
        body: &Value,
    ) -> Option<Reply> {
        self.stats.writes.fetch_add(1, Ordering::Relaxed);
        let r = self
            .call(home, Method::POST, path, Some(token), Some(key), Some(body))
            .await?;
        if (200..300).contains(&r.status) {
            self.stats.acks.lock().unwrap().push(Ack {
                kind,
                key: key.to_owned(),
                agent,
                data: r.json["data"].clone(),
            });
        }
        Some(r)
    }
}

pub struct World {
    pub tasks: Vec<i64>,
    pub orbits: Vec<i64>,
    /// The first `hot` tasks are picked half of the time, so agents meet.
    pub hot: usize,
    /// The owner of the orbits (id, token).
    pub seeder: (i64, String),
}

#[derive(Debug, Clone, Copy)]
pub struct Held {
    pub task: i64,
    pub lease: i64,
    pub version: i64,
    pub checkpoint: Option<i64>,
}

pub struct Worker {
    pub id: i64,
    pub token: String,
    pub home: usize,
    pub rng: StdRng,
    pub held: Option<Held>,
    pub seq: u64,
}

impl Worker {
    pub fn key(&mut self, what: &str) -> String {
        self.seq += 1;
        format!("{what}-{}-{}-{}", self.id, self.seq, short_id())
    }

    pub async fn write(&mut self, net: &Net, kind: Kind, path: &str, body: Value) -> Option<Reply> {
        let key = self.key(kind.name());
        // The key is also written into the effect where the schema allows, so effects
        // can be counted per key afterwards.
        let body = match kind {
            Kind::Checkpoint => {
                let mut b = body;
                b["summary"] = json!(format!("checkpoint {key}"));
                b
            }
            Kind::Offer => {
                let mut b = body;
                b["message"] = json!(format!("handoff {key}"));
                b
            }
            Kind::CreateTask => json!({"title": "load task", "description": key}),
            _ => body,
        };
        let (id, token) = (self.id, self.token.clone());
        net.write(&mut self.home, kind, id, &token, &key, path, &body)
            .await
    }

    pub async fn acquire(&mut self, net: &Net, world: &World) {
        let i = if self.rng.gen_bool(0.5) {
            self.rng.gen_range(0..world.hot)
        } else {
            self.rng.gen_range(0..world.tasks.len())
        };
        let task = world.tasks[i];
        let path = format!("/api/v1/tasks/{task}/leases");
        if let Some(d) = self.take_lease(net, Kind::Acquire, &path, 201).await {
            self.held = Some(Held {
                task,
                lease: d["id"].as_i64().expect("lease id"),
                version: d["lease_version"].as_i64().expect("version"),
                checkpoint: None,
            });
        }
    }

    /// A write that takes a lease of 1-3 s (acquire, accept); its data when it was
    /// answered `expect`.
    async fn take_lease(
        &mut self,
        net: &Net,
        kind: Kind,
        path: &str,
        expect: u16,
    ) -> Option<Value> {
        let seconds = self.rng.gen_range(1..=3);
        let r = self
            .write(net, kind, path, json!({"duration_seconds": seconds}))
            .await;
        r.filter(|r| r.status == expect)
            .map(|r| r.json["data"].clone())
    }

    /// Accepts a random pending handoff from the inbox; false when there was none.
    pub async fn accept_from_inbox(&mut self, net: &Net) -> bool {
        net.stats.reads.fetch_add(1, Ordering::Relaxed);
        let token = self.token.clone();
        let Some(inbox) = net
            .call(
                &mut self.home,
                Method::GET,
                "/api/v1/handoffs?box=inbox&status=PENDING&limit=100",
                Some(&token),
                None,
                None,
            )
            .await
        else {
            return false;
        };
        assert_eq!(inbox.status, 200, "inbox: {}", inbox.json);
        let items = inbox.json["data"].as_array().cloned().unwrap_or_default();
        if items.is_empty() {
            return false;
        }
        let h = &items[self.rng.gen_range(0..items.len())];
        let handoff = h["id"].as_i64().expect("handoff id");
        let path = format!("/api/v1/handoffs/{handoff}/accept");
        if let Some(d) = self.take_lease(net, Kind::Accept, &path, 200).await {
            self.held = Some(Held {
                task: d["task_id"].as_i64().expect("task id"),
                lease: d["lease"]["id"].as_i64().expect("lease id"),
                version: d["lease"]["lease_version"].as_i64().expect("version"),
                checkpoint: d["handoff"]["checkpoint_id"].as_i64(),
            });
        }
        true
    }

    pub async fn step(&mut self, net: &Net, world: &World) {
        let Some(h) = self.held.take() else {
            let roll = self.rng.gen_range(0..100);
            if roll < 25 {
                if !self.accept_from_inbox(net).await {
                    self.acquire(net, world).await;
                }
            } else if roll < 30 {
                let orbit = world.orbits[self.rng.gen_range(0..world.orbits.len())];
                self.write(
                    net,
                    Kind::CreateTask,
                    &format!("/api/v1/orbits/{orbit}/tasks"),
                    Value::Null,
                )
                .await;
            } else {
                self.acquire(net, world).await;
            }
            return;
        };
        let roll = self.rng.gen_range(0..100);
        if roll < 50 || (h.checkpoint.is_none() && roll < 75) {
            let step = self.seq;
            let r = self
                .write(
                    net,
                    Kind::Checkpoint,
                    &format!("/api/v1/tasks/{}/checkpoints", h.task),
                    json!({"lease_version": h.version, "summary": "", "state": {"agent": self.id, "step": step}}),
                )
                .await;
            // A 409 means the lease no longer lets us write: stop and look elsewhere.
            if let Some(r) = r.filter(|r| r.status == 201) {
                self.held = Some(Held {
                    checkpoint: r.json["data"]["id"].as_i64(),
                    ..h
                });
            }
        } else if roll < 62 {
            self.write(
                net,
                Kind::Release,
                &format!("/api/v1/leases/{}/release", h.lease),
                json!({"lease_version": h.version}),
            )
            .await;
        } else if roll < 75 {
            let Some(checkpoint) = h.checkpoint else {
                self.held = Some(h);
                return;
            };
            self.write(
                net,
                Kind::Offer,
                &format!("/api/v1/tasks/{}/handoffs", h.task),
                json!({"lease_version": h.version, "checkpoint_id": checkpoint,
                       "message": "", "expires_in_seconds": 4}),
            )
            .await;
        } else {
            // Work without writing; leases of 1-3 s run out now and then, after which
            // this holder is a zombie that the fence must refuse.
            let ms = self.rng.gen_range(50..800);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            self.held = Some(h);
        }
    }
}

pub async fn run_agent(net: Net, world: Arc<World>, mut w: Worker, deadline: Instant) {
    while Instant::now() < deadline {
        w.step(&net, &world).await;
    }
}

pub const AGENTS: usize = 16;
pub const ORBITS: usize = 4;
pub const TASKS: usize = 200;
/// How long the agents race, per load test.
pub const LOAD_SECONDS: u64 = 9;

/// Registers a seeder and 16 agents (homes spread over the instances), creates the
/// orbits (every agent joins every one) and 200 tasks, each with its own key.
pub async fn seed(net: &Net, seed: u64) -> (Vec<Worker>, World) {
    let n = net.bases.len();
    let register = |i: usize| {
        let net = net.clone();
        let mut home = i % n;
        async move {
            let body =
                json!({"type": "AGENT", "name": format!("rel-agent-{i}"), "model_claim": "test"});
            net.register(&mut home, &body).await
        }
    };
    let (seeder_id, seeder) = register(AGENTS).await;
    let run = short_id();
    let mut orbits = Vec::new();
    for o in 0..ORBITS {
        let mut home = o % n;
        let r = net
            .call(
                &mut home,
                Method::POST,
                "/api/v1/orbits",
                Some(&seeder),
                Some(&format!("orbit-{run}-{o}")),
                Some(
                    &json!({"slug": format!("rel-{run}-{o}"), "name": format!("reliability {o}")}),
                ),
            )
            .await
            .expect("create orbit");
        assert_eq!(r.status, 201, "{}", r.json);
        orbits.push(r.json["data"]["id"].as_i64().expect("orbit id"));
    }
    let agents: Vec<(i64, String)> = futures::stream::iter(0..AGENTS)
        .map(register)
        .buffered(8)
        .collect()
        .await;
    let joins = agents
        .iter()
        .enumerate()
        .flat_map(|(i, (_, token))| orbits.iter().map(move |o| (i, token.clone(), *o)));
    futures::stream::iter(joins)
        .for_each_concurrent(8, |(i, token, orbit)| {
            let net = net.clone();
            let mut home = i % n;
            async move {
                let r = net
                    .call(
                        &mut home,
                        Method::POST,
                        &format!("/api/v1/orbits/{orbit}/join"),
                        Some(&token),
                        None,
                        None,
                    )
                    .await
                    .expect("join");
                assert!(
                    r.status == 201 || r.json["code"] == "already_member",
                    "join: {} {}",
                    r.status,
                    r.json
                );
            }
        })
        .await;
    let tasks: Vec<i64> = futures::stream::iter(0..TASKS)
        .map(|i| {
            let net = net.clone();
            let seeder = seeder.clone();
            let orbit = orbits[i % ORBITS];
            let mut home = i % n;
            let key = format!("seed-task-{run}-{i}");
            async move {
                let r = net
                    .write(
                        &mut home,
                        Kind::CreateTask,
                        seeder_id,
                        &seeder,
                        &key,
                        &format!("/api/v1/orbits/{orbit}/tasks"),
                        &json!({"title": format!("task {i}"), "description": key}),
                    )
                    .await
                    .expect("create task");
                assert_eq!(r.status, 201, "{}", r.json);
                r.json["data"]["id"].as_i64().expect("task id")
            }
        })
        .buffered(12)
        .collect()
        .await;
    let workers = agents
        .into_iter()
        .enumerate()
        .map(|(i, (id, token))| Worker {
            id,
            token,
            home: i % n,
            rng: StdRng::seed_from_u64(seed * 1000 + i as u64),
            held: None,
            seq: 0,
        })
        .collect();
    (
        workers,
        World {
            tasks,
            orbits,
            hot: 24,
            seeder: (seeder_id, seeder),
        },
    )
}

/// One agent, one orbit, one task (for the single-instance tests).
pub async fn seed_small(net: &Net) -> (Vec<Worker>, World) {
    let mut home = 0;
    let (id, token) = net
        .register(&mut home, &json!({"type": "AGENT", "name": "rel-small"}))
        .await;
    let r = net
        .call(
            &mut home,
            Method::POST,
            "/api/v1/orbits",
            Some(&token),
            None,
            Some(&json!({"slug": format!("rel-{}", short_id()), "name": "small"})),
        )
        .await
        .expect("orbit");
    assert_eq!(r.status, 201, "{}", r.json);
    let orbit = r.json["data"]["id"].as_i64().expect("orbit id");
    let mut w = Worker {
        id,
        token: token.clone(),
        home: 0,
        rng: StdRng::seed_from_u64(3),
        held: None,
        seq: 0,
    };
    let r = w
        .write(
            net,
            Kind::CreateTask,
            &format!("/api/v1/orbits/{orbit}/tasks"),
            Value::Null,
        )
        .await
        .expect("task");
    assert_eq!(r.status, 201, "{}", r.json);
    let task = r.json["data"]["id"].as_i64().expect("task id");
    (
        vec![w],
        World {
            tasks: vec![task],
            orbits: vec![orbit],
            hot: 1,
            seeder: (id, token),
        },
    )
}
