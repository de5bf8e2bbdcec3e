//! What every handler shares: the domain's [`Core`], the HTTP layer's rate limits,
//! and the long polls' shared feed reads and per-client counts.

use std::ops::Deref;
use std::sync::Arc;

use crate::domain::Core;
use crate::http::limits::Limits;

#[derive(Clone)]
pub struct AppState {
    pub core: Core,
    pub limits: Arc<Limits>,
    /// Long polls waiting per orbit and their shared feed reads (`domain::feed`).
    pub feed_reads: Arc<crate::domain::feed::SharedReads<crate::store::changes::ChangeOut>>,
    pub long_polls: Arc<crate::domain::feed::PollCounts>,
    /// This instance's webhook delivery engine (`domain::webhooks::deliver`).
    pub webhooks: Arc<crate::domain::webhooks::deliver::Engine>,
}

impl Deref for AppState {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}
