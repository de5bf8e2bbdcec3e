//! Protection in front of every handler: the body limit and the rate limits.
//!
//! `Protect` runs before routing to handlers, so a refused request never touches
//! the database: 413 when `Content-Length` passes 256 KiB (bodies sent without a
//! length are cut at the same limit by the JSON extractor), then 429 from the
//! per-token or per-address limiter. Every limited response carries
//! `RateLimit-Policy` and `RateLimit` (IETF httpapi draft form): this budget's, or
//! those of the limit a handler refused by (a registration's, `error::RateLimit`);
//! the exempt probes (`/healthz`, `/readyz`, `/metrics`) and the 413 do not. On `/mcp` a refusal's
//! body is a JSON-RPC error (`mcp::transport_refusal`), on a page an HTML page
//! (`pages::refusal`). Limits are in memory and per instance. The client address
//! judged here is left in the request (`auth::ClientAddr`) for the token checks.

use std::future::{ready, Ready};
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;

use actix_web::body::EitherBody;
use actix_web::dev::{forward_ready, Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::http::header::{self, HeaderName, HeaderValue};
use actix_web::{web, HttpMessage};
use futures_util::future::LocalBoxFuture;
use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateSnapshot;

use crate::domain::auth::ClientAddr;
use crate::error::{ApiError, RateLimit};
use crate::http::json::MAX_BODY_BYTES;
use crate::http::state::AppState;
use crate::metrics::{LIMIT_ANON, LIMIT_TOKEN};

/// `RateLimit-Policy` and `RateLimit` header values for `limit`'s bucket with
/// `remaining` units left.
fn headers(limit: RateLimit, remaining: u32) -> (String, String) {
    let quota = limit.quota.max(1);
    // Seconds until the bucket is full again: each request is given back after
    // window/quota seconds.
    let reset = ((quota - remaining.min(quota)) as u64 * limit.window).div_ceil(quota as u64);
    limit.headers(remaining, reset)
}

enum Decision {
    Allowed(String, String),
    Refused(ApiError, String, String),
}

fn decide(state: &AppState, req: &ServiceRequest, ip: IpAddr) -> Decision {
    let limits = &state.limits;
    // A token that is not (yet) verified counts against the address, so random
    // tokens cannot mint fresh buckets.
    let token_key = crate::domain::auth::bearer_from_request(req.request())
        .ok()
        .flatten()
        .map(|t| state.tokens.cache_key(&t))
        .filter(|k| state.tokens.is_verified(k));
    let per_minute = |name, quota| RateLimit {
        name,
        quota,
        window: 60,
    };
    let (limit, outcome, which): (RateLimit, Result<StateSnapshot, _>, usize) = match token_key {
        Some(key) => (
            per_minute("token", limits.token_per_minute),
            limits.token.check_key(&key),
            LIMIT_TOKEN,
        ),
        None => (
            per_minute("anon", limits.anon_per_minute),
            limits.anon.check_key(&ip),
            LIMIT_ANON,
        ),
    };
    match outcome {
        Ok(snapshot) => {
            let (p, r) = headers(limit, snapshot.remaining_burst_capacity());
            Decision::Allowed(p, r)
        }
        Err(not_until) => {
            state.metrics.rate_limited[which].fetch_add(1, Ordering::Relaxed);
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            let seconds = (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1);
            // Its headers are set below, as on an allowed request (and on a page).
            let (p, r) = limit.headers(0, seconds);
            Decision::Refused(ApiError::too_many_requests(seconds), p, r)
        }
    }
}

fn declared_length(req: &ServiceRequest) -> Option<usize> {
    req.headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok())
}

pub struct Protect;

impl<S, B> Transform<S, ServiceRequest> for Protect
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = actix_web::Error;
    type Transform = ProtectMiddleware<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(ProtectMiddleware {
            service: Rc::new(service),
        }))
    }
}

pub struct ProtectMiddleware<S> {
    service: Rc<S>,
}

impl<S, B> Service<ServiceRequest> for ProtectMiddleware<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let state = req.app_data::<web::Data<AppState>>().cloned();
        let service = self.service.clone();
        Box::pin(async move {
            let Some(state) = state else {
                return service.call(req).await.map(|r| r.map_into_left_body());
            };
            if let Some(resp) = crate::http::api::system::gate(req.request(), &state) {
                return Ok(req.into_response(resp).map_into_right_body());
            }
            let refusal = if crate::http::mcp::owns(req.path()) {
                crate::http::mcp::transport_refusal
            } else if crate::http::pages::owns(req.path()) {
                crate::http::pages::refusal
            } else {
                ApiError::to_response
            };
            if declared_length(&req).is_some_and(|n| n > MAX_BODY_BYTES) {
                let resp = refusal(&ApiError::payload_too_large());
                return Ok(req.into_response(resp).map_into_right_body());
            }
            // Health, readiness and metrics are for operators and probes: not limited.
            let exempt = matches!(req.path(), "/healthz" | "/readyz" | "/metrics");
            if exempt {
                return service.call(req).await.map(|r| r.map_into_left_body());
            }
            // The address the limits judge is the one a failed token verification
            // is counted under (`auth::ClientAddr`).
            let ip = state.limits.client_ip(req.request());
            req.extensions_mut().insert(ClientAddr(ip));
            let (policy, remaining, refused) = match decide(&state, &req, ip) {
                Decision::Allowed(p, r) => (p, r, None),
                Decision::Refused(e, p, r) => (p, r, Some(e)),
            };
            let mut res = match refused {
                Some(err) => req.into_response(refusal(&err)).map_into_right_body(),
                None => service.call(req).await?.map_into_left_body(),
            };
            // A handler's refusal by another limit (registrations) names that one.
            let h = res.headers_mut();
            if !h.contains_key("ratelimit") {
                if let Ok(v) = HeaderValue::from_str(&policy) {
                    h.insert(HeaderName::from_static("ratelimit-policy"), v);
                }
                if let Ok(v) = HeaderValue::from_str(&remaining) {
                    h.insert(HeaderName::from_static("ratelimit"), v);
                }
            }
            Ok(res)
        })
    }
}
