//! The orbit revision: the one function every write inside an orbit calls.
//!
//! `record` bumps the orbit's counter by exactly one and appends the change row in a
//! single statement, in the caller's transaction. The `UPDATE` takes the orbit row's
//! lock, so concurrent writers of one orbit are ordered by it and the revisions are
//! dense: a rolled-back transaction gives its number back. Call it as the LAST
//! statement of the effect, so the orbit lock is held only until commit. It also
//! queues a `NOTIFY orbit_changes` (delivered at commit) that wakes long polls on
//! every instance.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text};

pub const NOTIFY_CHANNEL: &str = "orbit_changes";

/// What a write did, for the change feed.
pub struct Change<'a> {
    pub kind: &'a str,
    pub entity_type: &'a str,
    pub entity_id: i64,
    pub task_id: Option<i64>,
    pub summary: String,
}

#[derive(QueryableByName)]
struct Revision {
    #[diesel(sql_type = BigInt)]
    revision: i64,
}

/// Advances the orbit's revision by one and appends the change row. Returns the new
/// revision.
pub fn record(
    conn: &mut PgConnection,
    orbit_id: i64,
    contributor_id: i64,
    change: Change<'_>,
) -> QueryResult<i64> {
    let row: Revision = diesel::sql_query(
        "WITH bumped AS ( \
             UPDATE orbits SET revision = revision + 1 WHERE id = $1 RETURNING id, revision \
         ) \
         INSERT INTO changes (orbit_id, revision, kind, entity_type, entity_id, task_id, \
                              contributor_id, summary, created_at) \
         SELECT b.id, b.revision, $2, $3, $4, $5, $6, $7, clock_timestamp() \
         FROM bumped b \
         CROSS JOIN LATERAL (SELECT pg_notify('orbit_changes', b.id::text)) AS n \
         RETURNING revision",
    )
    .bind::<BigInt, _>(orbit_id)
    .bind::<Text, _>(change.kind)
    .bind::<Text, _>(change.entity_type)
    .bind::<BigInt, _>(change.entity_id)
    .bind::<Nullable<BigInt>, _>(change.task_id)
    .bind::<BigInt, _>(contributor_id)
    .bind::<Text, _>(&change.summary)
    .get_result(conn)?;
    Ok(row.revision)
}
