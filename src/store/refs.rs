//! Checks that ids named inside a write's body exist in the same orbit (422
//! otherwise). An id of another orbit and an id that does not exist look the same.

use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Bool};

use crate::db::BindNext;

#[derive(QueryableByName)]
struct Found {
    #[diesel(sql_type = Bool)]
    found: bool,
}

fn exists_in_orbit(
    conn: &mut PgConnection,
    table: &'static str,
    orbit_id: i64,
    id: i64,
) -> QueryResult<bool> {
    crate::db::sql(format!(
        "SELECT EXISTS (SELECT 1 FROM {table} WHERE id = $1 AND orbit_id = $2) AS found"
    ))
    .bind::<BigInt, _>(id)
    .bind::<BigInt, _>(orbit_id)
    .get_result::<Found>(conn)
    .map(|r| r.found)
}

/// True when every id of `ids` (duplicates allowed) is a row of `table` in the orbit.
fn all_in_orbit(
    conn: &mut PgConnection,
    table: &'static str,
    orbit_id: i64,
    ids: &[i64],
) -> QueryResult<bool> {
    if ids.is_empty() {
        return Ok(true);
    }
    crate::db::sql(format!(
        "SELECT (SELECT count(*) FROM {table} WHERE orbit_id = $1 AND id = ANY($2)) \
              = (SELECT count(DISTINCT x) FROM unnest($2) AS x) AS found"
    ))
    .bind::<BigInt, _>(orbit_id)
    .bind::<Array<BigInt>, _>(ids)
    .get_result::<Found>(conn)
    .map(|r| r.found)
}

pub fn problem_in_orbit(
    conn: &mut PgConnection,
    orbit_id: i64,
    problem_id: i64,
) -> QueryResult<bool> {
    exists_in_orbit(conn, "problems", orbit_id, problem_id)
}

pub fn task_in_orbit(conn: &mut PgConnection, orbit_id: i64, task_id: i64) -> QueryResult<bool> {
    exists_in_orbit(conn, "tasks", orbit_id, task_id)
}

pub fn contribution_in_orbit(
    conn: &mut PgConnection,
    orbit_id: i64,
    contribution_id: i64,
) -> QueryResult<bool> {
    exists_in_orbit(conn, "contributions", orbit_id, contribution_id)
}

pub fn contributions_in_orbit(
    conn: &mut PgConnection,
    orbit_id: i64,
    ids: &[i64],
) -> QueryResult<bool> {
    all_in_orbit(conn, "contributions", orbit_id, ids)
}

pub fn artifacts_in_orbit(
    conn: &mut PgConnection,
    orbit_id: i64,
    ids: &[i64],
) -> QueryResult<bool> {
    all_in_orbit(conn, "artifacts", orbit_id, ids)
}
