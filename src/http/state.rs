//! What every handler shares: the domain's [`Core`] and the HTTP layer's rate limits
//! and webhook engine.

use std::ops::Deref;
use std::sync::Arc;

use crate::domain::Core;
use crate::http::limits::Limits;

#[derive(Clone)]
pub struct AppState {
    pub core: Core,
    pub limits: Arc<Limits>,
    /// This instance's webhook delivery engine (`domain::webhooks::deliver`).
    pub webhooks: Arc<crate::domain::webhooks::deliver::Engine>,
}

impl Deref for AppState {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}
