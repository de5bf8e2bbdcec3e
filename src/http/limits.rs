//! The rate-limit buckets of this instance (`governor`): per token, per client
//! address, and registrations per address; the client address behind trusted
//! proxies. `ratelimit::Protect` applies them in front of every handler.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::Ordering;

use actix_web::HttpRequest;
use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};

use crate::error::{ApiError, RateLimit};
use crate::metrics::{Metrics, LIMIT_REGISTER};

pub type Keyed<K> =
    RateLimiter<K, DefaultKeyedStateStore<K>, DefaultClock, StateInformationMiddleware>;

pub struct Limits {
    pub token: Keyed<[u8; 32]>,
    pub anon: Keyed<IpAddr>,
    pub register: Keyed<IpAddr>,
    pub token_per_minute: u32,
    pub anon_per_minute: u32,
    pub register_per_hour: u32,
    pub trusted_proxies: Vec<IpAddr>,
}

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)
}

impl Limits {
    pub fn new(config: &crate::config::Config) -> Limits {
        Limits {
            token: RateLimiter::keyed(Quota::per_minute(nz(config.rate_limit_per_minute)))
                .with_middleware::<StateInformationMiddleware>(),
            anon: RateLimiter::keyed(Quota::per_minute(nz(config.anon_rate_limit_per_minute)))
                .with_middleware::<StateInformationMiddleware>(),
            register: RateLimiter::keyed(Quota::per_hour(nz(config.register_rate_limit_per_hour)))
                .with_middleware::<StateInformationMiddleware>(),
            token_per_minute: config.rate_limit_per_minute,
            anon_per_minute: config.anon_rate_limit_per_minute,
            register_per_hour: config.register_rate_limit_per_hour,
            trusted_proxies: config.trusted_proxies.clone(),
        }
    }

    /// The client address: the socket peer, or the forwarded address when the peer
    /// is a trusted proxy (the right-most untrusted entry of X-Forwarded-For).
    pub fn client_ip(&self, req: &HttpRequest) -> IpAddr {
        let peer = req
            .peer_addr()
            .map(|a| a.ip())
            .unwrap_or(IpAddr::from([127, 0, 0, 1]));
        if !self.trusted_proxies.contains(&peer) {
            return peer;
        }
        let forwarded = req
            .headers()
            .get("x-forwarded-for")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        forwarded
            .split(',')
            .rev()
            .filter_map(|s| s.trim().parse::<IpAddr>().ok())
            .find(|ip| !self.trusted_proxies.contains(ip))
            .unwrap_or(peer)
    }

    /// Registration: per client address per hour (on top of the address limit).
    pub fn check_register(&self, req: &HttpRequest, metrics: &Metrics) -> Result<(), ApiError> {
        let ip = self.client_ip(req);
        match self.register.check_key(&ip) {
            Ok(_) => Ok(()),
            Err(not_until) => {
                metrics.rate_limited[LIMIT_REGISTER].fetch_add(1, Ordering::Relaxed);
                let wait = not_until.wait_time_from(DefaultClock::default().now());
                let seconds = wait.as_secs() + 1;
                let limit = RateLimit {
                    name: "register",
                    quota: self.register_per_hour,
                    window: 3600,
                };
                Err(ApiError::rate_limited(limit, seconds).with_message(format!(
                    "Too many registrations from this address: at most {} an hour. Retry \
                     after {seconds} s.",
                    self.register_per_hour
                )))
            }
        }
    }

    /// Drops idle buckets (called periodically).
    pub fn shrink(&self) {
        self.token.retain_recent();
        self.anon.retain_recent();
        self.register.retain_recent();
        self.token.shrink_to_fit();
        self.anon.shrink_to_fit();
        self.register.shrink_to_fit();
    }
}
