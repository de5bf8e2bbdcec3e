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
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    // `config::log_filter` refused an unreadable filter at start.
    let filter = EnvFilter::new(with_quiet_sdk(filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    let _ = match format {
        LogFormat::Json => builder.json().finish().with(ClientFaults).try_init(),
        LogFormat::Pretty => builder.finish().with(ClientFaults).try_init(),
    };
}

/// Drops actix-http's ERROR line for a connection it ended over the client's own
/// fault: a request head it could not parse (a URI over 64 KiB, a space in the
/// path: answered a bare 400 before any route) or a request that did not arrive
/// in time (408). No request span exists for them, and without this an anonymous
/// client could write ERROR lines at will (a probe, 2026-12-08: one per request).
/// Its other lines (a response body that failed, a service error) are kept.
struct ClientFaults;

impl ClientFaults {
    const TARGET: &'static str = "actix_http::h1::dispatcher";
    const MESSAGES: [&'static str; 2] = [
        "stream error: request parse error",
        "stream error: request did not complete within the specified timeout",
    ];
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for ClientFaults {
    fn event_enabled(
        &self,
        event: &tracing::Event<'_>,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) -> bool {
        struct Message(Option<String>);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = Some(format!("{value:?}"));
                }
            }
        }
        if event.metadata().target() != Self::TARGET {
            return true;
        }
        let mut message = Message(None);
        event.record(&mut message);
        let text = message.0.unwrap_or_default();
        !Self::MESSAGES.iter().any(|m| text.starts_with(m))
    }
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

    /// actix-http's lines for a client's malformed or late request are dropped;
    /// its other lines, and every other target's, are written.
    #[test]
    fn a_clients_malformed_request_writes_no_error_line() {
        use std::sync::{Arc, Mutex};
        use tracing_subscriber::layer::SubscriberExt;

        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let writer = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .finish()
            .with(super::ClientFaults);
        tracing::subscriber::with_default(subscriber, || {
            let err = "request parse error: URI error: uri too long";
            tracing::error!(target: "actix_http::h1::dispatcher", "stream error: {}", err);
            tracing::error!(
                target: "actix_http::h1::dispatcher",
                "stream error: request did not complete within the specified timeout"
            );
            tracing::error!(target: "actix_http::h1::dispatcher", "stream error: I/O error: x");
            tracing::error!(target: "actix_http::h1::dispatcher", "Response payload stream error: y");
            tracing::error!(target: "orbit_commons", "stream error: request parse error: z");
        });
        let log = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert!(!log.contains("uri too long"), "{log}");
        assert!(!log.contains("within the specified timeout"), "{log}");
        for kept in [
            "I/O error: x",
            "Response payload stream error: y",
            "parse error: z",
        ] {
            assert!(log.contains(kept), "{kept}: {log}");
        }
    }

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
