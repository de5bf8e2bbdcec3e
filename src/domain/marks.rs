//! Marks: how a quick write's response and change are rendered by the ordinary
//! path's own types and functions before the database has chosen or read some of
//! their values (a new lease's id and version, the clock, a field a revision keeps).
//!
//! The renderer (`leases::quick_acquire`, `leases::quick_release`,
//! `checkpoints::quick_create`, `tasks::quick_create`, `contributions::quick_create`,
//! `contributions::quick_revise`) fills the ordinary response type with a mark for
//! each such value ([`Marks::number`], [`Marks::time`], [`Marks::text`]), each
//! naming the column of the row the write writes that holds it, and hands the
//! rendering to the quick statement (`perf::quick`); there `quick_outcome`
//! (src/db/functions.sql) replaces each mark with its column's value. So SQL
//! renders no body and no summary: adding a field to `Lease` changes the quick
//! responses too. The revision is filled later, as for every write, by
//! `apply_change` (`revision::PENDING`).
//!
//! A number mark lies just above −2^63, where no double falls, so no request may
//! send it as a number (`http::json` keeps only numbers that come back as sent),
//! a time mark is in year 1, a text mark is made of U+0001; each
//! could still stand inside a string a client wrote (a checkpoint's summary or
//! state, a contributor's name), so a rendering in which a mark is not found
//! exactly once is not sent the quick way ([`Marks::rendered`] gives `None`) and
//! the write takes the ordinary path.

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
    kind: Kind,
}

/// How a mark's value is written (or `null`, for every kind).
#[derive(Serialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Kind {
    /// Its digits.
    Number,
    /// As `json_ts` writes it, quoted.
    Time,
    /// As a JSON string.
    Text,
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
            kind: Kind::Number,
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
            kind: Kind::Time,
        });
        value
    }

    /// A mark for the text in `column` (e.g. a field a revision keeps): the i-th
    /// mark of a rendering is U+0001, i, U+0001, which JSON writes as
    /// `"\u0001i\u0001"`. Texts are filled last, and a text holding U+0001 is not
    /// filled (`quick_outcome` declines it), so no text filled in can hold a mark.
    pub fn text(&mut self, column: &'static str) -> String {
        let value = format!("\u{1}{}\u{1}", self.fill.len());
        self.fill.push(Fill {
            column,
            mark: serde_json::to_string(&value).expect("a string serializes"),
            kind: Kind::Text,
        });
        value
    }

    /// The rendering for the quick statement: `reply` and `change` as the ordinary
    /// path's functions made them from values with these marks. `None` when a mark
    /// is not found exactly once in the body (a client's string held one).
    pub fn rendered(mut self, reply: Reply, change: Change<'_>) -> Option<Rendered> {
        // Texts last (a stable sort: the others keep their order).
        self.fill.sort_by_key(|f| f.kind == Kind::Text);
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
        let x = marks.text("title");
        let b = marks.number("lease_version");
        assert_eq!(a, PENDING + 1);
        assert_eq!(b, PENDING + 4);
        assert!(a < -(1 << 53) && b < -(1 << 53));
        assert_eq!(format_ts(&t), "0001-01-01T00:00:00.002Z");
        assert_eq!(x, "\u{1}2\u{1}");
        let marks: Vec<&str> = marks.fill.iter().map(|f| f.mark.as_str()).collect();
        assert_eq!(
            marks,
            [
                "-9223372036854775806",
                "\"0001-01-01T00:00:00.002Z\"",
                "\"\\u00012\\u0001\"",
                "-9223372036854775803"
            ]
        );
    }

    #[test]
    fn texts_are_filled_last() {
        let mut marks = Marks::default();
        let title = marks.text("title");
        let id = marks.number("id");
        let body = serde_json::json!({"id": id, "title": title});
        let reply = Reply::new(actix_web::http::StatusCode::CREATED, &body, None).unwrap();
        let change = Change {
            kind: "k",
            entity_type: "e",
            entity_id: 1,
            task_id: None,
            summary: String::new(),
        };
        let rendered = marks.rendered(reply, change).expect("each mark once");
        let outcome: serde_json::Value = serde_json::from_str(&rendered.outcome).unwrap();
        let kinds: Vec<&str> = outcome["fill"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["number", "text"]);
    }
}
