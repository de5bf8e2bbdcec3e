//! Pages for people (contract section 16): server-rendered HTML at `/`, beside the
//! API. Each handler parses its path and query, reads what its page shows with one
//! function of `domain::views` in one pool checkout (`db::read`), and renders with
//! maud, which escapes every interpolated string: all content is untrusted and is
//! only ever shown as text. Two differ. The orbit page goes through the list cache
//! (`views::orbit_page`, on `domain::write::cached_page`): one statement reads the
//! orbit's revision and the clock, and a kept page whose stamp still holds is sent
//! as it was; otherwise the page is read, rendered and kept. The search page reads
//! with the API's `domain::search::search`. This module owns the pages' route table,
//! their error pages (unknown slug or id → HTML 404, bad query → HTML 400, never a
//! 5xx for what a user typed; a full database or a rate limit keeps its status and
//! `Retry-After`, also when the limit refuses a page before routing), their
//! response headers (the CSP) and the assets served from the binary (`assets`).
//! Live updates are `assets/live.js` on the section 14 stream.

mod assets;
mod home;
mod knowledge;
mod layout;
mod orbit;
mod task;

use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use maud::Markup;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// The pages' Content-Security-Policy: everything from this origin only, no inline
/// script or style, nothing from anywhere else (the pages work offline).
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; \
    frame-ancestors 'none'";

pub use crate::domain::views::{BOARD, PAGE};

/// Registers the pages. `/o/...` paths that match no page get the HTML 404; a page
/// path asked with another method than GET (or HEAD) gets the HTML 405 with `Allow`.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(page("/", web::get().to(home::index)))
        .service(page("/search", web::get().to(home::search)))
        .service(page("/contributors/{id}", web::get().to(home::contributor)))
        .service(page("/assets/{name}", web::get().to(assets::asset)))
        .service(
            web::scope("/o")
                .service(page("/{slug}", web::get().to(orbit::orbit)))
                .service(page("/{slug}/tasks", web::get().to(orbit::tasks)))
                .service(page("/{slug}/activity", web::get().to(orbit::activity)))
                .service(page("/{slug}/members", web::get().to(orbit::members)))
                .service(page("/{slug}/problems", web::get().to(orbit::problems)))
                .service(page(
                    "/{slug}/contributions",
                    web::get().to(orbit::contributions),
                ))
                .service(page("/{slug}/tasks/{id}", web::get().to(task::task)))
                .service(page(
                    "/{slug}/problems/{id}",
                    web::get().to(knowledge::problem),
                ))
                .service(page(
                    "/{slug}/contributions/{id}",
                    web::get().to(knowledge::contribution),
                ))
                .default_service(web::to(not_found)),
        );
}

/// One page's resource: its GET, and the HTML 405 for any other method.
fn page(path: &str, get: actix_web::Route) -> actix_web::Resource {
    web::resource(path)
        .route(get)
        .default_service(web::to(method_not_allowed))
}

async fn method_not_allowed() -> HttpResponse {
    let mut resp = error_page(PageError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        message: "Pages are only read: this address answers GET (and HEAD).".into(),
        details: Vec::new(),
        retry_after: None,
    });
    resp.headers_mut().insert(
        actix_web::http::header::ALLOW,
        actix_web::http::header::HeaderValue::from_static("GET, HEAD"),
    );
    resp
}

/// Why a page could not be shown, as a person reads it.
#[derive(Debug)]
pub struct PageError {
    pub status: StatusCode,
    pub message: String,
    /// Field problems, one line each.
    pub details: Vec<String>,
    /// Seconds for `Retry-After` (a full database, a rate limit), as the API's.
    pub retry_after: Option<u64>,
}

impl PageError {
    pub fn not_found(what: &str) -> PageError {
        PageError {
            status: StatusCode::NOT_FOUND,
            message: format!("{what} not found."),
            details: Vec::new(),
            retry_after: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> PageError {
        PageError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            details: Vec::new(),
            retry_after: None,
        }
    }
}

/// The API's errors as pages: 404 stays 404; invalid input (422) is the user's query,
/// so 400; a full database or a rate limit keeps its status and its `Retry-After`;
/// anything else is a fixed 500 text (the cause is already in the log).
impl From<ApiError> for PageError {
    fn from(e: ApiError) -> PageError {
        let status = match e.status.as_u16() {
            404 => StatusCode::NOT_FOUND,
            400 | 413 | 422 => StatusCode::BAD_REQUEST,
            401 | 429 | 503 => e.status,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let message = if status.is_server_error() && status != StatusCode::SERVICE_UNAVAILABLE {
            "Something went wrong on our side.".to_owned()
        } else {
            e.body.message.clone()
        };
        let details = e
            .body
            .errors
            .iter()
            .flatten()
            .flat_map(|(field, problems)| problems.iter().map(move |p| format!("{field}: {p}")))
            .collect();
        PageError {
            status,
            message,
            details,
            retry_after: e.retry_after.filter(|_| status == e.status),
        }
    }
}

pub type PageResult = Result<Markup, PageError>;

/// The response of a page: the markup, or its error page.
pub fn respond(result: PageResult) -> HttpResponse {
    match result {
        Ok(markup) => html_response(StatusCode::OK, markup),
        Err(e) => error_page(e),
    }
}

pub fn error_page(e: PageError) -> HttpResponse {
    let status = e.status;
    let mut resp = html_response(status, layout::error(&e));
    if let Some(seconds) = e.retry_after {
        if let Ok(v) = HeaderValue::from_str(&seconds.to_string()) {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
    }
    resp
}

/// Whether `path` is a page's (the routes of [`configure`]): a refusal made before
/// routing (a rate limit, `http::ratelimit`) is then an HTML page too.
pub fn owns(path: &str) -> bool {
    matches!(path, "/" | "/search")
        || ["/o/", "/contributors/", "/assets/"]
            .iter()
            .any(|p| path.starts_with(p))
}

/// An API error, refused before routing, as the page a person gets.
pub fn refusal(e: &ApiError) -> HttpResponse {
    error_page(PageError::from(e.clone()))
}

/// A rendered page's bytes as a 200 (a page kept by the list cache).
pub fn html_bytes(body: actix_web::web::Bytes) -> HttpResponse {
    html_body(StatusCode::OK, body)
}

fn html_response(status: StatusCode, markup: Markup) -> HttpResponse {
    html_body(status, html_text(markup))
}

/// A page's markup as the text sent: maud escapes markup, and the control
/// characters a text may hold (stored verbatim; U+0001, U+001B, DEL, C1), which
/// HTML forbids in its input, become U+FFFD. HTML's whitespace (tab, line feed,
/// form feed, carriage return) stays. No template writes a control character of
/// its own.
pub fn html_text(markup: Markup) -> String {
    let html = markup.into_string();
    let forbidden = |c: char| c.is_control() && !matches!(c, '\t' | '\n' | '\u{c}' | '\r');
    if !html.contains(forbidden) {
        return html;
    }
    html.replace(forbidden, "\u{FFFD}")
}

fn html_body(
    status: StatusCode,
    body: impl actix_web::body::MessageBody + 'static,
) -> HttpResponse {
    let mut resp = HttpResponse::build(status)
        .insert_header((
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        ))
        .insert_header((header::CACHE_CONTROL, HeaderValue::from_static("no-cache")))
        .body(body);
    secure(resp.headers_mut());
    resp
}

/// The headers every page and asset carries.
fn secure(headers: &mut actix_web::http::header::HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}

/// The HTML 404 for a path under `/o/` that names no page, and for any other
/// unknown path a browser asks for (`routes::fallback`).
pub async fn not_found() -> HttpResponse {
    error_page(PageError::not_found("Page"))
}

/// A page's query string, parsed into `T` (unknown parameters ignored); values
/// that do not fit → 400 naming every one of them.
pub fn query<T: DeserializeOwned>(req: &HttpRequest) -> Result<T, PageError> {
    crate::http::json::parse_query(req.query_string()).map_err(|problems| {
        let text: Vec<String> = problems
            .into_iter()
            .map(|(param, words)| {
                if param.is_empty() {
                    words
                } else {
                    format!("{param} {words}")
                }
            })
            .collect();
        PageError::bad_request(format!(
            "The query parameters are not valid: {}.",
            text.join("; ")
        ))
    })
}

/// A positive id from a path segment, written as the API writes ids
/// ([`crate::model::plain_id`]: `/tasks/01` is not task 1's page); anything else
/// names nothing → 404.
pub fn path_id(segment: &str, what: &str) -> Result<i64, PageError> {
    crate::model::plain_id(segment).ok_or_else(|| PageError::not_found(what))
}

/// A non-negative paging position from the query (`after`, `before`) → 400 when
/// negative.
pub fn position(name: &str, value: Option<i64>) -> Result<Option<i64>, PageError> {
    match value {
        Some(v) if v < 0 => Err(PageError::bad_request(format!(
            "`{name}` must not be negative."
        ))),
        v => Ok(v),
    }
}

/// Percent-encodes a query value (RFC 3986 unreserved characters stay).
pub fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Runs a page's reads on one pool checkout (`db::read`), mapping its errors.
pub async fn read<T, F>(state: &crate::http::api::State, work: F) -> Result<T, PageError>
where
    T: Send + 'static,
    F: FnOnce(&mut diesel::PgConnection) -> crate::db::TxResult<T> + Send + 'static,
{
    crate::db::read(&state.pool, work)
        .await
        .map_err(PageError::from)
}
