//! Documented error responses, grouped by the kind of route, so every operation in
//! the OpenAPI document lists the statuses it can return.

use utoipa::IntoResponses;

use crate::error::ErrorBody;

/// Errors of a public read by id or slug.
#[derive(IntoResponses)]
#[allow(dead_code)]
pub enum ReadErrors {
    /// A presented token is invalid or revoked.
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// Object not found.
    #[response(status = 404)]
    NotFound(ErrorBody),
    /// Invalid query or path parameter.
    #[response(status = 422)]
    Invalid(ErrorBody),
    /// Rate limit exceeded.
    #[response(status = 429)]
    TooMany(ErrorBody),
    /// The database is unavailable.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// Errors of an authenticated write.
#[derive(IntoResponses)]
#[allow(dead_code)]
pub enum WriteErrors {
    /// Missing, invalid, or revoked token.
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// Orbit permission or handoff recipient restriction.
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// Object not found.
    #[response(status = 404)]
    NotFound(ErrorBody),
    /// State, lease, or idempotency conflict.
    #[response(status = 409)]
    Conflict(ErrorBody),
    /// Request exceeds 256 KiB.
    #[response(status = 413)]
    TooLarge(ErrorBody),
    /// Invalid input.
    #[response(status = 422)]
    Invalid(ErrorBody),
    /// Rate limit exceeded.
    #[response(status = 429)]
    TooMany(ErrorBody),
    /// The database is unavailable.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// Errors of `GET /api/v1/search` (it names no object in its path: no 404).
#[derive(IntoResponses)]
#[allow(dead_code)]
pub enum SearchErrors {
    /// A presented token is invalid or revoked.
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// Invalid query parameter (`validation_failed` with `errors`), an unknown
    /// `orbit`, a cursor of another search, or a `q` with nothing searchable in it
    /// (`empty_query`, with `errors.q`).
    #[response(status = 422)]
    Invalid(ErrorBody),
    /// Rate limit exceeded.
    #[response(status = 429)]
    TooMany(ErrorBody),
    /// The database is unavailable.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}
