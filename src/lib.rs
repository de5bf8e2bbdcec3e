//! Orbit Commons: a public, multi-tenant knowledge commons where AI agents and
//! people coordinate fenced work.
//!
//! A write request reads top to bottom: size and rate limits → extractors (path,
//! query, the body read but not yet judged) → one transaction { token → lookups
//! (404) → permission (403) → body and field checks (422) → key claim → fence →
//! effect → `apply_change` (revision, change, stored response) } → commit → wake
//! the change feed's waiters → envelope (docs/MECHANISMS.md, "The path of one
//! write").

pub use actix_web;

pub mod config;
pub mod db;
pub mod domain;
pub mod error;
pub mod http;
pub mod metrics;
pub mod model;
pub mod perf;
pub mod store;
pub mod testkit;

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::{Server, ServerHandle};
use actix_web::http::header::{self, HeaderValue};
use actix_web::{web, App, HttpServer};
use utoipa_actix_web::AppExt;
use utoipa_swagger_ui::SwaggerUi;

use crate::config::Config;
use crate::domain::feed::ChangeHub;
use crate::domain::{auth, idempotency, Core};
use crate::http::state::AppState;
use crate::http::{mcp, ratelimit, routes, telemetry};
use crate::perf::{listcache, quick};

/// A running instance: its address, its server future, and how to stop it.
pub struct Running {
    pub addr: std::net::SocketAddr,
    pub server: Server,
    pub handle: ServerHandle,
    pub state: AppState,
}

/// Builds the shared state for a database URL.
pub fn build_state(config: &Config, database_url: &str) -> AppState {
    let database_url = &db::with_keepalives(database_url);
    let pool = db::build_pool(
        database_url,
        config.db_pool_size,
        Duration::from_millis(config.db_timeout_ms),
    );
    let metrics = Arc::new(metrics::Metrics::default());
    let hub = ChangeHub::default();
    let tokens = Arc::new(auth::TokenCache::default());
    // How long a quick write or a grouped read waits for its group's answer: the
    // one limit of every wait for the database.
    let group_deadline = db::deadline(&pool);
    let reads = (config.read_lanes > 0).then(|| {
        Arc::new(crate::domain::reads::Reads::new(
            config.read_lanes as usize,
            group_deadline,
            &pool,
            tokens.clone(),
        ))
    });
    hub.start_listener(database_url.to_owned());
    hub.start_notifier(database_url.to_owned());
    let hints = Arc::new(crate::perf::lanes::Hints::default());
    let core = Core {
        pool: pool.clone(),
        config: Arc::new(config.clone()),
        tokens,
        hub,
        events: Arc::default(),
        quick: Arc::new(quick::QuickQueue::new(
            pool.clone(),
            config.write_lanes as usize,
            config.quick_queue_count(),
            group_deadline,
            metrics.clone(),
            hints.clone(),
        )),
        commits: Arc::new(crate::perf::commits::Commits::new(
            pool.clone(),
            config.write_lanes as usize,
            group_deadline,
            hints.clone(),
            crate::domain::auth::token_rows,
        )),
        hints,
        reads,
        list_cache: Arc::new(listcache::ListCache::new(
            usize::try_from(config.list_cache_bytes).unwrap_or(usize::MAX),
        )),
        metrics,
        feed_reads: Arc::default(),
        long_polls: Arc::default(),
        search_stats: Arc::default(),
        webhook_orbits: Arc::default(),
    };
    let webhooks = crate::domain::webhooks::deliver::Engine::start(core.clone());
    AppState {
        core,
        webhooks,
        limits: Arc::new(crate::http::limits::Limits::new(config)),
    }
}

/// Starts the HTTP server on `listener` (migrations must already be applied).
pub fn start(listener: TcpListener, state: AppState) -> std::io::Result<Running> {
    let addr = listener.local_addr()?;
    let doc = routes::openapi();
    let known = web::Data::new(routes::KnownRoutes::from_openapi(&doc));
    let data = web::Data::new(state.clone());
    let mcp = mcp::service(data.clone());
    let workers = state.config.worker_count();
    let client_timeout = Duration::from_secs(state.config.client_timeout_seconds);
    // `/metrics` on its own listener (ORBIT_METRICS_BIND): the same app, gated by
    // the address a request came in on (`http::api::system::gate`).
    let metrics_listener = match state.config.metrics_bind {
        Some(at) => Some(TcpListener::bind(at).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("cannot listen on {at} (set ORBIT_METRICS_BIND): {e}"),
            )
        })?),
        None => None,
    };
    let metrics_at = match &metrics_listener {
        Some(l) => Some(web::Data::new(crate::http::api::system::MetricsListener(
            l.local_addr()?,
        ))),
        None => None,
    };
    spawn_background(&state);
    end_streams_on_signal(&state);
    let mut server = HttpServer::new(move || {
        let (app, _) = App::new()
            .into_utoipa_app()
            .configure(routes::configure)
            .split_for_parts();
        let app = match metrics_at.clone() {
            Some(at) => app.app_data(at),
            None => app,
        };
        app.app_data(data.clone())
            .app_data(known.clone())
            .app_data(routes::facts())
            .configure(|cfg| mcp::configure(cfg, &mcp))
            .service(web::redirect("/docs", "/docs/"))
            .service(SwaggerUi::new("/docs/{_:.*}").url("/openapi.json", doc.clone()))
            .configure(routes::pages)
            .default_service(web::to(routes::fallback))
            .wrap(routes::envelope_errors())
            // Protect's own refusals (413, 429) pass through the security headers.
            .wrap(ratelimit::Protect)
            .wrap_fn(|req, srv| {
                use actix_web::dev::Service;
                let authed = req.headers().contains_key(header::AUTHORIZATION);
                let fut = srv.call(req);
                async move {
                    let mut res = fut.await?;
                    let headers = res.headers_mut();
                    headers.insert(
                        header::X_CONTENT_TYPE_OPTIONS,
                        HeaderValue::from_static("nosniff"),
                    );
                    let json = headers
                        .get(header::CONTENT_TYPE)
                        .and_then(|v| v.to_str().ok())
                        .is_some_and(|v| v.starts_with("application/json"));
                    if authed && json && !headers.contains_key(header::CACHE_CONTROL) {
                        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
                    }
                    Ok(res)
                }
            })
            .wrap(telemetry::RequestSpan)
    })
    // Each connection's socket, for a long poll to notice its client leaving.
    .on_connect(crate::http::peer::on_connect)
    .client_request_timeout(client_timeout)
    .client_disconnect_timeout(Duration::from_secs(2))
    // Half-closed connections stay allowed (actix's default), and with them a
    // handler whose client left runs to its end: `h1_allow_half_closed(false)` would
    // cancel a write's handler at the client's EOF, after its commit but before its
    // change hub publish, so waiters would sleep to their deadline.
    .keep_alive(client_timeout)
    .shutdown_timeout(10)
    .listen(listener)?;
    if let Some(l) = metrics_listener {
        server = server.listen(l)?;
    }
    // Every unit of database work holds a pooled connection, so more blocking threads
    // than connections only wait (and cost memory): size each worker's blocking
    // pool to its share of the connection pool, plus room for argon2 and the purge.
    let blocking = (state.config.db_pool_size as usize).div_ceil(workers) + 2;
    server = server
        .workers(workers)
        .worker_max_blocking_threads(blocking);
    let server = server.run();
    let handle = server.handle();
    Ok(Running {
        addr,
        server,
        handle,
        state,
    })
}

/// actix-web stops gracefully on SIGINT and SIGTERM and waits for open connections;
/// an event stream or a long poll would hold it for the whole shutdown timeout. On
/// the same signals, every stream says `retry:` and ends (its connection closes
/// with it), and every long poll answers the page it has.
fn end_streams_on_signal(state: &AppState) {
    let streams = state.events.clone();
    actix_web::rt::spawn(async move {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let (Ok(mut term), Ok(mut int)) = (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) else {
                return;
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        #[cfg(not(unix))]
        if tokio::signal::ctrl_c().await.is_err() {
            return;
        }
        streams.close();
    });
}

/// Background upkeep: the idempotency key purge and idle rate-limit buckets.
fn spawn_background(state: &AppState) {
    let pool = state.pool.clone();
    let limits = state.limits.clone();
    let tokens = state.tokens.clone();
    actix_web::rt::spawn(async move {
        let mut interval = actix_web::rt::time::interval(Duration::from_secs(60));
        loop {
            interval.tick().await;
            limits.shrink();
            tokens.shrink();
            let result = db::read(&pool, |conn| Ok(idempotency::purge_expired(conn)?)).await;
            match result {
                Ok(n) if n > 0 => tracing::info!(purged = n, "expired idempotency keys purged"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "idempotency purge skipped; next in a minute"),
            }
        }
    });
}
