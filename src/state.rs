//! What every handler shares.

use std::sync::Arc;

use crate::auth::TokenCache;
use crate::config::Config;
use crate::db::PgPool;
use crate::feed::ChangeHub;
use crate::ratelimit::Limits;

#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub config: Arc<Config>,
    pub tokens: Arc<TokenCache>,
    pub hub: ChangeHub,
    pub limits: Arc<Limits>,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The lease-cycle writes of this instance, run in groups (`src/quick.rs`).
    pub quick: Arc<crate::quick::QuickQueue>,
    /// Single-row reads run in groups (`src/readgroup.rs`); `None` when
    /// `ORBIT_READ_LANES` is 0.
    pub reads: Option<Arc<crate::readgroup::Reads>>,
    pub list_cache: Arc<crate::listcache::ListCache>,
    /// Long polls waiting per orbit and their shared feed reads (`src/feed.rs`).
    pub feed_reads: Arc<crate::feed::SharedReads<crate::api::changes::ChangeOut>>,
    pub long_polls: Arc<crate::feed::PollCounts>,
}
