//! The change feed's queries: a page of an orbit's changes after a revision, read
//! with the orbit's revision in one snapshot (REST, MCP and the long polls' shared
//! reads); and the pages' activity reads, newest first: an orbit's (`latest`) and a
//! contributor's over every orbit (`of_contributor`).

use chrono::{DateTime, Utc};
use diesel::dsl::AsSelect;
use diesel::pg::Pg;
use diesel::prelude::*;
use serde::Serialize;
use utoipa::ToSchema;

use crate::db::schema::{changes, contributors};
use crate::model::{ts, ContributorActor};
use crate::store::contributors::{actor, actor_columns, ActorColumns, ActorTuple};

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
    pub created_at: DateTime<Utc>,
    /// Names side effects, e.g. a superseded handoff or an expired lease.
    pub summary: String,
}

/// The change's own columns of a [`ChangeOut`], selected beside its contributor's.
#[derive(Queryable, Selectable)]
#[diesel(table_name = changes, check_for_backend(diesel::pg::Pg))]
struct ChangeRow {
    revision: i64,
    kind: String,
    entity_type: String,
    entity_id: i64,
    task_id: Option<i64>,
    created_at: DateTime<Utc>,
    summary: String,
}

type ChangeTuple = (ChangeRow, ActorTuple);

/// What every change read selects: a [`ChangeTuple`].
fn change_columns() -> (AsSelect<ChangeRow, Pg>, ActorColumns) {
    (ChangeRow::as_select(), actor_columns())
}

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
        .select(change_columns())
        .load(conn)?;
    Ok((rows.into_iter().map(change_out).collect(), orbit_revision))
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
        .select(change_columns())
        .load(conn)?;
    Ok(rows.into_iter().map(change_out).collect())
}

fn change_out((c, contributor): ChangeTuple) -> ChangeOut {
    ChangeOut {
        revision: c.revision,
        kind: c.kind,
        entity_type: c.entity_type,
        entity_id: c.entity_id,
        task_id: c.task_id,
        created_at: c.created_at,
        summary: c.summary,
        contributor: actor(contributor),
    }
}

/// One of a contributor's changes, with the orbit it was written in.
#[derive(Debug, Clone)]
pub struct ContributorChange {
    pub orbit_id: i64,
    pub orbit_slug: String,
    pub change: ChangeOut,
}

/// Where a contributor's activity continues (newest first): before the instant
/// `at`, or, with `change` (`(orbit, revision)` of the last one shown), before that
/// change among those of the same instant, so a page break between changes of one
/// microsecond loses none.
#[derive(Debug, Clone, Copy)]
pub struct ActivityCursor {
    pub at: DateTime<Utc>,
    pub change: Option<(i64, i64)>,
}

/// A contributor's most recent changes over every orbit, newest first (by instant,
/// then orbit and revision), at most `limit`, after the cursor `before` (`None`:
/// from the newest), by `changes_contributor_idx`.
pub fn of_contributor(
    conn: &mut PgConnection,
    contributor_id: i64,
    before: Option<ActivityCursor>,
    limit: i64,
) -> QueryResult<Vec<ContributorChange>> {
    use crate::db::schema::orbits;
    use diesel::dsl::sql;
    use diesel::sql_types::{BigInt, Bool, Timestamptz};
    let mut query = changes::table
        .inner_join(contributors::table)
        .inner_join(orbits::table.on(orbits::id.eq(changes::orbit_id)))
        .filter(changes::contributor_id.eq(contributor_id))
        .into_boxed();
    match before {
        Some(ActivityCursor { at, change: None }) => {
            query = query.filter(changes::created_at.lt(at));
        }
        Some(ActivityCursor {
            at,
            change: Some((orbit, revision)),
        }) => {
            query = query.filter(
                sql::<Bool>("(changes.created_at, changes.orbit_id, changes.revision) < (")
                    .bind::<Timestamptz, _>(at)
                    .sql(", ")
                    .bind::<BigInt, _>(orbit)
                    .sql(", ")
                    .bind::<BigInt, _>(revision)
                    .sql(")"),
            );
        }
        None => {}
    }
    // Flat: diesel loads a `SelectBy` inside a tuple, not inside a nested one.
    let rows: Vec<(ChangeRow, ActorTuple, i64, String)> = query
        .order((
            changes::created_at.desc(),
            changes::orbit_id.desc(),
            changes::revision.desc(),
        ))
        .limit(limit)
        .select((
            ChangeRow::as_select(),
            actor_columns(),
            orbits::id,
            orbits::slug,
        ))
        .load(conn)?;
    Ok(rows
        .into_iter()
        .map(|(c, contributor, orbit_id, slug)| ContributorChange {
            orbit_id,
            orbit_slug: slug,
            change: change_out((c, contributor)),
        })
        .collect())
}
