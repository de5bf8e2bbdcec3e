//! The row mapping every read by id shares: a query's row type (`*Row`, loaded by
//! name) becomes its model type through `From`, for one row by id, for a list, and
//! for a group of reads (one answer per id, `src/perf/readgroup.rs`).

use std::borrow::Cow;

use diesel::deserialize::QueryableByName;
use diesel::pg::Pg;
use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Nullable, Text};

use crate::db::grouped::{by_position, Numbered};
use crate::db::BindNext;
use crate::model::ContributorActor;

/// The row of `sql` (its one placeholder `$1` bound to `id`) as `T`, or `None`.
pub fn by_id<R, T>(
    conn: &mut PgConnection,
    sql: impl Into<Cow<'static, str>>,
    id: i64,
) -> QueryResult<Option<T>>
where
    R: QueryableByName<Pg> + 'static,
    T: From<R>,
{
    crate::db::sql(sql)
        .bind::<BigInt, _>(id)
        .get_result::<R>(conn)
        .optional()
        .map(|o| o.map(T::from))
}

/// One answer per id, in order, from `sql`: a `group_over_ids!` statement over the
/// array `$1`.
pub fn by_ids<R, T>(
    conn: &mut PgConnection,
    sql: &'static str,
    ids: &[i64],
) -> QueryResult<Vec<Option<T>>>
where
    R: QueryableByName<Pg> + 'static,
    T: From<R>,
{
    let rows: Vec<Numbered<R>> = crate::db::sql(sql)
        .bind::<Array<BigInt>, _>(ids)
        .load(conn)?;
    Ok(by_position(rows, ids.len()))
}

/// A statement's one `id` column (`RETURNING id`, `SELECT orbit_id AS id`).
#[derive(QueryableByName)]
pub struct Id {
    #[diesel(sql_type = BigInt)]
    pub id: i64,
}

/// Rows as their model type.
pub fn all<R, T: From<R>>(rows: Vec<R>) -> Vec<T> {
    rows.into_iter().map(T::from).collect()
}

/// Defines a row part for the four columns of a joined contributor, named with one
/// prefix (`a_id, a_type, a_name, a_model_claim`, …); embedded in a query's row with
/// `#[diesel(embed)]` and turned into a [`ContributorActor`] with `into()`.
macro_rules! actor_columns {
    ($(#[$doc:meta])* $name:ident: $id:ident, $kind:ident, $n:ident, $claim:ident) => {
        $(#[$doc])*
        #[derive(QueryableByName)]
        pub struct $name {
            #[diesel(sql_type = BigInt)]
            $id: i64,
            #[diesel(sql_type = Text)]
            $kind: String,
            #[diesel(sql_type = Text)]
            $n: String,
            #[diesel(sql_type = Nullable<Text>)]
            $claim: Option<String>,
        }

        impl From<$name> for ContributorActor {
            fn from(r: $name) -> ContributorActor {
                ContributorActor {
                    id: r.$id,
                    kind: r.$kind,
                    name: r.$n,
                    model_claim: r.$claim,
                }
            }
        }
    };
}

actor_columns!(
    /// The contributor joined as `a` (an author or assessor): `a_id`, `a_type`, …
    ActorA: a_id, a_type, a_name, a_model_claim
);
actor_columns!(
    /// The contributor joined as `c` (a creator): `c_id`, `c_type`, …
    ActorC: c_id, c_type, c_name, c_model_claim
);
