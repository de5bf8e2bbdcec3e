//! The command line: flags, scenario names and the pgbench reference of each.

use std::path::PathBuf;

use clap::Parser;
use serde::Serialize;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "orbit-bench",
    about = "Load-tests Orbit Commons against pgbench on the same PostgreSQL server (issue 9)."
)]
pub struct Args {
    /// Scenarios: `all` or a comma-separated list of lease-cycle, lease-cycle-fresh,
    /// handoff-chain, idempotent-replay, public-get, authed-get, changes-feed,
    /// overview, write-mix, big-orbit, search, webhooks, orbit-page, events.
    #[arg(long, default_value = "all")]
    pub scenario: String,

    /// Client counts (concurrent virtual agents), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    pub clients: Vec<usize>,

    /// Measured seconds per scenario, shape and client count (also pgbench's -T).
    #[arg(long, default_value_t = 10)]
    pub duration: u64,

    /// Warm-up seconds before each measurement (requests made then are not counted).
    #[arg(long, default_value_t = 2)]
    pub warmup: u64,

    /// Target a running service instead of starting one. Set DATABASE_URL to that
    /// service's database to enable bulk seeding and the pgbench references.
    #[arg(long)]
    pub url: Option<String>,

    /// With --url: the service's process id, to report its memory.
    #[arg(long)]
    pub pid: Option<u32>,

    /// Where to write the JSON results.
    #[arg(long, default_value = "target/bench/results.json")]
    pub json: PathBuf,

    /// Skip the pgbench references.
    #[arg(long)]
    pub no_pgbench: bool,

    /// Runs of every row (scenario, shape, client count), one after the other; the
    /// report adds each group's spread and judges the worst run (issue 25).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10))]
    pub repeats: u32,

    /// The tasks of `big-orbit`'s orbit.
    #[arg(long, default_value_t = 1_000_000)]
    pub big_orbit_tasks: usize,

    /// Also run every row unsettled: without waiting for autovacuum and without a
    /// CHECKPOINT first (a settled row has both), right after its own seeding. Its
    /// shape is named `<shape> unsettled`.
    #[arg(long)]
    pub unsettled: bool,

    /// Measure each row's pgbench reference right before that row, not once per
    /// client count: a row's ratio then compares the two at the same moment of a
    /// shared machine, whose speed moves within the hour. A run takes about twice
    /// as long.
    #[arg(long)]
    pub paired_references: bool,

    /// The `events` scenario's subscribers: SSE streams of the hot orbit, open while
    /// the clients run the lease cycle there.
    #[arg(long, default_value_t = 1000)]
    pub subscribers: usize,

    /// CI smoke run: authed-get and events (20 subscribers), 1 client, 2 s, no
    /// pgbench; checks the tool runs.
    #[arg(long)]
    pub smoke: bool,

    /// Also profile every row: CPU per request of the service, its database backends
    /// and the load generator; transactions and (with pg_stat_statements, which is
    /// preloaded into the private cluster for this) statements per request; what the
    /// backends wait on; the machine's memory latency; WAL bytes and flushes per
    /// request and the mean flush time (timed in the private cluster). Sampling costs
    /// a little throughput: take the headline table from a run without it.
    #[arg(long)]
    pub profile: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scenario {
    LeaseCycle,
    LeaseCycleFresh,
    HandoffChain,
    IdempotentReplay,
    PublicGet,
    AuthedGet,
    ChangesFeed,
    Overview,
    WriteMix,
    BigOrbit,
    Search,
    Webhooks,
    OrbitPage,
    Events,
}

impl Scenario {
    pub const ALL: [Scenario; 14] = [
        Scenario::LeaseCycle,
        Scenario::LeaseCycleFresh,
        Scenario::HandoffChain,
        Scenario::IdempotentReplay,
        Scenario::PublicGet,
        Scenario::AuthedGet,
        Scenario::ChangesFeed,
        Scenario::Overview,
        Scenario::WriteMix,
        Scenario::BigOrbit,
        Scenario::Search,
        Scenario::Webhooks,
        Scenario::OrbitPage,
        Scenario::Events,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::LeaseCycle => "lease-cycle",
            Scenario::LeaseCycleFresh => "lease-cycle-fresh",
            Scenario::HandoffChain => "handoff-chain",
            Scenario::IdempotentReplay => "idempotent-replay",
            Scenario::PublicGet => "public-get",
            Scenario::AuthedGet => "authed-get",
            Scenario::ChangesFeed => "changes-feed",
            Scenario::Overview => "overview",
            Scenario::WriteMix => "write-mix",
            Scenario::BigOrbit => "big-orbit",
            Scenario::Search => "search",
            Scenario::Webhooks => "webhooks",
            Scenario::OrbitPage => "orbit-page",
            Scenario::Events => "events",
        }
    }

    /// The pgbench reference a scenario is compared with.
    pub fn reference(self) -> RefKind {
        match self {
            Scenario::LeaseCycle
            | Scenario::LeaseCycleFresh
            | Scenario::BigOrbit
            | Scenario::HandoffChain
            | Scenario::IdempotentReplay
            | Scenario::WriteMix
            | Scenario::Webhooks
            | Scenario::Events => RefKind::TpcbLike,
            _ => RefKind::SelectOnly,
        }
    }

    pub fn parse_list(text: &str) -> Result<Vec<Scenario>, String> {
        let mut out = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if part == "all" {
                out.extend(Scenario::ALL);
                continue;
            }
            let s = Scenario::ALL
                .into_iter()
                .find(|s| s.name() == part)
                .ok_or_else(|| {
                    format!(
                        "unknown scenario `{part}`; use all or one of: {}",
                        Scenario::ALL.map(|s| s.name()).join(", ")
                    )
                })?;
            out.push(s);
        }
        out.sort();
        out.dedup();
        if out.is_empty() {
            return Err("no scenario given".into());
        }
        Ok(out)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RefKind {
    TpcbLike,
    SelectOnly,
}

impl RefKind {
    pub fn name(self) -> &'static str {
        match self {
            RefKind::TpcbLike => "tpcb-like",
            RefKind::SelectOnly => "select-only",
        }
    }

    pub fn flags(self) -> &'static [&'static str] {
        match self {
            RefKind::TpcbLike => &["-b", "tpcb-like"],
            RefKind::SelectOnly => &["-S"],
        }
    }
}
