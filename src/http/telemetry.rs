//! Logging setup and a request span. Secrets never reach a log line: the span
//! records the method, the matched route template and the status, never headers.
//!
//! `RequestSpan` is the outermost layer, so it is also where a request is first
//! looked at: a method longer than `metrics::MAX_METHOD_LEN` is refused with 405
//! before any span, log line or metric exists for it, and `HEAD` is routed as
//! `GET` (the HTTP codec remembers it was `HEAD` and sends no body; a handler whose
//! body would outlive the response, the event stream, asks for [`WasHead`]).

use std::future::{ready, Ready};
use std::time::Instant;

use actix_web::body::EitherBody;
use actix_web::dev::{forward_ready, Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::http::Method;
use actix_web::HttpMessage;
use futures_util::future::LocalBoxFuture;
use tracing::Instrument;
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// In a request's extensions when it came as `HEAD` and is routed as `GET`.
#[derive(Debug, Clone, Copy)]
pub struct WasHead;

pub fn init(filter: &str, format: LogFormat) {
    // `config::log_filter` refused an unreadable filter at start.
    let filter = EnvFilter::new(with_quiet_sdk(filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Pretty => builder.try_init(),
    };
}

/// `filter`, with the MCP SDK (`rmcp`) held at ERROR unless the filter names it:
/// it starts and ends a service for every message of the stateless transport,
/// three INFO lines (about 1 KB) a message, and writes a WARN line with the whole
/// text of every refused call (a probe, 2026-12-07: 59 % of a day's log, and one
/// 200 KB line for a made-up tool name). The request span logs every request.
fn with_quiet_sdk(filter: &str) -> String {
    if filter.contains("rmcp") || filter.trim() == "off" {
        filter.to_owned()
    } else {
        format!("{filter},rmcp=error")
    }
}

pub struct RequestSpan;

impl<S, B> Transform<S, ServiceRequest> for RequestSpan
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = actix_web::Error;
    type Transform = RequestSpanMiddleware<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(RequestSpanMiddleware { service }))
    }
}

pub struct RequestSpanMiddleware<S> {
    service: S,
}

impl<S, B> Service<ServiceRequest> for RequestSpanMiddleware<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    forward_ready!(service);

    fn call(&self, mut req: ServiceRequest) -> Self::Future {
        // Made-up methods are unbounded input: refuse long ones before anything
        // keeps a copy, and label the rest from a fixed set.
        if req.method().as_str().len() > crate::metrics::MAX_METHOD_LEN {
            let resp = crate::error::ApiError::from_status(
                actix_web::http::StatusCode::METHOD_NOT_ALLOWED,
            )
            .to_response();
            return Box::pin(ready(Ok(req.into_response(resp).map_into_right_body())));
        }
        let method = crate::metrics::method_label(req.method());
        // HEAD answers like GET without a body (RFC 9110 9.3.2). `/mcp` is left
        // alone: its GET opens an event stream.
        if req.method() == Method::HEAD && req.path() != "/mcp" {
            req.head_mut().method = Method::GET;
            req.extensions_mut().insert(WasHead);
        }
        let span = tracing::info_span!("request", method, route = tracing::field::Empty);
        let started = Instant::now();
        let fut = self.service.call(req);
        Box::pin(
            async move {
                let res = fut.await?;
                let route = res
                    .request()
                    .match_pattern()
                    .unwrap_or_else(|| "<unmatched>".to_owned());
                tracing::Span::current().record("route", route.as_str());
                let code = res
                    .response()
                    .extensions()
                    .get::<crate::error::ErrorCode>()
                    .map(|c| c.0.clone());
                if let Some(state) = res
                    .request()
                    .app_data::<actix_web::web::Data<crate::http::state::AppState>>()
                {
                    state.metrics.observe(
                        &route,
                        method,
                        res.status().as_u16(),
                        started.elapsed().as_secs_f64(),
                        code.as_deref(),
                    );
                }
                tracing::info!(
                    status = res.status().as_u16(),
                    ms = started.elapsed().as_secs_f64() * 1000.0,
                    "request"
                );
                Ok(res.map_into_left_body())
            }
            .instrument(span),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::with_quiet_sdk;

    #[test]
    fn the_mcp_sdk_is_held_at_error_unless_the_filter_names_it() {
        assert_eq!(with_quiet_sdk("info"), "info,rmcp=error");
        assert_eq!(
            with_quiet_sdk("info,orbit_commons=debug"),
            "info,orbit_commons=debug,rmcp=error"
        );
        assert_eq!(with_quiet_sdk("debug,rmcp=debug"), "debug,rmcp=debug");
        assert_eq!(with_quiet_sdk("off"), "off");
        tracing_subscriber::EnvFilter::try_new(with_quiet_sdk("warn")).expect("a filter");
    }
}
