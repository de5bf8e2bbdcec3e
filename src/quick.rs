//! Quick writes: the successful case of a lease-cycle write in one statement.
//!
//! A lease acquire, a checkpoint or a release through the ordinary path (`api::write`)
//! is about nine round trips to the database (BEGIN, token, membership, key claim,
//! task lock, the read after it, the effect, the closing statement with COMMIT, the
//! revision), and on a small machine the context switches of those round trips are
//! most of a write's CPU. For these three writes, `api::write_quick` first calls a
//! database function (migration `2026-11-30-000006_one_statement_lease_writes`) that
//! runs the same statements, in the same lock order, as one statement in its own
//! implicit transaction, and returns the response body with the revision it took.
//!
//! The functions only ever do the successful case. Whenever anything else might
//! apply (a key seen before, a lease that is not the caller's current active one, an
//! open lease to end, a pending handoff, a token whose use is due to be recorded, a
//! token this instance has not verified yet, artifacts to check...) the function
//! raises `quick_declined`, its transaction rolls back having changed nothing, and
//! the write runs through the ordinary path, on the same connection in the same
//! `web::block`, which decides and words every refusal: the fence module
//! (`src/fence.rs`) stays the one owner of the lease checks. The integration tests
//! compare each quick response, byte for byte, with the ordinary read of what it
//! wrote, and count on `/metrics` that the quick path ran.

use diesel::prelude::*;
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel::sql_types::{BigInt, Integer, Text};

use crate::db::{BindNext, TxError, TxResult};

/// The message a quick write function raises when the ordinary path must decide.
pub const DECLINED: &str = "quick_declined";

/// A lease-cycle write whose request is valid, in the form its function takes.
#[derive(Debug, Clone)]
pub enum QuickCall {
    /// `POST /api/v1/tasks/{task}/leases`.
    Acquire { task_id: i64, seconds: i64 },
    /// `POST /api/v1/tasks/{task}/checkpoints` with no artifacts: `state` is the
    /// canonical form, `state_hash` its SHA-256.
    Checkpoint {
        task_id: i64,
        lease_version: i64,
        summary: String,
        state: String,
        state_hash: String,
    },
    /// `POST /api/v1/leases/{lease}/release`.
    Release { lease_id: i64, lease_version: i64 },
}

/// The Idempotency-Key a quick write claims, exactly as `Gate::claim` would.
#[derive(Debug, Clone)]
pub struct QuickKey {
    pub scope: String,
    pub key: String,
    pub fingerprint: String,
    pub retention_hours: i32,
}

/// What a quick write did: its orbit, the revision it took, and the response body
/// with the revision placeholder (`revision::PENDING`), as the ordinary path builds it.
#[derive(QueryableByName, Debug)]
pub struct QuickRow {
    #[diesel(sql_type = BigInt)]
    pub out_orbit: i64,
    #[diesel(sql_type = BigInt)]
    pub out_revision: i64,
    #[diesel(sql_type = Text)]
    pub out_body: String,
}

impl QuickCall {
    /// The path parameters the key's fingerprint covers (as the handler claims them).
    pub fn params(&self) -> [i64; 1] {
        match self {
            QuickCall::Acquire { task_id, .. } | QuickCall::Checkpoint { task_id, .. } => {
                [*task_id]
            }
            QuickCall::Release { lease_id, .. } => [*lease_id],
        }
    }

    /// The status of the write's success, as its handler answers it.
    pub fn status(&self) -> actix_web::http::StatusCode {
        match self {
            QuickCall::Release { .. } => actix_web::http::StatusCode::OK,
            _ => actix_web::http::StatusCode::CREATED,
        }
    }

    /// Runs the write as one statement for the token `token_id` (verified by this
    /// instance). `Ok(None)`: it changed nothing and the ordinary path must run,
    /// because the function declined or the statement failed (its implicit
    /// transaction rolled back). A lost connection or a timeout is returned as the
    /// ordinary path would return it.
    pub fn run(
        &self,
        conn: &mut PgConnection,
        token_id: i64,
        key: &QuickKey,
    ) -> TxResult<Option<QuickRow>> {
        let result = match self {
            QuickCall::Acquire { task_id, seconds } => crate::db::sql(
                "SELECT out_orbit, out_revision, out_body \
                 FROM quick_acquire_lease($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind::<BigInt, _>(token_id)
            .bind::<BigInt, _>(*task_id)
            .bind::<BigInt, _>(*seconds)
            .bind::<Text, _>(&key.scope)
            .bind::<Text, _>(&key.key)
            .bind::<Text, _>(&key.fingerprint)
            .bind::<Integer, _>(key.retention_hours)
            .get_result::<QuickRow>(conn),
            QuickCall::Checkpoint {
                task_id,
                lease_version,
                summary,
                state,
                state_hash,
            } => crate::db::sql(
                "SELECT out_orbit, out_revision, out_body \
                 FROM quick_checkpoint($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            )
            .bind::<BigInt, _>(token_id)
            .bind::<BigInt, _>(*task_id)
            .bind::<BigInt, _>(*lease_version)
            .bind::<Text, _>(summary)
            .bind::<Text, _>(state)
            .bind::<Text, _>(state_hash)
            .bind::<Text, _>(&key.scope)
            .bind::<Text, _>(&key.key)
            .bind::<Text, _>(&key.fingerprint)
            .bind::<Integer, _>(key.retention_hours)
            .get_result::<QuickRow>(conn),
            QuickCall::Release {
                lease_id,
                lease_version,
            } => crate::db::sql(
                "SELECT out_orbit, out_revision, out_body \
                 FROM quick_release_lease($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind::<BigInt, _>(token_id)
            .bind::<BigInt, _>(*lease_id)
            .bind::<BigInt, _>(*lease_version)
            .bind::<Text, _>(&key.scope)
            .bind::<Text, _>(&key.key)
            .bind::<Text, _>(&key.fingerprint)
            .bind::<Integer, _>(key.retention_hours)
            .get_result::<QuickRow>(conn),
        };
        match result {
            Ok(row) => Ok(Some(row)),
            // The connection is gone: the statement may even have committed. Answered
            // as the ordinary path answers a lost connection (503; a retry with the
            // key replays or executes once).
            Err(
                e @ DieselError::DatabaseError(
                    DatabaseErrorKind::ClosedConnection | DatabaseErrorKind::UnableToSendCommand,
                    _,
                ),
            ) => Err(TxError::Db(e)),
            // The server answered with an error, so the statement's transaction rolled
            // back: nothing happened and the ordinary path decides. That includes a
            // lock timeout (on the key it is `idempotency_key_in_flight` there) and a
            // statement timeout (the ordinary path has a budget per statement; one
            // statement here sums the waits for the key, the task and the orbit).
            Err(DieselError::DatabaseError(_, info))
                if !crate::db::is_unavailable_message(info.message())
                    || info.message().starts_with("canceling statement due to") =>
            {
                if info.message() != DECLINED {
                    tracing::debug!(error = %info.message(), "quick write failed; running the ordinary path");
                }
                Ok(None)
            }
            Err(e) => Err(TxError::Db(e)),
        }
    }
}
