//! The change feed's queries: a page of an orbit's changes after a revision, read
//! with the orbit's revision in one snapshot (REST, MCP and the long polls' shared
//! reads).

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use serde::Serialize;
use utoipa::ToSchema;

use crate::db::schema::{changes, contributors};
use crate::model::{ts, ContributorActor};
use crate::store::contributors::{actor, actor_columns, ActorTuple};

/// One write in an orbit.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChangeOut {
    pub revision: i64,
    /// e.g. `task.created`, `lease.acquired`, `member.added`.
    pub kind: String,
    pub entity_type: String,
    pub entity_id: i64,
    #[schema(required = true)]
    pub task_id: Option<i64>,
    pub contributor: ContributorActor,
    #[serde(with = "ts")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: DateTime<Utc>,
    /// Names side effects, e.g. a superseded handoff or an expired lease.
    pub summary: String,
}

type ChangeTuple = (
    i64,
    String,
    String,
    i64,
    Option<i64>,
    DateTime<Utc>,
    String,
    ActorTuple,
);

pub fn load_page(
    conn: &mut PgConnection,
    orbit_id: i64,
    after: i64,
    limit: i64,
) -> QueryResult<(Vec<ChangeOut>, i64)> {
    let orbit_revision: i64 = crate::db::schema::orbits::table
        .find(orbit_id)
        .select(crate::db::schema::orbits::revision)
        .first(conn)?;
    let rows: Vec<ChangeTuple> = changes::table
        .inner_join(contributors::table)
        .filter(changes::orbit_id.eq(orbit_id))
        .filter(changes::revision.gt(after))
        .filter(changes::revision.le(orbit_revision))
        .order(changes::revision.asc())
        .limit(limit)
        .select((
            changes::revision,
            changes::kind,
            changes::entity_type,
            changes::entity_id,
            changes::task_id,
            changes::created_at,
            changes::summary,
            actor_columns(),
        ))
        .load(conn)?;
    let out = rows
        .into_iter()
        .map(|t| ChangeOut {
            revision: t.0,
            kind: t.1,
            entity_type: t.2,
            entity_id: t.3,
            task_id: t.4,
            created_at: t.5,
            summary: t.6,
            contributor: actor(t.7),
        })
        .collect();
    Ok((out, orbit_revision))
}
