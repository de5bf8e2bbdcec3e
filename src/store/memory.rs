//! Memory records: free-form notes of an orbit, filterable by tag.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Nullable, Text, Timestamptz};
use serde::Serialize;
use utoipa::ToSchema;

use crate::db::BindNext;
use crate::model::Cursor;
use crate::model::{ts, ContributorActor};
use crate::store::rows::{all, by_id, ActorA, Id};

/// A memory record (original behaviour: every POST creates one).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MemoryRecord {
    #[schema(minimum = 1)]
    pub id: i64,
    #[schema(minimum = 1)]
    pub orbit_id: i64,
    pub author: ContributorActor,
    /// Untrusted evidence, stored and returned verbatim.
    pub content: String,
    /// As sent, in order.
    pub tags: Vec<String>,
    #[serde(with = "ts")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: DateTime<Utc>,
    /// Present on mutation response; omitted on nested read objects.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = i64, required = false)]
    pub orbit_revision: Option<i64>,
}

#[derive(QueryableByName)]
struct MemoryRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = BigInt)]
    orbit_id: i64,
    #[diesel(sql_type = Text)]
    content: String,
    #[diesel(sql_type = Array<Text>)]
    tags: Vec<String>,
    #[diesel(sql_type = Timestamptz)]
    created_at: DateTime<Utc>,
    #[diesel(embed)]
    author: ActorA,
}

impl From<MemoryRow> for MemoryRecord {
    fn from(r: MemoryRow) -> MemoryRecord {
        MemoryRecord {
            id: r.id,
            orbit_id: r.orbit_id,
            author: r.author.into(),
            content: r.content,
            tags: r.tags,
            created_at: r.created_at,
            orbit_revision: None,
        }
    }
}

const MEMORY_SELECT: &str = "SELECT m.id, m.orbit_id, m.content, m.tags, m.created_at, \
        a.id AS a_id, a.type AS a_type, a.name AS a_name, a.model_claim AS a_model_claim \
    FROM memory_records m JOIN contributors a ON a.id = m.author_id";

pub fn record(conn: &mut PgConnection, id: i64) -> QueryResult<Option<MemoryRecord>> {
    by_id::<MemoryRow, _>(conn, format!("{MEMORY_SELECT} WHERE m.id = $1"), id)
}

/// An orbit's records, ascending by id; with `tag`, only records carrying it
/// (`tags @> ARRAY[tag]`, served by the GIN index).
pub fn records_of_orbit(
    conn: &mut PgConnection,
    orbit_id: i64,
    tag: Option<&str>,
    page: Cursor,
) -> QueryResult<Vec<MemoryRecord>> {
    let query = match tag {
        Some(_) => format!(
            "{MEMORY_SELECT} WHERE (m.orbit_id, m.id) > ($1, $2) AND m.orbit_id = $1 AND m.tags @> ARRAY[$3::text] \
             ORDER BY m.orbit_id, m.id LIMIT $4"
        ),
        None => format!(
            "{MEMORY_SELECT} WHERE (m.orbit_id, m.id) > ($1, $2) AND m.orbit_id = $1 AND $3::text IS NULL \
             ORDER BY m.orbit_id, m.id LIMIT $4"
        ),
    };
    crate::db::sql(query)
        .bind::<BigInt, _>(orbit_id)
        .bind::<BigInt, _>(page.after)
        .bind::<Nullable<Text>, _>(tag)
        .bind::<BigInt, _>(page.fetch())
        .load::<MemoryRow>(conn)
        .map(all)
}

pub fn insert(
    conn: &mut PgConnection,
    orbit_id: i64,
    author: i64,
    content: &str,
    tags: &[String],
) -> QueryResult<i64> {
    crate::db::sql(
        "INSERT INTO memory_records (orbit_id, author_id, content, tags) \
         VALUES ($1, $2, $3, $4) RETURNING id",
    )
    .bind::<BigInt, _>(orbit_id)
    .bind::<BigInt, _>(author)
    .bind::<Text, _>(content)
    .bind::<Array<Text>, _>(tags)
    .get_result::<Id>(conn)
    .map(|r| r.id)
}
