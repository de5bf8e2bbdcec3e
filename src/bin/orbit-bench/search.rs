//! The `search` scenario (issue 20): its data set and its request mix. The load
//! itself is `get_client` over the paths given here, and the reference is
//! `pgbench -S` (`RefKind::SelectOnly`) in the same run.
//!
//! Data set ([`seed`], written through the store with `Bulk`, each row with its
//! change): 100 orbits, 1,000,000 contributions and 100,000 memory records (plus
//! 1,000 problems and 1,000 tasks), words `w0`..`w4999` drawn with a skew (`w0` in
//! about 45% of contributions, `w4999` in a few hundred), `tenpercent` in exactly
//! 100,000 contributions, `rare<k>` in ten each. Deterministic (a seeded generator).
//! The contributions go in statements of 500 rows (`Bulk::contributions_many`);
//! the GIN indexes are dropped for the load and built again at the end, which is
//! much faster than a million inserts into them. The orbits have a million changes
//! between them: run no other scenario on this database.
//!
//! Shapes, 8 clients each:
//! - `mixed`: 70% a rare word (`rare<k>`), 20% one or two skewed words, 5% a
//!   phrase, 5% the common word; a third of them within one orbit, a tenth with
//!   `types`. Target: p99 < 25 ms, throughput ≥ 0.15 × `pgbench -S`.
//! - `100k-word`: `q=tenpercent` only (100,000 matching contributions), with and
//!   without an orbit. Target: p99 < 100 ms.

use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection, RunQueryDsl};
use orbit_commons::store::contributions::ContributionKind;
use rand::{Rng, SeedableRng};

use crate::bulk::{Bulk, NewContribution, Text};

/// How many orbits, rare words and skewed words the data set has.
pub const ORBITS: u32 = 100;
pub const RARE_WORDS: u32 = 100_000;
pub const WORDS: u32 = 5000;

/// Contributions in the data set (ten per rare word); memory records are a tenth.
const CONTRIBUTIONS: usize = 1_000_000;

/// Loads the data set into a migrated database whose search tables are empty
/// (orbit-bench's fresh database). A database that already holds all of it (a run
/// with `--url` against a service kept on the data set, for before/after pairs on
/// the same rows) is left as it is: `Ok(false)`.
pub fn seed(bulk: &Bulk) -> Result<bool, String> {
    if loaded(bulk)? {
        return Ok(false);
    }
    load(bulk, CONTRIBUTIONS).map(|()| true)
}

/// Marks a database whose load ran to its end (`COMMENT ON TABLE contributions`).
const LOADED: &str = "orbit-bench search data set";

/// Whether the database holds the whole data set already: the mark the last step
/// of [`load`] leaves (an interrupted load left the GIN indexes dropped).
fn loaded(bulk: &Bulk) -> Result<bool, String> {
    #[derive(diesel::QueryableByName)]
    struct Loaded {
        #[diesel(sql_type = diesel::sql_types::Bool)]
        loaded: bool,
    }
    let mut conn = PgConnection::establish(&bulk.url)
        .map_err(|e| format!("search seed: cannot connect: {e}"))?;
    let r: Loaded = diesel::sql_query(format!(
        "SELECT coalesce(obj_description('contributions'::regclass, 'pg_class') \
                         = '{LOADED}', false) AS loaded"
    ))
    .get_result(&mut conn)
    .map_err(|e| format!("search seed: {e}"))?;
    Ok(r.loaded)
}

/// The data set with `contributions` contributions and a tenth as many memory
/// records; the rest as [`seed`] says.
fn load(bulk: &Bulk, contributions: usize) -> Result<(), String> {
    let mut conn = PgConnection::establish(&bulk.url)
        .map_err(|e| format!("search seed: cannot connect: {e}"))?;
    let mut run = |sql: &str| {
        conn.batch_execute(sql)
            .map_err(|e| format!("search seed: {sql}: {e}"))
    };
    run("DROP INDEX IF EXISTS contributions_search_idx, memory_records_search_idx")?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut w = move || format!("w{}", skewed(&mut rng));
    let author = bulk.agents("search-bench-", 1, |_| None)?[0];
    let orbits = bulk.orbits(author, ORBITS as usize, |i| {
        let o = i + 1;
        [
            format!("search-{o}"),
            format!("Search bench orbit {o}"),
            String::new(),
        ]
    })?;
    // Rows are written in `g` order (ids follow it) and spread over the orbits
    // independently of the words.
    let orbit_of = |g: usize| orbits[spread(g as u64)];
    bulk.contributions_many(contributions, |i| {
        let g = i + 1;
        let title = format!("note {} {}", w(), w());
        let mut body = (0..8).map(|_| w()).collect::<Vec<_>>().join(" ");
        if g % 10 == 0 {
            body.push_str(" tenpercent");
        }
        body.push_str(&format!(" rare{}", g % RARE_WORDS as usize));
        NewContribution {
            orbit: orbit_of(g),
            kind: ContributionKind::Note,
            author,
            problem: None,
            title,
            body,
        }
    })?;
    bulk.memory(contributions / 10, |i| Text {
        orbit: orbit_of(i + 1),
        author,
        first: format!("memory {} {} {} {}", w(), w(), w(), w()),
        second: w(),
    })?;
    let by_g = |g: usize| orbits[g % ORBITS as usize];
    bulk.problems(1000, |i| Text {
        orbit: by_g(i + 1),
        author,
        first: format!("problem {}", w()),
        second: format!("{} {}", w(), w()),
    })?;
    bulk.tasks_of(1000, None, |i| Text {
        orbit: by_g(i + 1),
        author,
        first: format!("task {}", w()),
        second: format!("{} {}", w(), w()),
    })?;
    run(
        "CREATE INDEX contributions_search_idx ON contributions USING gin (search) \
         WITH (fastupdate = off)",
    )?;
    run(
        "CREATE INDEX memory_records_search_idx ON memory_records USING gin (search) \
         WITH (fastupdate = off)",
    )?;
    // VACUUM refuses a multi-statement string.
    run("VACUUM ANALYZE contributions, memory_records, problems, tasks, orbits")?;
    run(&format!("COMMENT ON TABLE contributions IS '{LOADED}'"))
}

/// Row `g`'s orbit index, a hash of `g` (so not correlated with the words).
fn spread(g: u64) -> usize {
    (g.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as usize % ORBITS as usize
}

/// The request paths of a shape (`mixed` or `100k-word`), `n` of them, drawn
/// deterministically from `seed`. Orbits are named by slug (`search-<n>`).
pub fn paths(shape: &str, n: usize, seed: u64) -> Vec<String> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let mut q = match shape {
                "100k-word" => "tenpercent".to_owned(),
                _ => match rng.gen_range(0..100) {
                    0..=69 => format!("rare{}", rng.gen_range(0..RARE_WORDS)),
                    70..=79 => format!("w{}", skewed(&mut rng)),
                    80..=89 => format!("w{}+w{}", skewed(&mut rng), skewed(&mut rng)),
                    90..=94 => format!("%22w{}+w{}%22", skewed(&mut rng), skewed(&mut rng)),
                    _ => "tenpercent".to_owned(),
                },
            };
            if rng.gen_range(0..3) == 0 {
                q.push_str(&format!("&orbit=search-{}", rng.gen_range(1..=ORBITS)));
            }
            if shape != "100k-word" && rng.gen_range(0..10) == 0 {
                q.push_str("&types=CONTRIBUTION,MEMORY");
            }
            format!("/api/v1/search?q={q}")
        })
        .collect()
}

/// A word index with the data set's own skew (`5000 × u³`).
fn skewed(rng: &mut impl Rng) -> u32 {
    let u: f64 = rng.gen();
    ((WORDS as f64) * u * u * u) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_is_deterministic_and_well_formed() {
        let a = paths("mixed", 1000, 7);
        assert_eq!(a, paths("mixed", 1000, 7));
        assert!(a.iter().all(|p| p.starts_with("/api/v1/search?q=")));
        let rare = a.iter().filter(|p| p.contains("q=rare")).count();
        assert!((600..800).contains(&rare), "{rare}");
        assert!(paths("100k-word", 100, 1)
            .iter()
            .all(|p| p.starts_with("/api/v1/search?q=tenpercent")));
        let mut per_orbit = [0u32; ORBITS as usize];
        (1..=10_000).for_each(|g| per_orbit[spread(g)] += 1);
        assert!(
            per_orbit.iter().all(|&n| (50..150).contains(&n)),
            "{per_orbit:?}"
        );
    }
}
