//! The instances under test: `orbit-commons serve` processes (started and killed
//! through the test kit) on one database, a migrated private cluster for the tests
//! that stop the server, and one load test's whole setting.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use orbit_commons::testkit::process::Spawn;
use orbit_commons::testkit::{short_id, PrivateCluster, Scratch, Service};
use tokio::task::JoinHandle;

use super::audit::{audit, report, Audit};
use super::load::{
    run_agent, seed, Ack, Net, Stats, Worker, World, AGENTS, LOAD_SECONDS, ORBITS, TASKS,
};
use crate::harness::TestDb;

/// The settings every load test instance runs with (plus `DATABASE_URL`).
pub fn load_env(database_url: &str) -> Vec<(&'static str, String)> {
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

/// `env` with one setting replaced.
pub fn with_setting(
    mut env: Vec<(&'static str, String)>,
    key: &'static str,
    value: impl ToString,
) -> Vec<(&'static str, String)> {
    env.retain(|(k, _)| *k != key);
    env.push((key, value.to_string()));
    env
}

/// Starts `orbit-commons serve` with exactly these `ORBIT_*` settings on a free port
/// and waits until `/readyz` answers 200. Killed when dropped; its log tail is
/// printed if the test is failing.
pub async fn start_serve(log_dir: &Path, name: &str, env: &[(&str, String)]) -> Service {
    Spawn::new(
        env!("CARGO_BIN_EXE_orbit-commons"),
        name,
        log_dir.join(format!("{name}.log")),
    )
    .env("ORBIT_LOG_FORMAT", "pretty")
    .envs(env)
    .isolated()
    .ready(Duration::from_secs(60))
    .await
    .unwrap_or_else(|e| panic!("{e}"))
    .tail_on_panic()
}

/// A private PostgreSQL cluster of this test under `/tmp/<prefix>-<id>` (for tests
/// that stop, start or kill the server), migrated; with its URL. Removed when dropped.
pub fn migrated_cluster(prefix: &str) -> (PrivateCluster, String) {
    let dir = Path::new("/tmp").join(format!("{prefix}-{}", short_id()));
    let pg = PrivateCluster::start(&dir).expect("start a private PostgreSQL cluster");
    let url = pg.url().to_owned();
    orbit_commons::db::migrate(&url).expect("migrate the private cluster");
    (pg, url)
}

/// Three instances on one fresh database, with extra settings.
pub async fn fleet(db: &TestDb, logs: &Path, extra: &[(&'static str, String)]) -> Vec<Service> {
    let mut env = load_env(&db.url);
    env.extend(extra.iter().cloned());
    let names: Vec<String> = (0..3).map(|i| format!("instance-{i}")).collect();
    futures::future::join_all(names.iter().map(|n| start_serve(logs, n, &env))).await
}

/// One load test: a fresh database, three instances on it, and the agents, orbits
/// and tasks seeded through them. Fields drop in order: instances, logs, database.
pub struct LoadRun {
    pub started: Instant,
    pub serves: Vec<Service>,
    pub net: Net,
    pub world: Arc<World>,
    workers: Vec<Worker>,
    /// How long starting and seeding took.
    pub setup: Duration,
    _logs: Scratch,
    pub db: TestDb,
}

/// The agents racing, from `started` until `deadline`.
pub struct Race {
    pub started: Instant,
    agents: Vec<JoinHandle<()>>,
}

impl LoadRun {
    /// Three instances with `extra` settings, seeded with RNG seed `seed`.
    pub async fn start(name: &str, seed_n: u64, extra: &[(&'static str, String)]) -> LoadRun {
        let started = Instant::now();
        let db = TestDb::new();
        let logs = Scratch::new(name).expect("create a temporary directory");
        let serves = fleet(&db, &logs.dir, extra).await;
        let net = Net::new(serves.iter().map(Service::base).collect());
        let (workers, world) = seed(&net, seed_n).await;
        LoadRun {
            started,
            serves,
            net,
            world: Arc::new(world),
            workers,
            setup: started.elapsed(),
            _logs: logs,
            db,
        }
    }

    /// Lets every agent loose for `LOAD_SECONDS`.
    pub fn race(&mut self) -> Race {
        let started = Instant::now();
        let deadline = started + Duration::from_secs(LOAD_SECONDS);
        let agents = std::mem::take(&mut self.workers)
            .into_iter()
            .map(|w| tokio::spawn(run_agent(self.net.clone(), self.world.clone(), w, deadline)))
            .collect();
        Race { started, agents }
    }

    /// Every acknowledgement so far, and the audit of the database against them.
    pub fn audit(&self) -> (Vec<Ack>, Audit) {
        let acks = self.net.stats.acks.lock().unwrap().clone();
        let audit = audit(&mut self.db.conn(), &acks);
        (acks, audit)
    }

    /// Prints the test's line of figures: the common ones, the setting, then `more`.
    pub fn report(&self, test: &str, audit: &Audit, more: &str) {
        report(
            test,
            &self.net,
            audit,
            self.started.elapsed(),
            &format!(
                "; 3 instances, {AGENTS} agents, {TASKS} seeded tasks in {ORBITS} orbits; \
                 setup {:.1} s, load {LOAD_SECONDS} s{more}",
                self.setup.as_secs_f64()
            ),
        );
    }

    /// The promises every load test checks: no invariant broken, no 5xx, and every
    /// request answered (`after` says since when, for the message).
    #[track_caller]
    pub fn assert_promises_kept(&self, audit: &Audit, after: &str) {
        assert!(
            audit.violations.is_empty(),
            "violations: {:#?}",
            audit.violations
        );
        let s = &self.net.stats;
        assert_eq!(Stats::get(&s.server_errors), 0, "5xx seen");
        assert_eq!(
            Stats::get(&s.unresolved),
            0,
            "requests never answered{after}"
        );
    }

    /// The instances (after the first `skip`) are all still running.
    #[track_caller]
    pub fn assert_alive(&mut self, skip: usize) {
        for s in self.serves.iter_mut().skip(skip) {
            assert!(s.alive(), "{} died:\n{}", s.name, s.log_tail());
        }
    }
}

impl Race {
    /// Waits for every agent to stop.
    pub async fn finish(self) {
        for a in self.agents {
            a.await.expect("agent task");
        }
    }
}
