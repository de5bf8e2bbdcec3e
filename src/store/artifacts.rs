//! Artifacts: small stored files. Metadata reads never load the bytes.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bytea, Text, Timestamptz};
use serde::Serialize;
use utoipa::ToSchema;

use crate::db::BindNext;
use crate::model::Cursor;
use crate::model::{ts, ContributorActor};
use crate::store::rows::{all, by_id, ActorC, Id};

/// A stored file's metadata. The bytes are at `GET /api/v1/artifacts/{id}/content`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Artifact {
    #[schema(minimum = 1)]
    pub id: i64,
    #[schema(minimum = 1)]
    pub orbit_id: i64,
    pub name: String,
    /// As declared by the uploader; the content route serves it as `Content-Type`.
    pub media_type: String,
    /// Size of the decoded content in bytes.
    #[schema(minimum = 0)]
    pub size_bytes: i64,
    /// Lowercase hex SHA-256 of the content; the content route's `ETag`.
    #[schema(pattern = "^[0-9a-f]{64}$")]
    pub sha256: String,
    pub created_by: ContributorActor,
    #[serde(with = "ts")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: DateTime<Utc>,
    /// Present on mutation response; omitted on nested read objects.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = i64, required = false)]
    pub orbit_revision: Option<i64>,
}

#[derive(QueryableByName)]
struct ArtifactRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = BigInt)]
    orbit_id: i64,
    #[diesel(sql_type = Text)]
    name: String,
    #[diesel(sql_type = Text)]
    media_type: String,
    #[diesel(sql_type = BigInt)]
    size_bytes: i64,
    #[diesel(sql_type = Text)]
    sha256: String,
    #[diesel(sql_type = Timestamptz)]
    created_at: DateTime<Utc>,
    #[diesel(embed)]
    creator: ActorC,
}

impl From<ArtifactRow> for Artifact {
    fn from(r: ArtifactRow) -> Artifact {
        Artifact {
            id: r.id,
            orbit_id: r.orbit_id,
            name: r.name,
            media_type: r.media_type,
            size_bytes: r.size_bytes,
            sha256: r.sha256,
            created_by: r.creator.into(),
            created_at: r.created_at,
            orbit_revision: None,
        }
    }
}

const ARTIFACT_SELECT: &str = "SELECT f.id, f.orbit_id, f.name, f.media_type, f.size_bytes, \
        f.sha256, f.created_at, \
        c.id AS c_id, c.type AS c_type, c.name AS c_name, c.model_claim AS c_model_claim \
    FROM artifacts f JOIN contributors c ON c.id = f.created_by";

pub fn artifact(conn: &mut PgConnection, id: i64) -> QueryResult<Option<Artifact>> {
    by_id::<ArtifactRow, _>(conn, format!("{ARTIFACT_SELECT} WHERE f.id = $1"), id)
}

pub fn artifacts_of_orbit(
    conn: &mut PgConnection,
    orbit_id: i64,
    page: Cursor,
) -> QueryResult<Vec<Artifact>> {
    crate::db::sql(format!(
        "{ARTIFACT_SELECT} WHERE (f.orbit_id, f.id) > ($1, $2) AND f.orbit_id = $1 ORDER BY f.orbit_id, f.id LIMIT $3"
    ))
    .bind::<BigInt, _>(orbit_id)
    .bind::<BigInt, _>(page.after)
    .bind::<BigInt, _>(page.fetch())
    .load::<ArtifactRow>(conn)
    .map(all)
}

/// What the content route needs to decide between 200 and 304.
#[derive(Debug, Clone, QueryableByName)]
pub struct ContentHead {
    #[diesel(sql_type = Text)]
    pub name: String,
    #[diesel(sql_type = Text)]
    pub media_type: String,
    #[diesel(sql_type = Text)]
    pub sha256: String,
}

pub fn content_head(conn: &mut PgConnection, id: i64) -> QueryResult<Option<ContentHead>> {
    crate::db::sql("SELECT name, media_type, sha256 FROM artifacts WHERE id = $1")
        .bind::<BigInt, _>(id)
        .get_result(conn)
        .optional()
}

pub fn content(conn: &mut PgConnection, id: i64) -> QueryResult<Vec<u8>> {
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = Bytea)]
        content: Vec<u8>,
    }
    crate::db::sql("SELECT content FROM artifacts WHERE id = $1")
        .bind::<BigInt, _>(id)
        .get_result::<Row>(conn)
        .map(|r| r.content)
}

#[expect(clippy::too_many_arguments, reason = "one column per argument")]
pub fn insert(
    conn: &mut PgConnection,
    orbit_id: i64,
    name: &str,
    media_type: &str,
    size_bytes: i64,
    sha256: &str,
    content: &[u8],
    creator: i64,
) -> QueryResult<i64> {
    crate::db::sql(
        "INSERT INTO artifacts (orbit_id, name, media_type, size_bytes, sha256, content, created_by) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
    )
    .bind::<BigInt, _>(orbit_id)
    .bind::<Text, _>(name)
    .bind::<Text, _>(media_type)
    .bind::<BigInt, _>(size_bytes)
    .bind::<Text, _>(sha256)
    .bind::<Bytea, _>(content)
    .bind::<BigInt, _>(creator)
    .get_result::<Id>(conn)
    .map(|r| r.id)
}
