//! The orbit revision: every write inside an orbit advances it by exactly one.
//!
//! An ordinary write names its change with `Gate::record` (src/domain/idempotency.rs),
//! which hands back [`PENDING`] for the response body. The change is applied by
//! `apply_change` (src/db/functions.sql) in the transaction's last statement, together
//! with the stored idempotent response: it bumps the orbit's counter, appends the
//! change row and stores the response with the real revision in place of the
//! placeholder. A write committed alone sends it as `orbit_apply`
//! (`db::APPLY_PREPARE`) in one message with the COMMIT ([`closing`],
//! `db::transact_closing`). A write group (`perf::commits`) applies its writes'
//! closings in one statement (`db::apply_all`), then commits; when there are several
//! and all name one orbit, `reserve_revisions` first takes their revisions with one
//! `UPDATE` of the orbit's row, and each `apply_change` takes the next reserved one
//! instead of bumping the counter. The quick writes (`perf::quick`) call
//! `apply_change` inside their one statement (`quick_write`, `quick_batch`; the latter
//! reserves so for each orbit with several writes). Either `UPDATE` (the bump or the
//! reservation) takes the orbit row's lock, so concurrent writers of one orbit are
//! ordered by it and the revisions are dense (a rolled-back transaction gives its
//! numbers back; `revisions_spent` refuses a reservation not used up). The lock is
//! held to the commit: by a write alone or a quick statement with no round trip to
//! the service in between, by a write group across one (its COMMIT after
//! `db::apply_all`); that is what bounds a busy orbit's write rate. Long polls are
//! woken after commit (`ChangeHub::publish`), never from inside the transaction.

use crate::db::Closing;

pub const NOTIFY_CHANNEL: &str = "orbit_changes";

/// Stands for the revision a write will get, in a response built before it is known.
/// Only ever serialized as the value of an `orbit_revision` field; `apply_change`
/// (src/db/functions.sql) is the one place it is replaced, in the stored response
/// and in the body the client gets (`db::Applied`).
pub const PENDING: i64 = -9_223_372_036_854_775_807;

/// Every kind of change (contract section 4): the one list. A write names its
/// change with one of them; webhook `kinds` patterns are checked against it; the
/// live page script (`pages/assets/live.js`) and agents.md repeat it, and a test
/// holds both and every kind written in `src/` to it.
pub const KINDS: &[&str] = &[
    "orbit.created",
    "member.added",
    "member.updated",
    "member.removed",
    "problem.created",
    "problem.updated",
    "contribution.created",
    "contribution.revised",
    "assessment.created",
    "artifact.created",
    "memory.created",
    "task.created",
    "task.completed",
    "task.cancelled",
    "lease.acquired",
    "lease.renewed",
    "lease.released",
    "checkpoint.created",
    "handoff.offered",
    "handoff.accepted",
    "handoff.declined",
    "handoff.withdrawn",
];

/// What a write did, for the change feed.
pub struct Change<'a> {
    pub kind: &'a str,
    pub entity_type: &'a str,
    pub entity_id: i64,
    pub task_id: Option<i64>,
    pub summary: String,
}

/// A change named by a write, applied at the end of its transaction.
#[derive(Debug, Clone)]
pub struct Pending {
    pub orbit_id: i64,
    pub contributor_id: i64,
    pub kind: String,
    pub entity_type: String,
    pub entity_id: i64,
    pub task_id: Option<i64>,
    pub summary: String,
}

impl Pending {
    pub fn new(orbit_id: i64, contributor_id: i64, change: Change<'_>) -> Pending {
        Pending {
            orbit_id,
            contributor_id,
            kind: change.kind.to_owned(),
            entity_type: change.entity_type.to_owned(),
            entity_id: change.entity_id,
            task_id: change.task_id,
            summary: change.summary,
        }
    }
}

/// The write's response body (with [`PENDING`] for its revision) and, for a keyed
/// write, the key row to store it under with its status.
pub struct Response<'a> {
    pub body: &'a [u8],
    pub stored: Option<(i64, i16)>,
}

/// The closing that applies `change` (fills its revision into the response body
/// and, for a keyed write, stores it), as text (`db::Closing`). Alone, it is sent in
/// one message with the transaction's COMMIT: the orbit row's lock is then held
/// from this statement to the commit without a round trip to the service between
/// them, so a busy orbit's writers wait for the database only, never for a service
/// thread to be scheduled. A write group sends all of its closings in one statement
/// (`db::apply_all`), then its COMMIT. Values are literals (the simple-query
/// protocol carries no parameters): numbers as digits (the status cast to `int2`),
/// text as standard-conforming string literals (quotes doubled; the connection sets
/// `standard_conforming_strings`), the body as a hex `bytea` literal: typed, so that
/// they call `apply_change` itself as they fill `orbit_apply`'s parameters.
pub fn closing(change: &Pending, response: Response<'_>) -> Result<Closing, String> {
    use std::fmt::Write as _;
    fn text(out: &mut String, s: &str) -> Result<(), String> {
        if s.contains('\0') {
            return Err("a NUL character cannot be stored".into());
        }
        out.push('\'');
        for ch in s.chars() {
            if ch == '\'' {
                out.push('\'');
            }
            out.push(ch);
        }
        out.push('\'');
        Ok(())
    }
    let opt = |v: Option<i64>| v.map_or_else(|| "NULL".to_owned(), |v| v.to_string());
    let (key_id, status) = match response.stored {
        Some((key_id, status)) => (Some(key_id), status),
        None => (None, 0),
    };
    let body = response.body;
    let mut sql = String::with_capacity(160 + change.summary.len() + 2 * body.len());
    let _ = write!(sql, "({}, ", change.orbit_id);
    text(&mut sql, &change.kind)?;
    sql.push_str(", ");
    text(&mut sql, &change.entity_type)?;
    let _ = write!(
        sql,
        ", {}, {}, {}, ",
        change.entity_id,
        opt(change.task_id),
        change.contributor_id
    );
    text(&mut sql, &change.summary)?;
    let _ = write!(sql, ", {}, {status}::int2, '\\x", opt(key_id));
    sql.push_str(&hex::encode(body));
    sql.push_str("'::bytea)");
    Ok(Closing::of_args(change.orbit_id, sql))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(summary: &str) -> Pending {
        Pending {
            orbit_id: 7,
            contributor_id: 3,
            kind: "task.created".into(),
            entity_type: "task".into(),
            entity_id: 11,
            task_id: None,
            summary: summary.into(),
        }
    }

    #[test]
    fn closing_renders_values_as_literals() {
        let body = br#"{"a":"it's \ here"}"#;
        let sql = closing(
            &change("it's a \\ 'quoted' summary"),
            Response {
                body,
                stored: Some((5, 201)),
            },
        )
        .unwrap()
        .statement();
        assert_eq!(
            sql,
            format!(
                "EXECUTE orbit_apply(7, 'task.created', 'task', 11, NULL, 3, \
                 'it''s a \\ ''quoted'' summary', 5, 201::int2, '\\x{}'::bytea)",
                hex::encode(body)
            )
        );
        let no_key = closing(&change("s"), Response { body, stored: None })
            .unwrap()
            .statement();
        assert!(no_key.ends_with(&format!(
            ", NULL, 0::int2, '\\x{}'::bytea)",
            hex::encode(body)
        )));
    }

    /// The placeholder field as it appears in a compact JSON body, which
    /// `apply_change` replaces.
    const PENDING_FIELD: &str = "\"orbit_revision\":-9223372036854775807";

    /// The file that defines `apply_change`.
    const APPLY_CHANGE_SQL: &str = crate::db::FUNCTIONS;

    #[test]
    fn apply_change_fills_the_same_placeholder() {
        assert!(APPLY_CHANGE_SQL.contains(&format!("'{PENDING_FIELD}'")));
        assert_eq!(PENDING_FIELD, format!("\"orbit_revision\":{PENDING}"));
    }

    /// The kinds as `live.js` and agents.md list them, and every kind a write in
    /// `src/` names (a whole string literal `"<entity>.<verb>"`), are [`KINDS`]: a
    /// kind missing from `live.js` would silently never refresh a page.
    #[test]
    fn every_copy_of_the_change_kinds_is_the_one_list() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let read = |p: &str| std::fs::read_to_string(root.join(p)).expect(p);
        let quoted = |text: &str| -> Vec<String> {
            text.split('"')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect()
        };
        let live = read("src/http/pages/assets/live.js");
        let array = live
            .split("var KINDS = [")
            .nth(1)
            .and_then(|r| r.split("];").next())
            .expect("live.js's KINDS");
        assert_eq!(quoted(array), KINDS, "live.js");
        let guide = read("agents.md");
        let kinds = guide
            .split("\nKinds: ")
            .nth(1)
            .and_then(|r| r.split(". ").next())
            .expect("agents.md's Kinds:");
        let listed: Vec<String> = kinds
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect();
        assert_eq!(listed, KINDS, "agents.md");

        const ENTITIES: &[&str] = &[
            "orbit",
            "member",
            "problem",
            "contribution",
            "assessment",
            "artifact",
            "memory",
            "task",
            "lease",
            "checkpoint",
            "handoff",
        ];
        let files = crate::error::source_files();
        let mut written = std::collections::BTreeSet::new();
        for file in files
            .iter()
            .filter(|f| !f.ends_with("src/domain/revision.rs"))
        {
            let text = std::fs::read_to_string(file).expect("read");
            // Unit tests name kinds that are not, on purpose.
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            for entity in ENTITIES {
                let opening = format!("\"{entity}.");
                for (at, _) in code.match_indices(&opening) {
                    let rest = &code[at + opening.len()..];
                    let verb: String = rest.chars().take_while(char::is_ascii_lowercase).collect();
                    if verb.is_empty() || !rest[verb.len()..].starts_with('"') {
                        continue;
                    }
                    let literal = format!("{entity}.{verb}");
                    assert!(
                        KINDS.contains(&literal.as_str()),
                        "{}: {literal} is no kind of revision::KINDS",
                        file.display()
                    );
                    written.insert(literal);
                }
            }
        }
        let never: Vec<&&str> = KINDS.iter().filter(|k| !written.contains(**k)).collect();
        assert!(never.is_empty(), "kinds no write names: {never:?}");
    }

    #[test]
    fn closing_refuses_a_nul_character() {
        let none = Response {
            body: b"",
            stored: None,
        };
        assert!(closing(&change("a\0b"), none).is_err());
    }
}
