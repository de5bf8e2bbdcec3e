//! Group commit for the ordinary write path: the units of work of one orbit's
//! writes that queue in this instance while a group runs share one transaction and
//! one commit.
//!
//! Each write of a busy orbit holds the orbit's row lock (its revision) from its
//! last statement to the end of its commit's WAL flush; writers of one orbit queue
//! on that lock one commit at a time. Here the writes queue in [`Lanes`] by the
//! orbit their token last wrote to (`lanes::Hints`); a group first reads every
//! write's token row in one statement (each write checks its own,
//! `Bearer::require_read`), then runs each write's own
//! unit of work — the same Rust function the ordinary path runs, so every rule keeps
//! its one owner — under its own `SAVEPOINT` inside one transaction on the lane's
//! connection, then applies every write's change (its closing, `revision::closing`)
//! in the group's order, all in one statement (`db::apply_all`), and commits once.
//! The applies come last so that the group takes the orbit's row only for them and
//! the commit, not through its writes' own statements: the orbit's other lane (or
//! an instance's) runs its writes meanwhile. A write whose work fails is rolled back to its
//! savepoint alone and answered its error, as its own transaction would have been.
//! After the first write every later write of the group gives up a lock wait within
//! 10 ms (`lock_timeout`): whatever it would wait for is held elsewhere, and waiting
//! inside the group would stall the group (or close a cycle with another group).
//! Such a write, or one that met a deadlock or a serialization failure, is rolled
//! back to its savepoint and runs again alone, after the group's commit, exactly as
//! the ordinary path runs it. The applies wait for the orbit's row as long as a
//! lone write would; if one fails (nothing of its change is then in), the group is
//! rolled back and every write runs alone. A group of one, a write whose token has
//! no hint, and a token this instance has not verified run alone, as before.
//! Nobody is answered before the commit their write is in.

use std::sync::Arc;

use diesel::connection::{AnsiTransactionManager as Tm, SimpleConnection, TransactionManager};
use diesel::result::Error as DieselError;
use diesel::{PgConnection, QueryResult};

use crate::db::{self, Applied, Closing, PgPool, TxError, TxResult};
use crate::error::{ApiError, ApiResult};
use crate::perf::lanes::Hints;
use crate::perf::lanes::{Lanes, Shape};
use crate::store::contributors::TokenRow;

/// The most writes in one group: each is a subtransaction, and PostgreSQL keeps up
/// to 64 of a transaction's subtransactions in its snapshots before it overflows.
pub const MAX_GROUP: usize = 32;

/// How long a write after the first of its group waits for a lock, in ms, before it
/// is set aside to run alone.
const LATER_LOCK_TIMEOUT_MS: u32 = 10;

/// One write's unit of work: its value and the closing statement that applies its
/// change (if any). It is given its token's row when its group read it (`None`, as
/// when it runs alone through `db::transact_closing`: it reads the row itself).
pub type Work<T> =
    Box<dyn FnMut(&mut PgConnection, Option<TokenRow>) -> TxResult<(T, Option<Closing>)> + Send>;

/// Reads the rows of the tokens `ids` in one statement (`domain::auth::token_rows`).
pub type ReadTokens = fn(&mut PgConnection, &[i64]) -> QueryResult<Vec<TokenRow>>;

/// A write waiting for its group: the verified token it authenticates with.
pub struct Queued<T> {
    token_id: i64,
    work: Work<T>,
}

/// A committed write: its value and what its closing statement took (the
/// revision, and the response body with it filled in).
pub type Committed<T> = (T, Option<Applied>);

/// The grouped ordinary writes of this instance.
pub struct Commits<T> {
    lanes: Arc<Lanes<i64, Queued<T>, Committed<T>>>,
    hints: Arc<Hints>,
}

impl<T: Send + 'static> Commits<T> {
    pub fn new(
        pool: PgPool,
        lanes: usize,
        deadline: std::time::Duration,
        hints: Arc<Hints>,
        read_tokens: ReadTokens,
    ) -> Commits<T> {
        let shape = Shape {
            per_route: lanes,
            borrow: 0,
            budget: 0,
            max_group: MAX_GROUP,
            deadline,
            skip_abandoned: false,
            what: "grouped write",
        };
        let run = move |_: &i64, group: &mut [Queued<T>]| run_group(&pool, read_tokens, group);
        Commits {
            lanes: Arc::new(Lanes::new(shape, Box::new(run))),
            hints,
        }
    }

    /// Writes queued for their next group.
    pub fn waiting(&self) -> usize {
        self.lanes.waiting()
    }

    /// `(groups run, writes answered, writes waiting)`.
    pub fn counts(&self) -> (u64, u64, u64) {
        self.lanes.counts()
    }

    /// Runs `work` as `db::transact_closing` would: in the next group of the orbit
    /// the verified token `token_id` last wrote to, or alone without a hint; 503 at
    /// `until`, the write's deadline.
    pub async fn transact(
        &self,
        pool: &PgPool,
        token_id: Option<i64>,
        until: std::time::Instant,
        mut work: Work<T>,
    ) -> ApiResult<Committed<T>> {
        match token_id.and_then(|t| Some((t, self.hints.orbit_of(t)?))) {
            Some((token_id, orbit)) => {
                self.lanes
                    .submit_until(orbit, Queued { token_id, work }, until)
                    .await
            }
            None => db::transact_closing_until(pool, until, move |conn| work(conn, None)).await,
        }
    }
}

/// What became of one write inside a group.
enum Step<T> {
    /// Its work ran; its change is applied at the end of the group.
    Ran(T, Option<Closing>),
    Done(Committed<T>),
    Failed(ApiError),
    /// Rolled back to its savepoint: runs alone after the group.
    Alone,
}

/// Runs one group on one pooled connection; one answer per write, in order.
fn run_group<T>(
    pool: &PgPool,
    read_tokens: ReadTokens,
    group: &mut [Queued<T>],
) -> Vec<ApiResult<Committed<T>>> {
    let every = |e: ApiError, n: usize| (0..n).map(|_| Err(e.clone())).collect::<Vec<_>>();
    let mut conn = match db::checkout(pool) {
        Ok(conn) => conn,
        Err(e) => return every(e, group.len()),
    };
    if let [one] = group {
        return vec![alone(&mut conn, one)];
    }
    let steps = match in_one_transaction(&mut conn, read_tokens, group) {
        Ok(steps) => steps,
        // Nothing of the group committed (or, if the COMMIT itself was lost, maybe
        // all of it): every write is answered as a lost connection is (503; a retry
        // with its key replays it or runs it once).
        Err(e) => return every(e, group.len()),
    };
    steps
        .into_iter()
        .zip(group.iter_mut())
        .map(|(step, work)| match step {
            Step::Done(done) => Ok(done),
            Step::Failed(e) => Err(e),
            Step::Alone | Step::Ran(..) => alone_after_the_group(&mut conn, work),
        })
        .collect()
}

/// [`alone`] for a write left over after its group committed: a panic answers this
/// write 500 and leaves the others their answers (past the lane's own catch, it
/// would answer the whole group 500, the writes that committed included).
fn alone_after_the_group<T>(
    conn: &mut PgConnection,
    queued: &mut Queued<T>,
) -> ApiResult<Committed<T>> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| alone(conn, queued))).unwrap_or_else(
        |_| {
            tracing::error!("a write run alone after its group panicked");
            Err(ApiError::internal())
        },
    )
}

/// Runs one write in a transaction of its own, as the ordinary path does.
fn alone<T>(conn: &mut PgConnection, queued: &mut Queued<T>) -> ApiResult<Committed<T>> {
    db::transact_closing_on(conn, &mut |conn: &mut PgConnection| {
        (queued.work)(conn, None)
    })
}

/// The group's transaction: its tokens' rows read, each write's work under its
/// savepoint, then every change applied, then one COMMIT. `Err` when the
/// transaction as a whole failed (the connection, or the COMMIT).
fn in_one_transaction<T>(
    conn: &mut PgConnection,
    read_tokens: ReadTokens,
    group: &mut [Queued<T>],
) -> ApiResult<Vec<Step<T>>> {
    Tm::begin_transaction(conn).map_err(ApiError::from)?;
    let ids: Vec<i64> = group.iter().map(|q| q.token_id).collect();
    let mut rows = match read_tokens(conn, &ids) {
        Ok(rows) => rows,
        Err(e) if is_lost(&e) => return Err(abandon(conn, e)),
        Err(e) => {
            tracing::warn!(error = %e, "a write group could not read its tokens; running its writes alone");
            let _ = Tm::rollback_transaction(conn);
            return Ok(all_alone(group.len()));
        }
    };
    let mut steps = Vec::with_capacity(group.len());
    for (i, queued) in group.iter_mut().enumerate() {
        let enter = match i {
            0 => "SAVEPOINT w".to_owned(),
            // The session's own lock_timeout is kept for the applies.
            1 => format!(
                "RELEASE SAVEPOINT w; \
                 SELECT set_config('orbit.group_lock_timeout', current_setting('lock_timeout'), \
                 true); SET LOCAL lock_timeout = {LATER_LOCK_TIMEOUT_MS}; SAVEPOINT w"
            ),
            _ => "RELEASE SAVEPOINT w; SAVEPOINT w".to_owned(),
        };
        if let Err(e) = conn.batch_execute(&enter) {
            return Err(abandon(conn, e));
        }
        let row = rows.iter().find(|r| r.id == queued.token_id).cloned();
        let ran =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (queued.work)(conn, row)));
        let step = match ran {
            Ok(Ok((value, closing))) => {
                // Its token's use, if due, is recorded now (and kept): a later write
                // of the same token in this group must not record it again.
                if let Some(row) = rows.iter_mut().find(|r| r.id == queued.token_id) {
                    row.use_due = false;
                }
                Step::Ran(value, closing)
            }
            Ok(Err(e)) => {
                if let Err(lost) = conn.batch_execute("ROLLBACK TO SAVEPOINT w") {
                    return Err(abandon(conn, lost));
                }
                match e {
                    TxError::Db(e) if is_lost(&e) => return Err(abandon(conn, e)),
                    TxError::Db(e) if db::is_retryable(&e) || crate::error::is_lock_timeout(&e) => {
                        Step::Alone
                    }
                    // A key held by a request still running (or by an earlier write
                    // of this group, its response not yet stored): the write waits
                    // for it alone, as the ordinary path does.
                    TxError::Api(e) if e.body.code == "idempotency_key_in_flight" => Step::Alone,
                    e => Step::Failed(e.into()),
                }
            }
            Err(_) => {
                tracing::error!("a grouped write panicked");
                if let Err(lost) = conn.batch_execute("ROLLBACK TO SAVEPOINT w") {
                    return Err(abandon(conn, lost));
                }
                Step::Failed(ApiError::internal())
            }
        };
        steps.push(step);
    }
    let leave = "RELEASE SAVEPOINT w; \
         SELECT set_config('lock_timeout', current_setting('orbit.group_lock_timeout'), true)";
    if let Err(e) = conn.batch_execute(leave) {
        return Err(abandon(conn, e));
    }
    // Every change of the group, in the group's order, in one statement: the
    // orbit's row is held from its first apply to the commit with one round trip
    // between them, however large the group.
    let closings: Vec<&Closing> = steps
        .iter()
        .filter_map(|step| match step {
            Step::Ran(_, Some(closing)) => Some(closing),
            _ => None,
        })
        .collect();
    let took = if closings.is_empty() {
        Ok(Vec::new())
    } else {
        db::apply_all(conn, &closings)
    };
    let mut took = match took {
        Ok(took) => took.into_iter(),
        Err(e) if is_lost(&e) => return Err(abandon(conn, e)),
        // A change that could not be applied leaves its write's effect in the
        // transaction without its revision: nothing of the group may commit, and
        // every write runs alone.
        Err(e) => {
            tracing::warn!(error = %e, "a write group's apply failed; running its writes alone");
            let _ = Tm::rollback_transaction(conn);
            return Ok(all_alone(group.len()));
        }
    };
    let applied: Vec<Step<T>> = steps
        .into_iter()
        .map(|step| match step {
            Step::Ran(value, Some(_)) => Step::Done((value, took.next())),
            Step::Ran(value, None) => Step::Done((value, None)),
            other => other,
        })
        .collect();
    match Tm::commit_transaction(conn) {
        Ok(()) => Ok(applied),
        Err(e) if is_lost(&e) => Err(e.into()),
        // The commit refused the group as a whole (nothing committed): every write
        // runs alone, where a refusal is its own.
        Err(e) => {
            tracing::warn!(error = %e, "a write group's commit failed; running its writes alone");
            let _ = Tm::rollback_transaction(conn);
            Ok(all_alone(group.len()))
        }
    }
}

/// Every write of a group that did not commit, to run alone.
fn all_alone<T>(n: usize) -> Vec<Step<T>> {
    (0..n).map(|_| Step::Alone).collect()
}

/// Rolls the group back after a failure of the connection (or of a savepoint
/// statement, which leaves nothing to rely on) and returns what to answer.
fn abandon(conn: &mut PgConnection, e: DieselError) -> ApiError {
    let _ = Tm::rollback_transaction(conn);
    e.into()
}

/// A failure of the connection itself (`error::is_connection_failure`), as
/// opposed to a statement the server cancelled (a statement or lock timeout),
/// which undoes only the write it hit.
fn is_lost(e: &DieselError) -> bool {
    crate::error::is_connection_failure(e) && !crate::error::is_cancelled(e)
}
