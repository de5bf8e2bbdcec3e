//! Logging setup and a request span. Secrets never reach a log line: the span
//! records the method, the matched route template and the status, never headers.

use std::future::{ready, Ready};
use std::time::Instant;

use actix_web::dev::{forward_ready, Service, ServiceRequest, ServiceResponse, Transform};
use futures_util::future::LocalBoxFuture;
use tracing::Instrument;
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

pub fn init(filter: &str, format: LogFormat) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Pretty => builder.try_init(),
    };
}

pub struct RequestSpan;

impl<S, B> Transform<S, ServiceRequest> for RequestSpan
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: 'static,
{
    type Response = ServiceResponse<B>;
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
    type Response = ServiceResponse<B>;
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let method = req.method().to_string();
        let span = tracing::info_span!("request", %method, route = tracing::field::Empty);
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
                        res.request().method().as_str(),
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
                Ok(res)
            }
            .instrument(span),
        )
    }
}
