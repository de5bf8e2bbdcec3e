//! One error type for the whole API, its status table and the JSON envelope.
//!
//! Every error leaves the service as `{"message", "code", "errors"?, "details"?}`.
//! 5xx bodies are fixed text: the cause goes to the log, never to the client.

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
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            body: Box::new(ErrorBody {
                message: message.into(),
                code: code.to_owned(),
                errors: None,
                details: None,
            }),
            retry_after: None,
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

    pub fn too_many_requests(retry_after: u64) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            "Too many requests. Retry after the number of seconds in Retry-After.",
        )
        .with_retry_after(retry_after)
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
            413 => Self::payload_too_large(),
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

    pub fn into_error(self) -> ApiError {
        let message = match self.0.iter().next() {
            Some((field, problems)) if self.0.len() == 1 => {
                format!("Invalid {field}: {}", problems.join("; "))
            }
            _ => "The request has invalid fields.".to_owned(),
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

    /// Checks a string's length in characters.
    pub fn len(&mut self, field: &str, value: &str, min: usize, max: usize) {
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
            // Every failure a lost or broken connection causes is 503 (the contract:
            // 503 whenever the database is unavailable), never 500.
            _ if is_connection_failure(&err) => {
                tracing::warn!(error = %err, "database connection lost");
                note_lost_connection();
                ApiError::unavailable()
            }
            // PostgreSQL `text` cannot hold U+0000: a NUL in any string the client sent
            // (body, path or query) that reached a statement is invalid input, not a
            // server error. Field-level checks (api::verbatim::text) say which field.
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

/// Messages libpq and the server use when the database cannot serve us.
pub fn is_unavailable_message(message: &str) -> bool {
    const NEEDLES: &[&str] = &[
        "server closed the connection",
        "terminating connection",
        "connection to server",
        "could not connect",
        "no connection to the server",
        "the database system is",
        "canceling statement due to statement timeout",
        "canceling statement due to lock timeout",
        "SSL connection has been closed",
        "Connection refused",
    ];
    NEEDLES.iter().any(|n| message.contains(n))
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
