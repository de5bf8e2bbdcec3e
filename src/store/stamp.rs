//! The stamp a public list page is read with (`perf::listcache`): the orbit's
//! revision, the clock and how long the page stays exact, in the same statement as
//! the page's rows.

use chrono::{DateTime, Utc};
use diesel::deserialize::{self, QueryableByName};
use diesel::pg::Pg;
use diesel::row::NamedRow;
use diesel::sql_types::{BigInt, Nullable, Timestamptz};

/// What a page was read at, from the page's own statement (so its own snapshot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, QueryableByName)]
pub struct Stamp {
    /// The orbit's revision in the page's snapshot.
    #[diesel(sql_type = BigInt)]
    pub m_revision: i64,
    /// The one clock reading every time-dependent decision of the page used.
    #[diesel(sql_type = Timestamptz)]
    pub m_now: DateTime<Utc>,
    /// The earliest `expires_at` after `m_now` of the orbit's leases that have not
    /// ended; `None`: nothing in the page depends on the time.
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub m_valid_until: Option<DateTime<Utc>>,
}

impl Stamp {
    /// Whether a page read at this stamp is exactly the page a read of `revision` at
    /// clock `now` would give.
    pub fn holds_at(&self, revision: i64, now: DateTime<Utc>) -> bool {
        self.m_revision == revision
            && self.m_now <= now
            && self.m_valid_until.is_none_or(|until| now < until)
    }
}

/// A page row with the page's stamp beside it. The page is left-joined to the
/// orbit's row, so an empty page is one row whose page columns are all null: its
/// `id` column is null and `row` is `None`. Any other null where `R` has none is
/// an error, as in an unstamped read.
pub struct Stamped<R> {
    pub row: Option<R>,
    pub stamp: Stamp,
}

impl<R: QueryableByName<Pg>> QueryableByName<Pg> for Stamped<R> {
    fn build<'a>(row: &impl NamedRow<'a, Pg>) -> deserialize::Result<Self> {
        let id = NamedRow::get::<Nullable<BigInt>, Option<i64>>(row, "id")?;
        Ok(Stamped {
            row: id.map(|_| R::build(row)).transpose()?,
            stamp: Stamp::build(row)?,
        })
    }
}

/// The page's rows and its stamp; `None` when the orbit's row was not there.
pub fn split<R, T: From<R>>(rows: Vec<Stamped<R>>) -> Option<(Vec<T>, Stamp)> {
    let stamp = rows.first()?.stamp;
    let page = rows
        .into_iter()
        .filter_map(|r| r.row.map(T::from))
        .collect();
    Some((page, stamp))
}
