//! The domain layer: one function per operation, each holding its unit of work
//! (key claim, fence, effect, revision, stored response) or its read, called alike
//! by a REST handler and its MCP tool. One module per resource (`artifacts`,
//! `assessments`, `changes`, `checkpoints`, `contributions`, `contributors`,
//! `handoffs`, `leases`, `members`, `memory`, `orbits`, `problems`, `tasks`) holds
//! its operations, their request bodies and validation rules. Beside them the
//! mechanisms: tokens and callers (`auth`), membership and roles (`access`), the
//! lease check (`fence`), Idempotency-Keys (`idempotency`), the orbit revision
//! (`revision`), the marks a quick write's response is rendered with (`marks`), the
//! change hub (`feed`), live event streams (`events`), search (`search`), webhooks
//! and their delivery engine (`webhooks`), grouped reads (`reads`), what each page
//! for people shows (`views`) and the one write path and public reads (`write`).
//! It imports store, perf, model, db, config, metrics and error, never `http`.

pub mod access;
pub mod artifacts;
pub mod assessments;
pub mod auth;
pub mod changes;
pub mod checkpoints;
pub mod contributions;
pub mod contributors;
pub mod events;
pub mod feed;
pub mod fence;
pub mod handoffs;
pub mod idempotency;
pub mod leases;
pub mod marks;
pub mod members;
pub mod memory;
pub mod orbits;
pub mod problems;
pub mod reads;
pub mod revision;
pub mod search;
pub mod tasks;
pub mod views;
pub mod webhooks;
pub mod write;

use std::sync::Arc;

use crate::config::Config;
use crate::db::PgPool;

/// What every operation shares: the pool, the settings, the token cache, the change
/// hub, the counters and the performance mechanisms beside this layer (`perf`).
#[derive(Clone)]
pub struct Core {
    pub pool: PgPool,
    pub config: Arc<Config>,
    pub tokens: Arc<auth::TokenCache>,
    pub hub: feed::ChangeHub,
    /// The live event streams of this instance and their per-orbit tails.
    pub events: Arc<events::Streams>,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The lease-cycle writes of this instance, run in groups (`perf::quick`).
    pub quick: Arc<crate::perf::quick::QuickQueue>,
    /// The ordinary path's writes, committed in groups per orbit (`perf::commits`).
    pub commits: Arc<crate::perf::commits::Commits<write::Outcome>>,
    /// Which orbit each verified token last wrote to: how writes find their group.
    pub hints: Arc<crate::perf::lanes::Hints>,
    /// Single-row reads run in groups (`perf::readgroup`); `None` when
    /// `ORBIT_READ_LANES` is 0.
    pub reads: Option<Arc<reads::Reads>>,
    pub list_cache: Arc<crate::perf::listcache::ListCache>,
    /// Long polls waiting per orbit and their shared feed reads (`feed`).
    pub feed_reads: Arc<feed::SharedReads<crate::store::changes::ChangeOut>>,
    pub long_polls: Arc<feed::PollCounts>,
    /// The searched tables' statistics, for how a search reads them.
    pub search_stats: Arc<crate::perf::searchstats::SearchStats>,
    /// The orbits with an ACTIVE webhook subscription, for the delivery engine.
    pub webhook_orbits: Arc<webhooks::deliver::WatchedOrbits>,
}
