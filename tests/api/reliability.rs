//! Reliability (issue 10): several `orbit-commons serve` processes on one database,
//! a SIGKILLed instance, a PostgreSQL restart and slow clients. Nothing a client was
//! told succeeded is lost or applied twice, and no two agents ever hold one task at
//! once. Every check is made afterwards from the database itself.
//!
//! Each test prints one `RELIABILITY ...` line with its figures (run with
//! `--nocapture` to see them); docs/RELIABILITY.md records the last ones.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diesel::sql_types::{BigInt, Nullable, Text};
use diesel::{Connection, PgConnection, QueryableByName, RunQueryDsl};
use futures::StreamExt;
use orbit_commons::db::embedded::Cluster;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::Method;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{sql_i64, Resp, RowLock, TestDb};

// ---------------------------------------------------------------------------
// Processes and directories, cleaned up whatever happens.

/// A temporary directory removed when dropped.
pub(crate) struct Scratch {
    pub(crate) dir: PathBuf,
}

impl Scratch {
    pub(crate) fn new(prefix: &str) -> Scratch {
        let dir = Path::new("/tmp").join(format!("{prefix}-{}", short_id()));
        std::fs::create_dir_all(&dir).expect("create a temporary directory");
        Scratch { dir }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub(crate) fn short_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..10].to_owned()
}

/// One `orbit-commons serve` process on its own port; killed when dropped (its log
/// tail is printed if the test is failing).
pub(crate) struct Serve {
    name: String,
    port: u16,
    child: Child,
    log: PathBuf,
}

impl Serve {
    pub(crate) fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub(crate) fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub(crate) fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let start = text.len().saturating_sub(6000);
        let start = (start..text.len())
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(text.len());
        text[start..].to_owned()
    }

    /// SIGKILL, as a crash: no graceful shutdown, no flushing of anything.
    fn sigkill(&mut self) -> std::process::ExitStatus {
        // SAFETY: signalling the child process we started.
        let rc = unsafe { libc::kill(self.pid(), libc::SIGKILL) };
        assert_eq!(rc, 0, "kill -9 {}", self.pid());
        self.child.wait().expect("reap the killed instance")
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if self.alive() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "----- {} (port {}) log tail -----\n{}",
                self.name,
                self.port,
                self.log_tail()
            );
        }
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("local address").port()
}

/// The settings every load test instance runs with (plus `DATABASE_URL`).
pub(crate) fn load_env(database_url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("DATABASE_URL", database_url.to_owned()),
        ("ORBIT_LOG", "warn".into()),
        ("ORBIT_RATE_LIMIT_PER_MINUTE", "1000000".into()),
        ("ORBIT_ANON_RATE_LIMIT_PER_MINUTE", "1000000".into()),
        ("ORBIT_REGISTER_RATE_LIMIT_PER_HOUR", "1000000".into()),
        ("ORBIT_TEST_SHORT_DURATIONS", "true".into()),
        ("ORBIT_DB_POOL_SIZE", "6".into()),
        ("ORBIT_WORKERS", "1".into()),
    ]
}

/// Starts `orbit-commons serve` with exactly these `ORBIT_*` settings on a free port
/// and waits until `/readyz` answers 200.
pub(crate) async fn start_serve(log_dir: &Path, name: &str, env: &[(&str, String)]) -> Serve {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let port = free_port();
        let log = log_dir.join(format!("{name}.log"));
        let file = File::create(&log).expect("create the log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_orbit-commons"));
        cmd.arg("serve");
        for (k, _) in std::env::vars() {
            if k.starts_with("ORBIT_") || k == "DATABASE_URL" {
                cmd.env_remove(k);
            }
        }
        cmd.env("ORBIT_BIND", format!("127.0.0.1:{port}"))
            .env("ORBIT_LOG_FORMAT", "pretty")
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log file"))
            .stderr(file);
        let child = cmd.spawn().expect("start orbit-commons serve");
        let mut serve = Serve {
            name: name.to_owned(),
            port,
            child,
            log,
        };
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .expect("client");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = client
                .get(format!("{}/readyz", serve.base()))
                .send()
                .await
                .map(|r| r.status().as_u16() == 200)
                .unwrap_or(false);
            if ready {
                return serve;
            }
            if !serve.alive() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{name}: /readyz not 200 within 60 s:\n{}",
                serve.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // It exited: a port taken between our probe and its bind is worth a retry.
        let tail = serve.log_tail();
        assert!(
            attempt < 3 && tail.contains("cannot listen"),
            "{name} exited at start:\n{tail}"
        );
    }
}

// ---------------------------------------------------------------------------
// The load: agents that acquire, checkpoint, release, hand off and accept, with an
// Idempotency-Key on every write and the same key on every retry.

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    CreateTask,
    Acquire,
    Checkpoint,
    Release,
    Offer,
    Accept,
}

const KINDS: [Kind; 6] = [
    Kind::CreateTask,
    Kind::Acquire,
    Kind::Checkpoint,
    Kind::Release,
    Kind::Offer,
    Kind::Accept,
];

impl Kind {
    /// The idempotency scope (method + route template) of this write.
    fn operation(self) -> &'static str {
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
    fn change(self) -> &'static str {
        match self {
            Kind::CreateTask => "task.created",
            Kind::Acquire => "lease.acquired",
            Kind::Checkpoint => "checkpoint.created",
            Kind::Release => "lease.released",
            Kind::Offer => "handoff.offered",
            Kind::Accept => "handoff.accepted",
        }
    }

    fn name(self) -> &'static str {
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
struct Ack {
    kind: Kind,
    key: String,
    agent: i64,
    data: Value,
}

#[derive(Default)]
struct Stats {
    /// Writes intended (one key each).
    writes: AtomicU64,
    /// Reads (inbox) intended.
    reads: AtomicU64,
    /// HTTP requests actually sent, retries included.
    attempts: AtomicU64,
    /// Retries after a connection error or timeout (same key, another instance).
    transport_retries: AtomicU64,
    /// Retries after 503 or 409 `idempotency_key_in_flight`.
    busy_retries: AtomicU64,
    /// 5xx other than 503 (each a bug).
    server_errors: AtomicU64,
    /// Responses with `Idempotency-Replayed: true`.
    replays: AtomicU64,
    /// Requests whose first answer was lost and whose retry replayed the stored one.
    recovered_by_replay: AtomicU64,
    /// Requests given up on (never answered).
    unresolved: AtomicU64,
    conflicts: Mutex<BTreeMap<String, u64>>,
    acks: Mutex<Vec<Ack>>,
}

impl Stats {
    fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    fn conflicts_total(&self) -> u64 {
        self.conflicts.lock().unwrap().values().sum()
    }
}

struct Reply {
    status: u16,
    json: Value,
}

#[derive(Clone)]
struct Net {
    client: reqwest::Client,
    bases: Arc<Vec<String>>,
    stats: Arc<Stats>,
}

impl Net {
    fn new(bases: Vec<String>) -> Net {
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

    /// Sends a request to the agent's home instance. A connection error or timeout
    /// moves the agent to the next instance and retries with the same key; 503, 5xx
    /// and 409 `idempotency_key_in_flight` retry with the same key after a pause.
    async fn call(
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
    async fn write(
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

struct World {
    tasks: Vec<i64>,
    orbits: Vec<i64>,
    /// The first `hot` tasks are picked half of the time, so agents meet.
    hot: usize,
    /// The owner of the orbits (id, token).
    seeder: (i64, String),
}

#[derive(Debug, Clone, Copy)]
struct Held {
    task: i64,
    lease: i64,
    version: i64,
    checkpoint: Option<i64>,
}

struct Worker {
    id: i64,
    token: String,
    home: usize,
    rng: StdRng,
    held: Option<Held>,
    seq: u64,
}

impl Worker {
    fn key(&mut self, what: &str) -> String {
        self.seq += 1;
        format!("{what}-{}-{}-{}", self.id, self.seq, short_id())
    }

    async fn write(&mut self, net: &Net, kind: Kind, path: &str, body: Value) -> Option<Reply> {
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

    async fn acquire(&mut self, net: &Net, world: &World) {
        let i = if self.rng.gen_bool(0.5) {
            self.rng.gen_range(0..world.hot)
        } else {
            self.rng.gen_range(0..world.tasks.len())
        };
        let task = world.tasks[i];
        let seconds = self.rng.gen_range(1..=3);
        let r = self
            .write(
                net,
                Kind::Acquire,
                &format!("/api/v1/tasks/{task}/leases"),
                json!({"duration_seconds": seconds}),
            )
            .await;
        if let Some(r) = r.filter(|r| r.status == 201) {
            self.held = Some(Held {
                task,
                lease: r.json["data"]["id"].as_i64().expect("lease id"),
                version: r.json["data"]["lease_version"].as_i64().expect("version"),
                checkpoint: None,
            });
        }
    }

    /// Accepts a random pending handoff from the inbox; false when there was none.
    async fn accept_from_inbox(&mut self, net: &Net) -> bool {
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
        let seconds = self.rng.gen_range(1..=3);
        let r = self
            .write(
                net,
                Kind::Accept,
                &format!("/api/v1/handoffs/{handoff}/accept"),
                json!({"duration_seconds": seconds}),
            )
            .await;
        if let Some(r) = r.filter(|r| r.status == 200) {
            let d = &r.json["data"];
            self.held = Some(Held {
                task: d["task_id"].as_i64().expect("task id"),
                lease: d["lease"]["id"].as_i64().expect("lease id"),
                version: d["lease"]["lease_version"].as_i64().expect("version"),
                checkpoint: d["handoff"]["checkpoint_id"].as_i64(),
            });
        }
        true
    }

    async fn step(&mut self, net: &Net, world: &World) {
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

async fn run_agent(net: Net, world: Arc<World>, mut w: Worker, deadline: Instant) {
    while Instant::now() < deadline {
        w.step(&net, &world).await;
    }
}

const AGENTS: usize = 16;
const ORBITS: usize = 4;
const TASKS: usize = 200;
/// How long the agents race, per load test.
const LOAD_SECONDS: u64 = 9;

/// Registers a seeder and 16 agents (homes spread over the instances), creates the
/// orbits (every agent joins every one) and 200 tasks, each with its own key.
async fn seed(net: &Net, seed: u64) -> (Vec<Worker>, World) {
    let n = net.bases.len();
    let register = |i: usize| {
        let net = net.clone();
        let mut home = i % n;
        async move {
            let r = net
                .call(
                    &mut home,
                    Method::POST,
                    "/api/v1/contributors",
                    None,
                    None,
                    Some(&json!({"type": "AGENT", "name": format!("rel-agent-{i}"), "model_claim": "test"})),
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

// ---------------------------------------------------------------------------
// The invariants, read from the database.

#[derive(QueryableByName)]
struct LeaseRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = BigInt)]
    task_id: i64,
    #[diesel(sql_type = BigInt)]
    contributor_id: i64,
    #[diesel(sql_type = BigInt)]
    lease_version: i64,
    #[diesel(sql_type = Nullable<Text>)]
    end_reason: Option<String>,
}

#[derive(QueryableByName)]
struct CheckpointRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = BigInt)]
    task_id: i64,
    #[diesel(sql_type = BigInt)]
    sequence: i64,
    #[diesel(sql_type = BigInt)]
    author_id: i64,
    #[diesel(sql_type = Text)]
    summary: String,
}

#[derive(QueryableByName)]
struct HandoffRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = BigInt)]
    task_id: i64,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = BigInt)]
    from_contributor: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    accepted_by: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    accepted_lease_id: Option<i64>,
    #[diesel(sql_type = Text)]
    message: String,
}

#[derive(QueryableByName)]
struct TaskRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Text)]
    description: String,
}

#[derive(QueryableByName)]
struct KeyRow {
    #[diesel(sql_type = BigInt)]
    contributor_id: i64,
    #[diesel(sql_type = Text)]
    operation: String,
    #[diesel(sql_type = Text)]
    key: String,
    #[diesel(sql_type = Text)]
    body: String,
}

#[derive(QueryableByName)]
struct KindCount {
    #[diesel(sql_type = Text)]
    kind: String,
    #[diesel(sql_type = BigInt)]
    n: i64,
}

fn load<T: QueryableByName<diesel::pg::Pg> + 'static>(
    conn: &mut PgConnection,
    sql: &str,
) -> Vec<T> {
    diesel::sql_query(sql)
        .load(conn)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// What the database holds after a run; every `violations` entry is a broken promise.
struct Audit {
    leases: i64,
    checkpoints: i64,
    handoffs: i64,
    accepted: i64,
    changes: i64,
    violations: Vec<String>,
}

impl Audit {
    fn check(&mut self, what: &str, bad: i64) {
        if bad != 0 {
            self.violations.push(format!("{what}: {bad}"));
        }
    }
}

/// Checks every invariant of issue 10 against the database and the acknowledgements.
fn audit(conn: &mut PgConnection, acks: &[Ack]) -> Audit {
    let mut a = Audit {
        leases: sql_i64(conn, "SELECT count(*) AS n FROM leases"),
        checkpoints: sql_i64(conn, "SELECT count(*) AS n FROM checkpoints"),
        handoffs: sql_i64(conn, "SELECT count(*) AS n FROM handoffs"),
        accepted: sql_i64(
            conn,
            "SELECT count(*) AS n FROM handoffs WHERE status = 'ACCEPTED'",
        ),
        changes: sql_i64(conn, "SELECT count(*) AS n FROM changes"),
        violations: Vec::new(),
    };

    // 1. No two leases of one task overlap in active time.
    let overlaps = sql_i64(
        conn,
        "SELECT count(*) AS n FROM leases a JOIN leases b \
           ON a.task_id = b.task_id AND a.id < b.id \
          AND tstzrange(a.acquired_at, COALESCE(a.released_at, a.expires_at), '[)') \
           && tstzrange(b.acquired_at, COALESCE(b.released_at, b.expires_at), '[)')",
    );
    a.check("overlapping leases of one task", overlaps);
    // 2. lease_version per task is 1..N and strictly increases with acquired_at.
    let versions = sql_i64(
        conn,
        "SELECT count(*) AS n FROM ( \
           SELECT lease_version, acquired_at, \
                  row_number() OVER w AS rn, lag(acquired_at) OVER w AS prev \
           FROM leases WINDOW w AS (PARTITION BY task_id ORDER BY lease_version)) s \
         WHERE lease_version <> rn OR prev >= acquired_at",
    );
    a.check("lease versions not 1..N in acquisition order", versions);
    let task_versions = sql_i64(
        conn,
        "SELECT count(*) AS n FROM tasks t \
         WHERE t.lease_version <> (SELECT count(*) FROM leases l WHERE l.task_id = t.id)",
    );
    a.check(
        "tasks whose lease_version is not their lease count",
        task_versions,
    );
    let open = sql_i64(
        conn,
        "SELECT count(*) AS n FROM (SELECT task_id FROM leases WHERE end_reason IS NULL \
         AND expires_at > clock_timestamp() GROUP BY task_id HAVING count(*) > 1) s",
    );
    a.check("tasks with two active leases", open);
    // 3. Checkpoint sequences per task are 1..N, in time order, and every checkpoint
    // was written by the holder of the lease it names while that lease was active
    // (2 s of slack only for the expiry racing the insert inside one transaction).
    let gaps = sql_i64(
        conn,
        "SELECT count(*) AS n FROM ( \
           SELECT sequence, created_at, row_number() OVER w AS rn, lag(created_at) OVER w AS prev \
           FROM checkpoints WINDOW w AS (PARTITION BY task_id ORDER BY sequence)) s \
         WHERE sequence <> rn OR prev > created_at",
    );
    a.check("checkpoint sequences not 1..N", gaps);
    let counters = sql_i64(
        conn,
        "SELECT count(*) AS n FROM tasks t WHERE t.checkpoint_sequence <> \
         (SELECT count(*) FROM checkpoints c WHERE c.task_id = t.id)",
    );
    a.check(
        "tasks whose checkpoint counter is not their checkpoint count",
        counters,
    );
    let unfenced = sql_i64(
        conn,
        "SELECT count(*) AS n FROM checkpoints c \
         LEFT JOIN leases l ON l.task_id = c.task_id AND l.lease_version = c.lease_version \
         WHERE l.id IS NULL OR l.contributor_id <> c.author_id OR c.created_at < l.acquired_at \
            OR c.created_at >= COALESCE(l.released_at, l.expires_at) + interval '2 seconds'",
    );
    a.check(
        "checkpoints not written under their author's active lease",
        unfenced,
    );
    let handoffs_unfenced = sql_i64(
        conn,
        "SELECT count(*) AS n FROM handoffs h \
         LEFT JOIN leases l ON l.task_id = h.task_id AND l.lease_version = h.lease_version \
         LEFT JOIN checkpoints c ON c.id = h.checkpoint_id \
         WHERE l.id IS NULL OR l.contributor_id <> h.from_contributor \
            OR c.task_id IS DISTINCT FROM h.task_id",
    );
    a.check(
        "handoffs not offered by their lease holder",
        handoffs_unfenced,
    );
    let accepted = sql_i64(
        conn,
        "SELECT count(*) AS n FROM handoffs h LEFT JOIN leases l ON l.id = h.accepted_lease_id \
         WHERE h.status = 'ACCEPTED' AND (l.id IS NULL OR l.contributor_id <> h.accepted_by \
            OR l.task_id <> h.task_id OR l.lease_version <= h.lease_version)",
    );
    a.check("accepted handoffs without their new lease", accepted);
    // 4. Every orbit's changes are exactly revisions 1..orbits.revision.
    let dense = sql_i64(
        conn,
        "SELECT count(*) AS n FROM orbits o \
         WHERE o.revision <> (SELECT count(*) FROM changes c WHERE c.orbit_id = o.id) \
            OR o.revision <> COALESCE((SELECT max(revision) FROM changes c WHERE c.orbit_id = o.id), 0)",
    );
    a.check("orbits whose changes are not 1..revision", dense);

    // 5. Each write ran once: one stored key per effect and one effect per stored key.
    let keys: Vec<KeyRow> = load(
        conn,
        "SELECT contributor_id, operation, key, convert_from(response_body, 'UTF8') AS body \
         FROM idempotency_keys",
    );
    let kinds: Vec<KindCount> = load(
        conn,
        "SELECT kind, count(*) AS n FROM changes GROUP BY kind",
    );
    let changes_of: HashMap<String, i64> = kinds.into_iter().map(|k| (k.kind, k.n)).collect();
    let mut stored: HashMap<(i64, &str, &str), Value> = HashMap::new();
    let mut per_op: HashMap<&str, i64> = HashMap::new();
    for k in &keys {
        *per_op.entry(k.operation.as_str()).or_default() += 1;
        let body: Value = serde_json::from_str(&k.body).unwrap_or(Value::Null);
        stored.insert(
            (k.contributor_id, k.operation.as_str(), k.key.as_str()),
            body,
        );
    }
    for kind in KINDS {
        let keyed = per_op.get(kind.operation()).copied().unwrap_or(0);
        let effects = changes_of.get(kind.change()).copied().unwrap_or(0);
        if keyed != effects {
            a.violations.push(format!(
                "{}: {keyed} stored keys but {effects} `{}` changes",
                kind.name(),
                kind.change()
            ));
        }
    }
    let acquired = per_op.get(Kind::Acquire.operation()).copied().unwrap_or(0);
    let accepts = per_op.get(Kind::Accept.operation()).copied().unwrap_or(0);
    a.check(
        "leases not issued by exactly one acquire or accept key",
        a.leases - acquired - accepts,
    );
    a.check(
        "checkpoints without exactly one key",
        a.checkpoints
            - per_op
                .get(Kind::Checkpoint.operation())
                .copied()
                .unwrap_or(0),
    );
    a.check(
        "handoffs without exactly one key",
        a.handoffs - per_op.get(Kind::Offer.operation()).copied().unwrap_or(0),
    );
    let tasks = sql_i64(conn, "SELECT count(*) AS n FROM tasks");
    a.check(
        "tasks without exactly one key",
        tasks
            - per_op
                .get(Kind::CreateTask.operation())
                .copied()
                .unwrap_or(0),
    );
    for (what, sql) in [
        (
            "checkpoints written twice for one key",
            "SELECT count(*) AS n FROM (SELECT summary FROM checkpoints GROUP BY summary HAVING count(*) > 1) s",
        ),
        (
            "handoffs offered twice for one key",
            "SELECT count(*) AS n FROM (SELECT message FROM handoffs GROUP BY message HAVING count(*) > 1) s",
        ),
        (
            "tasks created twice for one key",
            "SELECT count(*) AS n FROM (SELECT description FROM tasks GROUP BY description HAVING count(*) > 1) s",
        ),
        (
            "leases issued twice for one acquire key",
            "SELECT count(*) - count(DISTINCT convert_from(response_body, 'UTF8')::jsonb #>> '{data,id}') AS n \
             FROM idempotency_keys WHERE operation = 'POST /api/v1/tasks/{task}/leases'",
        ),
    ] {
        let bad = sql_i64(conn, sql);
        a.check(what, bad);
    }

    // 6. Every acknowledged write is there, as the client saw it.
    let leases: HashMap<i64, LeaseRow> = load::<LeaseRow>(
        conn,
        "SELECT id, task_id, contributor_id, lease_version, end_reason FROM leases",
    )
    .into_iter()
    .map(|l| (l.id, l))
    .collect();
    let checkpoints: HashMap<i64, CheckpointRow> = load::<CheckpointRow>(
        conn,
        "SELECT id, task_id, sequence, author_id, summary FROM checkpoints",
    )
    .into_iter()
    .map(|c| (c.id, c))
    .collect();
    let handoffs: HashMap<i64, HandoffRow> = load::<HandoffRow>(
        conn,
        "SELECT id, task_id, status, from_contributor, accepted_by, accepted_lease_id, message \
         FROM handoffs",
    )
    .into_iter()
    .map(|h| (h.id, h))
    .collect();
    let task_rows: HashMap<i64, TaskRow> =
        load::<TaskRow>(conn, "SELECT id, description FROM tasks")
            .into_iter()
            .map(|t| (t.id, t))
            .collect();
    let mut missing = Vec::new();
    let mut seen_keys = HashSet::new();
    for ack in acks {
        let d = &ack.data;
        let id = d["id"].as_i64().unwrap_or(0);
        let present = match ack.kind {
            Kind::CreateTask => task_rows.get(&id).is_some_and(|t| t.description == ack.key),
            Kind::Acquire => leases.get(&id).is_some_and(|l| {
                l.contributor_id == ack.agent
                    && Some(l.task_id) == d["task_id"].as_i64()
                    && Some(l.lease_version) == d["lease_version"].as_i64()
            }),
            Kind::Checkpoint => checkpoints.get(&id).is_some_and(|c| {
                c.author_id == ack.agent
                    && Some(c.task_id) == d["task_id"].as_i64()
                    && Some(c.sequence) == d["sequence"].as_i64()
                    && c.summary == format!("checkpoint {}", ack.key)
            }),
            Kind::Release => leases.get(&id).is_some_and(|l| {
                l.contributor_id == ack.agent && l.end_reason.as_deref() == Some("RELEASED")
            }),
            Kind::Offer => handoffs.get(&id).is_some_and(|h| {
                h.from_contributor == ack.agent
                    && Some(h.task_id) == d["task_id"].as_i64()
                    && h.message == format!("handoff {}", ack.key)
            }),
            Kind::Accept => {
                let hid = d["handoff"]["id"].as_i64().unwrap_or(0);
                let lid = d["lease"]["id"].as_i64().unwrap_or(0);
                handoffs.get(&hid).is_some_and(|h| {
                    h.status == "ACCEPTED"
                        && h.accepted_by == Some(ack.agent)
                        && h.accepted_lease_id == Some(lid)
                }) && leases
                    .get(&lid)
                    .is_some_and(|l| l.contributor_id == ack.agent)
            }
        };
        // The stored response for that key is the one the client was given.
        let same_response = stored
            .get(&(ack.agent, ack.kind.operation(), ack.key.as_str()))
            .is_some_and(|body| body["data"] == ack.data);
        if !present || !same_response {
            missing.push(format!(
                "{} key {} (present: {present}, stored response matches: {same_response}): {}",
                ack.kind.name(),
                ack.key,
                ack.data
            ));
        }
        if !seen_keys.insert((ack.agent, ack.kind, ack.key.clone())) {
            missing.push(format!("key {} acknowledged twice", ack.key));
        }
    }
    if !missing.is_empty() {
        a.violations.push(format!(
            "{} acknowledged writes missing or different, e.g. {:?}",
            missing.len(),
            &missing[..missing.len().min(5)]
        ));
    }
    a
}

fn ack_counts(acks: &[Ack]) -> BTreeMap<&'static str, usize> {
    let mut m = BTreeMap::new();
    for a in acks {
        *m.entry(a.kind.name()).or_default() += 1;
    }
    m
}

/// Prints one line of figures for docs/RELIABILITY.md.
fn report(test: &str, net: &Net, audit: &Audit, elapsed: Duration, extra: &str) {
    let s = &net.stats;
    let acks = s.acks.lock().unwrap();
    eprintln!(
        "RELIABILITY {test}: {:.1} s; writes {} (+{} inbox reads), requests sent {}, \
         acknowledged {} {:?}; conflicts {} {:?}; retries: transport {} busy(503/in-flight) {}; \
         replays {} (recovered lost answers {}); unresolved {}; 5xx {}; \
         db: leases {} checkpoints {} handoffs {} (accepted {}) changes {}; violations {}{extra}",
        elapsed.as_secs_f64(),
        Stats::get(&s.writes),
        Stats::get(&s.reads),
        Stats::get(&s.attempts),
        acks.len(),
        ack_counts(&acks),
        s.conflicts_total(),
        s.conflicts.lock().unwrap(),
        Stats::get(&s.transport_retries),
        Stats::get(&s.busy_retries),
        Stats::get(&s.replays),
        Stats::get(&s.recovered_by_replay),
        Stats::get(&s.unresolved),
        Stats::get(&s.server_errors),
        audit.leases,
        audit.checkpoints,
        audit.handoffs,
        audit.accepted,
        audit.changes,
        audit.violations.len(),
    );
}

/// Three instances on one fresh database, with extra settings.
async fn fleet(db: &TestDb, logs: &Path, extra: &[(&'static str, String)]) -> Vec<Serve> {
    let mut env = load_env(&db.url);
    env.extend(extra.iter().cloned());
    let names: Vec<String> = (0..3).map(|i| format!("instance-{i}")).collect();
    futures::future::join_all(names.iter().map(|n| start_serve(logs, n, &env))).await
}

// ---------------------------------------------------------------------------
// 1. Many instances.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_instances_never_overlap_leases() {
    let started = Instant::now();
    let db = TestDb::new();
    let logs = Scratch::new("oc-rel-many");
    let serves = fleet(&db, &logs.dir, &[]).await;
    let net = Net::new(serves.iter().map(Serve::base).collect());
    let (workers, world) = seed(&net, 1).await;
    let world = Arc::new(world);
    let setup = started.elapsed();

    let load_started = Instant::now();
    let deadline = load_started + Duration::from_secs(LOAD_SECONDS);
    let agents: Vec<_> = workers
        .into_iter()
        .map(|w| tokio::spawn(run_agent(net.clone(), world.clone(), w, deadline)))
        .collect();
    for a in agents {
        a.await.expect("agent task");
    }

    let acks = net.stats.acks.lock().unwrap().clone();
    let audit = audit(&mut db.conn(), &acks);
    report(
        "many_instances_never_overlap_leases",
        &net,
        &audit,
        started.elapsed(),
        &format!(
            "; 3 instances, {AGENTS} agents, {TASKS} seeded tasks in {ORBITS} orbits; \
             setup {:.1} s, load {LOAD_SECONDS} s",
            setup.as_secs_f64()
        ),
    );
    assert!(
        audit.violations.is_empty(),
        "violations: {:#?}",
        audit.violations
    );
    let s = &net.stats;
    assert_eq!(Stats::get(&s.server_errors), 0, "5xx seen");
    assert_eq!(Stats::get(&s.unresolved), 0, "requests never answered");
    // The run exercised what it claims to: contention, expiry, handoffs.
    let counts = ack_counts(&acks);
    for kind in ["acquire", "checkpoint", "release", "offer", "accept"] {
        assert!(
            counts.get(kind).copied().unwrap_or(0) > 0,
            "no {kind} succeeded: {counts:?}"
        );
    }
    let conflicts = s.conflicts.lock().unwrap().clone();
    assert!(
        conflicts.get("lease_conflict").copied().unwrap_or(0) > 0,
        "agents never met: {conflicts:?}"
    );
    let expired = sql_i64(
        &mut db.conn(),
        "SELECT count(*) AS n FROM leases WHERE expires_at <= clock_timestamp() AND released_at IS NULL",
    );
    assert!(expired > 0, "no lease ever ran out");
    for mut s in serves {
        assert!(s.alive(), "{} died:\n{}", s.name, s.log_tail());
    }
}

// ---------------------------------------------------------------------------
// 2. Crash: SIGKILL one instance under load; clients retry elsewhere with the same key.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_kill_retry_applies_each_write_once() {
    let started = Instant::now();
    let db = TestDb::new();
    let logs = Scratch::new("oc-rel-crash");
    // A lock timeout (half of this) well above the time the two straddling writes
    // below wait on the test's row locks, so neither gives up before the kill.
    let mut serves = fleet(&db, &logs.dir, &[("ORBIT_DB_TIMEOUT_MS", "30000".into())]).await;
    let net = Net::new(serves.iter().map(Serve::base).collect());
    let (workers, world) = seed(&net, 2).await;
    let world = Arc::new(world);
    let setup = started.elapsed();

    let load_started = Instant::now();
    let deadline = load_started + Duration::from_secs(LOAD_SECONDS);
    let agents: Vec<_> = workers
        .into_iter()
        .map(|w| tokio::spawn(run_agent(net.clone(), world.clone(), w, deadline)))
        .collect();
    // Two writes are made to straddle the crash deterministically, on tasks of their
    // own that no agent touches, both sent to instance-0 while a row lock held here
    // keeps them inside their transaction:
    // - `lost`: its client gives up (timeout); the lock is lifted, the instance
    //   commits and answers nobody; after the crash its retry must replay the
    //   original lease, not acquire again;
    // - `cut`: still waiting on the lock when the instance is SIGKILLed; its retry
    //   must execute exactly once.
    let (seeder_id, seeder) = world.seeder.clone();
    let mut probe_tasks = Vec::new();
    for i in 0..2 {
        let key = format!("probe-task-{}", short_id());
        let r = net
            .write(
                &mut (i + 1),
                Kind::CreateTask,
                seeder_id,
                &seeder,
                &key,
                &format!("/api/v1/orbits/{}/tasks", world.orbits[0]),
                &json!({"title": "probe", "description": key}),
            )
            .await
            .expect("probe task");
        assert_eq!(r.status, 201, "{}", r.json);
        probe_tasks.push(r.json["data"]["id"].as_i64().expect("task id"));
    }
    let (lost_task, cut_task) = (probe_tasks[0], probe_tasks[1]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut monitor = db.conn();
    let lost_lock = RowLock::take(&db, lost_task);
    let cut_lock = RowLock::take(&db, cut_task);
    let acquire = |task: i64, base: &str, key: &str, timeout: Duration| {
        net.client
            .post(format!("{base}/api/v1/tasks/{task}/leases"))
            .bearer_auth(&seeder)
            .header("Idempotency-Key", key)
            .timeout(timeout)
            .json(&json!({"duration_seconds": 3600}))
            .send()
    };
    let (lost_key, cut_key) = (
        format!("lost-{}", short_id()),
        format!("cut-{}", short_id()),
    );
    // One after the other: sent together, both could go in one group of quick
    // writes (src/quick.rs), and `lost` would then wait for `cut`'s lock too. Sent
    // once `lost` waits, `cut` runs in the queue's second lane.
    let lost = tokio::spawn(acquire(
        lost_task,
        &serves[0].base(),
        &lost_key,
        Duration::from_secs(60),
    ));
    assert!(
        lost_lock.waiters(&mut monitor) >= 1,
        "the `lost` write is not waiting on the lock"
    );
    let cut = tokio::spawn(acquire(
        cut_task,
        &serves[0].base(),
        &cut_key,
        Duration::from_secs(60),
    ));
    assert!(
        cut_lock.waiters(&mut monitor) >= 1,
        "the `cut` write is not waiting on the lock"
    );
    // The `lost` client gives up (as on a timeout): its connection closes unanswered.
    lost.abort();
    assert!(lost.await.is_err(), "the locked write answered");
    lost_lock.release();
    let committed = Instant::now();
    while sql_i64(
        &mut monitor,
        &format!("SELECT count(*) AS n FROM idempotency_keys WHERE key = '{lost_key}'"),
    ) == 0
    {
        assert!(
            committed.elapsed() < Duration::from_secs(10),
            "the `lost` write never committed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let in_flight_before = Stats::get(&net.stats.attempts);
    let retries_before = Stats::get(&net.stats.transport_retries);
    let status = serves[0].sigkill();
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    let killed_at = load_started.elapsed();
    assert!(
        cut.await.expect("cut task").is_err(),
        "the `cut` write was answered"
    );
    // Its statement is still queued on the lock; the server notices that its client
    // is gone (`client_connection_check_interval`) and cancels it, so the write
    // cannot commit after its instance died, even as one statement (src/quick.rs).
    let gone = Instant::now();
    while cut_lock.waiting_now(&mut monitor) > 0 {
        assert!(
            gone.elapsed() < Duration::from_secs(10),
            "the killed instance's statement still waits on the lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cut_lock.release();

    // Both retried with the same key on a surviving instance.
    let lost_retry = Resp::from(
        acquire(
            lost_task,
            &serves[1].base(),
            &lost_key,
            Duration::from_secs(20),
        )
        .await
        .expect("retry lost"),
    )
    .await;
    assert_eq!(lost_retry.status, 201, "{}", lost_retry.text);
    assert_eq!(
        lost_retry.header("idempotency-replayed"),
        Some("true"),
        "the committed write ran again"
    );
    let cut_retry = Resp::from(
        acquire(
            cut_task,
            &serves[2].base(),
            &cut_key,
            Duration::from_secs(20),
        )
        .await
        .expect("retry cut"),
    )
    .await;
    assert_eq!(cut_retry.status, 201, "{}", cut_retry.text);
    assert_eq!(
        cut_retry.header("idempotency-replayed"),
        None,
        "a rolled-back write replayed"
    );
    for (kind_key, r) in [(&lost_key, &lost_retry), (&cut_key, &cut_retry)] {
        net.stats.acks.lock().unwrap().push(Ack {
            kind: Kind::Acquire,
            key: kind_key.clone(),
            agent: seeder_id,
            data: r.json["data"].clone(),
        });
    }
    for task in [lost_task, cut_task] {
        let n = sql_i64(
            &mut monitor,
            &format!("SELECT count(*) AS n FROM leases WHERE task_id = {task}"),
        );
        assert_eq!(
            n, 1,
            "task {task} has {n} leases after one acquire retried across a crash"
        );
    }

    for a in agents {
        a.await.expect("agent task");
    }

    let acks = net.stats.acks.lock().unwrap().clone();
    let audit = audit(&mut db.conn(), &acks);
    let s = &net.stats;
    let retries_after_kill = Stats::get(&s.transport_retries) - retries_before;
    report(
        "crash_kill_retry_applies_each_write_once",
        &net,
        &audit,
        started.elapsed(),
        &format!(
            "; 3 instances, {AGENTS} agents, {TASKS} seeded tasks in {ORBITS} orbits; \
             setup {:.1} s, load {LOAD_SECONDS} s; instance-0 SIGKILLed {:.1} s into the load \
             after {in_flight_before} requests; transport retries after the kill {retries_after_kill}; \
             write committed with its answer lost: retried, replayed (1 lease); write cut by the \
             kill mid-transaction: retried, executed once (1 lease)",
            setup.as_secs_f64(),
            killed_at.as_secs_f64()
        ),
    );
    assert!(
        audit.violations.is_empty(),
        "violations: {:#?}",
        audit.violations
    );
    assert_eq!(Stats::get(&s.server_errors), 0, "5xx seen");
    assert_eq!(
        Stats::get(&s.unresolved),
        0,
        "requests never answered after the crash"
    );
    assert!(
        retries_after_kill > 0,
        "no client ever noticed the crash: the test did not test it"
    );
    let counts = ack_counts(&acks);
    assert!(counts.get("checkpoint").copied().unwrap_or(0) > 0);
    for s in serves.iter_mut().skip(1) {
        assert!(s.alive(), "{} died:\n{}", s.name, s.log_tail());
    }
}

// ---------------------------------------------------------------------------
// 3. PostgreSQL restart under load: 503 in the envelope, then the same process serves.

/// A private cluster in a short temporary directory: stopped and removed when
/// dropped, whatever state the test left it in.
pub(crate) struct PrivatePg {
    pub(crate) dir: PathBuf,
    pub(crate) cluster: Option<Cluster>,
}

impl PrivatePg {
    pub(crate) fn cluster(&self) -> &Cluster {
        self.cluster.as_ref().expect("cluster")
    }
}

impl Drop for PrivatePg {
    fn drop(&mut self) {
        if let Some(mut c) = self.cluster.take() {
            c.stop();
        }
        // A postmaster left behind (e.g. by a failure during restart): SIGQUIT is
        // PostgreSQL's immediate shutdown.
        let pidfile = self.dir.join("postgres/data/postmaster.pid");
        if let Some(pid) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|t| t.lines().next().and_then(|l| l.trim().parse::<i32>().ok()))
        {
            // SAFETY: signalling the postmaster of our own cluster, by its pid file.
            unsafe {
                libc::kill(pid, libc::SIGQUIT);
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while pidfile.exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[derive(Debug, Clone)]
struct Sample {
    what: &'static str,
    sent: Instant,
    done: Instant,
    status: Option<u16>,
    envelope: bool,
    retry_after: bool,
    key: Option<String>,
}

/// One request as a light-load client sees it (no retries: every answer counts).
async fn probe(
    client: &reqwest::Client,
    base: &str,
    what: &'static str,
    token: &str,
    task: i64,
) -> Sample {
    let sent = Instant::now();
    let mut key = None;
    let req = match what {
        "read" => client.get(format!("{base}/api/v1/tasks/{task}")),
        "me" => client.get(format!("{base}/api/v1/me")).bearer_auth(token),
        "ready" => client.get(format!("{base}/readyz")),
        _ => {
            let k = format!("outage-{}", short_id());
            key = Some(k.clone());
            client
                .post(format!("{base}/api/v1/tasks/{task}/checkpoints"))
                .bearer_auth(token)
                .header("Idempotency-Key", &k)
                .json(
                    &json!({"lease_version": 1, "summary": format!("checkpoint {k}"), "state": {}}),
                )
        }
    };
    let (status, envelope, retry_after) = match req.send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            let retry_after = r.headers().contains_key("retry-after");
            let json_type = r
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("application/json"));
            let body: Value = r.json().await.unwrap_or(Value::Null);
            let envelope = json_type
                && body["message"].is_string()
                && body["code"].is_string()
                && body.as_object().is_some_and(|o| {
                    o.keys()
                        .all(|k| ["message", "code", "errors", "details"].contains(&k.as_str()))
                });
            (Some(status), envelope, retry_after)
        }
        Err(_) => (None, false, false),
    };
    Sample {
        what,
        sent,
        done: Instant::now(),
        status,
        envelope,
        retry_after,
        key,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_restart_gives_503_then_recovers() {
    const DB_TIMEOUT_MS: u64 = 1000;
    let started = Instant::now();
    let dir = Path::new("/tmp").join(format!("oc-rel-pg-{}", short_id()));
    let (cluster, url) = Cluster::start(&dir).expect("start a private PostgreSQL cluster");
    let pg = PrivatePg {
        dir,
        cluster: Some(cluster),
    };
    orbit_commons::db::migrate(&url).expect("migrate the private cluster");
    let mut env = load_env(&url);
    env.push(("ORBIT_DB_TIMEOUT_MS", DB_TIMEOUT_MS.to_string()));
    env.retain(|(k, _)| *k != "ORBIT_DB_POOL_SIZE");
    env.push(("ORBIT_DB_POOL_SIZE", "4".into()));
    let mut serve = start_serve(&pg.dir, "serve", &env).await;
    let pid = serve.pid();
    let base = serve.base();

    // An agent holding a long lease on one task: the load checkpoints it.
    let net = Net::new(vec![base.clone()]);
    let (mut workers, world) = seed_small(&net).await;
    let w = &mut workers[0];
    let task = world.tasks[0];
    let token = w.token.clone();
    let r = w
        .write(
            &net,
            Kind::Acquire,
            &format!("/api/v1/tasks/{task}/leases"),
            json!({"duration_seconds": 3600}),
        )
        .await
        .expect("acquire");
    assert_eq!(r.status, 201, "{}", r.json);
    assert_eq!(r.json["data"]["lease_version"], 1);

    // Light load: two clients, each cycling read / authenticated read / keyed write.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client");
    let stop = Arc::new(AtomicBool::new(false));
    let samples = Arc::new(Mutex::new(Vec::<Sample>::new()));
    let loaders: Vec<_> = (0..2)
        .map(|_| {
            let (client, base, token) = (client.clone(), base.clone(), token.clone());
            let (stop, samples) = (stop.clone(), samples.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    for what in ["read", "me", "write"] {
                        let s = probe(&client, &base, what, &token, task).await;
                        samples.lock().unwrap().push(s);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // Outage.
    tokio::task::block_in_place(|| pg.cluster().stop_now()).expect("stop PostgreSQL");
    let down = Instant::now();
    let mut outage_probes = Vec::new();
    for what in ["ready", "read", "me", "write"] {
        outage_probes.push(probe(&client, &base, what, &token, task).await);
    }
    let healthz = client
        .get(format!("{base}/healthz"))
        .send()
        .await
        .map(|r| r.status().as_u16());
    assert_eq!(
        healthz.ok(),
        Some(200),
        "the process is not up during the outage"
    );
    tokio::time::sleep_until((down + Duration::from_secs(4)).into()).await;
    assert!(
        serve.alive(),
        "the service died with the database:\n{}",
        serve.log_tail()
    );

    // Restart; the same process must serve again.
    let restart_called = Instant::now();
    tokio::task::block_in_place(|| pg.cluster().restart()).expect("restart PostgreSQL");
    let up = Instant::now();
    let ready_in = loop {
        let s = probe(&client, &base, "ready", &token, task).await;
        if s.status == Some(200) {
            break up.elapsed();
        }
        assert!(
            up.elapsed() < Duration::from_secs(20),
            "/readyz not 200 within 20 s of the restart: {s:?}\n{}",
            serve.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let steady = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    for l in loaders {
        l.await.expect("loader");
    }
    // Right after: every kind of request succeeds, many times in a row.
    for i in 0..30 {
        let what = ["read", "me", "write"][i % 3];
        let s = probe(&client, &base, what, &token, task).await;
        assert!(
            matches!(s.status, Some(200) | Some(201)),
            "request {i} ({what}) after recovery: {s:?}\n{}",
            serve.log_tail()
        );
    }
    assert!(serve.alive(), "the service exited");
    assert_eq!(serve.pid(), pid, "not the same process");

    let mut all = samples.lock().unwrap().clone();
    all.extend(outage_probes.iter().cloned());
    let limit = Duration::from_millis(DB_TIMEOUT_MS) + Duration::from_secs(2);
    let during: Vec<&Sample> = all
        .iter()
        .filter(|s| s.sent >= down && s.done < restart_called)
        .collect();
    let writes_during = during.iter().filter(|s| s.what == "write").count();
    assert!(
        during.len() >= 6,
        "too few requests during the outage: {during:?}"
    );
    let mut worst = Duration::ZERO;
    for s in &during {
        worst = worst.max(s.done - s.sent);
        assert!(
            s.status == Some(503) && s.envelope && s.retry_after,
            "during the outage: {s:?}"
        );
        assert!(s.done - s.sent <= limit, "hung past the timeout: {s:?}");
    }
    for s in &outage_probes {
        assert_eq!(s.status, Some(503), "probe during the outage: {s:?}");
    }
    let after: Vec<&Sample> = all.iter().filter(|s| s.sent >= steady).collect();
    for s in &after {
        assert!(
            matches!(s.status, Some(200) | Some(201)),
            "after recovery: {s:?}"
        );
    }
    let lost: Vec<&Sample> = all.iter().filter(|s| s.status.is_none()).collect();
    assert!(lost.is_empty(), "requests without an answer: {lost:?}");

    // Writes refused with 503 ran nowhere: retried with the same key they run once;
    // acknowledged ones are all there, once.
    let mut conn = PgConnection::establish(&url).expect("connect");
    let refused: Vec<String> = during.iter().filter_map(|s| s.key.clone()).collect();
    for k in &refused {
        let n = sql_i64(
            &mut conn,
            &format!("SELECT count(*) AS n FROM checkpoints WHERE summary = 'checkpoint {k}'"),
        );
        assert_eq!(n, 0, "a write answered 503 was applied: {k}");
        let r = client
            .post(format!("{base}/api/v1/tasks/{task}/checkpoints"))
            .bearer_auth(&token)
            .header("Idempotency-Key", k)
            .json(&json!({"lease_version": 1, "summary": format!("checkpoint {k}"), "state": {}}))
            .send()
            .await
            .expect("retry");
        assert_eq!(r.status(), 201, "retry of {k}");
    }
    let acked: Vec<String> = all
        .iter()
        .filter(|s| s.status == Some(201))
        .filter_map(|s| s.key.clone())
        .chain(refused.iter().cloned())
        .collect();
    for k in &acked {
        let n = sql_i64(
            &mut conn,
            &format!("SELECT count(*) AS n FROM checkpoints WHERE summary = 'checkpoint {k}'"),
        );
        assert_eq!(n, 1, "acknowledged checkpoint {k} stored {n} times");
    }
    let gaps = sql_i64(
        &mut conn,
        "SELECT count(*) AS n FROM orbits o WHERE o.revision <> (SELECT count(*) FROM changes c WHERE c.orbit_id = o.id)",
    );
    assert_eq!(gaps, 0, "revisions not dense after the restart");

    let ok_before = all
        .iter()
        .filter(|s| s.done < down && matches!(s.status, Some(200) | Some(201)))
        .count();
    eprintln!(
        "RELIABILITY database_restart_gives_503_then_recovers: {:.1} s; requests {} \
         (2xx before outage {ok_before}, during outage {} ({writes_during} writes) all 503 enveloped, worst latency {} ms \
         vs limit {} ms, after recovery {} all 2xx + 30 sequential 2xx); /readyz 200 {} ms after \
         restart; 503'd writes retried with the same key {} (applied once each); acknowledged \
         checkpoints {}; same pid {pid}; violations 0",
        started.elapsed().as_secs_f64(),
        all.len(),
        during.len(),
        worst.as_millis(),
        limit.as_millis(),
        after.len(),
        ready_in.as_millis(),
        refused.len(),
        acked.len(),
    );
    drop(serve);
}

/// One agent, one orbit, one task (for the single-instance tests).
async fn seed_small(net: &Net) -> (Vec<Worker>, World) {
    let mut home = 0;
    let r = net
        .call(
            &mut home,
            Method::POST,
            "/api/v1/contributors",
            None,
            None,
            Some(&json!({"type": "AGENT", "name": "rel-small"})),
        )
        .await
        .expect("register");
    assert_eq!(r.status, 201, "{}", r.json);
    let id = r.json["data"]["contributor"]["id"].as_i64().expect("id");
    let token = r.json["data"]["token"].as_str().expect("token").to_owned();
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

// ---------------------------------------------------------------------------
// 4. Slow clients hold neither a worker nor a database connection.

/// How a stalled connection ended: closed (EOF or reset), or answered 408 and closed.
async fn until_closed(stream: &mut tokio::net::TcpStream, limit: Duration) -> Option<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => {
                let text = String::from_utf8_lossy(&got);
                return Some(text.lines().next().unwrap_or("closed").to_owned());
            }
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

fn backends(conn: &mut PgConnection, db: &str, states: &str) -> i64 {
    sql_i64(
        conn,
        &format!(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = '{db}' \
             AND pid <> pg_backend_pid() AND backend_type = 'client backend' {states}"
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_client_does_not_hold_a_worker() {
    const TIMEOUT_S: u64 = 2;
    let started = Instant::now();
    let db = TestDb::new();
    let logs = Scratch::new("oc-rel-slow");
    let mut env = load_env(&db.url);
    env.retain(|(k, _)| *k != "ORBIT_DB_POOL_SIZE");
    env.push(("ORBIT_DB_POOL_SIZE", "2".into()));
    env.push(("ORBIT_CLIENT_TIMEOUT_SECONDS", TIMEOUT_S.to_string()));
    let mut serve = start_serve(&logs.dir, "serve", &env).await;
    let base = serve.base();
    let addr = format!("127.0.0.1:{}", serve.port);
    let net = Net::new(vec![base.clone()]);
    let (workers, _world) = seed_small(&net).await;
    let token = workers[0].token.clone();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    // Warm the pool to its size, then take the baseline.
    let warm: Vec<_> = (0..6)
        .map(|_| {
            client
                .get(format!("{base}/api/v1/me"))
                .bearer_auth(&token)
                .send()
        })
        .collect();
    for r in futures::future::join_all(warm).await {
        assert_eq!(r.expect("warm-up").status(), 200);
    }
    let mut monitor = db.conn();
    let baseline = backends(&mut monitor, &db.name, "");

    // 16 clients stop in the middle of their headers; 8 send whole headers of a write
    // and stall in its body; 4 finish one request and then idle on keep-alive.
    let mut stalled = Vec::new();
    let opened = Instant::now();
    for i in 0..16 {
        let mut s = tokio::net::TcpStream::connect(&addr)
            .await
            .expect("connect");
        s.write_all(
            format!("GET /api/v1/orbits HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow-{i}: ").as_bytes(),
        )
        .await
        .expect("partial head");
        stalled.push(("partial headers", s));
    }
    for _ in 0..8 {
        let mut s = tokio::net::TcpStream::connect(&addr)
            .await
            .expect("connect");
        let head = format!(
            "POST /api/v1/orbits HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"slug\": "
        );
        s.write_all(head.as_bytes()).await.expect("partial body");
        stalled.push(("stalled body", s));
    }
    for _ in 0..4 {
        let mut s = tokio::net::TcpStream::connect(&addr)
            .await
            .expect("connect");
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .expect("request");
        let mut buf = [0u8; 1024];
        let n = s.read(&mut buf).await.expect("response");
        assert!(
            buf[..n].starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&buf[..n])
        );
        stalled.push(("idle keep-alive", s));
    }

    // Meanwhile the single worker answers everyone else promptly, and the database
    // sees no more connections than before, none of them in a transaction.
    let mut worst = Duration::ZERO;
    for i in 0..12 {
        let t = Instant::now();
        let r = match i % 3 {
            0 => client.get(format!("{base}/api/v1/orbits")).send().await,
            1 => {
                client
                    .get(format!("{base}/api/v1/me"))
                    .bearer_auth(&token)
                    .send()
                    .await
            }
            _ => {
                client
                    .post(format!("{base}/api/v1/orbits"))
                    .bearer_auth(&token)
                    .json(&json!({"slug": format!("rel-slow-{i}-{}", short_id()), "name": "x"}))
                    .send()
                    .await
            }
        }
        .expect("a normal request while slow clients stall");
        assert!(r.status().is_success(), "{}", r.status());
        worst = worst.max(t.elapsed());
    }
    assert!(
        worst < Duration::from_secs(TIMEOUT_S),
        "a normal request waited {worst:?} behind slow clients"
    );
    let during = backends(&mut monitor, &db.name, "");
    // A stalled client holding a connection would keep it busy; the instance's own
    // background statements (a coalesced NOTIFY after the writes above, the purge)
    // are busy only for a moment, so look a few times.
    let mut busy = 0;
    for _ in 0..20 {
        busy = backends(
            &mut monitor,
            &db.name,
            "AND state IN ('active', 'idle in transaction', 'idle in transaction (aborted)')",
        );
        if busy == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        during <= baseline,
        "database connections grew while clients stalled: {baseline} -> {during}"
    );
    assert_eq!(busy, 0, "a stalled client holds a database connection");

    // The server closes each stalled connection after about the timeout.
    let mut closes = BTreeMap::<&str, (Duration, Duration, String)>::new();
    let limit = Duration::from_secs(TIMEOUT_S + 3);
    for (what, mut s) in stalled {
        let left = limit.saturating_sub(opened.elapsed());
        let how = until_closed(&mut s, left).await;
        let at = opened.elapsed();
        let how = how.unwrap_or_else(|| {
            panic!("a connection with {what} was still open {at:?} after it stalled (timeout {TIMEOUT_S} s)")
        });
        let e = closes
            .entry(what)
            .or_insert((Duration::MAX, Duration::ZERO, how.clone()));
        e.0 = e.0.min(at);
        e.1 = e.1.max(at);
    }
    for (what, (first, _, _)) in &closes {
        assert!(
            *first >= Duration::from_millis(TIMEOUT_S * 1000 / 2),
            "{what}: closed after {first:?}, long before the timeout"
        );
    }
    assert!(serve.alive(), "the service exited");
    let r = client
        .get(format!("{base}/api/v1/orbits"))
        .send()
        .await
        .expect("after");
    assert_eq!(r.status(), 200);
    eprintln!(
        "RELIABILITY slow_client_does_not_hold_a_worker: {:.1} s; 28 stalled connections \
         (16 partial headers, 8 stalled bodies, 4 idle keep-alive) against 1 worker; 12 normal \
         requests answered meanwhile, worst {} ms; db connections {baseline} before, {during} \
         during, {busy} busy; closed by the server (first..last, how): {:?}; violations 0",
        started.elapsed().as_secs_f64(),
        worst.as_millis(),
        closes
            .iter()
            .map(|(k, (a, b, how))| format!(
                "{k}: {:.1}..{:.1} s ({how})",
                a.as_secs_f64(),
                b.as_secs_f64()
            ))
            .collect::<Vec<_>>(),
    );
}

// ---------------------------------------------------------------------------
// 5. Hostile input (regression for what schemathesis found; the fuzzing itself is
// scripts/schemathesis.sh): U+0000, which PostgreSQL `text` cannot hold, is 422 in
// the envelope wherever it is sent, never a 500, and nothing is written.

#[tokio::test]
async fn nul_characters_in_text_are_422_not_500() {
    use crate::harness::TestApp;
    use crate::work::{checkpoint, crew, lease, task};
    let app = TestApp::spawn().await;
    let c = crew(&app, "nul", 1).await;
    let (owner, member) = (&c.owner, &c.members[0]);
    let t = task(&app, owner, c.orbit, "plain").await;
    let (_, v) = lease(&app, owner, t, 900).await;
    let r = checkpoint(&app, owner, t, v, json!({"fine": "\u{0}"})).await;
    assert_eq!(
        r.status, 201,
        "a NUL inside free-form JSON state is fine: {}",
        r.text
    );
    let ckpt = r.json["data"]["id"].as_i64().unwrap();
    let before = sql_i64(&mut app.db.conn(), "SELECT count(*) AS n FROM changes");

    let nul = "a\u{0}b";
    let cases: Vec<(&str, Method, String, Option<&str>, Value)> = vec![
        (
            "register name",
            Method::POST,
            "/api/v1/contributors".into(),
            None,
            json!({"type": "AGENT", "name": nul}),
        ),
        (
            "register model_claim",
            Method::POST,
            "/api/v1/contributors".into(),
            None,
            json!({"type": "AGENT", "name": "x", "model_claim": nul}),
        ),
        (
            "orbit name",
            Method::POST,
            "/api/v1/orbits".into(),
            Some(&owner.token),
            json!({"slug": "nul-orbit", "name": nul}),
        ),
        (
            "orbit description",
            Method::POST,
            "/api/v1/orbits".into(),
            Some(&owner.token),
            json!({"slug": "nul-orbit", "name": "x", "description": nul}),
        ),
        (
            "task title",
            Method::POST,
            format!("/api/v1/orbits/{}/tasks", c.orbit),
            Some(&owner.token),
            json!({"title": nul}),
        ),
        (
            "task description",
            Method::POST,
            format!("/api/v1/orbits/{}/tasks", c.orbit),
            Some(&owner.token),
            json!({"title": "x", "description": nul}),
        ),
        (
            "checkpoint summary",
            Method::POST,
            format!("/api/v1/tasks/{t}/checkpoints"),
            Some(&owner.token),
            json!({"lease_version": v, "summary": nul, "state": {}}),
        ),
        (
            "completion summary",
            Method::POST,
            format!("/api/v1/tasks/{t}/complete"),
            Some(&owner.token),
            json!({"lease_version": v, "summary": nul}),
        ),
        (
            "handoff message",
            Method::POST,
            format!("/api/v1/tasks/{t}/handoffs"),
            Some(&owner.token),
            json!({"lease_version": v, "checkpoint_id": ckpt, "message": nul,
                   "to_contributor_id": member.id}),
        ),
        (
            "slug in the path",
            Method::GET,
            "/api/v1/orbits/a%00b".into(),
            None,
            Value::Null,
        ),
    ];
    for (what, method, path, token, body) in cases {
        let key = format!("nul-{}", short_id());
        let body = (!body.is_null()).then_some(body);
        let r = app.send(method, &path, token, Some(&key), body).await;
        assert!(
            r.status.as_u16() == 422 || (what == "slug in the path" && r.status.as_u16() == 404),
            "{what}: {} {}",
            r.status,
            r.text
        );
        r.assert_envelope(r.status.as_u16());
    }
    let after = sql_i64(&mut app.db.conn(), "SELECT count(*) AS n FROM changes");
    assert_eq!(before, after, "a refused request wrote something");
    // The lease is still usable: nothing above ended it.
    let r = checkpoint(&app, owner, t, v, json!({"after": true})).await;
    assert_eq!(r.status, 201, "{}", r.text);
}
