//! Live events: `GET /api/v1/orbits/{orbit}/events`, the change feed as a
//! Server-Sent Events stream. The handler parses the resume point and streams what
//! `domain::events` gives it; the fan-out, the replay and the limits live there.

use crate::http::params::Path;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{get, HttpMessage, HttpResponse};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::domain::auth::Bearer;
use crate::domain::events;
use crate::error::ApiResult;
use crate::http::api::responses::ReadErrors;
use crate::http::api::State;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Replay the changes after this revision, then continue live. `Last-Event-ID`,
    /// when sent, wins. Absent: start after the orbit's current revision.
    #[param(value_type = Option<i64>, minimum = 0)]
    pub after: Option<String>,
}

/// Nothing to judge here: the resume point (`after` or `Last-Event-ID`) is judged
/// by `events::open`, after the orbit's 404 (contract section 14).
impl crate::model::Validate for EventsQuery {
    fn validate(&self, _: &mut crate::error::FieldErrors) {}
}

/// Follow an orbit's changes as Server-Sent Events.
///
/// Each change is one event: `id` is its revision, `event` its kind, `data` the
/// `Change` as one line of JSON. The stream first replays the changes after
/// `Last-Event-ID` (or `?after=`) from the feed, then continues live, strictly in
/// revision order with no gap and no duplicate, whichever instance a write ran on.
/// A `: keep-alive` comment comes at least every 15 s. The server ends a stream
/// after a while, on shutdown, or when the client stops reading, and says
/// `retry:` first: reconnect with `Last-Event-ID`, as a browser's `EventSource`
/// does by itself. A client (a token, or an address without one) may have
/// `ORBIT_MAX_STREAMS_PER_CLIENT` (default 16) streams open; beyond, 429.
#[utoipa::path(
    tag = "Orbits",
    params(
        ("orbit" = String, Path, description = "Orbit id or slug."),
        ("Last-Event-ID" = Option<i64>, Header,
         description = "The last revision received; the stream resumes after it."),
        EventsQuery,
    ),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses(
        (status = 200, description = "An open event stream: `id: <revision>`, \
            `event: <kind>`, `data: <Change JSON>` per change; `: keep-alive` comments; \
            `retry:` before the server ends it.",
         content_type = "text/event-stream", body = String),
        ReadErrors,
    ),
)]
#[get("/orbits/{orbit}/events")]
pub async fn stream_events(
    state: State,
    bearer: Bearer,
    req: actix_web::HttpRequest,
    path: Path<String>,
    query: crate::http::params::Query<EventsQuery>,
) -> ApiResult<HttpResponse> {
    let addr = state.limits.client_ip(&req);
    let last_event_id = req
        .headers()
        .get("last-event-id")
        .map(|v| v.to_str().unwrap_or("\u{fffd}"));
    let after = events::resume_point(last_event_id, query.after.as_deref());
    // A HEAD is answered like the GET, without a stream: the codec would send no
    // body but keep one, and its place under the client's cap, until the stream's
    // time ran out (a hostile probe held 16 places for 15 minutes so).
    let head = req
        .extensions()
        .get::<crate::http::telemetry::WasHead>()
        .is_some();
    let stream = events::open(&state.core, bearer, path.into_inner(), after, addr, head).await?;
    let mut resp = HttpResponse::Ok();
    resp.insert_header((
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    ))
    .insert_header((header::CACHE_CONTROL, HeaderValue::from_static("no-store")))
    // Proxies that buffer responses (nginx) pass this one through as it comes.
    .insert_header(("X-Accel-Buffering", HeaderValue::from_static("no")))
    // The connection ends with the stream, so a graceful stop need not wait
    // for it to idle out.
    .force_close();
    Ok(match stream {
        Some(stream) => resp.streaming(stream),
        None => resp.finish(),
    })
}
