//! Bulk seeding: many rows written straight into the service's database with the
//! library's own store functions, each row's change applied through the library's
//! revision path (`revision::closing`, the statement the service sends with every
//! write's COMMIT). The bench restates no revision rule: the orbit's counter, the
//! change rows and the problem's counters are kept by the same code (and database
//! triggers) as for a write through the API, without one HTTP round trip and one
//! commit per row.

use diesel::connection::SimpleConnection as _;
use diesel::{Connection, PgConnection};
use orbit_commons::domain::revision::{self, Change, Pending};
use orbit_commons::store::contributions::{self as contributions, ContributionKind};
use orbit_commons::store::{problems, tasks};

/// Rows per transaction. Every row's change updates its orbit's row, and versions
/// a transaction wrote cannot be pruned before it commits: a long one would make
/// each later update walk all of them.
const BATCH: usize = 500;

const KINDS: [ContributionKind; 5] = [
    ContributionKind::Attempt,
    ContributionKind::Observation,
    ContributionKind::Claim,
    ContributionKind::Question,
    ContributionKind::Note,
];

/// The service's database, for rows that would take too long through the API.
pub struct Bulk {
    pub url: String,
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

    /// Writes `n` rows in transactions of [`BATCH`]: `row(conn, i)` writes row `i`
    /// (0-based) and names its change; the changes of a batch are applied in order,
    /// in one round trip, before its commit.
    fn rows<T>(
        &self,
        n: usize,
        what: &str,
        mut row: impl FnMut(&mut PgConnection, usize) -> diesel::QueryResult<(T, Pending)>,
    ) -> Result<Vec<T>, String> {
        let mut conn = self.conn()?;
        let mut out = Vec::with_capacity(n);
        for start in (0..n).step_by(BATCH) {
            let batch = conn
                .transaction::<_, diesel::result::Error, _>(|c| {
                    let mut written = Vec::with_capacity(BATCH);
                    let mut apply = Vec::with_capacity(BATCH);
                    for i in start..(start + BATCH).min(n) {
                        let (value, change) = row(c, i)?;
                        written.push(value);
                        apply.push(
                            revision::closing(
                                &change,
                                revision::Response {
                                    body: b"",
                                    stored: None,
                                },
                            )
                            .map_err(|e| diesel::result::Error::QueryBuilderError(e.into()))?,
                        );
                    }
                    c.batch_execute(&apply.join(";\n"))?;
                    Ok(written)
                })
                .map_err(|e| format!("bulk {what}: {e}"))?;
            out.extend(batch);
        }
        Ok(out)
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
        self.rows(n, "task insert", |c, i| {
            let id = tasks::insert_task(
                c,
                orbit,
                problem,
                &format!("bench task {}", i + 1),
                "seeded by orbit-bench",
                creator,
            )?;
            let change = Change {
                kind: "task.created",
                entity_type: "task",
                entity_id: id,
                task_id: Some(id),
                summary: format!("task {id} created"),
            };
            Ok((id, Pending::new(orbit, creator, change)))
        })
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
        self.rows(n, "contribution insert", |c, i| {
            let kind = KINDS[(i + 1) % KINDS.len()];
            let id = contributions::insert(
                c,
                orbit,
                kind,
                author,
                Some(problem),
                None,
                &format!("bench contribution {}", i + 1),
                "seeded by orbit-bench",
                &[],
            )?;
            problems::count_contribution(c, problem, kind)?;
            let change = Change {
                kind: "contribution.created",
                entity_type: "contribution",
                entity_id: id,
                task_id: None,
                summary: format!("contribution {id} ({}) created", kind.as_str()),
            };
            Ok(((), Pending::new(orbit, author, change)))
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
