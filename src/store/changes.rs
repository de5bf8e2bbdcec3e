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

/// An orbit's changes at or below `before`, newest first, at most `limit` (the
/// pages' activity feed: a range of the primary key read backwards).
pub fn latest(
    conn: &mut PgConnection,
    orbit_id: i64,
    before: i64,
    limit: i64,
) -> QueryResult<Vec<ChangeOut>> {
    let rows: Vec<ChangeTuple> = changes::table
        .inner_join(contributors::table)
        .filter(changes::orbit_id.eq(orbit_id))
        .filter(changes::revision.le(before))
        .order(changes::revision.desc())
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
    Ok(rows.into_iter().map(change_out).collect())
}

fn change_out(t: ChangeTuple) -> ChangeOut {
    ChangeOut {
        revision: t.0,
        kind: t.1,
        entity_type: t.2,
        entity_id: t.3,
        task_id: t.4,
        created_at: t.5,
        summary: t.6,
        contributor: actor(t.7),
    }
}

/// One of a contributor's changes, with the orbit it was written in.
#[derive(Debug, Clone)]
pub struct ContributorChange {
    pub orbit_id: i64,
    pub orbit_slug: String,
    pub change: ChangeOut,
}

/// A contributor's most recent changes over every orbit, newest first, at most
/// `limit`, older than `before` (a `(created_at)` position; `None` = now), by
/// `changes_contributor_idx`.
pub fn of_contributor(
    conn: &mut PgConnection,
    contributor_id: i64,
    before: Option<DateTime<Utc>>,
    limit: i64,
) -> QueryResult<Vec<ContributorChange>> {
    use crate::db::schema::orbits;
    let mut query = changes::table
        .inner_join(contributors::table)
        .inner_join(orbits::table.on(orbits::id.eq(changes::orbit_id)))
        .filter(changes::contributor_id.eq(contributor_id))
        .into_boxed();
    if let Some(before) = before {
        query = query.filter(changes::created_at.lt(before));
    }
    let rows: Vec<(ChangeTuple, i64, String)> = query
        .order(changes::created_at.desc())
        .limit(limit)
        .select((
            (
                changes::revision,
                changes::kind,
                changes::entity_type,
                changes::entity_id,
                changes::task_id,
                changes::created_at,
                changes::summary,
                actor_columns(),
            ),
            orbits::id,
            orbits::slug,
        ))
        .load(conn)?;
    Ok(rows
        .into_iter()
        .map(|(t, orbit_id, slug)| ContributorChange {
            orbit_id,
            orbit_slug: slug,
            change: change_out(t),
        })
        .collect())
}
