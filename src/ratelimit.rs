//! Rate limits (governor, in memory, per instance) and the client address.

use std::net::IpAddr;
use std::num::NonZeroU32;

use actix_web::HttpRequest;
use governor::clock::DefaultClock;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};

use crate::error::ApiError;

pub type Keyed<K> = RateLimiter<K, DefaultKeyedStateStore<K>, DefaultClock>;

pub struct Limits {
    pub register: Keyed<IpAddr>,
    pub trusted_proxies: Vec<IpAddr>,
}

impl Limits {
    pub fn new(config: &crate::config::Config) -> Limits {
        let per_hour =
            NonZeroU32::new(config.register_rate_limit_per_hour).unwrap_or(NonZeroU32::MIN);
        Limits {
            register: RateLimiter::keyed(Quota::per_hour(per_hour)),
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

    /// Registration: per client address per hour.
    pub fn check_register(&self, req: &HttpRequest) -> Result<(), ApiError> {
        let ip = self.client_ip(req);
        self.register.check_key(&ip).map_err(|not_until| {
            let wait = not_until.wait_time_from(governor::clock::Clock::now(
                &governor::clock::DefaultClock::default(),
            ));
            ApiError::too_many_requests(wait.as_secs() + 1)
        })
    }
}
