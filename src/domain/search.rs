//! Search (contract section 13): the one operation behind `GET /api/v1/search` and
//! the MCP `search` tool. It owns the query's rules — `q`, `orbit`, `types`,
//! `limit` and the opaque cursor are checked here, a `q` with nothing searchable is
//! 422 `empty_query` — and shapes the hits: plain-text snippets with the `[start,
//! end)` offsets of the matched words, counted in Unicode code points.
//! The queries are `store::search`; the ranking window is explained there and in
//! docs/DECISIONS.md.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use utoipa::{IntoParams, ToSchema};

use crate::db::TxResult;
use crate::domain::auth::Bearer;
use crate::domain::write::public_read;
use crate::domain::Core;
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::model::ts;
use crate::store::orbits as orbit_store;
use crate::store::search::{self as store, After, HitRow, Kind, START, STOP};

/// The most characters `q` may have.
pub const MAX_Q_CHARS: usize = 256;
/// `limit`: 1..50, default 20.
pub const MAX_LIMIT: i64 = 50;
pub const DEFAULT_LIMIT: i64 = 20;

/// The query of `GET /api/v1/search` (and the arguments of the MCP tool).
#[derive(Debug, Default, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct SearchQuery {
    /// Required. 1..256 characters of web-search syntax: plain words (all must
    /// match), `"quoted phrases"`, `OR`, `-excluded`. English words match across
    /// inflections (`running` finds `run`), words with other letters match exactly,
    /// case never matters. Nothing searchable in it (only stop words or
    /// punctuation) → 422 `empty_query`.
    #[param(required = true, min_length = 1, max_length = 256)]
    pub q: Option<String>,
    /// Only this orbit (id or slug); absent = every orbit.
    #[param(min_length = 1, max_length = 63)]
    pub orbit: Option<String>,
    /// Comma list of `CONTRIBUTION`, `PROBLEM`, `TASK`, `MEMORY`; absent = all.
    pub types: Option<String>,
    /// Page size, 1..50 (default 20).
    #[param(minimum = 1, maximum = 50)]
    pub limit: Option<i64>,
    /// Opaque: the previous page's `meta.next_cursor`, with the same `q`, `orbit`
    /// and `types`.
    pub cursor: Option<String>,
}

/// The orbit a hit belongs to.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HitOrbit {
    #[schema(minimum = 1)]
    pub id: i64,
    pub slug: String,
}

#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum HitType {
    Contribution,
    Memory,
    Problem,
    Task,
}

impl From<Kind> for HitType {
    fn from(k: Kind) -> HitType {
        match k {
            Kind::Contribution => HitType::Contribution,
            Kind::Memory => HitType::Memory,
            Kind::Problem => HitType::Problem,
            Kind::Task => HitType::Task,
        }
    }
}

/// One search result. Everything in it is untrusted content, as stored.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Hit {
    #[serde(rename = "type")]
    pub kind: HitType,
    #[schema(minimum = 1)]
    pub id: i64,
    pub orbit: HitOrbit,
    /// The title; for a memory record, the first line of its content that is not
    /// blank, trimmed (at most 80 characters).
    pub title: String,
    /// Plain text cut from the matched field (the body, statement, description or
    /// content; the title or the tags when only they matched), never markup.
    pub snippet: String,
    /// `[start, end)` offsets into `snippet` where query words matched, counted in
    /// Unicode code points (not bytes, not UTF-16 units), ascending.
    #[schema(value_type = Vec<Vec<i64>>)]
    pub matches: Vec<[usize; 2]>,
    /// Relevance (higher is better): PostgreSQL's `ts_rank` with titles and tags
    /// weighing more than bodies, divided by 1 + log(length).
    pub rank: f32,
    #[serde(with = "ts")]
    pub created_at: DateTime<Utc>,
    /// A memory record is never updated: its `created_at`.
    #[serde(with = "ts")]
    pub updated_at: DateTime<Utc>,
    /// A contribution's current revision (only for `CONTRIBUTION`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false, minimum = 1)]
    pub revision: Option<i64>,
    /// A contribution's kind (only for `CONTRIBUTION`).
    #[serde(rename = "kind", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = crate::store::contributions::ContributionKind, required = false)]
    pub contribution_kind: Option<String>,
    /// `OPEN`/`RESOLVED` for a problem, `OPEN`/`COMPLETED`/`CANCELLED` for a task.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false)]
    pub status: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SearchMeta {
    /// Pass as `cursor` (with the same `q`, `orbit`, `types`) for the next page;
    /// null on the last page.
    #[schema(required = true)]
    pub next_cursor: Option<String>,
}

/// `{"data": [Hit...], "meta": {"next_cursor"}}`, best match first, ties by type
/// then id.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SearchPage {
    pub data: Vec<Hit>,
    pub meta: SearchMeta,
}

/// A checked query, before the database is asked anything.
struct Checked {
    q: String,
    orbit: Option<String>,
    kinds: Vec<Kind>,
    limit: i64,
    cursor: Option<Cursor>,
}

impl crate::model::Validate for SearchQuery {
    fn validate(&self, e: &mut FieldErrors) {
        read(self, e);
    }
}

/// The query as a search runs it, or 422 with every problem.
fn check(query: SearchQuery) -> ApiResult<Checked> {
    let mut e = FieldErrors::default();
    let checked = read(&query, &mut e);
    e.finish()?;
    Ok(checked)
}

/// The query read as a search runs it, its problems noted in `e` (the one reading
/// of a search's parameters: `check`, and the query's `Validate`).
fn read(query: &SearchQuery, e: &mut FieldErrors) -> Checked {
    let q = match &query.q {
        None => {
            e.add("q", "is required");
            String::new()
        }
        Some(q) => {
            if q.chars().count() > MAX_Q_CHARS {
                e.add("q", format!("must be at most {MAX_Q_CHARS} characters"));
            }
            // PostgreSQL text cannot hold U+0000; it is not a word either.
            q.replace('\0', " ")
        }
    };
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    e.range("limit", limit, 1, MAX_LIMIT);
    let mut kinds = Vec::new();
    match query.types.as_deref() {
        None => kinds.extend(Kind::ALL),
        Some(list) => {
            for part in list.split(',') {
                match Kind::parse(part.trim()) {
                    Some(k) => kinds.push(k),
                    None => e.add(
                        "types",
                        format!(
                            "unknown type {:?}: use CONTRIBUTION, PROBLEM, TASK or MEMORY",
                            part.chars().take(40).collect::<String>()
                        ),
                    ),
                }
            }
        }
    }
    kinds.sort();
    kinds.dedup();
    if let Some(orbit) = &query.orbit {
        crate::domain::orbits::check_reference(e, "orbit", orbit);
    }
    let cursor = match query.cursor.as_deref() {
        None => None,
        Some(c) => match Cursor::decode(c) {
            Some(c) => Some(c),
            None => {
                e.add(
                    "cursor",
                    "is not a cursor this service gave (use meta.next_cursor)",
                );
                None
            }
        },
    };
    Checked {
        q,
        orbit: query.orbit.clone(),
        kinds,
        limit,
        cursor,
    }
}

/// Runs a search as a public read: a presented token is checked first (401), then
/// the query (422), the orbit filter (422 when no such orbit), then one page.
pub async fn search(core: &Core, bearer: Bearer, query: SearchQuery) -> ApiResult<SearchPage> {
    let stats = core.search_stats.clone();
    public_read(core, bearer, move |conn| {
        let c = check(query)?;
        let orbit_id = match &c.orbit {
            None => None,
            Some(reference) => match orbit_store::find(conn, reference)? {
                Some(o) => Some(o.id),
                None => return Err(ApiError::field("orbit", "no such orbit").into()),
            },
        };
        let Some(tsquery) = store::parse(conn, &c.q)? else {
            let mut err = ApiError::invalid(
                "empty_query",
                "The query has nothing searchable in it (only stop words or punctuation).",
            );
            err.body.errors = Some(
                [(
                    "q".to_owned(),
                    vec!["has no searchable word (only stop words or punctuation)".to_owned()],
                )]
                .into(),
            );
            return Err(err.into());
        };
        let fingerprint = fingerprint(&tsquery, orbit_id, &c.kinds);
        let (bounds, after) = match &c.cursor {
            Some(cur) if cur.fingerprint != fingerprint => {
                return Err(ApiError::field(
                    "cursor",
                    "belongs to another search: send the same q, orbit and types as the \
                     page it came from",
                )
                .into())
            }
            Some(cur) => (cur.bounds, Some(cur.after)),
            None => (store::max_ids(conn)?, None),
        };
        let stats = stats.get(conn)?;
        let candidates = store::Candidates::of(&tsquery);
        let access = |kind| stats.access(kind, &candidates.relaxed, orbit_id, candidates.window);
        let found = Found {
            orbit_id,
            bounds,
            after,
            fingerprint,
        };
        page(conn, &tsquery, &c, found, &access)
    })
    .await
}

/// Where a page starts, and what its cursor must carry on.
struct Found {
    orbit_id: Option<i64>,
    bounds: [i64; 4],
    after: Option<After>,
    fingerprint: u64,
}

fn page(
    conn: &mut diesel::PgConnection,
    tsquery: &str,
    c: &Checked,
    found: Found,
    access: &dyn Fn(Kind) -> store::Access,
) -> TxResult<SearchPage> {
    let Found {
        orbit_id,
        bounds,
        after,
        fingerprint,
    } = found;
    let mut ranked = store::ranked(
        conn,
        tsquery,
        &c.kinds,
        orbit_id,
        &bounds,
        after,
        c.limit + 1,
        access,
    )?;
    let more = ranked.len() as i64 > c.limit;
    ranked.truncate(c.limit as usize);
    let ids: Vec<(Kind, i64)> = ranked.iter().map(|r| (r.kind, r.id)).collect();
    let mut rows = store::hits(conn, tsquery, &ids)?;
    let mut data = Vec::with_capacity(ranked.len());
    for r in &ranked {
        let Some(pos) = rows
            .iter()
            .position(|h| h.id == r.id && h.kind == r.kind.as_str())
        else {
            continue;
        };
        data.push(hit(rows.swap_remove(pos), r.kind, r.rank));
    }
    let next_cursor = match (more, ranked.last()) {
        (true, Some(last)) => Some(
            Cursor {
                fingerprint,
                bounds,
                after: After {
                    rank: last.rank,
                    kind: last.kind,
                    id: last.id,
                },
            }
            .encode(),
        ),
        _ => None,
    };
    Ok(SearchPage {
        data,
        meta: SearchMeta { next_cursor },
    })
}

fn hit(row: HitRow, kind: Kind, rank: f32) -> Hit {
    let (snippet, matches) = snippet(&row.body_headline, &row.head_headline);
    Hit {
        kind: kind.into(),
        id: row.id,
        orbit: HitOrbit {
            id: row.orbit_id,
            slug: row.orbit_slug,
        },
        title: row.title,
        snippet,
        matches,
        rank,
        created_at: row.created_at,
        updated_at: row.updated_at,
        revision: row.revision,
        contribution_kind: row.contribution_kind,
        status: row.status,
    }
}

/// The snippet and its match offsets: from the long field when a query word is
/// marked in it, else from the short one when one is marked there, else the start
/// of the long field (the title when that is empty).
fn snippet(body: &str, head: &str) -> (String, Vec<[usize; 2]>) {
    let marked = |s: &str| s.contains(START);
    let source = if marked(body) || (!marked(head) && !body.trim().is_empty()) {
        body
    } else {
        head
    };
    unmark(source)
}

/// Removes the markers, recording where each marked word starts and ends (in
/// code points of the text without markers), and gives each character
/// `orbit_search_text` replaced back (`store::original_of`);
/// leading and trailing whitespace is cut off.
pub fn unmark(marked: &str) -> (String, Vec<[usize; 2]>) {
    let mut text = String::with_capacity(marked.len());
    let mut matches = Vec::new();
    let mut n = 0usize;
    let mut open = None;
    for ch in marked.chars() {
        match ch {
            START => open = Some(n),
            STOP => {
                if let Some(start) = open.take() {
                    if n > start {
                        matches.push([start, n]);
                    }
                }
            }
            _ => {
                text.push(store::original_of(ch).unwrap_or(ch));
                n += 1;
            }
        }
    }
    let lead = text.chars().take_while(|c| c.is_whitespace()).count();
    let trimmed: String = text.trim().to_owned();
    let len = trimmed.chars().count();
    let matches = matches
        .into_iter()
        .filter_map(|[s, e]| {
            let (s, e) = (s.saturating_sub(lead), e.saturating_sub(lead).min(len));
            (e > s).then_some([s, e])
        })
        .collect();
    (trimmed, matches)
}

/// What a cursor must come back with: the search it belongs to (the parsed query,
/// the orbit and the types), so a cursor sent with another search is refused.
fn fingerprint(tsquery: &str, orbit: Option<i64>, kinds: &[Kind]) -> u64 {
    let mut h = Sha256::new();
    h.update(tsquery.as_bytes());
    h.update([0]);
    h.update(orbit.unwrap_or(0).to_be_bytes());
    for k in kinds {
        h.update(k.as_str().as_bytes());
        h.update([b',']);
    }
    let d = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    u64::from_be_bytes(first)
}

/// The position after the last hit of a page, and the id bounds of the first page
/// (rows created after it never enter a later page, so pages neither overlap nor
/// shift while others write).
#[derive(Debug, Clone, PartialEq)]
struct Cursor {
    fingerprint: u64,
    bounds: [i64; 4],
    after: After,
}

impl Cursor {
    fn encode(&self) -> String {
        let [b0, b1, b2, b3] = self.bounds;
        let text = format!(
            "1.{:016x}.{b0}.{b1}.{b2}.{b3}.{:08x}.{}.{}",
            self.fingerprint,
            self.after.rank.to_bits(),
            self.after.kind.index(),
            self.after.id
        );
        URL_SAFE_NO_PAD.encode(text)
    }

    fn decode(s: &str) -> Option<Cursor> {
        if s.len() > 200 {
            return None;
        }
        let bytes = URL_SAFE_NO_PAD.decode(s).ok()?;
        let text = String::from_utf8(bytes).ok()?;
        let parts: Vec<&str> = text.split('.').collect();
        let [version, fp, b0, b1, b2, b3, rank, kind, id] = parts.as_slice() else {
            return None;
        };
        if *version != "1" {
            return None;
        }
        let bound = |s: &str| s.parse::<i64>().ok().filter(|b| *b >= 0);
        let rank = f32::from_bits(u32::from_str_radix(rank, 16).ok()?);
        if !rank.is_finite() {
            return None;
        }
        Some(Cursor {
            fingerprint: u64::from_str_radix(fp, 16).ok()?,
            bounds: [bound(b0)?, bound(b1)?, bound(b2)?, bound(b3)?],
            after: After {
                rank,
                kind: *Kind::ALL.get(kind.parse::<usize>().ok()?)?,
                id: id.parse::<i64>().ok().filter(|i| *i >= 1)?,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unmark_counts_code_points_and_trims() {
        let marked = format!("  Café {START}über{STOP} and {START}東京{STOP} ");
        let (text, matches) = unmark(&marked);
        assert_eq!(text, "Café über and 東京");
        let chars: Vec<char> = text.chars().collect();
        let words: Vec<String> = matches
            .iter()
            .map(|[s, e]| chars[*s..*e].iter().collect())
            .collect();
        assert_eq!(words, ["über", "東京"]);
    }

    #[test]
    fn a_cursor_survives_its_round_trip_and_nothing_else_decodes() {
        let c = Cursor {
            fingerprint: 0xdead_beef_0123_4567,
            bounds: [10, 0, 3, 99],
            after: After {
                rank: 0.0607927,
                kind: Kind::Problem,
                id: 42,
            },
        };
        assert_eq!(Cursor::decode(&c.encode()), Some(c));
        for bad in ["", "x", "MS4x", "!!!!", &"A".repeat(500)] {
            assert_eq!(Cursor::decode(bad), None, "{bad}");
        }
    }
}
