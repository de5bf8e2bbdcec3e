//! What every handler shares: the domain's [`Core`] and the HTTP layer's rate limits.

use std::ops::Deref;
use std::sync::Arc;

use crate::domain::Core;
use crate::http::limits::Limits;

#[derive(Clone)]
pub struct AppState {
    pub core: Core,
    pub limits: Arc<Limits>,
}

impl Deref for AppState {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}
