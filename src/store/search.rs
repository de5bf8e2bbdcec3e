//! Full-text search queries (contract section 13) over the `search` tsvector
//! columns of migration 8: parsing a query, the ranked candidates of one page, and
//! the hits' fields with their highlighted snippets.
//!
//! How each kind's newest matches are found (every index entry of a rare word,
//! then a sort; walking the id index backwards for a common one) is decided by the
//! caller from the tables' statistics (`store::search_access`), and the statement's
//! shape leaves PostgreSQL that one way. A statement whose every kind fetches all
//! its matches is prepared once per connection and keeps its generic plan; any
//! other goes through `diesel::sql_query` and is planned for its values, so that a
//! walk's plan, and the planner's own choice where the statistics cannot decide
//! (`Access::Planner`), weigh the actual tsquery.

use chrono::{DateTime, Utc};
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Float4, Nullable, Text, Timestamptz};

use crate::db::BindNext;

/// The text search configuration of every `search` column (migration 8).
pub const CONFIG: &str = "orbit_search";

/// How many of the newest matches of each kind are ranked. A query that matches
/// more rows than this is ranked among its newest `WINDOW` matches per kind only;
/// the rest is never read (docs/DECISIONS.md, "Search").
pub const WINDOW: i64 = 200;

/// A query with a phrase looks for it among the newest this many rows (per kind)
/// holding all its words. The index cannot check word positions, so a phrase of
/// common words that rarely meet would otherwise be checked row by row through
/// the whole table; the rows holding all its words the index finds exactly.
pub const PHRASE_CANDIDATES: i64 = 500;

/// Marks the start and end of a matched word in `ts_headline`'s output. Private-use
/// characters, removed from the text before it is highlighted (`translate` to
/// U+FFFD), so every marker in the output is ours.
pub const START: char = '\u{E000}';
pub const STOP: char = '\u{E001}';
/// What `orbit_search_text` (migrations 27, 28 and 29) makes of each character that
/// PostgreSQL's parser would otherwise read into one token with its neighbours: `<`,
/// or it drops `<...>` as a tag; `/`, `@`, `.` and `:`, or a URL, path, host name
/// or e-mail address is one word; `-` between a letter or digit and a digit, or
/// `utf-8` is a word and a negative number. Each becomes a private-use character
/// the parser separates words at (an original one became U+FFFD); a headline holds
/// it where the text held the original, and a snippet turns it back.
pub const SEPARATORS: [(char, char); 6] = [
    ('\u{E002}', '<'),
    ('\u{E003}', '/'),
    ('\u{E004}', '@'),
    ('\u{E005}', '.'),
    ('\u{E006}', ':'),
    ('\u{E007}', '-'),
];

/// The spaces a title is trimmed of, as the inside of a regular expression's
/// bracket expression: the locale's spaces and Unicode's other space characters.
const SPACE: &str =
    "[:space:]\\u00A0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000\\uFEFF";

/// The original character of a separator `orbit_search_text` put in, if `c` is one.
pub fn original_of(c: char) -> Option<char> {
    SEPARATORS
        .iter()
        .find_map(|&(stand_in, original)| (stand_in == c).then_some(original))
}

/// A searched kind. The order of the variants is the order of ties (by name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Contribution,
    Memory,
    Problem,
    Task,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Contribution, Kind::Memory, Kind::Problem, Kind::Task];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Contribution => "CONTRIBUTION",
            Kind::Memory => "MEMORY",
            Kind::Problem => "PROBLEM",
            Kind::Task => "TASK",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    pub fn index(self) -> usize {
        self as usize
    }

    /// Whether the kind's table has a BRIN index on `id` (migration 26), which the
    /// [`Access::Recent`] way needs: the big ones.
    pub fn has_id_ranges(self) -> bool {
        matches!(self, Kind::Contribution | Kind::Memory)
    }

    pub fn table(self) -> &'static str {
        match self {
            Kind::Contribution => "contributions",
            Kind::Memory => "memory_records",
            Kind::Problem => "problems",
            Kind::Task => "tasks",
        }
    }
}

#[derive(QueryableByName)]
struct Parsed {
    #[diesel(sql_type = Text)]
    query: String,
    #[diesel(sql_type = diesel::sql_types::Integer)]
    nodes: i32,
}

/// `q` in web-search syntax as a tsquery (its text form), or `None` when nothing in
/// it is searchable (only stop words or punctuation). `search_tsquery`
/// (src/db/functions.sql) never fails on syntax.
pub fn parse(conn: &mut PgConnection, q: &str) -> QueryResult<Option<String>> {
    let row: Parsed =
        crate::db::sql("SELECT t::text AS query, numnode(t) AS nodes FROM search_tsquery($1) AS t")
            .bind::<Text, _>(q)
            .get_result(conn)?;
    Ok((row.nodes > 0).then_some(row.query))
}

#[derive(QueryableByName)]
struct MaxIds {
    #[diesel(sql_type = BigInt)]
    contribution: i64,
    #[diesel(sql_type = BigInt)]
    memory: i64,
    #[diesel(sql_type = BigInt)]
    problem: i64,
    #[diesel(sql_type = BigInt)]
    task: i64,
}

/// The highest id of each kind now (0 when none), indexed by `Kind::index`: the
/// bounds that keep a search's later pages to the rows its first page could see.
pub fn max_ids(conn: &mut PgConnection) -> QueryResult<[i64; 4]> {
    let r: MaxIds = crate::db::sql(
        "SELECT (SELECT COALESCE(max(id), 0) FROM contributions) AS contribution, \
                (SELECT COALESCE(max(id), 0) FROM memory_records) AS memory, \
                (SELECT COALESCE(max(id), 0) FROM problems) AS problem, \
                (SELECT COALESCE(max(id), 0) FROM tasks) AS task",
    )
    .get_result(conn)?;
    Ok([r.contribution, r.memory, r.problem, r.task])
}

/// Where a page starts: after this hit in the order (rank desc, kind, id).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct After {
    pub rank: f32,
    pub kind: Kind,
    pub id: i64,
}

/// One ranked candidate.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranked {
    pub kind: Kind,
    pub id: i64,
    pub rank: f32,
}

#[derive(QueryableByName)]
struct RankedRow {
    #[diesel(sql_type = Text)]
    kind: String,
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Float4)]
    rank: f32,
}

/// How one kind's newest window of matches is found (chosen by
/// `store::search_access`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Every match from the GIN index, then the newest of them: for words that
    /// match few rows. In an orbit, the orbit is a filter on those rows.
    Bitmap,
    /// The primary key (or, in an orbit, the orbit's `(orbit_id, id)` index)
    /// backwards, testing each row until the window is full: for words that match
    /// many rows.
    Walk,
    /// In an orbit: the word's GIN entries intersected with the orbit's index
    /// entries, then the newest of the rows in both (PostgreSQL picks how).
    Both,
    /// The GIN index's matches among the newest `span` ids only (the kind's BRIN
    /// index on `id` bounds them, intersected with the word's entries), then, if
    /// those held fewer than the window, the older matches too: for words of
    /// middle frequency, of which fetching every match and walking both read
    /// thousands of rows. Only for the kinds with that index
    /// ([`Kind::has_id_ranges`]). In an orbit, the orbit is a filter on those rows.
    Recent { span: i64 },
    /// No statistics to decide from: PostgreSQL's planner chooses, with the window.
    Planner,
}

/// The matches of `tsquery` the ranking statement reads for each kind.
pub struct Candidates {
    /// `tsquery` without its phrases ([`without_phrases`]): what the candidates
    /// match, and what their access is chosen by.
    pub relaxed: String,
    /// Whether `tsquery` has a phrase (checked on the candidates only).
    pub phrase: bool,
    /// How many of the newest candidates: [`WINDOW`], or for a query with a
    /// phrase the [`PHRASE_CANDIDATES`] holding all its words.
    pub window: i64,
}

impl Candidates {
    pub fn of(tsquery: &str) -> Candidates {
        let relaxed = without_phrases(tsquery);
        let phrase = relaxed != tsquery;
        let window = if phrase { PHRASE_CANDIDATES } else { WINDOW };
        Candidates {
            relaxed,
            phrase,
            window,
        }
    }
}

/// The next `limit` hits of `tsquery` in the order (rank desc, kind, id): for each
/// kind of `kinds`, its newest [`WINDOW`] matches with an id up to `bounds` (in
/// `orbit` when given; for a phrase, among [`PHRASE_CANDIDATES`]) are ranked, and
/// only those, found the way `access` says for the kind (every way finds the same
/// rows). The statement's shape depends on `kinds`, each one's access, `orbit` and
/// `after` alone; every value of the request is bound (a [`Access::Recent`] span,
/// a number the service computed, is written in).
#[allow(clippy::too_many_arguments)]
pub fn ranked(
    conn: &mut PgConnection,
    tsquery: &str,
    kinds: &[Kind],
    orbit: Option<i64>,
    bounds: &[i64; 4],
    after: Option<After>,
    limit: i64,
    access: &dyn Fn(Kind) -> Access,
) -> QueryResult<Vec<Ranked>> {
    if kinds.is_empty() {
        return Ok(Vec::new());
    }
    // $1 query, $2..$5 bounds by kind, $6 orbit, $7..$9 after, $10 limit, $11 the
    // query without phrases. With a phrase, the candidates are the newest
    // PHRASE_CANDIDATES rows holding all its words ($11), and the phrase is checked
    // on those only.
    let Candidates {
        relaxed,
        phrase,
        window,
    } = Candidates::of(tsquery);
    let matching = if phrase { "$11" } else { "$1" };
    // Inside a caller's transaction the plan setting below would outlive this
    // statement (a savepoint's end keeps it): plan per search there.
    let outer = {
        use diesel::connection::{AnsiTransactionManager as Tm, TransactionManager};
        !matches!(
            Tm::transaction_manager_status_mut(conn).transaction_depth(),
            Ok(None)
        )
    };
    let (mut planner, mut fetch_all) = (false, !outer);
    let branches: Vec<String> = kinds
        .iter()
        .map(|&k| {
            let a = access(k);
            planner |= matches!(a, Access::Planner | Access::Both);
            fetch_all &= a == Access::Bitmap;
            let newest = newest(k, a, matching, orbit.is_some(), window);
            let kind = k.as_str();
            if phrase {
                format!(
                    "(SELECT '{kind}'::text COLLATE \"C\" AS kind, c.id, c.doc FROM ({newest}) c \
                     WHERE c.doc @@ $1::tsquery ORDER BY c.id DESC LIMIT {WINDOW})"
                )
            } else {
                format!(
                    "(SELECT '{kind}'::text COLLATE \"C\" AS kind, c.id, c.doc FROM ({newest}) c)"
                )
            }
        })
        .collect();
    let after_filter = if after.is_some() {
        "WHERE r.rank < $7 OR (r.rank = $7 AND (r.kind, r.id) > ($8::text COLLATE \"C\", $9))"
    } else {
        ""
    };
    let text = format!(
        "SELECT r.kind, r.id, r.rank FROM ( \
             SELECT c.kind, c.id, ts_rank(c.doc, $1::tsquery, 1) AS rank FROM ({}) c \
         ) r {after_filter} \
         ORDER BY r.rank DESC, r.kind, r.id LIMIT $10",
        branches.join(" UNION ALL ")
    );
    let a = after.unwrap_or(After {
        rank: 0.0,
        kind: Kind::Contribution,
        id: 0,
    });
    // The same eleven values, bound to either kind of statement.
    macro_rules! bound {
        ($query:expr) => {
            $query
                .bind::<Text, _>(tsquery)
                .bind::<BigInt, _>(bounds[0])
                .bind::<BigInt, _>(bounds[1])
                .bind::<BigInt, _>(bounds[2])
                .bind::<BigInt, _>(bounds[3])
                .bind::<Nullable<BigInt>, _>(orbit)
                .bind::<Float4, _>(a.rank)
                .bind::<Text, _>(a.kind.as_str())
                .bind::<BigInt, _>(a.id)
                .bind::<BigInt, _>(limit)
                .bind::<Text, _>(relaxed)
        };
    }
    let rows: Vec<RankedRow> = if fetch_all {
        // Every kind fetches all its matches from the GIN index (a rare word, most
        // searches): the shape leaves one plan whatever the values, so the
        // statement is prepared once per connection and its generic plan kept,
        // which saves planning a four-branch statement (0.4-1.3 ms) on every
        // search. Forced, because PostgreSQL would otherwise go on planning per
        // search: the generic plan assumes more matches than a rare word has, and
        // looks dearer. The setting is local to this statement's transaction.
        conn.transaction(|c| {
            c.batch_execute("SET LOCAL plan_cache_mode = force_generic_plan")?;
            bound!(crate::db::sql(text)).load(c)
        })?
    } else if orbit.is_some() && planner {
        // Where the planner chooses, within one orbit, it plans as if a random page
        // read cost little more than a sequential one (the default says 4×), for
        // this statement only: the rows are in memory, and with the default a
        // common word within one orbit read its whole GIN posting list (100,000
        // entries, 20-35 ms) to avoid walking the orbit's index backwards (about
        // 2,000 rows, 6 ms).
        conn.transaction(|c| {
            c.batch_execute("SET LOCAL random_page_cost = 1.1")?;
            bound!(diesel::sql_query(text)).load(c)
        })?
    } else {
        // Planned per search: a walk's plan depends on the values (a generic plan
        // for a walk within an orbit may read the whole orbit).
        bound!(diesel::sql_query(text)).load(conn)?
    };
    Ok(rows
        .into_iter()
        .filter_map(|r| {
            Kind::parse(&r.kind).map(|kind| Ranked {
                kind,
                id: r.id,
                rank: r.rank,
            })
        })
        .collect())
}

/// The subquery of `kind`'s newest `window` rows (`id`, `doc`) matching the
/// tsquery in parameter `matching`, with an id up to the kind's bound (and in the
/// orbit, `$6`), found by `access`. The shapes leave PostgreSQL one way each:
/// `ts_match_vq` is `@@` that no index can answer, `OFFSET 0` keeps the window's
/// `LIMIT` from turning a fetch of every match into a walk, and `+ 0` keeps a
/// column's index out of a bitmap.
fn newest(kind: Kind, access: Access, matching: &str, orbit: bool, window: i64) -> String {
    let (table, bound) = (kind.table(), kind.index() + 2);
    let order = format!("ORDER BY t.id DESC LIMIT {window}");
    match (access, orbit) {
        (Access::Walk, _) => format!(
            "SELECT t.id, t.search AS doc FROM {table} t \
             WHERE ts_match_vq(t.search, {matching}::tsquery) AND t.id <= ${bound}{} {order}",
            if orbit { " AND t.orbit_id = $6" } else { "" }
        ),
        (Access::Bitmap, _) | (Access::Both, false) => format!(
            "SELECT t.id, t.doc FROM (SELECT t.id, t.search AS doc FROM {table} t \
             WHERE t.search @@ {matching}::tsquery AND t.id + 0 <= ${bound}{} OFFSET 0) t {order}",
            if orbit {
                " AND t.orbit_id + 0 = $6"
            } else {
                ""
            }
        ),
        (Access::Both, true) => format!(
            "SELECT t.id, t.doc FROM (SELECT t.id, t.search AS doc FROM {table} t \
             WHERE t.search @@ {matching}::tsquery AND t.id <= ${bound} AND t.orbit_id = $6 \
             OFFSET 0) t {order}"
        ),
        (Access::Recent { span }, _) => {
            // The newest `span` ids first; the older rows only when those held
            // fewer than `window` matches (a `LIMIT` of 0 never runs its scan). A
            // span below 0 would let the older branch past the bound.
            let span = span.max(0);
            let in_orbit = if orbit {
                " AND t.orbit_id + 0 = $6"
            } else {
                ""
            };
            let fetch = |range: String, limit: String| {
                format!(
                    "SELECT t.id, t.doc FROM (SELECT t.id, t.search AS doc FROM {table} t \
                     WHERE t.search @@ {matching}::tsquery AND {range}{in_orbit} OFFSET 0) t \
                     ORDER BY t.id DESC LIMIT {limit}"
                )
            };
            format!(
                "WITH n AS MATERIALIZED ({}) SELECT n.id, n.doc FROM n UNION ALL ({})",
                fetch(
                    format!("t.id > ${bound} - {span} AND t.id + 0 <= ${bound}"),
                    window.to_string()
                ),
                fetch(
                    format!("t.id + 0 <= ${bound} - {span}"),
                    format!("({window} - (SELECT count(*) FROM n))")
                ),
            )
        }
        (Access::Planner, _) => format!(
            "SELECT t.id, t.search AS doc FROM {table} t \
             WHERE t.search @@ {matching}::tsquery AND t.id <= ${bound}{} {order}",
            if orbit { " AND t.orbit_id = $6" } else { "" }
        ),
    }
}

/// `tsquery` (PostgreSQL's text form) with its phrase operators (`<->`, `<N>`)
/// turned into `&`: a query every row matching `tsquery` matches too, that the GIN
/// index answers exactly (a phrase needs each row read). A phrase under a negation
/// (`!( 'b' <-> 'c' )`) is kept, since relaxing it would narrow the query; a query
/// where a phrase operator follows a negated word (`!'a' <-> 'b'`, which web-search
/// syntax does not produce) is returned unchanged. A word repeated in a plain
/// conjunction is kept once.
pub fn without_phrases(tsquery: &str) -> String {
    let mut out = String::with_capacity(tsquery.len());
    let mut quoted = false;
    // Per open parenthesis: whether it is negated, itself or by an outer one.
    let mut groups: Vec<bool> = Vec::new();
    let mut pending_not = false;
    let mut negated_word = false;
    let mut chars = tsquery.chars().peekable();
    while let Some(ch) = chars.next() {
        if quoted {
            out.push(ch);
            if ch == '\'' {
                // A doubled quote stays inside the lexeme.
                if chars.peek() == Some(&'\'') {
                    out.push('\'');
                    chars.next();
                } else {
                    quoted = false;
                }
            }
            continue;
        }
        match ch {
            '\'' => {
                quoted = true;
                negated_word = pending_not;
                pending_not = false;
                out.push(ch);
            }
            '!' => {
                pending_not = true;
                out.push(ch);
            }
            '(' => {
                let outer = groups.last().copied().unwrap_or(false);
                groups.push(pending_not || outer);
                pending_not = false;
                negated_word = false;
                out.push(ch);
            }
            ')' => {
                groups.pop();
                negated_word = false;
                out.push(ch);
            }
            '<' => {
                let mut op = String::from('<');
                for c in chars.by_ref() {
                    op.push(c);
                    if c == '>' {
                        break;
                    }
                }
                if negated_word {
                    return tsquery.to_owned();
                }
                if groups.last().copied().unwrap_or(false) {
                    out.push_str(&op);
                } else {
                    out.push('&');
                }
            }
            '&' | '|' => {
                negated_word = false;
                out.push(ch);
            }
            _ => out.push(ch),
        }
    }
    // A plain conjunction names each word once: PostgreSQL estimates `'w' & 'w'`
    // as two independent words and would plan for far fewer rows than match.
    if !out.contains(['(', '|']) {
        let mut seen: Vec<&str> = Vec::new();
        for term in out.split(" & ") {
            if !seen.contains(&term) {
                seen.push(term);
            }
        }
        return seen.join(" & ");
    }
    out
}

/// A hit's fields, with `ts_headline` of its long field (`body`) and of its short
/// one (`head`: the title, or a memory record's tags), both marked with
/// [`START`]/[`STOP`].
#[derive(Debug, Clone, QueryableByName)]
pub struct HitRow {
    #[diesel(sql_type = Text)]
    pub kind: String,
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    #[diesel(sql_type = BigInt)]
    pub orbit_id: i64,
    #[diesel(sql_type = Text)]
    pub orbit_slug: String,
    #[diesel(sql_type = Text)]
    pub title: String,
    #[diesel(sql_type = Text)]
    pub body_headline: String,
    #[diesel(sql_type = Text)]
    pub head_headline: String,
    #[diesel(sql_type = Timestamptz)]
    pub created_at: DateTime<Utc>,
    #[diesel(sql_type = Timestamptz)]
    pub updated_at: DateTime<Utc>,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub revision: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    pub contribution_kind: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    pub status: Option<String>,
}

/// `ts_headline` options: a passage of 15..35 words around the best match (the
/// start of the text when nothing in it matched), or the whole short field.
const BODY_OPTIONS: &str =
    "StartSel=\"\u{E000}\", StopSel=\"\u{E001}\", MaxWords=35, MinWords=15, ShortWord=3";
const HEAD_OPTIONS: &str = "StartSel=\"\u{E000}\", StopSel=\"\u{E001}\", HighlightAll=true";

/// The fields of the hits named by `ids` (any order; the caller orders them).
pub fn hits(
    conn: &mut PgConnection,
    tsquery: &str,
    ids: &[(Kind, i64)],
) -> QueryResult<Vec<HitRow>> {
    // Text whose own markers could be taken for ours has them replaced first; the
    // text is read as the search column reads it (`orbit_search_text`, whose
    // stand-ins `unmark` gives back: `SEPARATORS`).
    let clean = |col: &str| {
        format!("translate(orbit_search_text({col}), E'\\uE000\\uE001', E'\\uFFFD\\uFFFD')")
    };
    let hl =
        |col: &str, opts: &str| format!("ts_headline('{CONFIG}', {}, q.q, {opts})", clean(col));
    let mut branches = Vec::new();
    for kind in Kind::ALL {
        if !ids.iter().any(|(k, _)| *k == kind) {
            continue;
        }
        let param = kind.index() + 4;
        let (title, body, head, updated, revision, ckind, status) = match kind {
            Kind::Contribution => (
                "t.title".to_owned(),
                "t.body",
                "t.title".to_owned(),
                "t.updated_at",
                "t.revision",
                "t.kind",
                "NULL::text",
            ),
            Kind::Problem => (
                "t.title".to_owned(),
                "t.statement",
                "t.title".to_owned(),
                "t.updated_at",
                "NULL::bigint",
                "NULL::text",
                "t.status",
            ),
            Kind::Task => (
                "t.title".to_owned(),
                "t.description",
                "t.title".to_owned(),
                "t.updated_at",
                "NULL::bigint",
                "NULL::text",
                "t.status",
            ),
            // A record has no title: its first line that is not blank, at most 80
            // characters, without the spaces around it (a CRLF's `\r`, a no-break
            // or ideographic space among them; trimmed after the cut).
            Kind::Memory => (
                format!(
                    "coalesce(regexp_replace(left(substring(t.content FROM '[^{SPACE}][^\\r\\n]*'), \
                     80), '[{SPACE}]+$', ''), '')"
                ),
                "t.content",
                "orbit_search_tags(t.tags)".to_owned(),
                "t.created_at",
                "NULL::bigint",
                "NULL::text",
                "NULL::text",
            ),
        };
        // The short field is highlighted only when the long one shows no match
        // (`OFFSET 0` keeps the subquery, so the long one's headline is made once).
        branches.push(format!(
            "SELECT h.kind, h.id, h.orbit_id, h.orbit_slug, h.title, h.body_headline, \
                    CASE WHEN strpos(h.body_headline, E'\\uE000') > 0 THEN '' \
                         ELSE {hh} END AS head_headline, \
                    h.created_at, h.updated_at, h.revision, h.contribution_kind, h.status \
             FROM (SELECT '{k}'::text AS kind, t.id, t.orbit_id, o.slug AS orbit_slug, \
                          {title} AS title, {bh} AS body_headline, {head} AS head, \
                          t.created_at, {updated} AS updated_at, {revision} AS revision, \
                          {ckind} AS contribution_kind, {status} AS status \
                   FROM {table} t JOIN orbits o ON o.id = t.orbit_id, q \
                   WHERE t.id = ANY(${param}) OFFSET 0) h, q",
            k = kind.as_str(),
            table = kind.table(),
            bh = hl(body, "$2"),
            hh = hl("h.head", "$3"),
        ));
    }
    if branches.is_empty() {
        return Ok(Vec::new());
    }
    let text = format!(
        "WITH q AS (SELECT $1::tsquery AS q) {}",
        branches.join(" UNION ALL ")
    );
    let of = |kind: Kind| -> Vec<i64> {
        ids.iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, id)| *id)
            .collect()
    };
    // Cached (one text per set of kinds, at most 15): a lookup by ids plans the same
    // for every query.
    crate::db::sql(text)
        .bind::<Text, _>(tsquery)
        .bind::<Text, _>(BODY_OPTIONS)
        .bind::<Text, _>(HEAD_OPTIONS)
        .bind::<Array<BigInt>, _>(of(Kind::Contribution))
        .bind::<Array<BigInt>, _>(of(Kind::Memory))
        .bind::<Array<BigInt>, _>(of(Kind::Problem))
        .bind::<Array<BigInt>, _>(of(Kind::Task))
        .load(conn)
}

#[cfg(test)]
mod tests {
    use super::without_phrases;

    #[test]
    fn phrases_relax_to_and_outside_lexemes_only() {
        assert_eq!(without_phrases("'a' <-> 'b' & 'c'"), "'a' & 'b' & 'c'");
        assert_eq!(without_phrases("'a' <2> 'b' | 'c'"), "'a' & 'b' | 'c'");
        assert_eq!(without_phrases("'x<->y' <-> 'it''s'"), "'x<->y' & 'it''s'");
        assert_eq!(
            without_phrases("'a' & !( 'b' <-> 'c' )"),
            "'a' & !( 'b' <-> 'c' )"
        );
        assert_eq!(without_phrases("'b' <-> 'c' & !'d'"), "'b' & 'c' & !'d'");
        assert_eq!(
            without_phrases("( 'a' <-> 'b' | 'c' ) & !( 'd' <-> ( 'e' <-> 'f' ) )"),
            "( 'a' & 'b' | 'c' ) & !( 'd' <-> ( 'e' <-> 'f' ) )"
        );
        assert_eq!(without_phrases("!'a' <-> 'b'"), "!'a' <-> 'b'");
        assert_eq!(without_phrases("!'a' & 'b' <-> 'c'"), "!'a' & 'b' & 'c'");
        assert_eq!(without_phrases("'w' <-> 'w' <-> 'w' & !'x'"), "'w' & !'x'");
        assert_eq!(without_phrases("'a & b' <-> 'a & b'"), "'a & b'");
    }
}
