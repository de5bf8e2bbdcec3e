//! Idempotency-Key: every keyed write executes at most once and replays byte for byte.
//!
//! A write route declares its `Operation` (method, route template, key rule) once;
//! `domain::write::run` then runs the whole request as one transaction:
//! authenticate → the handler's own lookups and permission checks → `Gate::claim`
//! → the effect → `Gate::record` (the change) → `Gate::finish` (the closing
//! statement, or the stored response of a write without a change: `store_response`)
//! → commit.
//!
//! `claim` inserts the key row first. Its unique constraint on
//! `(contributor, operation, key)` makes a concurrent duplicate wait on the first
//! transaction: when that one commits, the duplicate finds the stored response and
//! replays it; when it rolls back (a handler error), the duplicate executes. The key
//! row and the response are written in the effect's transaction, so a crash leaves
//! both or neither. Nothing lives in process memory, so any number of instances on
//! one database behave as one.

use actix_web::dev::Payload;
use actix_web::http::StatusCode;
use actix_web::{FromRequest, HttpRequest};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bytea, Int2, Integer, Nullable, Text};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use utoipa::IntoParams;

use crate::db::BindNext;
use crate::db::{TxError, TxResult};
use crate::error::ApiError;

pub const HEADER: &str = "Idempotency-Key";
pub const REPLAYED_HEADER: &str = "idempotency-replayed";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRule {
    /// Missing → 422 `idempotency_key_required`.
    Required,
    /// Honoured when sent.
    Optional,
    /// Never read (memory records, joining an orbit, member changes).
    Ignored,
}

impl KeyRule {
    /// Whether a key sent with the operation is read at all (the REST header, an
    /// MCP tool's `idempotency_key` argument).
    pub fn reads_key(self) -> bool {
        self != KeyRule::Ignored
    }
}

/// One write operation: the scope of its keys is (contributor, method + template).
#[derive(Debug)]
pub struct Operation {
    pub method: &'static str,
    pub template: &'static str,
    pub rule: KeyRule,
}

impl Operation {
    pub const fn required(method: &'static str, template: &'static str) -> Operation {
        Operation {
            method,
            template,
            rule: KeyRule::Required,
        }
    }

    pub const fn optional(method: &'static str, template: &'static str) -> Operation {
        Operation {
            method,
            template,
            rule: KeyRule::Optional,
        }
    }

    pub const fn ignored(method: &'static str, template: &'static str) -> Operation {
        Operation {
            method,
            template,
            rule: KeyRule::Ignored,
        }
    }

    /// The operation part of a key's scope, as stored.
    pub fn scope(&self) -> String {
        format!("{} {}", self.method, self.template)
    }

    /// What a key is bound to: this operation, the resolved path parameters and the
    /// canonical body. A retry with the same key must match it.
    pub fn fingerprint(&self, params: &[i64], body_canonical: &str) -> String {
        let mut h = Sha256::new();
        h.update(self.method.as_bytes());
        h.update(b"\n");
        h.update(self.template.as_bytes());
        h.update(b"\n");
        for p in params {
            h.update(p.to_string().as_bytes());
            h.update(b"/");
        }
        h.update(b"\n");
        h.update(body_canonical.as_bytes());
        hex::encode(h.finalize())
    }
}

/// The `Idempotency-Key` header as sent (validated later, after auth and permission
/// checks, to keep the contract's precedence).
#[derive(Debug, Clone, Default)]
pub struct IdemHeader(pub Option<Result<String, ()>>);

impl FromRequest for IdemHeader {
    type Error = ApiError;
    type Future = std::future::Ready<Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        // Two header lines are one comma-joined value (RFC 9110 5.3), which no key
        // is: taking either line silently would make a retry whose proxy reordered
        // them a new request.
        let twice = req.headers().get_all(HEADER).nth(1).is_some();
        let value = req.headers().get(HEADER).map(|v| match v.to_str() {
            Ok(s) if is_valid_key(s) && !twice => Ok(s.to_owned()),
            _ => Err(()),
        });
        std::future::ready(Ok(IdemHeader(value)))
    }
}

/// `^[!-~]{1,128}$`.
pub fn is_valid_key(key: &str) -> bool {
    (1..=128).contains(&key.len()) && key.bytes().all(|b| (b'!'..=b'~').contains(&b))
}

/// OpenAPI: the required header on every keyed write.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Header)]
pub struct IdempotencyKeyRequired {
    /// Scoped to contributor and operation. Same key and normalized payload replays the
    /// original result; a different payload returns 409.
    #[serde(rename = "Idempotency-Key")]
    #[param(min_length = 1, max_length = 128, pattern = r"^[!-~]{1,128}$")]
    pub idempotency_key: String,
}

/// OpenAPI: the optional header on `POST /api/v1/orbits`.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Header)]
pub struct IdempotencyKeyOptional {
    /// Optional here. When sent: scoped to contributor and operation; the same key and
    /// normalized payload replays the original result; a different payload returns 409.
    #[serde(rename = "Idempotency-Key")]
    #[param(min_length = 1, max_length = 128, pattern = r"^[!-~]{1,128}$")]
    pub idempotency_key: Option<String>,
}

/// A stored response, replayed as is.
#[derive(Debug, Clone)]
pub struct Stored {
    pub status: StatusCode,
    pub body: Vec<u8>,
}

/// The per-request idempotency state inside the write's transaction.
pub struct Gate {
    op: &'static Operation,
    header: IdemHeader,
    contributor_id: i64,
    body_canonical: String,
    retention_hours: i32,
    claimed: Option<i64>,
    checked: bool,
    /// The change this write makes to its orbit, applied by `finish`.
    pending: Option<crate::domain::revision::Pending>,
}

#[derive(QueryableByName)]
struct ClaimedRow {
    /// NULL when the key is already held.
    #[diesel(sql_type = Nullable<BigInt>)]
    id: Option<i64>,
}

#[derive(QueryableByName)]
struct ExistingRow {
    #[diesel(sql_type = Text)]
    fingerprint: String,
    #[diesel(sql_type = Int2)]
    response_status: i16,
    #[diesel(sql_type = Bytea)]
    response_body: Vec<u8>,
}

impl Gate {
    pub fn new(
        op: &'static Operation,
        header: IdemHeader,
        contributor_id: i64,
        body_canonical: String,
        retention_hours: u32,
    ) -> Gate {
        Gate {
            op,
            header,
            contributor_id,
            body_canonical,
            retention_hours: retention_hours as i32,
            claimed: None,
            checked: false,
            pending: None,
        }
    }

    /// The contributor whose write this is.
    pub fn contributor_id(&self) -> i64 {
        self.contributor_id
    }

    fn fingerprint(&self, params: &[i64]) -> String {
        self.op.fingerprint(params, &self.body_canonical)
    }

    /// Claims the key for this request, after the handler's 401/404/403/422 checks
    /// and before its effect. `params` are the path parameters after resolution (an
    /// orbit named by slug is its id). Returns the stored response when the key
    /// already completed with the same request: the write then does nothing and
    /// answers `Reply::replayed(stored)`.
    pub fn claim(&mut self, conn: &mut PgConnection, params: &[i64]) -> TxResult<Option<Stored>> {
        self.checked = true;
        let key = match (&self.header.0, self.op.rule) {
            (_, KeyRule::Ignored) | (None, KeyRule::Optional) => return Ok(None),
            (None, KeyRule::Required) => {
                return Err(ApiError::invalid(
                    "idempotency_key_required",
                    "This write needs an Idempotency-Key header: a new key for each intended \
                     action, the same key for its retries.",
                )
                .into())
            }
            (Some(Err(())), _) => {
                return Err(ApiError::invalid(
                    "idempotency_key_invalid",
                    "The Idempotency-Key must be one header of 1 to 128 visible ASCII \
                     characters.",
                )
                .into())
            }
            (Some(Ok(key)), _) => key.clone(),
        };
        let fingerprint = self.fingerprint(params);
        let scope = self.op.scope();
        // `claim_key` (src/db/functions.sql) is shared with the quick writes
        // (src/perf/quick.rs).
        let claimed: ClaimedRow = crate::db::sql("SELECT claim_key($1, $2, $3, $4, $5) AS id")
            .bind::<BigInt, _>(self.contributor_id)
            .bind::<Text, _>(&scope)
            .bind::<Text, _>(&key)
            .bind::<Text, _>(&fingerprint)
            .bind::<Integer, _>(self.retention_hours)
            .get_result(conn)
            .map_err(|e| {
                if crate::error::is_lock_timeout(&e) {
                    TxError::Api(in_flight())
                } else {
                    TxError::Db(e)
                }
            })?;
        if let Some(id) = claimed.id {
            self.claimed = Some(id);
            return Ok(None);
        }
        let existing: Option<ExistingRow> = crate::db::sql(
            "SELECT fingerprint, response_status, response_body FROM idempotency_keys \
             WHERE contributor_id = $1 AND operation = $2 AND key = $3",
        )
        .bind::<BigInt, _>(self.contributor_id)
        .bind::<Text, _>(&scope)
        .bind::<Text, _>(&key)
        .get_result(conn)
        .optional()?;
        match existing {
            Some(row) if row.fingerprint != fingerprint => Err(ApiError::conflict(
                "idempotency_key_reused",
                "This Idempotency-Key was already used for a different request. Use a new key \
                 for a new intent.",
            )
            .into()),
            Some(row) if row.response_status > 0 => Ok(Some(Stored {
                status: StatusCode::from_u16(row.response_status as u16).unwrap_or(StatusCode::OK),
                body: row.response_body,
            })),
            // Deleted by the purge between our two statements, or not yet completed:
            // let the client retry shortly.
            _ => Err(in_flight().into()),
        }
    }

    /// Names this write's change to its orbit. Returns [`revision::PENDING`] to put
    /// in the response's `orbit_revision`; `finish` applies the change as the
    /// transaction's last statement and fills in the real revision. A write makes
    /// one revision: a second call is a programming error.
    ///
    /// [`revision::PENDING`]: crate::domain::revision::PENDING
    pub fn record(
        &mut self,
        orbit_id: i64,
        contributor_id: i64,
        change: crate::domain::revision::Change<'_>,
    ) -> TxResult<i64> {
        if self.pending.is_some() {
            tracing::error!(operation = %self.op.scope(), "a write recorded two changes");
            return Err(ApiError::internal().into());
        }
        self.pending = Some(crate::domain::revision::Pending::new(
            orbit_id,
            contributor_id,
            change,
        ));
        Ok(crate::domain::revision::PENDING)
    }

    /// Ends the write in its transaction. With a recorded change, returns the
    /// closing statement (`revision::closing`) that applies it and stores the
    /// response under the key; `db::transact_closing` sends it with the COMMIT (it
    /// takes the orbit's lock, so it comes last) and reads back the body with the
    /// revision filled in (`db::Applied`), which is what is sent. Without a change, the response is stored here. A
    /// route that must be keyed but never claimed is a programming error, refused
    /// loudly.
    pub fn finish(
        &mut self,
        conn: &mut PgConnection,
        status: StatusCode,
        body: &[u8],
    ) -> TxResult<Option<crate::db::Closing>> {
        if !self.checked && self.op.rule == KeyRule::Required {
            tracing::error!(operation = %self.op.scope(), "write route never claimed its key");
            return Err(ApiError::internal().into());
        }
        if let Some(change) = self.pending.take() {
            let response = crate::domain::revision::Response {
                body,
                stored: self.claimed.map(|key_id| (key_id, status.as_u16() as i16)),
            };
            let closing = crate::domain::revision::closing(&change, response).map_err(|e| {
                tracing::error!(error = %e, "cannot render the closing statement");
                ApiError::internal()
            })?;
            return Ok(Some(closing));
        } else if let Some(id) = self.claimed {
            crate::db::sql("SELECT store_response($1, $2, $3)")
                .bind::<BigInt, _>(id)
                .bind::<Int2, _>(status.as_u16() as i16)
                .bind::<Bytea, _>(body)
                .execute(conn)?;
        }
        Ok(None)
    }
}

/// The key errors' words over MCP, where the key is the tool argument
/// `idempotency_key`, not a header (the REST words are in `Gate::claim`).
pub fn tool_message(code: &str) -> Option<&'static str> {
    Some(match code {
        "idempotency_key_required" => {
            "This tool needs the argument idempotency_key: a new value for each intended \
             action, the same value for its retries."
        }
        "idempotency_key_invalid" => {
            "The argument idempotency_key must be 1 to 128 visible ASCII characters."
        }
        "idempotency_key_reused" => {
            "This idempotency_key was already used for a different call. Use a new \
             idempotency_key for a new intent."
        }
        "idempotency_key_in_flight" => {
            "A call with this idempotency_key is still executing. Call again with the same \
             idempotency_key after retry_after_seconds."
        }
        _ => return None,
    })
}

fn in_flight() -> ApiError {
    ApiError::conflict(
        "idempotency_key_in_flight",
        "A request with this Idempotency-Key is still executing. Retry the same request after \
         Retry-After seconds.",
    )
    .with_retry_after(1)
}

/// Deletes expired keys in small batches without long locks. Returns how many went.
pub fn purge_expired(conn: &mut PgConnection) -> QueryResult<usize> {
    const BATCH: i64 = 500;
    let mut total = 0;
    loop {
        let n = crate::db::sql(
            // statement_timestamp(), not clock_timestamp(): a volatile bound cannot
            // be an index condition, and the scan would then read every key.
            "DELETE FROM idempotency_keys WHERE id IN ( \
                 SELECT id FROM idempotency_keys WHERE expires_at <= statement_timestamp() \
                 ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)",
        )
        .bind::<BigInt, _>(BATCH)
        .execute(conn)?;
        total += n;
        if (n as i64) < BATCH {
            return Ok(total);
        }
    }
}
