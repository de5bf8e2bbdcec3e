//! Statements that read many rows by id at once, one answer per id in order: the
//! `group_over_ids!` statement shape and its numbered rows. Used by the store's
//! `*_by_ids` functions that the read groups (`perf::readgroup`) call.

use diesel::deserialize::{self, QueryableByName};
use diesel::pg::Pg;
use diesel::row::NamedRow;
use diesel::sql_types::BigInt;

/// A row of a group statement, with `g_i`: the 1-based position of the key it
/// answers in the statement's array (`unnest(...) WITH ORDINALITY`).
pub struct Numbered<R> {
    pub i: i64,
    pub row: R,
}

impl<R: QueryableByName<Pg>> QueryableByName<Pg> for Numbered<R> {
    fn build<'a>(row: &impl NamedRow<'a, Pg>) -> deserialize::Result<Self> {
        Ok(Numbered {
            i: NamedRow::get::<BigInt, i64>(row, "g_i")?,
            row: R::build(row)?,
        })
    }
}

/// The answers of `n` keys from rows of at most one per key: the row numbered `i`
/// at index `i - 1`, `None` where no row answered.
pub fn by_position<R, T: From<R>>(rows: Vec<Numbered<R>>, n: usize) -> Vec<Option<T>> {
    let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
    for r in rows {
        if let Some(slot) = usize::try_from(r.i - 1).ok().and_then(|i| out.get_mut(i)) {
            *slot = Some(T::from(r.row));
        }
    }
    out
}

/// A group statement over the bound array `$1` of ids from `$one`, the query of one
/// row by `q.id` (a string literal): each id's row, its columns as `$one` names them
/// plus `g_i`, the id's 1-based position in the array. The array is read through a sub-select so that no plan knows its
/// length: a plan made for the bound array of a few ids costs less than the generic
/// plan (which guesses ten), so PostgreSQL would plan the statement again on every
/// execution (~170 µs against ~13 µs for one id, measured). `OFFSET 0` keeps each
/// id's subquery from being flattened into a join the planner may run another way.
#[macro_export]
macro_rules! group_over_ids {
    ($one:expr) => {
        concat!(
            "SELECT q.i AS g_i, x.* FROM unnest((SELECT $1::bigint[])) WITH ORDINALITY AS q(id, i) \
             CROSS JOIN LATERAL (",
            $one,
            " OFFSET 0) x"
        )
    };
}
