//! Bulk seeding: many rows written straight into the service's database with the
//! library's own store functions, each row's change applied through the library's
//! revision path (`revision::closing`, the statement the service sends with every
//! write's COMMIT). The bench restates no revision rule: the orbit's counter, the
//! change rows and the problem's counters are kept by the same code (and database
//! triggers) as for a write through the API, without one HTTP round trip and one
//! commit per row. Contributors, orbits, members, problems, tasks and their lease
//! work (leases, checkpoints, completion, cancellation), contributions and memory
//! records; a million contributions go in statements of [`BATCH`] rows
//! (`contributions::insert_many`), with one change each all the same.

use std::collections::HashMap;

use diesel::connection::SimpleConnection as _;
use diesel::{Connection, PgConnection};
use orbit_commons::domain::revision::{self, Change, Pending};
use orbit_commons::model::{JoinPolicy, NewToken, Role, TokenKind};
use orbit_commons::store::contributions::{self as contributions, ContributionKind};
use orbit_commons::store::tasks::TaskStatus;
use orbit_commons::store::{contributors, memory, orbits, problems, tasks};

/// Rows per transaction. Every row's change updates its orbit's row, and versions
/// a transaction wrote cannot be pruned before it commits: a long one would make
/// each later update walk all of them.
const BATCH: usize = 500;

/// The contribution kinds, in the order seeds take them in turn.
pub const KINDS: [ContributionKind; 5] = [
    ContributionKind::Attempt,
    ContributionKind::Observation,
    ContributionKind::Claim,
    ContributionKind::Question,
    ContributionKind::Note,
];

/// A contribution to write with [`Bulk::contributions_of`] or
/// [`Bulk::contributions_many`].
pub struct NewContribution {
    pub orbit: i64,
    pub kind: ContributionKind,
    pub author: i64,
    /// Counted in the problem's counters when given.
    pub problem: Option<i64>,
    pub title: String,
    pub body: String,
}

/// A problem, task or memory record to write: its orbit, author and two texts (title
/// and statement or description; content and one tag).
pub struct Text {
    pub orbit: i64,
    pub author: i64,
    pub first: String,
    pub second: String,
}

/// One step of work on a task, by `worker` (see [`Bulk::task_work`]).
#[derive(Debug, Clone, Copy)]
pub struct Step {
    pub task: i64,
    pub worker: i64,
    pub op: Op,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// The next lease version, for this many seconds.
    Acquire(i64),
    /// A checkpoint under the open lease.
    Checkpoint,
    /// Ends the open lease as RELEASED.
    Release,
    /// Completes the task under its open lease.
    Complete,
    /// Cancels the task, ending its open lease if any.
    Cancel,
}

/// The checkpoints' state: an empty object, and the SHA-256 of its canonical form.
const STATE: &str = "{}";

/// The service's database, for rows that would take too long through the API.
pub struct Bulk {
    pub url: String,
}

/// The statements that apply `changes`, in order, in one round trip.
fn apply(c: &mut PgConnection, changes: &[Pending]) -> diesel::QueryResult<()> {
    if changes.is_empty() {
        return Ok(());
    }
    let sql = changes
        .iter()
        .map(|p| {
            revision::closing(
                p,
                revision::Response {
                    body: b"",
                    stored: None,
                },
            )
            .map(|c| c.statement())
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| diesel::result::Error::QueryBuilderError(e.into()))?;
    c.batch_execute(&sql.join(";\n"))
}

/// The change of one write in `orbit` by `by`, on `entity` (its type and id).
fn change(
    orbit: i64,
    by: i64,
    kind: &str,
    (entity_type, entity_id): (&str, i64),
    task_id: Option<i64>,
    summary: String,
) -> Vec<Pending> {
    let change = Change {
        kind,
        entity_type,
        entity_id,
        task_id,
        summary,
    };
    vec![Pending::new(orbit, by, change)]
}

impl Bulk {
    /// A connection with `orbit_apply` prepared, as on the service's own.
    fn conn(&self) -> Result<PgConnection, String> {
        let mut conn = PgConnection::establish(&self.url)
            .map_err(|e| format!("bulk seeding: cannot connect: {e}"))?;
        conn.batch_execute(orbit_commons::db::APPLY_PREPARE)
            .map_err(|e| format!("bulk seeding: {e}"))?;
        Ok(conn)
    }

    /// Writes `n` rows in transactions of [`BATCH`]: `batch(conn, range)` writes the
    /// rows of `range` (0-based) and names their changes, which are applied in
    /// order, in one round trip, before the commit.
    fn batches<T>(
        &self,
        n: usize,
        what: &str,
        mut batch: impl FnMut(
            &mut PgConnection,
            std::ops::Range<usize>,
        ) -> diesel::QueryResult<(Vec<T>, Vec<Pending>)>,
    ) -> Result<Vec<T>, String> {
        let mut conn = self.conn()?;
        let mut out = Vec::with_capacity(n);
        for start in (0..n).step_by(BATCH) {
            let written = conn
                .transaction::<_, diesel::result::Error, _>(|c| {
                    let (written, changes) = batch(c, start..(start + BATCH).min(n))?;
                    apply(c, &changes)?;
                    Ok(written)
                })
                .map_err(|e| format!("bulk {what}: {e}"))?;
            out.extend(written);
        }
        Ok(out)
    }

    /// [`Bulk::batches`] one row at a time: `row(conn, i)` writes row `i` and names
    /// its changes.
    fn rows<T>(
        &self,
        n: usize,
        what: &str,
        mut row: impl FnMut(&mut PgConnection, usize) -> diesel::QueryResult<(T, Vec<Pending>)>,
    ) -> Result<Vec<T>, String> {
        self.batches(n, what, |c, range| {
            let mut written = Vec::with_capacity(range.len());
            let mut changes = Vec::with_capacity(range.len());
            for i in range {
                let (value, named) = row(c, i)?;
                written.push(value);
                changes.extend(named);
            }
            Ok((written, changes))
        })
    }

    /// `n` rows `row(i)`, each written by `insert` and named `<entity>.created`
    /// (`<what> <id> created`; a task's change names the task).
    fn created(
        &self,
        n: usize,
        (entity, what): (&str, &str),
        mut row: impl FnMut(usize) -> Text,
        mut insert: impl FnMut(&mut PgConnection, &Text) -> diesel::QueryResult<i64>,
    ) -> Result<Vec<i64>, String> {
        let kind = format!("{entity}.created");
        self.rows(n, &format!("{entity} insert"), |c, i| {
            let t = row(i);
            let id = insert(c, &t)?;
            let task = (entity == "task").then_some(id);
            let summary = format!("{what} {id} created");
            let named = change(t.orbit, t.author, &kind, (entity, id), task, summary);
            Ok((id, named))
        })
    }

    /// `n` agents named `<prefix><i + 1>` (`model(i)` their model claim), each with
    /// a token nobody holds (its lookup has the wrong length to be presented).
    pub fn agents(
        &self,
        prefix: &str,
        n: usize,
        model: impl Fn(usize) -> Option<String>,
    ) -> Result<Vec<i64>, String> {
        self.rows(n, "agent insert", |c, i| {
            let name = format!("{prefix}{}", i + 1);
            let unusable = NewToken {
                token: String::new(),
                lookup: format!("bulk-{name}"),
                secret_hash: "seeded by orbit-bench: no secret".into(),
            };
            let (actor, _, _) = contributors::register(
                c,
                "AGENT",
                &name,
                model(i).as_deref(),
                TokenKind::Agent,
                unusable,
            )?;
            Ok((actor.id, Vec::new()))
        })
    }

    /// `n` OPEN orbits owned by `owner` (`row(i)`: slug, name, description), each
    /// with its `orbit.created` change.
    pub fn orbits(
        &self,
        owner: i64,
        n: usize,
        mut row: impl FnMut(usize) -> [String; 3],
    ) -> Result<Vec<i64>, String> {
        self.rows(n, "orbit insert", |c, i| {
            let [slug, name, description] = row(i);
            let id = orbits::insert(c, &slug, &name, &description, JoinPolicy::Open, owner)?
                .ok_or_else(|| {
                    diesel::result::Error::QueryBuilderError(format!("slug {slug} taken").into())
                })?;
            let summary = format!("orbit {slug} created");
            let named = change(id, owner, "orbit.created", ("orbit", id), None, summary);
            Ok((id, named))
        })
    }

    /// Adds `members` to `orbit` as CONTRIBUTORs, added by `by`, each with its
    /// `member.added` change.
    pub fn members(&self, orbit: i64, by: i64, members: &[i64]) -> Result<(), String> {
        self.rows(members.len(), "member insert", |c, i| {
            let id = members[i];
            orbits::upsert_member(c, orbit, id, Role::Contributor)?;
            let summary = format!("contributor {id} added as {}", Role::Contributor.as_str());
            let named = change(orbit, by, "member.added", ("member", id), None, summary);
            Ok(((), named))
        })
        .map(|_| ())
    }

    /// `n` OPEN problems (`row(i)`: title and statement), each with its
    /// `problem.created` change.
    pub fn problems(&self, n: usize, row: impl FnMut(usize) -> Text) -> Result<Vec<i64>, String> {
        self.created(n, ("problem", "problem"), row, |c, p| {
            problems::insert(c, p.orbit, &p.first, &p.second, p.author)
        })
    }

    /// `n` OPEN tasks in `orbit` (of `problem`, when given), each with its
    /// `task.created` change.
    pub fn tasks(
        &self,
        orbit: i64,
        creator: i64,
        n: usize,
        problem: Option<i64>,
    ) -> Result<Vec<i64>, String> {
        self.tasks_of(n, problem, |i| Text {
            orbit,
            author: creator,
            first: format!("bench task {}", i + 1),
            second: "seeded by orbit-bench".into(),
        })
    }

    /// `n` OPEN tasks (`row(i)`: title and description; of `problem`, when given),
    /// each with its `task.created` change.
    pub fn tasks_of(
        &self,
        n: usize,
        problem: Option<i64>,
        row: impl FnMut(usize) -> Text,
    ) -> Result<Vec<i64>, String> {
        self.created(n, ("task", "task"), row, |c, t| {
            tasks::insert_task(c, t.orbit, problem, &t.first, &t.second, t.author)
        })
    }

    /// [`Bulk::tasks`] for many tasks, [`BATCH`] rows per statement
    /// (`tasks::insert_many`): for the million-task orbit. Their ids, in order.
    pub fn tasks_many(&self, orbit: i64, creator: i64, n: usize) -> Result<Vec<i64>, String> {
        self.batches(n, "task insert", |c, range| {
            let titles: Vec<String> = range.map(|i| format!("bench task {}", i + 1)).collect();
            let ids = tasks::insert_many(c, orbit, creator, &titles, "seeded by orbit-bench")?;
            let changes = ids
                .iter()
                .flat_map(|&id| {
                    let summary = format!("task {id} created");
                    change(
                        orbit,
                        creator,
                        "task.created",
                        ("task", id),
                        Some(id),
                        summary,
                    )
                })
                .collect();
            Ok((ids, changes))
        })
    }

    /// Works on tasks of `orbit`, `steps` in order: each step is the store calls of
    /// its operation (lease issued, checkpoint, lease ended, task closed) and its
    /// change, as the operation's handler makes them. A task's first step sees
    /// lease version 0 and no open lease (a task as [`Bulk::tasks`] made it).
    pub fn task_work(&self, orbit: i64, steps: &[Step]) -> Result<(), String> {
        use sha2::Digest as _;
        let state_hash = hex::encode(sha2::Sha256::digest(STATE.as_bytes()));
        // Per task: its lease version and its open lease's id.
        let mut held: HashMap<i64, (i64, Option<i64>)> = HashMap::new();
        self.rows(steps.len(), "task work", |c, i| {
            let Step { task, worker, op } = steps[i];
            let now = chrono::Utc::now();
            let (version, open) = held.entry(task).or_insert((0, None));
            let no_lease = || {
                diesel::result::Error::QueryBuilderError(
                    format!("task {task}: {op:?} without an open lease").into(),
                )
            };
            let (kind, entity_type, entity_id, summary) = match op {
                Op::Acquire(seconds) => {
                    *version += 1;
                    let lease =
                        tasks::insert_lease(c, task, orbit, worker, *version, now, seconds)?;
                    *open = Some(lease.id);
                    let summary = format!("lease v{version} acquired on task {task}");
                    ("lease.acquired", "lease", lease.id, summary)
                }
                Op::Checkpoint => {
                    open.ok_or_else(no_lease)?;
                    let k = tasks::insert_checkpoint(
                        c,
                        task,
                        orbit,
                        *version,
                        worker,
                        "seeded by orbit-bench",
                        STATE,
                        &state_hash,
                        &[],
                        now,
                    )?;
                    let summary = format!(
                        "checkpoint {} of task {task} under lease v{version}",
                        k.sequence
                    );
                    ("checkpoint.created", "checkpoint", k.id, summary)
                }
                Op::Release => {
                    let lease = open.take().ok_or_else(no_lease)?;
                    tasks::end_lease(c, lease, now, "RELEASED")?;
                    (
                        "lease.released",
                        "lease",
                        lease,
                        format!("lease v{version} released"),
                    )
                }
                Op::Complete => {
                    let lease = open.take().ok_or_else(no_lease)?;
                    tasks::end_lease(c, lease, now, "COMPLETED")?;
                    tasks::close_task(c, task, TaskStatus::Completed, now, None, None, None)?;
                    let summary = format!("task {task} completed under lease v{version}");
                    ("task.completed", "task", task, summary)
                }
                Op::Cancel => {
                    let mut summary = format!("task {task} cancelled");
                    if let Some(lease) = open.take() {
                        tasks::end_lease(c, lease, now, "CANCELLED")?;
                        summary.push_str(&format!("; lease v{version} ended"));
                    }
                    tasks::close_task(c, task, TaskStatus::Cancelled, now, None, None, None)?;
                    ("task.cancelled", "task", task, summary)
                }
            };
            let entity = (entity_type, entity_id);
            Ok(((), change(orbit, worker, kind, entity, Some(task), summary)))
        })
        .map(|_| ())
    }

    /// `n` contributions of a problem (revision 1 each, the five kinds in turn),
    /// counted in the problem's counters, each with its `contribution.created` change.
    pub fn contributions(
        &self,
        orbit: i64,
        author: i64,
        problem: i64,
        n: usize,
    ) -> Result<(), String> {
        self.contributions_of(n, |i| NewContribution {
            orbit,
            kind: KINDS[(i + 1) % KINDS.len()],
            author,
            problem: Some(problem),
            title: format!("bench contribution {}", i + 1),
            body: "seeded by orbit-bench".into(),
        })
    }

    /// `n` contributions (`row(i)`), revision 1 each, counted in their problem's
    /// counters, each with its `contribution.created` change.
    pub fn contributions_of(
        &self,
        n: usize,
        mut row: impl FnMut(usize) -> NewContribution,
    ) -> Result<(), String> {
        self.rows(n, "contribution insert", |c, i| {
            let r = row(i);
            let id = contributions::insert(
                c,
                r.orbit,
                r.kind,
                r.author,
                r.problem,
                None,
                &r.title,
                &r.body,
                &[],
            )?;
            if let Some(problem) = r.problem {
                problems::count_contribution(c, problem, r.kind)?;
            }
            Ok((
                (),
                vec![Pending::new(r.orbit, r.author, created(id, r.kind))],
            ))
        })
        .map(|_| ())
    }

    /// [`Bulk::contributions_of`] for problem-less contributions, [`BATCH`] rows per
    /// statement (`contributions::insert_many`): for a million rows.
    pub fn contributions_many(
        &self,
        n: usize,
        mut row: impl FnMut(usize) -> NewContribution,
    ) -> Result<(), String> {
        self.batches(n, "contribution insert", |c, range| {
            let rows: Vec<NewContribution> = range.map(&mut row).collect();
            let new: Vec<contributions::NewContribution> = rows
                .iter()
                .map(|r| contributions::NewContribution {
                    orbit_id: r.orbit,
                    kind: r.kind,
                    author: r.author,
                    problem_id: r.problem,
                    title: &r.title,
                    body: &r.body,
                })
                .collect();
            if rows.iter().any(|r| r.problem.is_some()) {
                return Err(diesel::result::Error::QueryBuilderError(
                    "contributions_many counts no problem".into(),
                ));
            }
            let changes = contributions::insert_many(c, &new)?
                .into_iter()
                .zip(&rows)
                .map(|(w, r)| Pending::new(w.orbit_id, w.author_id, created(w.id, r.kind)))
                .collect();
            Ok((Vec::<()>::new(), changes))
        })
        .map(|_| ())
    }

    /// `n` memory records (`row(i)`: content and one tag), each with its
    /// `memory.created` change.
    pub fn memory(&self, n: usize, row: impl FnMut(usize) -> Text) -> Result<(), String> {
        self.created(n, ("memory", "memory record"), row, |c, m| {
            memory::insert(
                c,
                m.orbit,
                m.author,
                &m.first,
                std::slice::from_ref(&m.second),
            )
        })
        .map(|_| ())
    }

    /// Vacuums the rows every bulk row updated (orbits, problem counters: their dead
    /// versions would otherwise slow the measured writes until autovacuum comes),
    /// then gives the bulk-loaded tables statistics, as a database that grew through
    /// use would have. Tables still empty are left never-analyzed: statistics saying
    /// "empty" would make the planner trust their tiny size and keep sequential-scan
    /// plans for the tables the load then fills (autovacuum would fix that only
    /// after its next round, a minute later).
    pub fn analyze(&self) -> Result<(), String> {
        let mut conn = self.conn()?;
        conn.batch_execute("VACUUM orbits, problem_counters")
            .map_err(|e| e.to_string())?;
        conn.batch_execute(
            "DO $$ DECLARE t regclass; filled boolean; BEGIN \
                 FOR t IN SELECT c.oid FROM pg_class c \
                          JOIN pg_namespace n ON n.oid = c.relnamespace \
                          WHERE n.nspname = current_schema() AND c.relkind = 'r' LOOP \
                     EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s)', t) INTO filled; \
                     IF filled THEN EXECUTE format('ANALYZE %s', t); END IF; \
                 END LOOP; \
             END $$",
        )
        .map_err(|e| e.to_string())
    }
}

/// A contribution's `contribution.created` change.
fn created(id: i64, kind: ContributionKind) -> Change<'static> {
    Change {
        kind: "contribution.created",
        entity_type: "contribution",
        entity_id: id,
        task_id: None,
        summary: format!("contribution {id} ({}) created", kind.as_str()),
    }
}
