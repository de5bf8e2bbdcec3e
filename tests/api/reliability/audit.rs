//! The invariants of issue 10, read from the database after a run and checked
//! against what the clients were told; and the one line of figures each test prints.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use diesel::sql_types::{BigInt, Nullable, Text};
use diesel::{PgConnection, QueryableByName, RunQueryDsl};
use serde_json::Value;

use super::load::{Ack, Kind, Net, Stats, KINDS};
use crate::harness::sql_i64;

#[derive(QueryableByName)]
struct LeaseRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = BigInt)]
    task_id: i64,
    #[diesel(sql_type = BigInt)]
    contributor_id: i64,
    #[diesel(sql_type = BigInt)]
    lease_version: i64,
    #[diesel(sql_type = Nullable<Text>)]
    end_reason: Option<String>,
}

#[derive(QueryableByName)]
struct CheckpointRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = BigInt)]
    task_id: i64,
    #[diesel(sql_type = BigInt)]
    sequence: i64,
    #[diesel(sql_type = BigInt)]
    author_id: i64,
    #[diesel(sql_type = Text)]
    summary: String,
}

#[derive(QueryableByName)]
struct HandoffRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = BigInt)]
    task_id: i64,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = BigInt)]
    from_contributor: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    accepted_by: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    accepted_lease_id: Option<i64>,
    #[diesel(sql_type = Text)]
    message: String,
}

#[derive(QueryableByName)]
struct TaskRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Text)]
    description: String,
}

#[derive(QueryableByName)]
struct KeyRow {
    #[diesel(sql_type = BigInt)]
    contributor_id: i64,
    #[diesel(sql_type = Text)]
    operation: String,
    #[diesel(sql_type = Text)]
    key: String,
    #[diesel(sql_type = Text)]
    body: String,
}

#[derive(QueryableByName)]
struct KindCount {
    #[diesel(sql_type = Text)]
    kind: String,
    #[diesel(sql_type = BigInt)]
    n: i64,
}

fn load<T: QueryableByName<diesel::pg::Pg> + 'static>(
    conn: &mut PgConnection,
    sql: &str,
) -> Vec<T> {
    diesel::sql_query(sql)
        .load(conn)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// What the database holds after a run; every `violations` entry is a broken promise.
pub struct Audit {
    pub leases: i64,
    pub checkpoints: i64,
    pub handoffs: i64,
    pub accepted: i64,
    pub changes: i64,
    pub violations: Vec<String>,
}

impl Audit {
    fn check(&mut self, what: &str, bad: i64) {
        if bad != 0 {
            self.violations.push(format!("{what}: {bad}"));
        }
    }
}

/// Checks every invariant of issue 10 against the database and the acknowledgements.
pub fn audit(conn: &mut PgConnection, acks: &[Ack]) -> Audit {
    let mut a = Audit {
        leases: sql_i64(conn, "SELECT count(*) AS n FROM leases"),
        checkpoints: sql_i64(conn, "SELECT count(*) AS n FROM checkpoints"),
        handoffs: sql_i64(conn, "SELECT count(*) AS n FROM handoffs"),
        accepted: sql_i64(
            conn,
            "SELECT count(*) AS n FROM handoffs WHERE status = 'ACCEPTED'",
        ),
        changes: sql_i64(conn, "SELECT count(*) AS n FROM changes"),
        violations: Vec::new(),
    };

    // 1. No two leases of one task overlap in active time.
    let overlaps = sql_i64(
        conn,
        "SELECT count(*) AS n FROM leases a JOIN leases b \
           ON a.task_id = b.task_id AND a.id < b.id \
          AND tstzrange(a.acquired_at, COALESCE(a.released_at, a.expires_at), '[)') \
           && tstzrange(b.acquired_at, COALESCE(b.released_at, b.expires_at), '[)')",
    );
    a.check("overlapping leases of one task", overlaps);
    // 2. lease_version per task is 1..N and strictly increases with acquired_at.
    let versions = sql_i64(
        conn,
        "SELECT count(*) AS n FROM ( \
           SELECT lease_version, acquired_at, \
                  row_number() OVER w AS rn, lag(acquired_at) OVER w AS prev \
           FROM leases WINDOW w AS (PARTITION BY task_id ORDER BY lease_version)) s \
         WHERE lease_version <> rn OR prev >= acquired_at",
    );
    a.check("lease versions not 1..N in acquisition order", versions);
    let task_versions = sql_i64(
        conn,
        "SELECT count(*) AS n FROM tasks t \
         WHERE t.lease_version <> (SELECT count(*) FROM leases l WHERE l.task_id = t.id)",
    );
    a.check(
        "tasks whose lease_version is not their lease count",
        task_versions,
    );
    let open = sql_i64(
        conn,
        "SELECT count(*) AS n FROM (SELECT task_id FROM leases WHERE end_reason IS NULL \
         AND expires_at > clock_timestamp() GROUP BY task_id HAVING count(*) > 1) s",
    );
    a.check("tasks with two active leases", open);
    // 3. Checkpoint sequences per task are 1..N, in time order, and every checkpoint
    // was written by the holder of the lease it names while that lease was active
    // (2 s of slack only for the expiry racing the insert inside one transaction).
    let gaps = sql_i64(
        conn,
        "SELECT count(*) AS n FROM ( \
           SELECT sequence, created_at, row_number() OVER w AS rn, lag(created_at) OVER w AS prev \
           FROM checkpoints WINDOW w AS (PARTITION BY task_id ORDER BY sequence)) s \
         WHERE sequence <> rn OR prev > created_at",
    );
    a.check("checkpoint sequences not 1..N", gaps);
    let counters = sql_i64(
        conn,
        "SELECT count(*) AS n FROM tasks t WHERE t.checkpoint_sequence <> \
         (SELECT count(*) FROM checkpoints c WHERE c.task_id = t.id)",
    );
    a.check(
        "tasks whose checkpoint counter is not their checkpoint count",
        counters,
    );
    let unfenced = sql_i64(
        conn,
        "SELECT count(*) AS n FROM checkpoints c \
         LEFT JOIN leases l ON l.task_id = c.task_id AND l.lease_version = c.lease_version \
         WHERE l.id IS NULL OR l.contributor_id <> c.author_id OR c.created_at < l.acquired_at \
            OR c.created_at >= COALESCE(l.released_at, l.expires_at) + interval '2 seconds'",
    );
    a.check(
        "checkpoints not written under their author's active lease",
        unfenced,
    );
    let handoffs_unfenced = sql_i64(
        conn,
        "SELECT count(*) AS n FROM handoffs h \
         LEFT JOIN leases l ON l.task_id = h.task_id AND l.lease_version = h.lease_version \
         LEFT JOIN checkpoints c ON c.id = h.checkpoint_id \
         WHERE l.id IS NULL OR l.contributor_id <> h.from_contributor \
            OR c.task_id IS DISTINCT FROM h.task_id",
    );
    a.check(
        "handoffs not offered by their lease holder",
        handoffs_unfenced,
    );
    let accepted = sql_i64(
        conn,
        "SELECT count(*) AS n FROM handoffs h LEFT JOIN leases l ON l.id = h.accepted_lease_id \
         WHERE h.status = 'ACCEPTED' AND (l.id IS NULL OR l.contributor_id <> h.accepted_by \
            OR l.task_id <> h.task_id OR l.lease_version <= h.lease_version)",
    );
    a.check("accepted handoffs without their new lease", accepted);
    // 4. Every orbit's changes are exactly revisions 1..orbits.revision.
    let dense = sql_i64(
        conn,
        "SELECT count(*) AS n FROM orbits o \
         WHERE o.revision <> (SELECT count(*) FROM changes c WHERE c.orbit_id = o.id) \
            OR o.revision <> COALESCE((SELECT max(revision) FROM changes c WHERE c.orbit_id = o.id), 0)",
    );
    a.check("orbits whose changes are not 1..revision", dense);

    // 5. Each write ran once: one stored key per effect and one effect per stored key.
    let keys: Vec<KeyRow> = load(
        conn,
        "SELECT contributor_id, operation, key, convert_from(response_body, 'UTF8') AS body \
         FROM idempotency_keys",
    );
    let kinds: Vec<KindCount> = load(
        conn,
        "SELECT kind, count(*) AS n FROM changes GROUP BY kind",
    );
    let changes_of: HashMap<String, i64> = kinds.into_iter().map(|k| (k.kind, k.n)).collect();
    let mut stored: HashMap<(i64, &str, &str), Value> = HashMap::new();
    let mut per_op: HashMap<&str, i64> = HashMap::new();
    for k in &keys {
        *per_op.entry(k.operation.as_str()).or_default() += 1;
        let body: Value = serde_json::from_str(&k.body).unwrap_or(Value::Null);
        stored.insert(
            (k.contributor_id, k.operation.as_str(), k.key.as_str()),
            body,
        );
    }
    for kind in KINDS {
        let keyed = per_op.get(kind.operation()).copied().unwrap_or(0);
        let effects = changes_of.get(kind.change()).copied().unwrap_or(0);
        if keyed != effects {
            a.violations.push(format!(
                "{}: {keyed} stored keys but {effects} `{}` changes",
                kind.name(),
                kind.change()
            ));
        }
    }
    let acquired = per_op.get(Kind::Acquire.operation()).copied().unwrap_or(0);
    let accepts = per_op.get(Kind::Accept.operation()).copied().unwrap_or(0);
    a.check(
        "leases not issued by exactly one acquire or accept key",
        a.leases - acquired - accepts,
    );
    a.check(
        "checkpoints without exactly one key",
        a.checkpoints
            - per_op
                .get(Kind::Checkpoint.operation())
                .copied()
                .unwrap_or(0),
    );
    a.check(
        "handoffs without exactly one key",
        a.handoffs - per_op.get(Kind::Offer.operation()).copied().unwrap_or(0),
    );
    let tasks = sql_i64(conn, "SELECT count(*) AS n FROM tasks");
    a.check(
        "tasks without exactly one key",
        tasks
            - per_op
                .get(Kind::CreateTask.operation())
                .copied()
                .unwrap_or(0),
    );
    for (what, sql) in [
        (
            "checkpoints written twice for one key",
            "SELECT count(*) AS n FROM (SELECT summary FROM checkpoints GROUP BY summary HAVING count(*) > 1) s",
        ),
        (
            "handoffs offered twice for one key",
            "SELECT count(*) AS n FROM (SELECT message FROM handoffs GROUP BY message HAVING count(*) > 1) s",
        ),
        (
            "tasks created twice for one key",
            "SELECT count(*) AS n FROM (SELECT description FROM tasks GROUP BY description HAVING count(*) > 1) s",
        ),
        (
            "leases issued twice for one acquire key",
            "SELECT count(*) - count(DISTINCT convert_from(response_body, 'UTF8')::jsonb #>> '{data,id}') AS n \
             FROM idempotency_keys WHERE operation = 'POST /api/v1/tasks/{task}/leases'",
        ),
    ] {
        let bad = sql_i64(conn, sql);
        a.check(what, bad);
    }

    // 6. Every acknowledged write is there, as the client saw it.
    let leases: HashMap<i64, LeaseRow> = load::<LeaseRow>(
        conn,
        "SELECT id, task_id, contributor_id, lease_version, end_reason FROM leases",
    )
    .into_iter()
    .map(|l| (l.id, l))
    .collect();
    let checkpoints: HashMap<i64, CheckpointRow> = load::<CheckpointRow>(
        conn,
        "SELECT id, task_id, sequence, author_id, summary FROM checkpoints",
    )
    .into_iter()
    .map(|c| (c.id, c))
    .collect();
    let handoffs: HashMap<i64, HandoffRow> = load::<HandoffRow>(
        conn,
        "SELECT id, task_id, status, from_contributor, accepted_by, accepted_lease_id, message \
         FROM handoffs",
    )
    .into_iter()
    .map(|h| (h.id, h))
    .collect();
    let task_rows: HashMap<i64, TaskRow> =
        load::<TaskRow>(conn, "SELECT id, description FROM tasks")
            .into_iter()
            .map(|t| (t.id, t))
            .collect();
    let mut missing = Vec::new();
    let mut seen_keys = HashSet::new();
    for ack in acks {
        let d = &ack.data;
        let id = d["id"].as_i64().unwrap_or(0);
        let present = match ack.kind {
            Kind::CreateTask => task_rows.get(&id).is_some_and(|t| t.description == ack.key),
            Kind::Acquire => leases.get(&id).is_some_and(|l| {
                l.contributor_id == ack.agent
                    && Some(l.task_id) == d["task_id"].as_i64()
                    && Some(l.lease_version) == d["lease_version"].as_i64()
            }),
            Kind::Checkpoint => checkpoints.get(&id).is_some_and(|c| {
                c.author_id == ack.agent
                    && Some(c.task_id) == d["task_id"].as_i64()
                    && Some(c.sequence) == d["sequence"].as_i64()
                    && c.summary == format!("checkpoint {}", ack.key)
            }),
            Kind::Release => leases.get(&id).is_some_and(|l| {
                l.contributor_id == ack.agent && l.end_reason.as_deref() == Some("RELEASED")
            }),
            Kind::Offer => handoffs.get(&id).is_some_and(|h| {
                h.from_contributor == ack.agent
                    && Some(h.task_id) == d["task_id"].as_i64()
                    && h.message == format!("handoff {}", ack.key)
            }),
            Kind::Accept => {
                let hid = d["handoff"]["id"].as_i64().unwrap_or(0);
                let lid = d["lease"]["id"].as_i64().unwrap_or(0);
                handoffs.get(&hid).is_some_and(|h| {
                    h.status == "ACCEPTED"
                        && h.accepted_by == Some(ack.agent)
                        && h.accepted_lease_id == Some(lid)
                }) && leases
                    .get(&lid)
                    .is_some_and(|l| l.contributor_id == ack.agent)
            }
        };
        // The stored response for that key is the one the client was given.
        let same_response = stored
            .get(&(ack.agent, ack.kind.operation(), ack.key.as_str()))
            .is_some_and(|body| body["data"] == ack.data);
        if !present || !same_response {
            missing.push(format!(
                "{} key {} (present: {present}, stored response matches: {same_response}): {}",
                ack.kind.name(),
                ack.key,
                ack.data
            ));
        }
        if !seen_keys.insert((ack.agent, ack.kind, ack.key.clone())) {
            missing.push(format!("key {} acknowledged twice", ack.key));
        }
    }
    if !missing.is_empty() {
        a.violations.push(format!(
            "{} acknowledged writes missing or different, e.g. {:?}",
            missing.len(),
            &missing[..missing.len().min(5)]
        ));
    }
    a
}

pub fn ack_counts(acks: &[Ack]) -> BTreeMap<&'static str, usize> {
    let mut m = BTreeMap::new();
    for a in acks {
        *m.entry(a.kind.name()).or_default() += 1;
    }
    m
}

/// Prints one line of figures for docs/RELIABILITY.md.
pub fn report(test: &str, net: &Net, audit: &Audit, elapsed: Duration, extra: &str) {
    let s = &net.stats;
    let acks = s.acks.lock().unwrap();
    eprintln!(
        "RELIABILITY {test}: {:.1} s; writes {} (+{} inbox reads), requests sent {}, \
         acknowledged {} {:?}; conflicts {} {:?}; retries: transport {} busy(503/in-flight) {}; \
         replays {} (recovered lost answers {}); unresolved {}; 5xx {}; \
         db: leases {} checkpoints {} handoffs {} (accepted {}) changes {}; violations {}{extra}",
        elapsed.as_secs_f64(),
        Stats::get(&s.writes),
        Stats::get(&s.reads),
        Stats::get(&s.attempts),
        acks.len(),
        ack_counts(&acks),
        s.conflicts_total(),
        s.conflicts.lock().unwrap(),
        Stats::get(&s.transport_retries),
        Stats::get(&s.busy_retries),
        Stats::get(&s.replays),
        Stats::get(&s.recovered_by_replay),
        Stats::get(&s.unresolved),
        Stats::get(&s.server_errors),
        audit.leases,
        audit.checkpoints,
        audit.handoffs,
        audit.accepted,
        audit.changes,
        audit.violations.len(),
    );
}
