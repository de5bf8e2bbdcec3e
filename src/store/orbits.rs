//! Orbits and memberships.

use chrono::{DateTime, Utc};
use diesel::dsl::AsSelect;
use diesel::pg::Pg;
use diesel::prelude::*;
use serde::Serialize;
use utoipa::ToSchema;

use crate::db::schema::{contributors, memberships, orbits};
use crate::model::Cursor;
use crate::model::{ts, ContributorActor};
use crate::store::contributors::{actor, actor_columns, ActorColumns, ActorTuple};

pub use crate::model::{JoinPolicy, Role};

/// An orbit: a tenant of the commons.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Orbit {
    #[schema(minimum = 1)]
    pub id: i64,
    pub slug: String,
    pub name: String,
    pub description: String,
    #[schema(value_type = JoinPolicy)]
    pub join_policy: String,
    /// The orbit's current revision (number of writes so far).
    pub revision: i64,
    pub created_by: ContributorActor,
    #[serde(with = "ts")]
    pub created_at: DateTime<Utc>,
}

/// An orbit's own columns, selected beside its creator's.
#[derive(Queryable, Selectable)]
#[diesel(table_name = orbits, check_for_backend(diesel::pg::Pg))]
struct OrbitRow {
    id: i64,
    slug: String,
    name: String,
    description: String,
    join_policy: String,
    revision: i64,
    created_at: DateTime<Utc>,
}

type OrbitTuple = (OrbitRow, ActorTuple);

fn orbit_columns() -> (AsSelect<OrbitRow, Pg>, ActorColumns) {
    (OrbitRow::as_select(), actor_columns())
}

fn to_orbit((o, creator): OrbitTuple) -> Orbit {
    Orbit {
        id: o.id,
        slug: o.slug,
        name: o.name,
        description: o.description,
        join_policy: o.join_policy,
        revision: o.revision,
        created_at: o.created_at,
        created_by: actor(creator),
    }
}

/// The id an orbit reference names, if it names one by id: the one reading of a
/// reference (a path's `{orbit}`, a body's or a tool's `orbit`) for every layer. An
/// id is written as every path id is ([`crate::model::plain_id`]); anything else is
/// a slug (which starts with a letter, so never looks like an id; one that is not a
/// slug names no orbit).
pub fn id_of(reference: &str) -> Option<i64> {
    crate::model::plain_id(reference)
}

/// Whether a reference can name no orbit at all: one holding U+0000, which no slug
/// holds and PostgreSQL's text cannot (a statement would fail on it, not find
/// nothing). Every lookup of a reference answers "none" for it.
pub fn names_nothing(reference: &str) -> bool {
    reference.contains('\0')
}

/// An orbit named in a path: a positive id or a slug ([`id_of`]).
pub fn find(conn: &mut PgConnection, reference: &str) -> QueryResult<Option<Orbit>> {
    if let Some(id) = id_of(reference) {
        return find_by_id(conn, id);
    }
    if names_nothing(reference) {
        return Ok(None);
    }
    orbits::table
        .inner_join(contributors::table)
        .filter(orbits::slug.eq(reference))
        .select(orbit_columns())
        .first::<OrbitTuple>(conn)
        .optional()
        .map(|o| o.map(to_orbit))
}

diesel::define_sql_function! {
    /// The SQL function `member_role` (src/db/functions.sql): a role a write depends
    /// on, its membership held until the write commits.
    fn member_role(
        orbit: diesel::sql_types::BigInt,
        contributor: diesel::sql_types::BigInt,
    ) -> diesel::sql_types::Nullable<diesel::sql_types::Text>;
}

/// Like [`find`], with `contributor_id`'s role in the orbit (`None`: not a member),
/// in one statement: what a write into an orbit reads first. The role is held
/// ([`held_role`]).
pub fn find_with_role(
    conn: &mut PgConnection,
    reference: &str,
    contributor_id: i64,
) -> QueryResult<Option<(Orbit, Option<Role>)>> {
    if names_nothing(reference) {
        return Ok(None);
    }
    let columns = (
        OrbitRow::as_select(),
        actor_columns(),
        member_role(orbits::id, contributor_id),
    );
    let query = orbits::table
        .inner_join(contributors::table)
        .select(columns);
    let row = match id_of(reference) {
        Some(id) => query
            .filter(orbits::id.eq(id))
            .first::<(OrbitRow, ActorTuple, Option<String>)>(conn),
        None => query
            .filter(orbits::slug.eq(reference))
            .first::<(OrbitRow, ActorTuple, Option<String>)>(conn),
    };
    Ok(row.optional()?.map(|(o, creator, role)| {
        let role = role.as_deref().and_then(Role::parse);
        (to_orbit((o, creator)), role)
    }))
}

pub fn find_by_id(conn: &mut PgConnection, id: i64) -> QueryResult<Option<Orbit>> {
    orbits::table
        .inner_join(contributors::table)
        .filter(orbits::id.eq(id))
        .select(orbit_columns())
        .first::<OrbitTuple>(conn)
        .optional()
        .map(|o| o.map(to_orbit))
}

pub fn list(conn: &mut PgConnection, page: Cursor) -> QueryResult<Vec<Orbit>> {
    orbits::table
        .inner_join(contributors::table)
        .filter(orbits::id.gt(page.after))
        .order(orbits::id.asc())
        .limit(page.fetch())
        .select(orbit_columns())
        .load::<OrbitTuple>(conn)
        .map(|rows| rows.into_iter().map(to_orbit).collect())
}

/// Inserts the orbit (revision 0) and its first OWNER. Slug taken → `None`.
pub fn insert(
    conn: &mut PgConnection,
    slug: &str,
    name: &str,
    description: &str,
    join_policy: JoinPolicy,
    creator: i64,
) -> QueryResult<Option<i64>> {
    let id: Option<i64> = diesel::insert_into(orbits::table)
        .values((
            orbits::slug.eq(slug),
            orbits::name.eq(name),
            orbits::description.eq(description),
            orbits::join_policy.eq(join_policy.as_str()),
            orbits::created_by.eq(creator),
        ))
        .on_conflict(orbits::slug)
        .do_nothing()
        .returning(orbits::id)
        .get_result(conn)
        .optional()?;
    if let Some(id) = id {
        diesel::insert_into(memberships::table)
            .values((
                memberships::orbit_id.eq(id),
                memberships::contributor_id.eq(creator),
                memberships::role.eq(Role::Owner.as_str()),
            ))
            .execute(conn)?;
    }
    Ok(id)
}

/// `contributor_id`'s role in the orbit as a read sees it, taking no lock: for a
/// read, or a write that does not depend on it (a join). A write that depends on
/// it asks [`held_role`].
pub fn role_of(
    conn: &mut PgConnection,
    orbit_id: i64,
    contributor_id: i64,
) -> QueryResult<Option<Role>> {
    let role: Option<String> = memberships::table
        .find((orbit_id, contributor_id))
        .select(memberships::role)
        .first(conn)
        .optional()?;
    Ok(role.and_then(|r| Role::parse(&r)))
}

/// `contributor_id`'s role in the orbit for a write that depends on it (the
/// writer's own, or a recipient's it names): the membership stays held until the
/// write commits (the SQL function `member_role`), so a removal or a role change
/// ([`lock_change`]) comes wholly before or wholly after the write.
pub fn held_role(
    conn: &mut PgConnection,
    orbit_id: i64,
    contributor_id: i64,
) -> QueryResult<Option<Role>> {
    let role: Option<String> =
        diesel::select(member_role(orbit_id, contributor_id)).get_result(conn)?;
    Ok(role.and_then(|r| Role::parse(&r)))
}

/// What a membership change (a role change or a removal, `domain::members`) takes
/// first: the caller's membership held as any write holds it, and the target's
/// exclusively (`lock_membership`), in contributor-id order, so two changes that
/// name each other (two OWNERs removing each other) queue instead of deadlocking;
/// a caller changing its own membership takes it once, exclusively. The change
/// then waits for the target's writes under way, and the target's writes that ask
/// after it wait for the change; the change reads the roles after this.
pub fn lock_change(
    conn: &mut PgConnection,
    orbit_id: i64,
    caller_id: i64,
    target_id: i64,
) -> QueryResult<()> {
    use crate::db::BindNext;
    use diesel::sql_types::{BigInt, Bool};
    // The SQL function `lock_membership`: shared (a write's hold) or exclusive.
    let take = |conn: &mut PgConnection, contributor: i64, exclusive: bool| {
        crate::db::sql("SELECT lock_membership($1, $2, $3)")
            .bind::<BigInt, _>(orbit_id)
            .bind::<BigInt, _>(contributor)
            .bind::<Bool, _>(exclusive)
            .execute(conn)
    };
    if caller_id == target_id {
        take(conn, target_id, true)?;
    } else if caller_id < target_id {
        take(conn, caller_id, false)?;
        take(conn, target_id, true)?;
    } else {
        take(conn, target_id, true)?;
        take(conn, caller_id, false)?;
    }
    Ok(())
}

/// A member of an orbit.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Member {
    #[schema(minimum = 1)]
    pub orbit_id: i64,
    pub contributor: ContributorActor,
    #[schema(value_type = Role)]
    pub role: String,
    #[serde(with = "ts")]
    pub joined_at: DateTime<Utc>,
    #[serde(with = "ts")]
    pub updated_at: DateTime<Utc>,
}

/// A membership's own columns, selected beside its contributor's.
#[derive(Queryable, Selectable)]
#[diesel(table_name = memberships, check_for_backend(diesel::pg::Pg))]
struct MemberRow {
    orbit_id: i64,
    role: String,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

type MemberTuple = (MemberRow, ActorTuple);

fn member_columns() -> (AsSelect<MemberRow, Pg>, ActorColumns) {
    (MemberRow::as_select(), actor_columns())
}

fn to_member((m, contributor): MemberTuple) -> Member {
    Member {
        orbit_id: m.orbit_id,
        role: m.role,
        joined_at: m.created_at,
        updated_at: m.updated_at,
        contributor: actor(contributor),
    }
}

pub fn members(conn: &mut PgConnection, orbit_id: i64, page: Cursor) -> QueryResult<Vec<Member>> {
    memberships::table
        .inner_join(contributors::table)
        .filter(memberships::orbit_id.eq(orbit_id))
        .filter(memberships::contributor_id.gt(page.after))
        .order(memberships::contributor_id.asc())
        .limit(page.fetch())
        .select(member_columns())
        .load::<MemberTuple>(conn)
        .map(|rows| rows.into_iter().map(to_member).collect())
}

pub fn member(
    conn: &mut PgConnection,
    orbit_id: i64,
    contributor_id: i64,
) -> QueryResult<Option<Member>> {
    memberships::table
        .inner_join(contributors::table)
        .filter(memberships::orbit_id.eq(orbit_id))
        .filter(memberships::contributor_id.eq(contributor_id))
        .select(member_columns())
        .first::<MemberTuple>(conn)
        .optional()
        .map(|o| o.map(to_member))
}

/// Locks the orbit's OWNER rows, in contributor-id order, and returns their number:
/// the last-owner rule, which two changes at once must not both pass.
pub fn lock_owners(conn: &mut PgConnection, orbit_id: i64) -> QueryResult<i64> {
    let owners: Vec<i64> = memberships::table
        .filter(memberships::orbit_id.eq(orbit_id))
        .filter(memberships::role.eq(Role::Owner.as_str()))
        .order(memberships::contributor_id.asc())
        .select(memberships::contributor_id)
        .for_update()
        .load(conn)?;
    Ok(owners.len() as i64)
}

/// Adds a membership or changes its role. Returns true when it was added.
pub fn upsert_member(
    conn: &mut PgConnection,
    orbit_id: i64,
    contributor_id: i64,
    role: Role,
) -> QueryResult<bool> {
    let updated = diesel::update(memberships::table.find((orbit_id, contributor_id)))
        .set((
            memberships::role.eq(role.as_str()),
            memberships::updated_at.eq(diesel::dsl::sql::<diesel::sql_types::Timestamptz>(
                "clock_timestamp()",
            )),
        ))
        .execute(conn)?;
    if updated == 1 {
        return Ok(false);
    }
    let inserted = diesel::insert_into(memberships::table)
        .values((
            memberships::orbit_id.eq(orbit_id),
            memberships::contributor_id.eq(contributor_id),
            memberships::role.eq(role.as_str()),
        ))
        .on_conflict_do_nothing()
        .execute(conn)?;
    Ok(inserted == 1)
}

pub fn delete_member(
    conn: &mut PgConnection,
    orbit_id: i64,
    contributor_id: i64,
) -> QueryResult<bool> {
    diesel::delete(memberships::table.find((orbit_id, contributor_id)))
        .execute(conn)
        .map(|n| n == 1)
}

/// An orbit as the front page lists it: with its member count, its open tasks
/// without and with an active lease, and when its last change was written.
#[derive(Debug, Clone, QueryableByName)]
pub struct OrbitSummary {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub id: i64,
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub slug: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub name: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    pub description: String,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub revision: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub members: i64,
    /// OPEN tasks, leased or not.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub open_tasks: i64,
    /// OPEN tasks with an active lease (by the database clock).
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    pub leased_tasks: i64,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>)]
    pub last_change_at: Option<DateTime<Utc>>,
}

/// A page of orbit summaries, ascending by id (`page.fetch()` rows). The leased
/// count reads the orbit's active leases by `leases_active_orbit_idx`; the last
/// change is the row at the orbit's revision (its primary key).
pub fn summaries(conn: &mut PgConnection, page: Cursor) -> QueryResult<Vec<OrbitSummary>> {
    use crate::db::BindNext;
    use diesel::sql_types::BigInt;
    crate::db::sql(
        "SELECT o.id, o.slug, o.name, o.description, o.revision, \
            (SELECT count(*) FROM memberships m WHERE m.orbit_id = o.id) AS members, \
            (SELECT count(*) FROM tasks t WHERE t.orbit_id = o.id AND t.status = 'OPEN') \
                AS open_tasks, \
            (SELECT count(*) FROM leases l WHERE l.orbit_id = o.id \
                AND lease_is_active(l.end_reason, l.expires_at, clock_timestamp())) \
                AS leased_tasks, \
            (SELECT c.created_at FROM changes c WHERE c.orbit_id = o.id \
                AND c.revision = o.revision) AS last_change_at \
         FROM orbits o WHERE o.id > $1 ORDER BY o.id LIMIT $2",
    )
    .bind::<BigInt, _>(page.after)
    .bind::<BigInt, _>(page.fetch())
    .load(conn)
}

/// A contributor's memberships with the orbits' slugs and names, ascending by orbit.
pub fn memberships_of(
    conn: &mut PgConnection,
    contributor_id: i64,
    page: Cursor,
) -> QueryResult<Vec<(i64, String, String, String)>> {
    memberships::table
        .inner_join(orbits::table)
        .filter(memberships::contributor_id.eq(contributor_id))
        .filter(memberships::orbit_id.gt(page.after))
        .order(memberships::orbit_id.asc())
        .limit(page.fetch())
        .select((orbits::id, orbits::slug, orbits::name, memberships::role))
        .load(conn)
}

#[cfg(test)]
mod tests {
    use super::id_of;

    #[test]
    fn an_id_is_plain_digits_and_anything_else_a_slug() {
        assert_eq!(id_of("5"), Some(5));
        assert_eq!(id_of("9223372036854775807"), Some(i64::MAX));
        for other in [
            "+5",
            "-1",
            "05",
            "0",
            "",
            "5a",
            "demo",
            "9223372036854775808",
        ] {
            assert_eq!(id_of(other), None, "{other:?}");
        }
    }
}
