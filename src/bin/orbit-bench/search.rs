//! The `search` scenario (issue 20): its data set and its request mix. The load
//! itself is `get_client` over the paths given here, and the reference is
//! `pgbench -S` (`RefKind::SelectOnly`) in the same run.
//!
//! Data set (`src/bin/orbit-bench/search_seed.sql`, loaded straight into the service's database
//! like the other bulk seeds): 100 orbits, 1,000,000 contributions and 100,000
//! memory records (plus 1,000 problems and 1,000 tasks), words `w0`..`w4999` drawn
//! with a skew (`w0` in about 45% of contributions, `w4999` in a few hundred),
//! `tenpercent` in exactly 100,000 contributions, `rare<k>` in ten each. It has no
//! change rows and no `contribution_revisions`: run no other scenario on it.
//!
//! Shapes, 8 clients each:
//! - `mixed`: 70% a rare word (`rare<k>`), 20% one or two skewed words, 5% a
//!   phrase, 5% the common word; a third of them within one orbit, a tenth with
//!   `types`. Target: p99 < 25 ms, throughput ≥ 0.15 × `pgbench -S`.
//! - `100k-word`: `q=tenpercent` only (100,000 matching contributions), with and
//!   without an orbit. Target: p99 < 100 ms.
//!
//!
//! The data set is loaded with SQL (like the other bulk seeds), not through the
//! store: a million rows one write at a time would take the run's whole budget.

use diesel::connection::SimpleConnection;
use diesel::PgConnection;
use rand::{Rng, SeedableRng};

/// The data set's SQL (also runnable with psql).
pub const SEED_SQL: &str = include_str!("search_seed.sql");

/// How many orbits, rare words and skewed words the data set has.
pub const ORBITS: u32 = 100;
pub const RARE_WORDS: u32 = 100_000;
pub const WORDS: u32 = 5000;

/// Loads the data set into a migrated database whose search tables are empty
/// (orbit-bench's fresh database). Takes about 30 s on two cores.
pub fn seed(conn: &mut PgConnection) -> Result<(), String> {
    let (load, after) = SEED_SQL
        .split_once("-- after the load")
        .ok_or("search_seed.sql: no `-- after the load` marker")?;
    let load: String = load
        .lines()
        .filter(|l| !l.trim_start().starts_with('\\'))
        .collect::<Vec<_>>()
        .join("\n");
    conn.batch_execute(&load)
        .map_err(|e| format!("search seed: {e}"))?;
    // VACUUM refuses a multi-statement string: one statement at a time (the
    // marker's own line first goes).
    for statement in after
        .lines()
        .skip(1)
        .filter(|l| !l.trim_start().starts_with("--") && !l.trim().is_empty())
    {
        conn.batch_execute(statement)
            .map_err(|e| format!("search seed: {statement}: {e}"))?;
    }
    Ok(())
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
        assert!(SEED_SQL.contains("-- after the load"));
    }
}
