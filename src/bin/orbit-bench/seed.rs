//! Seeding: agents, orbits and tasks through the API; bulk rows through the
//! library's store functions ([`crate::bulk`]) when the service's database is
//! reachable.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::json;

use crate::bulk::Bulk;
use crate::cli::Scenario;
use crate::client::{Agent, Api, Method};

/// The tasks a lease-cycle client takes, one per cycle: its own pool, wrapping
/// around when it runs out (a released task can be leased again), or a pool shared
/// by a row's clients whose tasks are each taken once ([`TaskPool::fresh`]).
#[derive(Clone)]
pub struct TaskPool {
    pub tasks: Arc<Vec<i64>>,
    pub next: Arc<AtomicUsize>,
    /// Start again from the first task once all were taken; otherwise each task is
    /// taken once (never leased before: `lease-cycle-fresh`, `big-orbit`).
    pub wrap: bool,
}

impl TaskPool {
    /// Tasks taken in turn, again and again.
    pub fn cycling(ids: Vec<i64>) -> TaskPool {
        TaskPool {
            tasks: Arc::new(ids),
            next: Arc::new(AtomicUsize::new(0)),
            wrap: true,
        }
    }

    /// Tasks taken once each, shared by every client holding a clone.
    pub fn fresh(ids: Vec<i64>) -> TaskPool {
        TaskPool {
            wrap: false,
            ..TaskPool::cycling(ids)
        }
    }

    /// The next task; `None` when a fresh pool has none left.
    pub fn take(&self) -> Option<i64> {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        if self.wrap {
            Some(self.tasks[i % self.tasks.len()])
        } else {
            self.tasks.get(i).copied()
        }
    }
}

/// The state of one handoff chain: a task passed back and forth between two agents.
#[derive(Clone)]
pub struct Chain {
    pub agents: [Agent; 2],
    pub task: i64,
    pub checkpoint: i64,
    pub holder: usize,
    pub version: i64,
}

pub struct BigOrbit {
    pub label: &'static str,
    pub orbit: i64,
    pub revision: i64,
    pub problem: Option<i64>,
}

/// Everything seeded.
#[derive(Default)]
pub struct World {
    pub agents: Vec<Agent>,
    pub partners: Vec<Agent>,
    pub hot_owner: Option<Agent>,
    pub spread_orbits: Vec<i64>,
    pub hot_orbit: Option<i64>,
    /// A second orbit every agent joined: `write-mix two-hot` writes half its
    /// clients' writes there.
    pub second_hot_orbit: Option<i64>,
    pub spread_pools: Vec<TaskPool>,
    pub hot_pools: Vec<TaskPool>,
    pub chains: Vec<Chain>,
    pub replay: Vec<(i64, String)>,
    /// Contributions in the hot orbit, read by `public-get contribution`.
    pub hot_contributions: Vec<i64>,
    pub big: Vec<BigOrbit>,
    pub knowledge: Option<bool>,
    /// The search data set was loaded (`search::seed`, needs the database).
    pub search_seeded: bool,
    /// The orbit-page data set was loaded (`orbit_page::seed`, needs the database).
    pub orbit_page_seeded: bool,
    /// `lease-cycle-fresh`'s orbit, every agent a member; each row seeds its own
    /// tasks there ([`Seeder::fresh_tasks`]).
    pub fresh_orbit: Option<i64>,
    /// The never-leased tasks the current `lease-cycle-fresh` row seeded.
    pub fresh_pool: Option<TaskPool>,
    /// `big-orbit`'s orbit and its never-leased tasks (`--big-orbit-tasks`).
    pub big_orbit: Option<(i64, TaskPool)>,
    pub notes: Vec<String>,
}

/// Never-leased tasks a `lease-cycle-fresh` row seeds per second of its warm-up
/// and measurement: a cycle is three requests. The lease cycle reached 4,565
/// requests a second here on 2026-12-03, when 1,500 a second ran out at 128
/// clients; 2,500 leaves room up to 7,500.
pub const FRESH_PER_SECOND: usize = 2_500;

pub async fn register_many(api: &Api, prefix: &str, n: usize) -> Result<Vec<Agent>, String> {
    let mut out: Vec<Option<Agent>> = vec![None; n];
    let mut set = tokio::task::JoinSet::new();
    let mut next = 0;
    // A few at a time: each registration runs argon2 in the service.
    while next < n || !set.is_empty() {
        while next < n && set.len() < 4 {
            let api = api.clone();
            let name = format!("{prefix}-{next}");
            let i = next;
            set.spawn(async move { (i, api.register(&name).await) });
            next += 1;
        }
        if let Some(done) = set.join_next().await {
            let (i, agent) = done.map_err(|e| e.to_string())?;
            out[i] = Some(agent?);
        }
    }
    Ok(out.into_iter().flatten().collect())
}

pub struct Seeder<'a> {
    pub api: &'a Api,
    pub bulk: Option<&'a Bulk>,
    pub run_tag: String,
    /// The tasks of `big-orbit`'s orbit.
    pub big_orbit_tasks: usize,
}

/// Tasks per lease-cycle client: bulk-seeded when the database is reachable.
pub const POOL_SQL: usize = 1000;
pub const POOL_HTTP: usize = 8;

impl Seeder<'_> {
    pub async fn tasks(
        &self,
        who: &Agent,
        orbit: i64,
        n: usize,
        problem: Option<i64>,
    ) -> Result<Vec<i64>, String> {
        if let Some(bulk) = self.bulk {
            let bulk_url = bulk.url.clone();
            let creator = who.id;
            return tokio::task::spawn_blocking(move || {
                Bulk { url: bulk_url }.tasks(orbit, creator, n, problem)
            })
            .await
            .map_err(|e| e.to_string())?;
        }
        let mut ids = Vec::with_capacity(n);
        for i in 0..n {
            ids.push(
                self.api
                    .create_task(who, orbit, &format!("bench task {i}"))
                    .await?,
            );
        }
        Ok(ids)
    }

    pub async fn seed(
        &self,
        world: &mut World,
        scenarios: &[Scenario],
        max_c: usize,
    ) -> Result<(), String> {
        let api = self.api;
        let tag = &self.run_tag;
        let has = |s: Scenario| scenarios.contains(&s);
        let need_spread = has(Scenario::LeaseCycle)
            || has(Scenario::HandoffChain)
            || has(Scenario::IdempotentReplay)
            || has(Scenario::WriteMix)
            || has(Scenario::Webhooks)
            || has(Scenario::Events);
        let need_hot = has(Scenario::LeaseCycle)
            || has(Scenario::PublicGet)
            || has(Scenario::WriteMix)
            || has(Scenario::Events);
        let need_big = has(Scenario::ChangesFeed) || has(Scenario::Overview);

        eprintln!("seeding: registering {max_c} agents");
        world.agents = register_many(api, &format!("bench-{tag}-a"), max_c).await?;
        if need_spread {
            eprintln!("seeding: {max_c} spread orbits");
            for (i, a) in world.agents.iter().enumerate() {
                world
                    .spread_orbits
                    .push(api.create_orbit(a, &format!("bench-{tag}-s{i}")).await?);
            }
        }
        if need_hot || need_big {
            let owner = api.register(&format!("bench-{tag}-hot-owner")).await?;
            if need_hot {
                world.hot_orbit = Some(self.shared_orbit(&owner, "hot", &world.agents).await?);
            }
            if has(Scenario::WriteMix) {
                world.second_hot_orbit =
                    Some(self.shared_orbit(&owner, "hot2", &world.agents).await?);
            }
            world.hot_owner = Some(owner);
        }
        // The events scenario runs the lease cycle in the hot orbit.
        if has(Scenario::LeaseCycle) || has(Scenario::Events) {
            let per = if self.bulk.is_some() {
                POOL_SQL
            } else {
                POOL_HTTP
            };
            eprintln!("seeding: {per} tasks per lease-cycle client and shape");
            for (i, a) in world.agents.iter().enumerate() {
                let ids = self.tasks(a, world.spread_orbits[i], per, None).await?;
                world.spread_pools.push(TaskPool::cycling(ids));
            }
            let hot = world.hot_orbit.ok_or("no hot orbit")?;
            for a in &world.agents {
                let ids = self.tasks(a, hot, per, None).await?;
                world.hot_pools.push(TaskPool::cycling(ids));
            }
        } else if has(Scenario::PublicGet) {
            let hot = world.hot_orbit.ok_or("no hot orbit")?;
            let owner = world.hot_owner.clone().ok_or("no hot owner")?;
            self.tasks(&owner, hot, 100, None).await?;
        }
        if has(Scenario::PublicGet) {
            let hot = world.hot_orbit.ok_or("no hot orbit")?;
            let owner = world.hot_owner.clone().ok_or("no hot owner")?;
            let kinds = ["ATTEMPT", "OBSERVATION", "CLAIM", "QUESTION", "NOTE"];
            for i in 0..32 {
                let v = api
                    .must(
                        Method::Post,
                        &format!("/api/v1/orbits/{hot}/contributions"),
                        Some(&owner.token),
                        true,
                        Some(
                            json!({"kind": kinds[i % 5], "title": format!("read me {i}"),
                                    "body": "seeded by orbit-bench for public-get"}),
                        ),
                        201,
                    )
                    .await?;
                world
                    .hot_contributions
                    .push(v["data"]["id"].as_i64().ok_or("no contribution id")?);
            }
        }
        if has(Scenario::HandoffChain) {
            eprintln!("seeding: {max_c} handoff chains");
            world.partners = register_many(api, &format!("bench-{tag}-p"), max_c).await?;
            for i in 0..max_c {
                let (a, b) = (world.agents[i].clone(), world.partners[i].clone());
                let orbit = world.spread_orbits[i];
                api.join(&b, orbit).await?;
                let task = api.create_task(&a, orbit, "handoff chain").await?;
                let lease = api
                    .must(
                        Method::Post,
                        &format!("/api/v1/tasks/{task}/leases"),
                        Some(&a.token),
                        true,
                        Some(json!({"duration_seconds": 3600})),
                        201,
                    )
                    .await?;
                let version = lease["data"]["lease_version"]
                    .as_i64()
                    .ok_or("no version")?;
                let ck = api
                    .must(
                        Method::Post,
                        &format!("/api/v1/tasks/{task}/checkpoints"),
                        Some(&a.token),
                        true,
                        Some(json!({"lease_version": version, "summary": "start",
                                    "state": {"step": 0}})),
                        201,
                    )
                    .await?;
                world.chains.push(Chain {
                    agents: [a, b],
                    task,
                    checkpoint: ck["data"]["id"].as_i64().ok_or("no checkpoint id")?,
                    holder: 0,
                    version,
                });
            }
        }
        if has(Scenario::IdempotentReplay) {
            for (i, a) in world.agents.iter().enumerate() {
                let key = format!("bench-replay-{tag}-{i}");
                let path = format!("/api/v1/orbits/{}/tasks", world.spread_orbits[i]);
                let r = api
                    .send(
                        Method::Post,
                        &path,
                        Some(&a.token),
                        Some(&key),
                        Some(&json!({"title": "replayed task"})),
                    )
                    .await?;
                if r.status != 201 {
                    return Err(format!("replay seed: {}", String::from_utf8_lossy(&r.body)));
                }
                world.replay.push((world.spread_orbits[i], key));
            }
        }
        if need_big {
            self.seed_big(world, has(Scenario::Overview)).await?;
        }
        // The one-orbit rows of issue 25: their tasks go in through the database.
        match self.bulk {
            _ if !has(Scenario::LeaseCycleFresh) && !has(Scenario::BigOrbit) => {}
            None => world.notes.push(
                "lease-cycle-fresh, big-orbit: not seeded (their tasks need the database)".into(),
            ),
            Some(bulk) => {
                let owner = api.register(&format!("bench-{tag}-fresh-owner")).await?;
                if has(Scenario::LeaseCycleFresh) {
                    world.fresh_orbit =
                        Some(self.shared_orbit(&owner, "fresh", &world.agents).await?);
                }
                if has(Scenario::BigOrbit) {
                    let orbit = self.shared_orbit(&owner, "big", &world.agents).await?;
                    let n = self.big_orbit_tasks;
                    eprintln!("seeding: {n} tasks in one orbit (big-orbit)");
                    let (url, creator) = (bulk.url.clone(), owner.id);
                    let ids = tokio::task::spawn_blocking(move || {
                        Bulk { url }.tasks_many(orbit, creator, n)
                    })
                    .await
                    .map_err(|e| e.to_string())??;
                    world.big_orbit = Some((orbit, TaskPool::fresh(ids)));
                }
            }
        }
        if has(Scenario::Search) {
            match self.bulk {
                Some(bulk) => {
                    eprintln!("seeding: the search data set (1,000,000 contributions, 100,000 memory records), unless the database holds it");
                    let url = bulk.url.clone();
                    let loaded =
                        tokio::task::spawn_blocking(move || crate::search::seed(&Bulk { url }))
                            .await
                            .map_err(|e| e.to_string())??;
                    if !loaded {
                        eprintln!("seeding: the search data set is in the database already");
                    }
                    world.search_seeded = true;
                }
                None => world.notes.push(
                    "search: not seeded (the data set needs DATABASE_URL or the private cluster)"
                        .into(),
                ),
            }
        }
        if has(Scenario::OrbitPage) {
            match self.bulk {
                Some(bulk) => {
                    eprintln!(
                        "seeding: the orbit-page data set (1,000 tasks, {} changes)",
                        crate::orbit_page::CHANGES
                    );
                    let url = bulk.url.clone();
                    tokio::task::spawn_blocking(move || crate::orbit_page::seed(&Bulk { url }))
                    .await
                    .map_err(|e| e.to_string())??;
                    world.orbit_page_seeded = true;
                }
                None => world.notes.push(
                    "orbit-page: not seeded (the data set needs DATABASE_URL or the private cluster)"
                        .into(),
                ),
            }
        }
        if let Some(bulk) = self.bulk {
            let url = bulk.url.clone();
            tokio::task::spawn_blocking(move || Bulk { url }.analyze())
                .await
                .map_err(|e| e.to_string())??;
        }
        Ok(())
    }

    /// A new orbit `bench-<tag>-<name>` of `owner`'s that every agent joined.
    async fn shared_orbit(
        &self,
        owner: &Agent,
        name: &str,
        agents: &[Agent],
    ) -> Result<i64, String> {
        let orbit = self
            .api
            .create_orbit(owner, &format!("bench-{}-{name}", self.run_tag))
            .await?;
        for a in agents {
            self.api.join(a, orbit).await?;
        }
        Ok(orbit)
    }

    /// `n` never-leased tasks in `lease-cycle-fresh`'s orbit, seeded for one row,
    /// as a pool that hands out each once.
    pub async fn fresh_tasks(&self, world: &World, n: usize) -> Result<TaskPool, String> {
        let orbit = world.fresh_orbit.ok_or("no lease-cycle-fresh orbit")?;
        let creator = world.agents.first().ok_or("no agents")?.id;
        let bulk = self
            .bulk
            .ok_or("lease-cycle-fresh: its tasks need the database")?;
        let url = bulk.url.clone();
        let ids = tokio::task::spawn_blocking(move || Bulk { url }.tasks_many(orbit, creator, n))
            .await
            .map_err(|e| e.to_string())??;
        Ok(TaskPool::fresh(ids))
    }

    /// Whether the knowledge routes exist: a route-level 404 ("No route matches")
    /// means they do not.
    pub async fn knowledge_present(&self, world: &World) -> Result<bool, String> {
        let owner = world.hot_owner.as_ref().ok_or("no owner")?;
        let r = self
            .api
            .get("/api/v1/problems/1/overview", Some(&owner.token))
            .await?;
        if r.status != 404 {
            return Ok(true);
        }
        let msg = r.json()["message"].as_str().unwrap_or("").to_owned();
        Ok(!msg.contains("No route"))
    }

    /// The 1k and 100k orbits: with the knowledge routes, a problem whose rows are
    /// half contributions and half tasks (the five newest contributions made through
    /// the API); without them, tasks only. Every row has its change row, so the
    /// orbit's revision is about the row count.
    pub async fn seed_big(&self, world: &mut World, overview: bool) -> Result<(), String> {
        let owner = world.hot_owner.clone().ok_or("no owner")?;
        let knowledge = overview && self.knowledge_present(world).await?;
        world.knowledge = Some(knowledge);
        for (label, rows) in [("1k", 1_000usize), ("100k", 100_000usize)] {
            if self.bulk.is_none() && rows > 2_000 {
                world.notes.push(format!(
                    "the {label} orbit needs SQL bulk seeding: set DATABASE_URL to the service's database"
                ));
                continue;
            }
            eprintln!("seeding: the {label} orbit ({rows} rows)");
            let orbit = self
                .api
                .create_orbit(&owner, &format!("bench-{}-big-{label}", self.run_tag))
                .await?;
            let mut problem = None;
            let mut n_tasks = rows - 1;
            if knowledge {
                let v = self
                    .api
                    .must(
                        Method::Post,
                        &format!("/api/v1/orbits/{orbit}/problems"),
                        Some(&owner.token),
                        true,
                        Some(json!({"title": format!("bench problem {label}"),
                                    "statement": "seeded by orbit-bench"})),
                        201,
                    )
                    .await?;
                let p = v["data"]["id"].as_i64().ok_or("no problem id")?;
                problem = Some(p);
                let n_contrib = rows / 2 - 5;
                n_tasks = rows - 2 - rows / 2;
                match &self.bulk {
                    Some(bulk) => {
                        let url = bulk.url.clone();
                        let author = owner.id;
                        let r = tokio::task::spawn_blocking(move || {
                            Bulk { url }.contributions(orbit, author, p, n_contrib)
                        })
                        .await
                        .map_err(|e| e.to_string())?;
                        if let Err(e) = r {
                            world.notes.push(format!(
                                "{label} orbit: contributions not bulk-seeded ({e}); tasks only"
                            ));
                        }
                    }
                    None => {
                        for i in 0..n_contrib {
                            self.contribution(&owner, orbit, p, i).await?;
                        }
                    }
                }
            }
            self.tasks(&owner, orbit, n_tasks, problem).await?;
            if let Some(p) = problem {
                for i in 0..5 {
                    self.contribution(&owner, orbit, p, i).await?;
                }
            }
            let v = self
                .api
                .must(
                    Method::Get,
                    &format!("/api/v1/orbits/{orbit}"),
                    None,
                    false,
                    None,
                    200,
                )
                .await?;
            world.big.push(BigOrbit {
                label,
                orbit,
                revision: v["data"]["revision"].as_i64().unwrap_or(0),
                problem,
            });
        }
        Ok(())
    }

    pub async fn contribution(
        &self,
        owner: &Agent,
        orbit: i64,
        problem: i64,
        i: usize,
    ) -> Result<(), String> {
        let kinds = ["ATTEMPT", "OBSERVATION", "CLAIM", "QUESTION", "NOTE"];
        self.api
            .must(
                Method::Post,
                &format!("/api/v1/orbits/{orbit}/contributions"),
                Some(&owner.token),
                true,
                Some(
                    json!({"kind": kinds[i % 5], "title": format!("bench contribution {i}"),
                            "body": "seeded by orbit-bench", "problem_id": problem}),
                ),
                201,
            )
            .await
            .map(|_| ())
    }
}
