//! The orbit revision: every write inside an orbit advances it by exactly one.
//!
//! A write names its change with `Gate::record` (src/idempotency.rs), which hands
//! back [`PENDING`] for the response body. The change is applied by [`apply`] as the
//! transaction's last statement, together with the stored idempotent response: one
//! statement bumps the orbit's counter, appends the change row and stores the
//! response with the real revision in place of the placeholder. The `UPDATE` takes
//! the orbit row's lock, so concurrent writers of one orbit are ordered by it and the
//! revisions are dense (a rolled-back transaction gives its number back); holding it
//! for one statement and the commit is what bounds a busy orbit's write rate. Long
//! polls are woken after commit (`ChangeHub::publish`), never from inside the
//! transaction.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bytea, Int2, Nullable, Text};

use crate::db::BindNext;

pub const NOTIFY_CHANNEL: &str = "orbit_changes";

/// Stands for the revision a write will get, in a response built before it is known.
/// Only ever serialized as the value of an `orbit_revision` field.
pub const PENDING: i64 = -9_223_372_036_854_775_807;

const PENDING_FIELD: &str = "\"orbit_revision\":-9223372036854775807";

/// What a write did, for the change feed.
pub struct Change<'a> {
    pub kind: &'a str,
    pub entity_type: &'a str,
    pub entity_id: i64,
    pub task_id: Option<i64>,
    pub summary: String,
}

/// A change named by a write, applied at the end of its transaction.
#[derive(Debug, Clone)]
pub struct Pending {
    pub orbit_id: i64,
    pub contributor_id: i64,
    pub kind: String,
    pub entity_type: String,
    pub entity_id: i64,
    pub task_id: Option<i64>,
    pub summary: String,
}

impl Pending {
    pub fn new(orbit_id: i64, contributor_id: i64, change: Change<'_>) -> Pending {
        Pending {
            orbit_id,
            contributor_id,
            kind: change.kind.to_owned(),
            entity_type: change.entity_type.to_owned(),
            entity_id: change.entity_id,
            task_id: change.task_id,
            summary: change.summary,
        }
    }
}

#[derive(QueryableByName)]
struct Revision {
    #[diesel(sql_type = BigInt)]
    revision: i64,
}

/// A response to store under a claimed idempotency key.
pub struct StoredResponse<'a> {
    pub key_id: i64,
    pub status: i16,
    pub body: &'a [u8],
}

/// Advances the orbit's revision by one, appends the change row and, when the write
/// holds a key, stores its response with the revision filled in, in one statement.
/// Returns the new revision.
pub fn apply(
    conn: &mut PgConnection,
    change: &Pending,
    response: Option<StoredResponse<'_>>,
) -> QueryResult<i64> {
    let (key_id, status, body) = match response {
        Some(r) => (Some(r.key_id), r.status, r.body),
        None => (None, 0, &[][..]),
    };
    let row: Revision = crate::db::sql(
        "WITH bumped AS ( \
             UPDATE orbits SET revision = revision + 1 WHERE id = $1 RETURNING id, revision \
         ), change AS ( \
             INSERT INTO changes (orbit_id, revision, kind, entity_type, entity_id, task_id, \
                                  contributor_id, summary, created_at) \
             SELECT b.id, b.revision, $2, $3, $4, $5, $6, $7, clock_timestamp() \
             FROM bumped b \
             RETURNING revision \
         ), stored AS ( \
             UPDATE idempotency_keys k \
             SET response_status = $9, \
                 response_body = convert_to(replace(convert_from($10, 'UTF8'), $11, \
                                 '\"orbit_revision\":' || c.revision), 'UTF8') \
             FROM change c \
             WHERE k.id = $8 \
         ) \
         SELECT revision FROM change",
    )
    .bind::<BigInt, _>(change.orbit_id)
    .bind::<Text, _>(&change.kind)
    .bind::<Text, _>(&change.entity_type)
    .bind::<BigInt, _>(change.entity_id)
    .bind::<Nullable<BigInt>, _>(change.task_id)
    .bind::<BigInt, _>(change.contributor_id)
    .bind::<Text, _>(&change.summary)
    .bind::<Nullable<BigInt>, _>(key_id)
    .bind::<Int2, _>(status)
    .bind::<Bytea, _>(body)
    .bind::<Text, _>(PENDING_FIELD)
    .get_result(conn)?;
    Ok(row.revision)
}

/// Puts `revision` in place of [`PENDING`] in a serialized (compact) JSON body. The
/// placeholder cannot occur inside a JSON string: there every `"` is escaped.
pub fn fill(body: &[u8], revision: i64) -> Vec<u8> {
    let needle = PENDING_FIELD.as_bytes();
    let with = format!("\"orbit_revision\":{revision}");
    let mut out = Vec::with_capacity(body.len());
    let mut rest = body;
    while let Some(at) = rest.windows(needle.len()).position(|w| w == needle) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(with.as_bytes());
        rest = &rest[at + needle.len()..];
    }
    out.extend_from_slice(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_replaces_only_the_field() {
        let body = serde_json::to_vec(&serde_json::json!({
            "data": {"orbit_revision": PENDING, "text": "\"orbit_revision\":-9223372036854775807"},
            "orbit_revision": PENDING,
        }))
        .unwrap();
        let filled: serde_json::Value = serde_json::from_slice(&fill(&body, 42)).unwrap();
        assert_eq!(filled["data"]["orbit_revision"], 42);
        assert_eq!(filled["orbit_revision"], 42);
        assert_eq!(
            filled["data"]["text"],
            "\"orbit_revision\":-9223372036854775807"
        );
    }
}
