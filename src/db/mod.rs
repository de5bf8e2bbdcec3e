//! The database: connection pool, the one way to run a unit of work, migrations,
//! and the private cluster used when no `DATABASE_URL` is configured.

pub mod embedded;
pub mod grouped;
pub mod sql;
pub use sql::{sql, BindNext};
pub mod schema;

use std::time::Duration;

use diesel::connection::{AnsiTransactionManager, SimpleConnection, TransactionManager};
use diesel::pg::PgConnection;
use diesel::r2d2::{ConnectionManager, CustomizeConnection, Pool, PooledConnection};
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel::Connection;
use diesel_migrations::{embed_migrations, EmbeddedMigrations, MigrationHarness};

use crate::error::{ApiError, ApiResult};

pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations");

pub type PgPool = Pool<ConnectionManager<PgConnection>>;
pub type PgConn = PooledConnection<ConnectionManager<PgConnection>>;

/// Advisory lock key under which migrations run, so several instances can start at once.
const MIGRATION_LOCK_KEY: i64 = 0x6f72_6269_745f_6d69; // "orbit_mi"

/// How many times a unit of work is retried after a deadlock or serialization failure.
const MAX_ATTEMPTS: usize = 8;

#[derive(Debug)]
struct SessionSettings {
    statement_timeout_ms: u64,
}

impl CustomizeConnection<PgConnection, diesel::r2d2::Error> for SessionSettings {
    fn on_acquire(&self, conn: &mut PgConnection) -> Result<(), diesel::r2d2::Error> {
        // A lock wait gives up before the statement would, so a wait on another
        // request's Idempotency-Key is told apart (409 in flight) from a slow query.
        // Sequential scans off: every query of the service is an index lookup or
        // an index range. On the small tables of a young deployment the planner
        // prefers a scan of the table's page(s), and the prepared statements keep
        // that plan; a scan reads every dead version of a busy row (an orbit's
        // revision counter is updated by each write), an index probe only its
        // chain. A query with no usable index still runs (the setting only
        // weighs plans).
        // A statement whose client has gone (its instance was killed while it waited
        // for a lock, say) is cancelled within half a second instead of running to
        // its end: a one-statement write (src/perf/quick.rs) commits when its statement
        // ends, and must not land after the instance that sent it died (PostgreSQL
        // 14 and later on Linux; a server that refuses the setting goes without).
        conn.batch_execute(&format!(
            "SET statement_timeout = {}; SET lock_timeout = {}; SET TIME ZONE 'UTC'; \
             SET idle_in_transaction_session_timeout = {}; SET enable_seqscan = off; \
             SET standard_conforming_strings = on; \
             DO $$ BEGIN \
                 PERFORM set_config('client_connection_check_interval', '500', false); \
             EXCEPTION WHEN OTHERS THEN NULL; END $$; {}",
            self.statement_timeout_ms,
            (self.statement_timeout_ms / 2).max(100),
            self.statement_timeout_ms * 2,
            APPLY_PREPARE
        ))
        .map_err(diesel::r2d2::Error::QueryError)
    }
}

/// TCP keepalive settings every connection of the service asks libpq for, unless the
/// URL sets its own: a connection whose server vanished without closing it (a
/// half-open connection after a network partition or a host crash) fails within
/// about 25 s of silence, or 30 s of unacknowledged data, instead of blocking its
/// thread until the kernel's defaults notice (two hours). libpq ignores them on
/// Unix sockets (the private cluster).
const KEEPALIVES: [(&str, &str); 5] = [
    ("keepalives", "1"),
    ("keepalives_idle", "10"),
    ("keepalives_interval", "5"),
    ("keepalives_count", "3"),
    ("tcp_user_timeout", "30000"),
];

/// `url` with [`KEEPALIVES`] added, in its own syntax (a URI or `key=value` pairs);
/// unchanged when it already names any of them.
pub fn with_keepalives(url: &str) -> String {
    if KEEPALIVES.iter().any(|(k, _)| url.contains(k)) {
        return url.to_owned();
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let pairs: Vec<String> = KEEPALIVES.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}{}", pairs.join("&"))
    } else {
        let pairs: Vec<String> = KEEPALIVES.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{url} {}", pairs.join(" "))
    }
}

/// Builds the pool. Connections are made lazily so the service starts (and answers
/// 503) while the database is away.
pub fn build_pool(url: &str, size: u32, timeout: Duration) -> PgPool {
    let manager = ConnectionManager::<PgConnection>::new(url);
    Pool::builder()
        .max_size(size.max(1))
        .min_idle(Some(0))
        .connection_timeout(timeout)
        .test_on_check_out(false)
        .connection_customizer(Box::new(SessionSettings {
            statement_timeout_ms: timeout.as_millis() as u64,
        }))
        .error_handler(Box::new(ConnectFailures::default()))
        .build_unchecked(manager)
}

/// The pool's own failures to connect (r2d2 keeps trying in the background while
/// the database is away), logged at most once per [`ConnectFailures::QUIET`] with
/// how many came between: r2d2's default wrote one ERROR line per attempt, several
/// a second for as long as an outage lasted (a probe, 2026-12-07).
#[derive(Debug, Default)]
struct ConnectFailures(std::sync::Mutex<(Option<std::time::Instant>, u64)>);

impl ConnectFailures {
    const QUIET: Duration = Duration::from_secs(10);

    /// Whether a failure at `now` is logged, with how many went unlogged before it.
    fn note(&self, now: std::time::Instant) -> Option<u64> {
        let mut state = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match state.0 {
            Some(last) if now.saturating_duration_since(last) < Self::QUIET => {
                state.1 += 1;
                None
            }
            _ => {
                let unlogged = state.1;
                *state = (Some(now), 0);
                Some(unlogged)
            }
        }
    }
}

impl diesel::r2d2::HandleError<diesel::r2d2::Error> for ConnectFailures {
    fn handle_error(&self, error: diesel::r2d2::Error) {
        if let Some(unlogged) = self.note(std::time::Instant::now()) {
            tracing::warn!(%error, unlogged, "cannot connect to the database");
        }
    }
}

/// The service's SQL functions (code, no data), re-applied at every start.
pub const FUNCTIONS: &str = include_str!("functions.sql");

/// Applies the embedded migrations, then [`FUNCTIONS`], under an advisory lock.
pub fn migrate(url: &str) -> Result<usize, String> {
    let mut conn =
        PgConnection::establish(url).map_err(|e| format!("cannot connect to the database: {e}"))?;
    conn.batch_execute(&format!("SELECT pg_advisory_lock({MIGRATION_LOCK_KEY})"))
        .map_err(|e| format!("cannot take the migration lock: {e}"))?;
    let result = conn
        .run_pending_migrations(MIGRATIONS)
        .map(|applied| applied.len())
        .map_err(|e| format!("migration failed: {e}"))
        .and_then(|applied| {
            conn.batch_execute(FUNCTIONS)
                .map_err(|e| format!("cannot apply src/db/functions.sql: {e}"))?;
            Ok(applied)
        });
    let _ = conn.batch_execute(&format!("SELECT pg_advisory_unlock({MIGRATION_LOCK_KEY})"));
    result
}

/// True when every embedded migration has been applied; an error when the database
/// cannot be asked.
pub fn is_migrated(conn: &mut PgConnection) -> Result<bool, String> {
    conn.batch_execute("SELECT 1").map_err(|e| e.to_string())?;
    conn.has_pending_migration(MIGRATIONS)
        .map(|pending| !pending)
        .map_err(|e| e.to_string())
}

pub fn is_retryable(err: &DieselError) -> bool {
    match err {
        DieselError::DatabaseError(DatabaseErrorKind::SerializationFailure, _) => true,
        DieselError::DatabaseError(_, info) => info.message().contains("deadlock detected"),
        _ => false,
    }
}

/// The outcome of one attempt inside a transaction: an API error (rolls back and is
/// returned) or a database error (rolls back, retried when it is a race).
#[derive(Debug)]
pub enum TxError {
    Api(ApiError),
    Db(DieselError),
}

impl From<DieselError> for TxError {
    fn from(e: DieselError) -> Self {
        TxError::Db(e)
    }
}

impl From<ApiError> for TxError {
    fn from(e: ApiError) -> Self {
        TxError::Api(e)
    }
}

pub type TxResult<T> = Result<T, TxError>;

impl From<TxError> for ApiError {
    fn from(e: TxError) -> Self {
        match e {
            TxError::Api(e) => e,
            TxError::Db(e) => e.into(),
        }
    }
}

/// Threads waiting for a pooled connection right now (all pools of the process).
pub static POOL_WAITING: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Checks a connection out of the pool, mapping exhaustion to 503.
pub fn checkout(pool: &PgPool) -> ApiResult<PgConn> {
    use std::sync::atomic::Ordering;
    // After a lost connection (a database restart, say), the pool may still hold
    // connections to the old server. For a while, each checkout is tested and a dead
    // one is dropped, so requests after the outage do not fail one by one on them.
    let suspicious = crate::error::recently_lost();
    for _ in 0..=pool.max_size() {
        POOL_WAITING.fetch_add(1, Ordering::Relaxed);
        let conn = pool.get();
        POOL_WAITING.fetch_sub(1, Ordering::Relaxed);
        let mut conn = conn.map_err(|e| {
            tracing::warn!(error = %e, "no database connection available");
            ApiError::unavailable()
        })?;
        if !suspicious || conn.batch_execute("SELECT 1").is_ok() {
            return Ok(conn);
        }
        // A failed statement outside a transaction does not always leave diesel's
        // connection broken (libpq may still call it idle), and r2d2 would hand the
        // same dead connection out again: mark it broken, so r2d2 discards it when it
        // returns here, at the end of this iteration.
        AnsiTransactionManager::transaction_manager_status_mut(&mut *conn).set_in_error();
        tracing::debug!("dropping a pooled connection to a server that went away");
    }
    Err(ApiError::unavailable())
}

/// Runs one unit of work as one transaction on one pooled connection, inside one
/// `web::block`. Deadlocks and serialization failures are retried here, so a client
/// never sees a 5xx because two requests met.
pub async fn transact<T, F>(pool: &PgPool, mut work: F) -> ApiResult<T>
where
    T: Send + 'static,
    F: FnMut(&mut PgConnection) -> TxResult<T> + Send + 'static,
{
    retrying(pool, move |conn| {
        conn.transaction::<T, TxError, _>(|c| work(c))
    })
    .await
}

/// Like [`transact`], for a write that ends with a closing statement (its
/// `revision::closing`): the statement and the COMMIT go to the database in one
/// message, so the locks the statement takes are held until the commit without a
/// round trip to this process in between. Returns the work's value and, when a
/// closing statement ran, the revision it took (read after the commit).
///
/// diesel's transaction manager begins the transaction (so nested
/// `conn.transaction()` calls are savepoints) and rolls it back on an error or a
/// panic; only the closing COMMIT is sent outside it, in the batch (diesel reads the
/// connection's transaction status after each statement, so it sees the end).
pub async fn transact_closing<T, F>(pool: &PgPool, work: F) -> ApiResult<(T, Option<Applied>)>
where
    T: Send + 'static,
    F: FnMut(&mut PgConnection) -> TxResult<(T, Option<Closing>)> + Send + 'static,
{
    transact_closing_until(pool, std::time::Instant::now() + deadline(pool), work).await
}

/// [`transact_closing`] answered 503 at `until` (a write's one deadline, which an
/// earlier attempt of it may have spent in part: `domain::write::run`) instead of
/// [`deadline`] from now.
pub async fn transact_closing_until<T, F>(
    pool: &PgPool,
    until: std::time::Instant,
    mut work: F,
) -> ApiResult<(T, Option<Applied>)>
where
    T: Send + 'static,
    F: FnMut(&mut PgConnection) -> TxResult<(T, Option<Closing>)> + Send + 'static,
{
    blocking_until(pool, until, move |conn, until| {
        retry_on(
            conn,
            &mut |c: &mut PgConnection| closing_attempt(c, &mut work),
            Some(until),
        )
    })
    .await
}

/// One `web::block` and one pool checkout; `attempt` (a whole transaction) runs
/// again after a deadlock or serialization failure, up to [`MAX_ATTEMPTS`] times.
async fn retrying<T, A>(pool: &PgPool, mut attempt: A) -> ApiResult<T>
where
    T: Send + 'static,
    A: FnMut(&mut PgConnection) -> TxResult<T> + Send + 'static,
{
    blocking(pool, move |conn, until| {
        retry_on(conn, &mut attempt, Some(until))
    })
    .await
}

/// How long a request waits for one unit of database work (or for its group's
/// answer, `perf::lanes`) before it is answered 503: a checkout ends within the
/// pool's timeout (`ORBIT_DB_TIMEOUT_MS`) and a statement within the statement
/// timeout (the same), and the work may retry or queue behind a group
/// or two. A server that stops answering on an open connection (frozen, or a
/// network that drops what it sends while its kernel still acknowledges ours)
/// trips neither of those nor TCP's own timeouts, so this is the limit that holds
/// then.
pub fn deadline(pool: &PgPool) -> Duration {
    pool.connection_timeout().saturating_mul(4)
}

/// Where a unit of work of [`blocking`] stands: its thread may not have taken it
/// up yet when its request is answered.
const QUEUED: u8 = 0;
const STARTED: u8 = 1;
const WITHDRAWN: u8 = 2;

/// Runs `work` on a blocking thread, on one pooled connection, and waits for it at
/// most [`deadline`]; past it the answer is 503. Work that no thread has taken up
/// by then is withdrawn and never runs, and work whose checkout ends after the
/// deadline does not start, nor does a retry after a race (`work` gets the
/// deadline), so that 503 changed nothing. Only work already under way (its thread
/// blocked on a connection that stopped answering, or a statement slower than the
/// deadline) may still commit, as after a lost connection: a retry with the
/// write's Idempotency-Key replays it or runs it once (docs/OPERATIONS.md, "When
/// the database is away").
async fn blocking<T, W>(pool: &PgPool, work: W) -> ApiResult<T>
where
    T: Send + 'static,
    W: FnOnce(&mut PgConnection, std::time::Instant) -> ApiResult<T> + Send + 'static,
{
    blocking_until(pool, std::time::Instant::now() + deadline(pool), work).await
}

/// [`blocking`] with its 503 at `until` instead of [`deadline`] from now (at once,
/// the work never run, when `until` has passed).
async fn blocking_until<T, W>(pool: &PgPool, until: std::time::Instant, work: W) -> ApiResult<T>
where
    T: Send + 'static,
    W: FnOnce(&mut PgConnection, std::time::Instant) -> ApiResult<T> + Send + 'static,
{
    use std::sync::atomic::{AtomicU8, Ordering::SeqCst};
    let limit = until.saturating_duration_since(std::time::Instant::now());
    if limit.is_zero() {
        return Err(ApiError::unavailable());
    }
    let state = std::sync::Arc::new(AtomicU8::new(QUEUED));
    let (owned, taken) = (pool.clone(), state.clone());
    let job = move || {
        if taken
            .compare_exchange(QUEUED, STARTED, SeqCst, SeqCst)
            .is_err()
        {
            return Err(ApiError::unavailable());
        }
        let mut conn = checkout(&owned)?;
        if std::time::Instant::now() >= until {
            return Err(ApiError::unavailable());
        }
        work(&mut conn, until)
    };
    match tokio::time::timeout(limit, actix_web::web::block(job)).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => {
            tracing::error!(error = %e, "blocking task failed");
            Err(ApiError::internal())
        }
        Err(_) => {
            let unrun = state
                .compare_exchange(QUEUED, WITHDRAWN, SeqCst, SeqCst)
                .is_ok();
            tracing::warn!(
                deadline_ms = limit.as_millis() as u64,
                withdrawn_unrun = unrun,
                "database work unanswered past its deadline: the server stopped answering"
            );
            Err(ApiError::unavailable())
        }
    }
}

/// Runs `attempt` (a whole transaction) on `conn`, again after a deadlock or
/// serialization failure, up to [`MAX_ATTEMPTS`] times, and not once `until` (the
/// request's deadline, when it has one) has passed: its answer is 503 by then, and
/// the failed attempt rolled back.
fn retry_on<T, A>(
    conn: &mut PgConnection,
    attempt: &mut A,
    until: Option<std::time::Instant>,
) -> ApiResult<T>
where
    A: FnMut(&mut PgConnection) -> TxResult<T>,
{
    let mut n = 0;
    loop {
        n += 1;
        match attempt(conn) {
            Ok(v) => return Ok(v),
            Err(TxError::Db(e)) if n < MAX_ATTEMPTS && is_retryable(&e) => {
                if until.is_some_and(|u| std::time::Instant::now() >= u) {
                    return Err(ApiError::unavailable());
                }
                tracing::debug!(attempt = n, error = %e, "retrying transaction after a race");
                std::thread::sleep(Duration::from_millis(2 * n as u64));
            }
            Err(e) => return Err(ApiError::from(e)),
        }
    }
}

/// [`transact_closing`] on a connection the caller holds, on the calling thread:
/// the same transaction, closing statement and retries (a grouped write that must
/// run alone, `perf::commits`).
pub fn transact_closing_on<T, F>(
    conn: &mut PgConnection,
    work: &mut F,
) -> ApiResult<(T, Option<Applied>)>
where
    F: FnMut(&mut PgConnection) -> TxResult<(T, Option<Closing>)>,
{
    retry_on(
        conn,
        &mut |c: &mut PgConnection| closing_attempt(c, work),
        None,
    )
}

fn closing_attempt<T, F>(conn: &mut PgConnection, work: &mut F) -> TxResult<(T, Option<Applied>)>
where
    F: FnMut(&mut PgConnection) -> TxResult<(T, Option<Closing>)>,
{
    use diesel::connection::{AnsiTransactionManager as Tm, TransactionManager};
    // BEGIN through diesel's manager, so a `conn.transaction()` inside `work` nests
    // as a savepoint and the pool sees the connection's real state.
    Tm::begin_transaction(conn)?;
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(conn)));
    match outcome {
        Ok(Ok((value, Some(closing)))) => {
            // On an error the rest of the message is skipped and the transaction
            // is left aborted (or, if COMMIT itself failed, already ended: the
            // ROLLBACK is then a no-op).
            // diesel's PgConnection reconciles its transaction manager with libpq's
            // transaction status after every statement, so after this batch it
            // knows the transaction ended.
            if let Err(e) = conn.batch_execute(&format!("{}; COMMIT", closing.statement())) {
                let _ = Tm::rollback_transaction(conn);
                return Err(e.into());
            }
            Ok((value, Some(applied(conn)?)))
        }
        Ok(Ok((value, None))) => {
            Tm::commit_transaction(conn)?;
            Ok((value, None))
        }
        Ok(Err(e)) => {
            Tm::rollback_transaction(conn)?;
            Err(e)
        }
        Err(panic) => {
            let _ = Tm::rollback_transaction(conn);
            std::panic::resume_unwind(panic)
        }
    }
}

/// Runs read-only work on one pooled connection without an explicit transaction.
pub async fn read<T, F>(pool: &PgPool, work: F) -> ApiResult<T>
where
    T: Send + 'static,
    F: FnOnce(&mut PgConnection) -> TxResult<T> + Send + 'static,
{
    blocking(pool, move |conn, _| work(conn).map_err(ApiError::from)).await
}

/// Prepared on every pooled connection (`db::SessionSettings`) as `orbit_apply`:
/// calls `apply_change` (src/db/functions.sql; the quick writes of `perf::quick`
/// call it too), which advances the orbit's revision by one, appends the change
/// row, fills the revision into the response body and, when the write holds a key,
/// stores it. The new revision and the filled body are left in the session
/// settings `orbit.revision` and `orbit.body`, which outlive the commit, because
/// the statement is sent together with COMMIT (`revision::closing`) and its rows
/// are not read; a write group applies its closings with [`apply_all`] instead. The
/// subquery (`OFFSET 0` keeps it one) runs `apply_change` before the outer
/// columns read what it set.
pub const APPLY_PREPARE: &str = "PREPARE orbit_apply \
        (bigint, text, text, bigint, bigint, bigint, text, bigint, int2, bytea) AS \
     SELECT set_config('orbit.revision', a.r::text, false)::bigint AS revision, \
            current_setting('orbit.body') AS body \
     FROM (SELECT apply_change($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) AS r OFFSET 0) a";

/// A write's closing: the arguments of `apply_change` as one parenthesized list of
/// literals (`revision::closing` renders it). Alone, it is sent as `EXECUTE
/// orbit_apply(...)` in one message with the COMMIT ([`Closing::statement`]); a
/// write group sends all of its closings in one statement ([`apply_all`]).
#[derive(Debug, Clone)]
pub struct Closing {
    orbit: i64,
    args: String,
}

impl Closing {
    /// `args`: `(orbit, kind, entity_type, entity, task, contributor, summary, key,
    /// status, body)` as literals; `orbit` the first of them.
    pub fn of_args(orbit: i64, args: String) -> Closing {
        Closing { orbit, args }
    }

    /// The statement that applies the change alone.
    pub fn statement(&self) -> String {
        format!("EXECUTE orbit_apply{}", self.args)
    }
}

/// What a committed change took: its revision, and the response body with the
/// revision filled in by `apply_change` (the bytes stored under the write's key).
#[derive(Debug, Clone, diesel::QueryableByName)]
pub struct Applied {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub revision: i64,
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub body: String,
}

/// One row of [`apply_all`]: `i` is the closing's place.
#[derive(diesel::QueryableByName)]
struct AppliedAt {
    #[diesel(sql_type = diesel::sql_types::Integer)]
    i: i32,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    revision: i64,
    #[diesel(sql_type = diesel::sql_types::Text)]
    body: String,
}

/// Applies `closings` in order, in one statement (one round trip however many):
/// what each took, in the same order. Each is read as `orbit_apply` reads it (the
/// subquery runs `apply_change` before its row reads the body it left); the
/// branches of a `UNION ALL` run one after the other. An error applies none of them.
/// Closings that all name one orbit take their revisions at once first
/// (`reserve_revisions`: one new version of the orbit's row for the group), and a
/// last branch checks that every reserved revision was applied.
pub fn apply_all(
    conn: &mut PgConnection,
    closings: &[&Closing],
) -> diesel::QueryResult<Vec<Applied>> {
    use diesel::RunQueryDsl;
    use std::fmt::Write as _;
    let mut sql = String::with_capacity(closings.iter().map(|c| c.args.len() + 140).sum());
    let one_orbit = match closings {
        [first, rest @ ..] if !rest.is_empty() && rest.iter().all(|c| c.orbit == first.orbit) => {
            Some(first.orbit)
        }
        _ => None,
    };
    if let Some(orbit) = one_orbit {
        let _ = write!(
            sql,
            "SELECT -1 AS i, reserve_revisions({orbit}, {}) AS revision, '' AS body \
             UNION ALL ",
            closings.len()
        );
    }
    for (i, closing) in closings.iter().enumerate() {
        if i > 0 {
            sql.push_str(" UNION ALL ");
        }
        let _ = write!(
            sql,
            "SELECT {i} AS i, a.r AS revision, current_setting('orbit.body') AS body \
             FROM (SELECT apply_change{} AS r OFFSET 0) a",
            closing.args
        );
    }
    if one_orbit.is_some() {
        sql.push_str(" UNION ALL SELECT -2, 0, '' WHERE NOT revisions_spent()");
    }
    let mut rows: Vec<AppliedAt> = diesel::sql_query(sql).load(conn)?;
    rows.retain(|r| r.i >= 0);
    rows.sort_by_key(|r| r.i);
    if rows.len() != closings.len() || rows.iter().enumerate().any(|(i, r)| r.i as usize != i) {
        return Err(diesel::result::Error::QueryBuilderError(
            "apply_all: one row per closing expected".into(),
        ));
    }
    Ok(rows
        .into_iter()
        .map(|r| Applied {
            revision: r.revision,
            body: r.body,
        })
        .collect())
}

/// Reads what the last committed `orbit_apply` of this connection took.
pub fn applied(conn: &mut PgConnection) -> diesel::QueryResult<Applied> {
    use diesel::RunQueryDsl;
    crate::db::sql(
        "SELECT current_setting('orbit.revision')::bigint AS revision, \
                current_setting('orbit.body') AS body",
    )
    .get_result(conn)
}

#[cfg(test)]
mod tests {
    use super::{with_keepalives, ConnectFailures};

    /// An outage's connect failures make one line per quiet period, which counts
    /// the ones between.
    #[test]
    fn connect_failures_are_logged_once_per_quiet_period() {
        let failures = ConnectFailures::default();
        let start = std::time::Instant::now();
        let at = |ms: u64| start + std::time::Duration::from_millis(ms);
        assert_eq!(failures.note(at(0)), Some(0));
        for ms in (100..10_000).step_by(100) {
            assert_eq!(failures.note(at(ms)), None, "{ms}");
        }
        assert_eq!(failures.note(at(10_000)), Some(99));
        assert_eq!(failures.note(at(10_500)), None);
        assert_eq!(failures.note(at(60_000)), Some(1));
    }

    #[test]
    fn keepalives_are_added_in_the_url_own_syntax_unless_it_sets_them() {
        let k = "keepalives=1&keepalives_idle=10&keepalives_interval=5&keepalives_count=3\
                 &tcp_user_timeout=30000";
        assert_eq!(
            with_keepalives("postgres://u@db:5432/app"),
            format!("postgres://u@db:5432/app?{k}")
        );
        assert_eq!(
            with_keepalives("postgresql://u@/app?host=/run/pg&port=5432"),
            format!("postgresql://u@/app?host=/run/pg&port=5432&{k}")
        );
        assert_eq!(
            with_keepalives("host=db dbname=app"),
            format!("host=db dbname=app {}", k.replace('&', " "))
        );
        let own = "postgres://u@db/app?keepalives_idle=60";
        assert_eq!(with_keepalives(own), own);
    }
}
