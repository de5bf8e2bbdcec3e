//! Marks: how a quick write's response and change are rendered by the ordinary
//! path's own types and functions before the database has chosen some of their
//! values (a new lease's id and version, the clock).
//!
//! The renderer (`leases::quick_acquire`, `leases::quick_release`,
//! `checkpoints::quick_create`, `tasks::quick_create`, `contributions::quick_create`)
//! fills the ordinary response type with a mark for each
//! such value ([`Marks::number`], [`Marks::time`]), each naming the column of the row
//! the write writes that holds it, and hands the rendering to the quick statement
//! (`perf::quick`); there `quick_outcome` (src/db/functions.sql) replaces each mark with
//! its column's value. So SQL renders no body and no summary: adding a field to
//! `Lease` changes the quick responses too. The revision is filled later, as for
//! every write, by `apply_change` (`revision::PENDING`).
//!
//! A number mark lies past ±(2^53−1), which no request may send as a number
//! (`http::json`), and a time mark is in year 1; either could still stand inside a
//! string a client wrote (a checkpoint's summary or state, a contributor's name), so
//! a rendering in which a mark is not found exactly once is not sent the quick way
//! ([`Marks::rendered`] gives `None`) and the write takes the ordinary path.

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use serde::Serialize;

use crate::domain::revision::{Change, PENDING};
use crate::domain::write::Reply;
use crate::model::format_ts;
use crate::perf::quick::Rendered;

/// The marks of one rendering, in the order they were taken.
#[derive(Default)]
pub struct Marks {
    fill: Vec<Fill>,
}

/// One mark: the text that stands for a value, and the column that holds it.
#[derive(Serialize)]
struct Fill {
    column: &'static str,
    mark: String,
    /// A timestamp (written as `json_ts` writes it, or `null`), else a number.
    time: bool,
}

/// What `quick_outcome` (src/db/functions.sql) takes besides the body.
#[derive(Serialize)]
struct Outcome<'a> {
    status: u16,
    kind: &'a str,
    entity_type: &'a str,
    entity_id: String,
    task_id: Option<String>,
    summary: &'a str,
    fill: &'a [Fill],
}

impl Marks {
    /// A mark for the number in `column`: the i-th mark of a rendering is
    /// `revision::PENDING + i`.
    pub fn number(&mut self, column: &'static str) -> i64 {
        let value = PENDING + 1 + self.fill.len() as i64;
        self.fill.push(Fill {
            column,
            mark: value.to_string(),
            time: false,
        });
        value
    }

    /// A mark for the timestamp in `column` (which may be NULL: then it reads
    /// `null`, so an optional timestamp is rendered as `Some` of its mark): the i-th
    /// mark of a rendering is i milliseconds into year 1.
    pub fn time(&mut self, column: &'static str) -> DateTime<Utc> {
        let value = Utc
            .with_ymd_and_hms(1, 1, 1, 0, 0, 0)
            .single()
            .expect("year 1 is a valid timestamp")
            + TimeDelta::milliseconds(1 + self.fill.len() as i64);
        self.fill.push(Fill {
            column,
            mark: format!("\"{}\"", format_ts(&value)),
            time: true,
        });
        value
    }

    /// The rendering for the quick statement: `reply` and `change` as the ordinary
    /// path's functions made them from values with these marks. `None` when a mark
    /// is not found exactly once in the body (a client's string held one).
    pub fn rendered(self, reply: Reply, change: Change<'_>) -> Option<Rendered> {
        let body = String::from_utf8(reply.body).ok()?;
        if self.fill.iter().any(|f| body.matches(&f.mark).count() != 1) {
            return None;
        }
        let outcome = Outcome {
            status: reply.status.as_u16(),
            kind: change.kind,
            entity_type: change.entity_type,
            entity_id: change.entity_id.to_string(),
            task_id: change.task_id.map(|t| t.to_string()),
            summary: &change.summary,
            fill: &self.fill,
        };
        Some(Rendered {
            status: reply.status,
            body,
            outcome: serde_json::to_string(&outcome).ok()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_distinct_and_out_of_reach_of_requests() {
        let mut marks = Marks::default();
        let a = marks.number("id");
        let t = marks.time("acquired_at");
        let b = marks.number("lease_version");
        assert_eq!(a, PENDING + 1);
        assert_eq!(b, PENDING + 3);
        assert!(a < -(1 << 53) && b < -(1 << 53));
        assert_eq!(format_ts(&t), "0001-01-01T00:00:00.002Z");
        let marks: Vec<&str> = marks.fill.iter().map(|f| f.mark.as_str()).collect();
        assert_eq!(
            marks,
            [
                "-9223372036854775806",
                "\"0001-01-01T00:00:00.002Z\"",
                "-9223372036854775804"
            ]
        );
    }
}
