//! One error type for the whole API, its status table and the JSON envelope.
//!
//! Every error leaves the service as `{"message", "code", "errors"?, "details"?}`.
//! 5xx bodies are fixed text: the cause goes to the log, never to the client. A
//! refusal's `Retry-After`, and a 429's rate-limit headers, are rendered here too.

use std::collections::BTreeMap;

use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// The error envelope. `code` is a stable snake_case reason a client can branch on.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody {
    /// A human sentence.
    pub message: String,
    /// Stable machine-readable reason, e.g. `stale_lease_version`.
    pub code: String,
    /// Field problems, keyed by field name (present only for invalid input).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = BTreeMap<String, Vec<String>>, required = false)]
    pub errors: Option<BTreeMap<String, Vec<String>>>,
    /// Machine-readable context, e.g. `expires_at` for `lease_conflict`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Object, required = false)]
    pub details: Option<Value>,
}

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub body: Box<ErrorBody>,
    pub retry_after: Option<u64>,
    /// The rate limit a 429 refused by: named in its `RateLimit-Policy` and
    /// `RateLimit` headers, with nothing left until `Retry-After`.
    pub limit: Option<Box<RateLimit>>,
}

/// A rate limit as its headers name it (IETF httpapi draft form): `quota` units
/// per `window` seconds, under `name`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub name: &'static str,
    pub quota: u32,
    pub window: u64,
}

impl RateLimit {
    /// `RateLimit-Policy` and `RateLimit` with `remaining` units left and `reset`
    /// seconds until the bucket is full again (on a refusal: 0 left, and the seconds
    /// until the next unit, `Retry-After`).
    pub fn headers(&self, remaining: u32, reset: u64) -> (String, String) {
        let name = self.name;
        (
            format!("\"{name}\";q={};w={}", self.quota.max(1), self.window),
            format!("\"{name}\";r={remaining};t={reset}"),
        )
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    /// A refusal; one whose reaction is `retry_same_key_after` ([`recover_for`])
    /// says after how long from the start (`Retry-After: 1`, until
    /// [`ApiError::with_retry_after`] says otherwise): the reaction names the header.
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        let retry = recover_for(status.as_u16(), code) == "retry_same_key_after";
        ApiError {
            status,
            body: Box::new(ErrorBody {
                message: message.into(),
                code: code.to_owned(),
                errors: None,
                details: None,
            }),
            retry_after: retry.then_some(1),
            limit: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.body.details = Some(details);
        self
    }

    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.body.message = message.into();
        self
    }

    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds.max(1));
        self
    }

    pub fn code(&self) -> &str {
        &self.body.code
    }

    /// 401 with `WWW-Authenticate: Bearer` (added when rendered).
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    pub fn forbidden(code: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, code, message)
    }

    pub fn not_found(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} not found."),
        )
    }

    pub fn conflict(code: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }

    /// 422 for a problem that is not tied to one field.
    pub fn invalid(code: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
    }

    /// 422 `validation_failed` with one field problem.
    pub fn field(field: &str, problem: impl Into<String>) -> Self {
        let mut errors = FieldErrors::default();
        errors.add(field, problem);
        errors.into_error()
    }

    pub fn unavailable() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            "The database is unavailable. Retry later.",
        )
        .with_retry_after(1)
    }

    pub fn internal() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            "Internal server error.",
        )
    }

    pub fn payload_too_large() -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "The request body exceeds 256 KiB.",
        )
    }

    /// 429 `rate_limited`: wait `retry_after` seconds. The message names no header,
    /// so that it reads the same over MCP.
    pub fn too_many_requests(retry_after: u64) -> Self {
        let seconds = retry_after.max(1);
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            format!("Too many requests. Retry after {seconds} s."),
        )
        .with_retry_after(seconds)
    }

    /// The 429 of rate limit `limit`, `retry_after` seconds from its next unit; its
    /// `message` says which limit it is when it is not the request budget.
    pub fn rate_limited(limit: RateLimit, retry_after: u64) -> Self {
        let mut e = Self::too_many_requests(retry_after);
        e.limit = Some(Box::new(limit));
        e
    }

    /// The envelope for a status produced outside our handlers (routing, actix).
    pub fn from_status(status: StatusCode) -> Self {
        match status.as_u16() {
            404 => Self::new(status, "not_found", "No route matches this path."),
            405 => Self::new(
                status,
                "method_not_allowed",
                "This method is not allowed on this path.",
            ),
            // Only the MCP transport answers these (REST refuses a wrong content
            // type with 422 `unsupported_content_type`).
            406 => Self::new(
                status,
                "not_acceptable",
                "The Accept header does not list what this endpoint needs (POST /mcp: both \
                 application/json and text/event-stream).",
            ),
            413 => Self::payload_too_large(),
            415 => Self::new(
                status,
                "unsupported_media_type",
                "This endpoint does not take this Content-Type (POST /mcp: application/json).",
            ),
            s if s >= 500 => Self::internal(),
            _ => Self::new(
                status,
                "bad_request",
                status.canonical_reason().unwrap_or("Bad request."),
            ),
        }
    }

    pub fn to_response(&self) -> HttpResponse {
        let mut builder = HttpResponse::build(self.status);
        builder
            .extensions_mut()
            .insert(ErrorCode(self.body.code.clone()));
        builder.insert_header((
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        ));
        if self.status == StatusCode::UNAUTHORIZED {
            builder.insert_header((
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"orbit-commons\""),
            ));
        }
        if let Some(seconds) = self.retry_after {
            builder.insert_header((header::RETRY_AFTER, seconds.to_string()));
            if let Some(limit) = &self.limit {
                let (policy, state) = limit.headers(0, seconds);
                builder.insert_header(("ratelimit-policy", policy));
                builder.insert_header(("ratelimit", state));
            }
        }
        let body = serde_json::to_vec(&self.body).unwrap_or_else(|_| {
            br#"{"message":"Internal server error.","code":"internal_error"}"#.to_vec()
        });
        builder.body(body)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.body.code)
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        self.to_response()
    }
}

/// The error code of a response, for metrics (set by `ApiError::to_response`).
#[derive(Debug, Clone)]
pub struct ErrorCode(pub String);

/// Collects field problems so a client sees all of them at once.
#[derive(Debug, Default)]
pub struct FieldErrors(BTreeMap<String, Vec<String>>);

impl FieldErrors {
    pub fn add(&mut self, field: &str, problem: impl Into<String>) {
        self.0
            .entry(field.to_owned())
            .or_default()
            .push(problem.into());
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A list's length, checked before its elements: past `max` the count is the
    /// list's one problem and no element is judged (a 256 KiB body holds tens of
    /// thousands, each of which would be a named problem). Returns the elements to
    /// judge.
    pub fn bounded<'a, T>(
        &mut self,
        field: &str,
        items: &'a [T],
        max: usize,
        noun: &str,
    ) -> &'a [T] {
        if items.len() > max {
            self.add(field, format!("at most {max} {noun}"));
            &items[..0]
        } else {
            items
        }
    }

    /// Whether `field` has a problem already.
    pub fn has(&self, field: &str) -> bool {
        self.0.contains_key(field)
    }

    /// The problems by field.
    pub fn into_inner(self) -> BTreeMap<String, Vec<String>> {
        self.0
    }

    /// 422 `validation_failed`; the message names every field and its problems.
    pub fn into_error(self) -> ApiError {
        let message = match self.0.iter().next() {
            Some((field, problems)) if self.0.len() == 1 => {
                format!("Invalid {field}: {}", problems.join("; "))
            }
            Some(_) => format!(
                "Invalid fields: {}.",
                self.0
                    .iter()
                    .map(|(f, p)| format!("{f} {}", p.join("; ")))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            None => "The request has invalid fields.".to_owned(),
        };
        let mut err = ApiError::invalid("validation_failed", message);
        err.body.errors = Some(self.0);
        err
    }

    pub fn finish(self) -> ApiResult<()> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(self.into_error())
        }
    }

    /// Checks a text field: its length in characters, `min..=max`, and that
    /// PostgreSQL can store it (`text` cannot hold U+0000). The one check of every
    /// string a body or an MCP tool's arguments carry, so a NUL is a 422 naming its
    /// field, among the others, before any 409 (not a database error afterwards).
    pub fn text(&mut self, field: &str, value: &str, min: usize, max: usize) {
        let n = value.chars().count();
        if n < min {
            if min == 1 {
                self.add(field, "must not be empty");
            } else {
                self.add(field, format!("must be at least {min} characters"));
            }
        } else if n > max {
            self.add(field, format!("must be at most {max} characters"));
        }
        if value.contains('\0') {
            self.add(field, "must not contain the character U+0000");
        }
    }

    pub fn range(&mut self, field: &str, value: i64, min: i64, max: i64) {
        if value < min || value > max {
            self.add(field, format!("must be between {min} and {max}"));
        }
    }
}

/// Whether a database error comes from a connection that was lost or broke (a
/// restart, `pg_terminate_backend`, a network failure, a timeout): such a request
/// gets 503 and may be retried with the same key (issue 26, finding 9).
///
/// - A connection the server dropped fails the statement with `ClosedConnection`
///   and the rollback after it with `UnableToSendCommand`; the server's own words
///   ("terminating connection due to administrator command", "the database system
///   is shutting down", a statement or lock timeout) come as `Unknown`.
/// - When the rollback after such a failure fails too, diesel marks the
///   connection's transaction manager broken and answers `BrokenTransactionManager`
///   ("The transaction manager is broken") for that work; the pool then discards the
///   connection.
/// - A failed COMMIT whose rollback failed as well is `RollbackErrorOnCommit`.
pub fn is_connection_failure(err: &diesel::result::Error) -> bool {
    use diesel::result::{DatabaseErrorKind, Error};
    match err {
        Error::DatabaseError(
            DatabaseErrorKind::ClosedConnection | DatabaseErrorKind::UnableToSendCommand,
            _,
        ) => true,
        Error::DatabaseError(_, info) => is_unavailable_message(info.message()),
        Error::BrokenTransactionManager => true,
        Error::RollbackErrorOnCommit {
            rollback_error,
            commit_error,
        } => is_connection_failure(rollback_error) || is_connection_failure(commit_error),
        _ => false,
    }
}

impl From<diesel::result::Error> for ApiError {
    fn from(err: diesel::result::Error) -> Self {
        use diesel::result::Error;
        match &err {
            Error::NotFound => {
                tracing::error!(error = %err, "unexpected NotFound from the database");
                ApiError::internal()
            }
            Error::DatabaseError(_, info) if is_timeout_message(info.message()) => {
                tracing::warn!(error = %err, "database statement timed out");
                ApiError::unavailable()
            }
            // Every failure a lost or broken connection causes is 503 (the contract:
            // 503 whenever the database is unavailable), never 500.
            _ if is_connection_failure(&err) => {
                tracing::warn!(error = %err, "database connection lost");
                note_lost_connection();
                ApiError::unavailable()
            }
            // PostgreSQL `text` cannot hold U+0000: a NUL in any string the client sent
            // (body, path or query) that reached a statement is invalid input, not a
            // server error. Field-level checks (`FieldErrors::text`) say which field.
            Error::DatabaseError(_, info)
                if info
                    .message()
                    .starts_with("invalid byte sequence for encoding \"UTF8\": 0x00") =>
            {
                ApiError::invalid(
                    "validation_failed",
                    "Text must not contain the character U+0000.",
                )
            }
            _ => {
                tracing::error!(error = %err, "database error");
                ApiError::internal()
            }
        }
    }
}

/// Messages libpq and the server use when the database cannot serve us: a lost
/// connection or one of our own timeouts ([`is_timeout_message`]).
pub fn is_unavailable_message(message: &str) -> bool {
    const NEEDLES: &[&str] = &[
        "server closed the connection",
        "terminating connection",
        "connection to server",
        "could not connect",
        "no connection to the server",
        "the database system is",
        "SSL connection has been closed",
        "Connection refused",
    ];
    is_timeout_message(message) || NEEDLES.iter().any(|n| message.contains(n))
}

/// A statement the server cut off at our `statement_timeout` or `lock_timeout`
/// (`db::SessionSettings`): 503 like a lost connection, but the connection is
/// fine, so the pool is not suspected and the log says what happened.
pub fn is_timeout_message(message: &str) -> bool {
    message.starts_with("canceling statement due to statement timeout")
        || message.starts_with(LOCK_TIMEOUT)
}

/// The server's words for a statement cut off at our `lock_timeout`.
const LOCK_TIMEOUT: &str = "canceling statement due to lock timeout";

/// A statement cut off at our `lock_timeout`: the one test of it, each caller
/// deciding what it means there (a key in flight, a write to run alone, a 503).
pub fn is_lock_timeout(err: &diesel::result::Error) -> bool {
    matches!(err, diesel::result::Error::DatabaseError(_, info)
        if info.message().starts_with(LOCK_TIMEOUT))
}

/// A statement the server cancelled (a timeout, or a cancel request): the
/// statement failed, the connection did not.
pub fn is_cancelled(err: &diesel::result::Error) -> bool {
    matches!(err, diesel::result::Error::DatabaseError(_, info)
        if is_cancel_message(info.message()))
}

/// The server's message for a statement it cancelled ([`is_cancelled`]).
pub fn is_cancel_message(message: &str) -> bool {
    message.starts_with("canceling statement")
}

/// Milliseconds since the Unix epoch of the last lost database connection.
static LOST_AT_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// How long after a lost connection checkouts are tested.
const SUSPICION_MS: u64 = 60_000;

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Records that a connection to the database was lost.
pub fn note_lost_connection() {
    LOST_AT_MS.store(now_ms(), std::sync::atomic::Ordering::Relaxed);
}

pub fn recently_lost() -> bool {
    let at = LOST_AT_MS.load(std::sync::atomic::Ordering::Relaxed);
    at != 0 && now_ms().saturating_sub(at) < SUSPICION_MS
}

/// One error code: its status and the one reaction a client should have to it
/// (`recover`, a word from [`REACTIONS`]).
#[derive(Debug, Clone, Copy)]
pub struct Code {
    pub code: &'static str,
    pub status: u16,
    pub recover: &'static str,
}

/// The reactions, as MCP refusals and agents.md name them.
pub const REACTIONS: &[&str] = &[
    "stop_and_report",
    "choose_other_task",
    "renew_instead",
    "reread_then_retry",
    "retry_same_key_after",
    "new_key_for_new_intent",
    "fix_input",
    "not_permitted",
    "not_found",
    "continue",
];

const fn code(code: &'static str, status: u16, recover: &'static str) -> Code {
    Code {
        code,
        status,
        recover,
    }
}

/// Every error code the service answers, with its status and its one reaction. A
/// new code goes here (a test finds every code written in `src/` and refuses one
/// that is missing), and into the table at the top of agents.md (a test compares).
pub const CODES: &[Code] = &[
    code("bad_request", 400, "fix_input"),
    code("unauthorized", 401, "not_permitted"),
    code("not_a_member", 403, "not_permitted"),
    code("insufficient_role", 403, "not_permitted"),
    code("invite_only", 403, "not_permitted"),
    code("not_author", 403, "not_permitted"),
    code("not_giver", 403, "not_permitted"),
    code("not_recipient", 403, "not_permitted"),
    code("own_handoff", 403, "not_permitted"),
    code("not_found", 404, "not_found"),
    code("method_not_allowed", 405, "fix_input"),
    code("not_acceptable", 406, "fix_input"),
    code("request_timeout", 408, "retry_same_key_after"),
    code("stale_lease_version", 409, "stop_and_report"),
    code("lease_not_held", 409, "stop_and_report"),
    code("lease_released", 409, "stop_and_report"),
    code("lease_expired", 409, "stop_and_report"),
    code("handed_off", 409, "stop_and_report"),
    code("task_closed", 409, "stop_and_report"),
    code("lease_conflict", 409, "choose_other_task"),
    code("handoff_not_pending", 409, "choose_other_task"),
    code("handoff_expired", 409, "choose_other_task"),
    code("lease_already_held", 409, "renew_instead"),
    code("revision_conflict", 409, "reread_then_retry"),
    code("idempotency_key_in_flight", 409, "retry_same_key_after"),
    code("idempotency_key_reused", 409, "new_key_for_new_intent"),
    code("already_member", 409, "continue"),
    code("slug_taken", 409, "fix_input"),
    code("last_owner", 409, "fix_input"),
    code("webhook_limit", 409, "fix_input"),
    code("payload_too_large", 413, "fix_input"),
    code("unsupported_media_type", 415, "fix_input"),
    code("validation_failed", 422, "fix_input"),
    code("invalid_path", 422, "fix_input"),
    code("malformed_json", 422, "fix_input"),
    code("unreadable_body", 422, "fix_input"),
    code("unsupported_content_type", 422, "fix_input"),
    code("unsupported_content_encoding", 422, "fix_input"),
    code("empty_query", 422, "fix_input"),
    code("idempotency_key_required", 422, "fix_input"),
    code("idempotency_key_invalid", 422, "fix_input"),
    code("lease_version_not_issued", 422, "fix_input"),
    code("webhook_url_forbidden", 422, "fix_input"),
    code("rate_limited", 429, "retry_same_key_after"),
    code("internal_error", 500, "retry_same_key_after"),
    code("service_unavailable", 503, "retry_same_key_after"),
    code("not_migrated", 503, "retry_same_key_after"),
];

impl ApiError {
    /// The one reaction to this error: the code's, except where the details name a
    /// lease the caller may go on with (`details.lease_id`; `continue`): a
    /// `stale_lease_version` whose current, active lease is the caller's own and
    /// unfenced, a `handoff_not_pending` or `handoff_expired` whose task the caller
    /// holds (it accepted the handoff itself, or holds the task otherwise, as the
    /// giver that still holds it). `details.yours` alone is no such lease: the
    /// caller's own pending handoff may fence it (`details.handoff_id`).
    pub fn recover(&self) -> &'static str {
        let details = self.body.details.as_ref();
        let code = self.body.code.as_str();
        let mine = match code {
            "stale_lease_version" | "handoff_not_pending" | "handoff_expired" => {
                details.and_then(|d| d.get("lease_id")).is_some()
            }
            _ => false,
        };
        if mine {
            return "continue";
        }
        recover_for(self.status.as_u16(), code)
    }
}

/// The reaction to `code` (from [`CODES`]); a code not in the table by its status.
pub fn recover_for(status: u16, code: &str) -> &'static str {
    if let Some(c) = CODES.iter().find(|c| c.code == code) {
        return c.recover;
    }
    match status {
        429 | 500 | 503 => "retry_same_key_after",
        401 | 403 => "not_permitted",
        404 => "not_found",
        _ => "fix_input",
    }
}

/// Every `.rs` file under `src/`, for the unit tests that hold a list to the code
/// (the error codes here, the change kinds in `domain::revision`).
#[cfg(test)]
pub(crate) fn source_files() -> Vec<std::path::PathBuf> {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A statement cut off by our own lock or statement timeout is 503, but not a
    /// lost connection: the pool is not put under suspicion (which tests every
    /// checkout for a minute), as it is after a connection the server closed.
    #[test]
    fn a_timeout_is_503_without_suspecting_the_pool() {
        use diesel::result::{DatabaseErrorKind, Error};
        let error = |message: &str| {
            Error::DatabaseError(DatabaseErrorKind::Unknown, Box::new(message.to_owned()))
        };
        for message in [
            "canceling statement due to lock timeout",
            "canceling statement due to statement timeout",
        ] {
            assert!(is_unavailable_message(message));
            assert_eq!(
                ApiError::from(error(message)).status,
                StatusCode::SERVICE_UNAVAILABLE
            );
            assert!(!recently_lost(), "{message}");
        }
        let closed = error("server closed the connection unexpectedly");
        assert_eq!(
            ApiError::from(closed).status,
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert!(recently_lost());
    }

    /// Every code written in `src/` as an error's code is in CODES, with a status
    /// that agrees, and every reaction is one of REACTIONS.
    #[test]
    fn every_code_in_the_source_is_in_the_table() {
        let files = super::source_files();
        let constructors = [
            ("ApiError::conflict(", Some(409)),
            ("ApiError::forbidden(", Some(403)),
            ("ApiError::invalid(", Some(422)),
            ("ApiError::new(", None),
            ("Self::new(", None),
        ];
        let mut found = 0;
        for file in files {
            let text = std::fs::read_to_string(&file).expect("read");
            for (call, status) in constructors {
                if call == "Self::new(" && !file.ends_with("src/error.rs") {
                    continue;
                }
                for (at, _) in text.match_indices(call) {
                    let rest = &text[at + call.len()..];
                    // The first string literal of the call is its code.
                    let Some(open) = rest.find('"') else { continue };
                    if rest[..open].contains(')') {
                        continue; // a code passed in a variable (`code`)
                    }
                    let code: String = rest[open + 1..].chars().take_while(|c| *c != '"').collect();
                    if !code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
                        continue;
                    }
                    found += 1;
                    let entry = CODES.iter().find(|c| c.code == code).unwrap_or_else(|| {
                        panic!("{}: code {code} is not in error::CODES", file.display())
                    });
                    if let Some(status) = status {
                        assert_eq!(entry.status, status, "{code}");
                    }
                }
            }
        }
        assert!(found > 25, "the scan found only {found} codes");
        for c in CODES {
            assert!(REACTIONS.contains(&c.recover), "{}: {}", c.code, c.recover);
        }
        for (status, code) in [
            (404, "not_found"),
            (405, "method_not_allowed"),
            (413, "payload_too_large"),
            (500, "internal_error"),
            (400, "bad_request"),
        ] {
            let e = ApiError::from_status(StatusCode::from_u16(status).unwrap());
            assert_eq!(e.code(), code);
            assert!(CODES.iter().any(|c| c.code == code && c.status == status));
        }
    }

    #[test]
    fn recovery_follows_the_table_and_the_details() {
        assert_eq!(recover_for(409, "stale_lease_version"), "stop_and_report");
        assert_eq!(recover_for(409, "handoff_not_pending"), "choose_other_task");
        assert_eq!(recover_for(409, "lease_already_held"), "renew_instead");
        assert_eq!(recover_for(422, "lease_version_not_issued"), "fix_input");
        assert_eq!(recover_for(429, "rate_limited"), "retry_same_key_after");
        assert_eq!(recover_for(403, "some_new_code"), "not_permitted");
        let mine = ApiError::conflict("stale_lease_version", "x").with_details(
            serde_json::json!({"current_lease_version": 2, "yours": true, "lease_id": 4}),
        );
        assert_eq!(mine.recover(), "continue");
        let fenced = ApiError::conflict("stale_lease_version", "x").with_details(
            serde_json::json!({"current_lease_version": 2, "yours": true, "handoff_id": 5}),
        );
        assert_eq!(fenced.recover(), "stop_and_report");
        let theirs = ApiError::conflict("stale_lease_version", "x")
            .with_details(serde_json::json!({"current_lease_version": 2, "yours": false}));
        assert_eq!(theirs.recover(), "stop_and_report");
        let accepted = ApiError::conflict("handoff_not_pending", "x").with_details(
            serde_json::json!({"current_status": "ACCEPTED", "accepted_by": 3, "lease_id": 9, "lease_version": 2}),
        );
        assert_eq!(accepted.recover(), "continue");
        let holding = ApiError::conflict("handoff_expired", "x").with_details(
            serde_json::json!({"current_status": "EXPIRED", "lease_id": 9, "lease_version": 1}),
        );
        assert_eq!(holding.recover(), "continue");
        let expired = ApiError::conflict("handoff_expired", "x")
            .with_details(serde_json::json!({"current_status": "EXPIRED"}));
        assert_eq!(expired.recover(), "choose_other_task");
    }

    /// Every refusal whose reaction is to retry after `Retry-After` is answered with
    /// one, however it was made (a probe, 2026-12-07: `/readyz`'s `not_migrated`,
    /// made with `ApiError::new`, had none), and no other is.
    #[test]
    fn every_retry_code_is_answered_with_retry_after() {
        for c in CODES {
            let status = StatusCode::from_u16(c.status).unwrap();
            let answer = ApiError::new(status, c.code, String::new()).error_response();
            let header = answer.headers().get(header::RETRY_AFTER);
            let retries = c.recover == "retry_same_key_after";
            assert_eq!(header.is_some(), retries, "{}: {header:?}", c.code);
        }
    }
}
