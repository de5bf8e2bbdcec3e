//! How the ranking statement finds each kind's newest matches (`store::search`):
//! the table statistics it decides from ([`statistics`], read from `pg_stats`) and
//! the decision ([`Statistics::access`]), made here rather than by PostgreSQL's
//! planner. The planner prices a GIN scan as nearly free and a walk of an index as
//! random disk reads, and for a common word within one orbit it read the word's
//! whole posting list (60-75 ms) where walking the orbit's rows takes 3-5 ms
//! (docs/PERFORMANCE.md, "Search: each type's access chosen by the service").
//!
//! Every [`Access`] returns the same rows, the newest matches of the kind with an
//! id up to the bound: only the cost differs. Without statistics (a new table, or
//! one never analysed) the choice is left to the planner.

use std::collections::HashMap;

use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Double, Float4, Nullable, Text};

use crate::store::search::{Access, Kind};

/// Relative cost, per row or entry, of each access (µs on the shared 2-core
/// machine, 2026-12-01; only their ratios matter): a match fetched from the heap
/// through a bitmap, a row tested while walking the primary key, a row tested while
/// walking an orbit's index (its rows are scattered over the table), an entry of a
/// GIN posting list or of the orbit index read into a bitmap.
const BITMAP_ROW: f64 = 3.0;
const WALK_ROW: f64 = 0.5;
const ORBIT_WALK_ROW: f64 = 1.5;
const INDEX_ENTRY: f64 = 0.3;
/// A row of the table, for the scan of its whole BRIN index on `id` that the
/// `Recent` access makes (one summary per 4 pages).
const RANGE_ROW: f64 = 0.002;

/// The `Recent` access's ids span: this many times the ids expected to hold the
/// window's matches, so that a word spread evenly over time fills the window from
/// the span alone (about this many windows of rows fetched).
const RECENT_MARGIN: f64 = 3.0;

/// What `ANALYZE` knows of one searched table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KindStats {
    /// `pg_class.reltuples`: about how many rows.
    pub rows: f64,
    /// The most common lexemes of `search` and the fraction of rows holding each.
    pub lexemes: HashMap<String, f64>,
    /// The smallest of those fractions: a lexeme not listed is rarer than this.
    pub min_freq: f64,
    /// The most common orbits and the fraction of rows in each.
    pub orbits: HashMap<i64, f64>,
    /// The fraction of rows in an orbit not listed.
    pub other_orbit: f64,
}

/// The statistics of the four searched tables, indexed by `Kind::index`; `None`
/// where a table has none yet.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Statistics {
    pub kinds: [Option<KindStats>; 4],
}

impl Statistics {
    /// How to find `kind`'s newest `window` rows matching `query` (a tsquery's text,
    /// phrases already relaxed to `&`) in `orbit` (or every orbit): the access of
    /// least estimated cost.
    pub fn access(&self, kind: Kind, query: &str, orbit: Option<i64>, window: i64) -> Access {
        let Some(s) = &self.kinds[kind.index()] else {
            return Access::Planner;
        };
        let Some(f) = estimate(query, s) else {
            return Access::Planner;
        };
        if s.rows < 1.0 || s.lexemes.is_empty() {
            return Access::Planner;
        }
        let (n, w) = (s.rows, window as f64);
        let matches = f * n;
        // Rows tested walking backwards until `window` matched (all, if fewer match).
        let walked = |rows: f64| if f > 0.0 { rows.min(w / f) } else { rows };
        let bitmap = matches * BITMAP_ROW;
        // The orbit's share of the rows (all of them across every orbit).
        let share = orbit.map_or(1.0, |o| s.orbits.get(&o).copied().unwrap_or(s.other_orbit));
        // `Recent`: the newest ids that should hold the window's matches (in the
        // orbit, when given) a few times over. Only the matches among them are
        // fetched, every orbit's; the word's entries are still all read.
        let span = if f * share > 0.0 {
            RECENT_MARGIN * w / (f * share)
        } else {
            n
        };
        let recent = (span < n && kind.has_id_ranges())
            .then(|| matches * INDEX_ENTRY + n * RANGE_ROW + (f * span).min(matches) * BITMAP_ROW);
        let (cost, access) = match orbit {
            None => {
                let walk = walked(n) * WALK_ROW;
                if walk < bitmap {
                    (walk, Access::Walk)
                } else {
                    (bitmap, Access::Bitmap)
                }
            }
            Some(_) => {
                let in_orbit = share * n;
                let walk = walked(in_orbit) * ORBIT_WALK_ROW;
                let both = (matches + in_orbit) * INDEX_ENTRY + matches * share * BITMAP_ROW;
                let bitmap = bitmap + matches * INDEX_ENTRY;
                if walk <= both && walk <= bitmap {
                    (walk, Access::Walk)
                } else if both < bitmap {
                    (both, Access::Both)
                } else {
                    (bitmap, Access::Bitmap)
                }
            }
        };
        match recent {
            Some(r) if r < cost => Access::Recent {
                span: span.ceil() as i64,
            },
            _ => access,
        }
    }
}

/// The fraction of rows matching `query` (a tsquery's text form), with PostgreSQL's
/// own assumptions: a lexeme not among the most common is half as frequent as the
/// least common listed, words are independent. `None` for what it cannot read
/// (a prefix or weight marker, which web-search syntax does not produce).
pub fn estimate(query: &str, stats: &KindStats) -> Option<f64> {
    let tokens = tokens(query)?;
    let mut p = Parser {
        tokens: &tokens,
        at: 0,
        stats,
    };
    let f = p.or()?;
    (p.at == tokens.len()).then_some(f.clamp(0.0, 1.0))
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Lexeme(String),
    Not,
    And,
    Or,
    /// `<->` or `<N>`: for the estimate, like `&`.
    Followed,
    Open,
    Close,
}

fn tokens(query: &str) -> Option<Vec<Token>> {
    let mut out = Vec::new();
    let mut chars = query.chars().peekable();
    while let Some(ch) = chars.next() {
        match ch {
            ' ' => {}
            '!' => out.push(Token::Not),
            '&' => out.push(Token::And),
            '|' => out.push(Token::Or),
            '(' => out.push(Token::Open),
            ')' => out.push(Token::Close),
            '<' => {
                for c in chars.by_ref() {
                    if c == '>' {
                        break;
                    }
                }
                out.push(Token::Followed);
            }
            '\'' => {
                let mut lexeme = String::new();
                loop {
                    match chars.next()? {
                        '\'' if chars.peek() == Some(&'\'') => {
                            chars.next();
                            lexeme.push('\'');
                        }
                        '\'' => break,
                        c => lexeme.push(c),
                    }
                }
                if chars.peek() == Some(&':') {
                    return None;
                }
                out.push(Token::Lexeme(lexeme));
            }
            _ => return None,
        }
    }
    Some(out)
}

/// Recursive descent over tsquery's precedence: `!`, then `<->`, `&`, `|`.
struct Parser<'a> {
    tokens: &'a [Token],
    at: usize,
    stats: &'a KindStats,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn or(&mut self) -> Option<f64> {
        let mut f = self.and()?;
        while self.peek() == Some(&Token::Or) {
            self.at += 1;
            let g = self.and()?;
            f = f + g - f * g;
        }
        Some(f)
    }

    fn and(&mut self) -> Option<f64> {
        let mut f = self.unary()?;
        while matches!(self.peek(), Some(Token::And | Token::Followed)) {
            self.at += 1;
            f *= self.unary()?;
        }
        Some(f)
    }

    fn unary(&mut self) -> Option<f64> {
        let token = self.peek()?.clone();
        self.at += 1;
        match token {
            Token::Not => Some(1.0 - self.unary()?),
            Token::Open => {
                let f = self.or()?;
                (self.peek() == Some(&Token::Close)).then(|| {
                    self.at += 1;
                    f
                })
            }
            Token::Lexeme(l) => Some(
                self.stats
                    .lexemes
                    .get(&l)
                    .copied()
                    .unwrap_or(self.stats.min_freq / 2.0),
            ),
            _ => None,
        }
    }
}

#[derive(QueryableByName)]
struct StatsRow {
    #[diesel(sql_type = Text)]
    table: String,
    #[diesel(sql_type = Double)]
    rows: f64,
    #[diesel(sql_type = Nullable<Array<Text>>)]
    lexemes: Option<Vec<String>>,
    #[diesel(sql_type = Nullable<Array<Float4>>)]
    lexeme_freqs: Option<Vec<f32>>,
    #[diesel(sql_type = Nullable<Array<BigInt>>)]
    orbits: Option<Vec<i64>>,
    #[diesel(sql_type = Nullable<Array<Float4>>)]
    orbit_freqs: Option<Vec<f32>>,
    #[diesel(sql_type = Nullable<Float4>)]
    orbit_distinct: Option<f32>,
}

/// The statistics `ANALYZE` (or autovacuum) last gathered on the four tables.
pub fn statistics(conn: &mut PgConnection) -> QueryResult<Statistics> {
    let rows: Vec<StatsRow> = crate::db::sql(
        "SELECT c.relname::text AS table, c.reltuples::float8 AS rows, \
                s.most_common_elems::text::text[] AS lexemes, \
                s.most_common_elem_freqs AS lexeme_freqs, \
                o.most_common_vals::text::bigint[] AS orbits, \
                o.most_common_freqs AS orbit_freqs, o.n_distinct AS orbit_distinct \
         FROM pg_class c \
         LEFT JOIN pg_stats s ON s.schemaname = current_schema() \
              AND s.tablename = c.relname AND s.attname = 'search' \
         LEFT JOIN pg_stats o ON o.schemaname = current_schema() \
              AND o.tablename = c.relname AND o.attname = 'orbit_id' \
         WHERE c.relnamespace = (SELECT n.oid FROM pg_namespace n WHERE n.nspname = current_schema()) \
           AND c.relname IN ('contributions', 'memory_records', 'problems', 'tasks')",
    )
    .load(conn)?;
    let mut out = Statistics::default();
    for r in rows {
        let Some(kind) = Kind::ALL.into_iter().find(|k| k.table() == r.table) else {
            continue;
        };
        let (Some(lexemes), Some(freqs)) = (r.lexemes, r.lexeme_freqs) else {
            continue;
        };
        // After one fraction per lexeme come the smallest and the largest.
        let Some(&min_freq) = freqs.get(lexemes.len()) else {
            continue;
        };
        let mut s = KindStats {
            rows: r.rows,
            lexemes: lexemes
                .into_iter()
                .zip(freqs.iter().map(|&f| f as f64))
                .collect(),
            min_freq: min_freq as f64,
            ..KindStats::default()
        };
        let listed = r.orbits.unwrap_or_default();
        let listed_freqs = r.orbit_freqs.unwrap_or_default();
        let rest = 1.0 - listed_freqs.iter().map(|&f| f as f64).sum::<f64>();
        // n_distinct: a count, or (negative) a fraction of the rows.
        let distinct = match r.orbit_distinct.unwrap_or(1.0) as f64 {
            d if d < 0.0 => -d * r.rows,
            d => d,
        };
        let unlisted = (distinct - listed.len() as f64).max(1.0);
        s.other_orbit = (rest / unlisted).clamp(0.0, 1.0);
        s.orbits = listed
            .into_iter()
            .zip(listed_freqs.iter().map(|&f| f as f64))
            .collect();
        out.kinds[kind.index()] = Some(s);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats() -> KindStats {
        KindStats {
            rows: 1_000_000.0,
            lexemes: [
                ("common".to_owned(), 0.45),
                ("tenth".to_owned(), 0.1),
                ("middle".to_owned(), 0.003),
                ("it's".to_owned(), 0.2),
            ]
            .into(),
            min_freq: 0.001,
            orbits: [(1, 0.5)].into(),
            other_orbit: 0.01,
        }
    }

    #[test]
    fn the_estimate_follows_the_operators() {
        let s = stats();
        let e = |q: &str| estimate(q, &s).map(|f| (f * 1e6).round() / 1e6);
        assert_eq!(e("'common'"), Some(0.45));
        assert_eq!(e("'rare'"), Some(0.0005));
        assert_eq!(e("'common' & 'tenth'"), Some(0.045));
        assert_eq!(e("'common' <-> 'tenth'"), Some(0.045));
        assert_eq!(e("'tenth' | 'tenth'"), Some(0.19));
        assert_eq!(e("!'tenth'"), Some(0.9));
        assert_eq!(e("'tenth' & !( 'common' | 'tenth' )"), Some(0.0495));
        assert_eq!(e("'it''s'"), Some(0.2));
        assert_eq!(e("'pre':*"), None);
        assert_eq!(e("'a' &"), None);
        assert_eq!(e("( 'a'"), None);
    }

    #[test]
    fn each_access_is_the_cheapest_for_its_words() {
        let s = Statistics {
            kinds: [Some(stats()), None, None, None],
        };
        let a = |q: &str, orbit: Option<i64>| s.access(Kind::Contribution, q, orbit, 200);
        // Across every orbit: a few matches are fetched, a middle word's among
        // the newest rows only, many are walked.
        assert_eq!(a("'rare'", None), Access::Bitmap);
        assert_eq!(a("'middle'", None), Access::Recent { span: 200_000 });
        assert_eq!(a("'tenth'", None), Access::Walk);
        assert_eq!(a("!'tenth'", None), Access::Walk);
        // A kind without the BRIN index on `id` fetches the middle word's matches.
        let tasks = Statistics {
            kinds: [None, None, None, Some(stats())],
        };
        assert_eq!(
            tasks.access(Kind::Task, "'middle'", None, 200),
            Access::Bitmap
        );
        // In a small orbit (1% of the rows): rare fetched, middle intersected,
        // common walked; in a big one, a common word is walked.
        assert_eq!(a("'rare'", Some(7)), Access::Bitmap);
        assert_eq!(a("'middle'", Some(7)), Access::Both);
        assert_eq!(a("'tenth'", Some(7)), Access::Walk);
        assert_eq!(a("'common'", Some(1)), Access::Walk);
        // In the big orbit, a middle word among the newest ids: twice the span,
        // since half the matches there are the orbit's.
        assert_eq!(a("'middle'", Some(1)), Access::Recent { span: 400_000 });
        // No statistics, or a query it cannot read: the planner decides.
        assert_eq!(s.access(Kind::Memory, "'rare'", None, 200), Access::Planner);
        assert_eq!(a("'pre':*", None), Access::Planner);
    }
}
