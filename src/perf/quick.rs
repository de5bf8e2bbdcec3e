//! Quick writes: the successful case of a lease-cycle write, of a plain task or
//! contribution creation, or of a contribution's revision, in one statement.
//!
//! A lease acquire, a checkpoint or a release through the ordinary path (`domain::write::run`)
//! is about nine round trips to the database (BEGIN, token, membership, key claim,
//! task lock, the read after it, the effect, the closing statement with COMMIT, the
//! revision), a creation or a revision four to six, and on a small machine the
//! context switches of those round trips are most of a write's CPU. For these six
//! writes (a creation only in an orbit named by its id, with no problem, task or
//! artifacts to check; a revision with no artifacts, of a contribution with no
//! problem or artifacts), `domain::write::run` first runs a
//! database function (`quick_*` in src/db/functions.sql) that does the same
//! statements, in the same lock order, as part of one statement, and returns the
//! response body with the revision it took. The body and the change are rendered by
//! the service before the statement, by the ordinary path's own types, with marks
//! for the values the statement chooses ([`Rendered`], `domain::marks`): the
//! functions fill those in and render nothing. The writes of one orbit (and of the
//! other orbits sharing its queue) that queue in this instance while a group runs go
//! together in the next group ([`QuickQueue`]): one statement, one commit, one hold
//! of the orbit's row lock for all of them.
//!
//! The functions decide nothing of their own. They ask the same database functions
//! as the ordinary path: `lease_verdict` and `acquire_verdict` (the lease decision,
//! which `domain::fence` words), `member_role`, `token_use_due`, `claim_key`, the
//! inserts `task_insert` and `contribution_insert`, and `contribution_revise`.
//! When the verdict is not a plain yes, or anything else might apply (a key seen
//! before, an open lease to end, a pending handoff to supersede, a token whose use
//! is due to be recorded, a revised contribution's artifacts to check, a revision
//! by someone else or from a base that moved on...) the function raises
//! `quick_declined`, its subtransaction rolls back having changed nothing, and once
//! the group has committed the write runs through the ordinary path, which asks the
//! same verdict and words the refusal. (A write whose token this instance has not
//! verified yet is not sent here at all: `domain::write::run` gives it to the
//! ordinary path, which verifies the token.) The integration tests compare each
//! quick response, byte for byte, with the ordinary read of what it wrote, and count
//! on `/metrics` that the quick path ran and how the writes were grouped.

use std::sync::Arc;

use diesel::prelude::*;
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel::sql_types::{Array, BigInt, Integer, SmallInt, Text};

use crate::db::{BindNext, PgPool};
use crate::error::{ApiError, ApiResult};
use crate::perf::lanes::{Hints, Lanes, Shape};

/// The message a quick write function raises when the ordinary path must decide.
pub const DECLINED: &str = "quick_declined";

/// A write with a quick form whose request is valid, in the form its function takes.
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
    /// `POST /api/v1/orbits/{orbit}/tasks` with the orbit's id and no problem.
    CreateTask {
        orbit_id: i64,
        title: String,
        description: String,
    },
    /// `POST /api/v1/orbits/{orbit}/contributions` with the orbit's id and no
    /// problem, task or artifacts.
    CreateContribution {
        orbit_id: i64,
        kind: &'static str,
        title: String,
        body: String,
    },
    /// `POST /api/v1/contributions/{contribution}/revisions` with no artifacts;
    /// `None`: the field is left out (the base revision's value is kept).
    Revise {
        contribution_id: i64,
        base_revision: i64,
        title: Option<String>,
        body: Option<String>,
    },
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
/// with the revision filled in by `apply_change` (the bytes stored under its key).
#[derive(QueryableByName, Debug, Clone)]
pub struct QuickRow {
    /// The write's place in its group, from 1.
    #[diesel(sql_type = Integer)]
    pub out_index: i32,
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
            QuickCall::CreateTask { orbit_id, .. }
            | QuickCall::CreateContribution { orbit_id, .. } => [*orbit_id],
            QuickCall::Revise {
                contribution_id, ..
            } => [*contribution_id],
        }
    }

    /// The arguments of `quick_effect_of` (src/db/functions.sql) after the token: the
    /// kind (1 acquire, 2 checkpoint, 3 release, 4 task creation, 5 contribution
    /// creation, 6 revision), the task (the lease of a release, the orbit of a
    /// creation, the contribution of a revision), the lease's seconds (the lease
    /// version, the base revision, 0 for a creation), and three texts: the
    /// checkpoint's summary, canonical state and hash, the task's title and
    /// description, the contribution's title, body and kind, or the revision's title
    /// and body and which of them it gives (`t`, `b`; empty otherwise).
    fn args(&self) -> (i16, i64, i64, &str, &str, &str) {
        match self {
            QuickCall::Acquire { task_id, seconds } => (1, *task_id, *seconds, "", "", ""),
            QuickCall::Checkpoint {
                task_id,
                lease_version,
                summary,
                state,
                state_hash,
            } => (2, *task_id, *lease_version, summary, state, state_hash),
            QuickCall::Release {
                lease_id,
                lease_version,
            } => (3, *lease_id, *lease_version, "", "", ""),
            QuickCall::CreateTask {
                orbit_id,
                title,
                description,
            } => (4, *orbit_id, 0, title, description, ""),
            QuickCall::CreateContribution {
                orbit_id,
                kind,
                title,
                body,
            } => (5, *orbit_id, 0, title, body, kind),
            QuickCall::Revise {
                contribution_id,
                base_revision,
                title,
                body,
            } => {
                let given = match (title.is_some(), body.is_some()) {
                    (true, true) => "tb",
                    (true, false) => "t",
                    (false, true) => "b",
                    (false, false) => "",
                };
                fn text(field: &Option<String>) -> &str {
                    field.as_deref().unwrap_or_default()
                }
                let (title, body) = (text(title), text(body));
                (6, *contribution_id, *base_revision, title, body, given)
            }
        }
    }
}

/// A quick write's response and change as the service rendered them
/// (`domain::marks`): the statement fills in the values it chose and renders
/// nothing itself.
#[derive(Debug, Clone)]
pub struct Rendered {
    /// The status of the write's success.
    pub status: actix_web::http::StatusCode,
    /// The response body, with marks (`quick_outcome`'s `p_body`).
    pub body: String,
    /// The change, the status and the marks, as JSON (`quick_outcome`'s `p_outcome`).
    pub outcome: String,
}

/// A quick write waiting for its group.
pub struct Queued {
    call: QuickCall,
    rendered: Rendered,
    token_id: i64,
    key: QuickKey,
}

/// The most writes in one group. Each is a subtransaction; PostgreSQL keeps up to
/// 64 of a transaction's subtransactions in its snapshots before it overflows.
pub const MAX_GROUP: usize = 32;

/// The quick writes of this instance, run in groups (group commit) on [`Lanes`].
///
/// A write is queued by the orbit it most likely writes to (the orbit of its
/// token's last committed write, quick or ordinary: [`Hints`] is shared with the
/// ordinary write groups; a token with none yet has a queue of its own): orbit
/// `o` goes to queue `o mod queues`, and runs in that queue's next group. Up to
/// `lanes` groups of one queue run at once, each on its own blocking thread and
/// pooled connection, and `lanes` more while the instance runs fewer than
/// `queues × lanes` quick groups in all (a busy queue borrows an idle one's lanes).
/// Grouping gathers the writes that would otherwise have queued on an orbit's row
/// lock, so they take that lock and flush their commit once, and
/// the writes of the quiet orbits sharing a queue, which would otherwise each be a
/// transaction and a commit of their own on a machine with few cores (a fixed
/// number of queues rather than one per orbit: docs/DECISIONS.md, "Quick queues
/// shared by orbits"). The hint only chooses a queue: a group may hold writes of
/// any orbits, and its statement (`quick_batch`, src/db/functions.sql) applies each
/// orbit's changes in turn, in the orbits' order. Each write runs in its own
/// subtransaction and all commit together; one that declined (or failed on its own)
/// left nothing behind and is answered `None`. A group of one runs as
/// `quick_write`, whose decline is also caught in a block of its own: no row, and
/// no `ERROR` in the server log for an expected decline.
pub struct QuickQueue {
    lanes: Arc<Lanes<Route, Queued, Option<QuickRow>>>,
    hints: Arc<Hints>,
    queues: i64,
}

/// A queue: one of the queues the orbits share, or a token with no orbit hint yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Route {
    Shared(i64),
    Token(i64),
}

impl QuickQueue {
    pub fn new(
        pool: PgPool,
        lanes: usize,
        queues: usize,
        deadline: std::time::Duration,
        metrics: Arc<crate::metrics::Metrics>,
        hints: Arc<Hints>,
    ) -> QuickQueue {
        // A queue whose orbit is hot while the others are quiet runs a second group
        // beside its first (docs/DECISIONS.md, "A busy quick queue borrows an idle
        // queue's lane"): the effects of one group run while the other applies and
        // commits, on the cores the idle queues leave free.
        let shape = Shape {
            per_route: lanes,
            borrow: lanes,
            budget: lanes.saturating_mul(queues),
            max_group: MAX_GROUP,
            deadline,
            skip_abandoned: false,
            what: "quick write",
        };
        let learned = hints.clone();
        let run = move |_: &Route, group: &mut [Queued]| {
            let answers = run_group(&pool, &metrics, group);
            for (queued, answer) in group.iter().zip(&answers) {
                if let Ok(Some(row)) = answer {
                    learned.learn(queued.token_id, row.out_orbit);
                }
            }
            answers
        };
        QuickQueue {
            lanes: Arc::new(Lanes::new(shape, Box::new(run))),
            hints,
            queues: i64::try_from(queues).unwrap_or(i64::MAX).max(1),
        }
    }

    /// Writes queued for their next group, in all queues.
    pub fn waiting(&self) -> usize {
        self.lanes.waiting()
    }

    /// Runs `call`, answered with `rendered`, for the token `token_id` (verified by
    /// this instance) in the next group of its queue, and waits for the group's commit. `Ok(None)`: it changed
    /// nothing and the ordinary path must run, because it declined or its group's
    /// statement failed (the group's transaction rolled back). A lost connection is
    /// returned as the ordinary path would return it (503: the group may have
    /// committed; a retry with the key replays or executes once).
    pub async fn run(
        &self,
        call: QuickCall,
        rendered: Rendered,
        token_id: i64,
        key: QuickKey,
        until: std::time::Instant,
    ) -> ApiResult<Option<QuickRow>> {
        let route = self
            .hints
            .orbit_of(token_id)
            .map_or(Route::Token(token_id), |orbit| {
                Route::Shared(orbit.rem_euclid(self.queues))
            });
        let queued = Queued {
            call,
            rendered,
            token_id,
            key,
        };
        self.lanes.submit_until(route, queued, until).await
    }
}

/// Runs one group on one pooled connection; one answer per write, in order.
fn run_group(
    pool: &PgPool,
    metrics: &crate::metrics::Metrics,
    group: &[Queued],
) -> Vec<ApiResult<Option<QuickRow>>> {
    let every = |answer: ApiResult<Option<QuickRow>>| -> Vec<ApiResult<Option<QuickRow>>> {
        group.iter().map(|_| answer.clone()).collect()
    };
    let mut conn = match crate::db::checkout(pool) {
        Ok(conn) => conn,
        Err(e) => return every(Err(e)),
    };
    let loaded = load_group(&mut conn, group);
    metrics
        .quick_groups
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    match loaded {
        Ok(rows) => {
            let mut answers = every(Ok(None));
            for row in rows {
                if let Some(slot) = usize::try_from(row.out_index - 1)
                    .ok()
                    .and_then(|i| answers.get_mut(i))
                {
                    *slot = Ok(Some(row));
                }
            }
            answers
        }
        // The group's transaction rolled back: every write runs the ordinary path.
        Err(e) => every(classify(e).map_or(Ok(None), Err)),
    }
}

/// `None`: the server answered the statement with an error, so its transaction
/// rolled back and nothing happened; the ordinary path decides. That includes a
/// statement timeout (the ordinary path has a budget per statement; one group's
/// statement sums the waits of all its writes). `Some`: the error as the ordinary
/// path would answer it (a lost connection: the statement may even have committed).
fn classify(e: DieselError) -> Option<ApiError> {
    match e {
        e @ DieselError::DatabaseError(
            DatabaseErrorKind::ClosedConnection | DatabaseErrorKind::UnableToSendCommand,
            _,
        ) => Some(e.into()),
        DieselError::DatabaseError(_, info)
            if !crate::error::is_unavailable_message(info.message())
                || crate::error::is_cancel_message(info.message()) =>
        {
            if info.message() != DECLINED {
                tracing::debug!(error = %info.message(), "quick write group failed; running the ordinary path");
            }
            None
        }
        e => Some(e.into()),
    }
}

/// Runs the group's statement: `quick_write(...)` for a group of one, else
/// `quick_batch(...)`, element i of each array for write i; each write's rendered
/// body and outcome go last.
fn load_group(conn: &mut PgConnection, group: &[Queued]) -> QueryResult<Vec<QuickRow>> {
    if let [one] = group {
        let (call, target, number, summary, state, hash) = one.call.args();
        return crate::db::sql(
            "SELECT out_index, out_orbit, out_revision, out_body \
             FROM quick_write($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
        )
        .bind::<SmallInt, _>(call)
        .bind::<BigInt, _>(one.token_id)
        .bind::<BigInt, _>(target)
        .bind::<BigInt, _>(number)
        .bind::<Text, _>(summary)
        .bind::<Text, _>(state)
        .bind::<Text, _>(hash)
        .bind::<Text, _>(&one.key.scope)
        .bind::<Text, _>(&one.key.key)
        .bind::<Text, _>(&one.key.fingerprint)
        .bind::<Integer, _>(one.key.retention_hours)
        .bind::<Text, _>(&one.rendered.body)
        .bind::<Text, _>(&one.rendered.outcome)
        .load(conn);
    }
    let column = |f: &dyn Fn(&Queued) -> i64| group.iter().map(f).collect::<Vec<_>>();
    let text = |f: &dyn Fn(&Queued) -> &str| group.iter().map(f).collect::<Vec<_>>();
    crate::db::sql(
        "SELECT out_index, out_orbit, out_revision, out_body \
         FROM quick_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
    )
    .bind::<Array<SmallInt>, _>(group.iter().map(|q| q.call.args().0).collect::<Vec<_>>())
    .bind::<Array<BigInt>, _>(column(&|q| q.token_id))
    .bind::<Array<BigInt>, _>(column(&|q| q.call.args().1))
    .bind::<Array<BigInt>, _>(column(&|q| q.call.args().2))
    .bind::<Array<Text>, _>(text(&|q| q.call.args().3))
    .bind::<Array<Text>, _>(text(&|q| q.call.args().4))
    .bind::<Array<Text>, _>(text(&|q| q.call.args().5))
    .bind::<Array<Text>, _>(text(&|q| &q.key.scope))
    .bind::<Array<Text>, _>(text(&|q| &q.key.key))
    .bind::<Array<Text>, _>(text(&|q| &q.key.fingerprint))
    .bind::<Array<Integer>, _>(
        group
            .iter()
            .map(|q| q.key.retention_hours)
            .collect::<Vec<_>>(),
    )
    .bind::<Array<Text>, _>(text(&|q| &q.rendered.body))
    .bind::<Array<Text>, _>(text(&|q| &q.rendered.outcome))
    .load(conn)
}
