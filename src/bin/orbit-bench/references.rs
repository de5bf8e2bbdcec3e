//! The references: `pgbench -b tpcb-like` and `pgbench -S` on the same server, at
//! the same client counts; once per client count, or before every row
//! (`--paired-references`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use diesel::{Connection, PgConnection, RunQueryDsl};
use orbit_commons::testkit::PgServer;

use crate::cli::RefKind;
use crate::profile::{Probe, Profile};

pub struct References {
    pub pgbench: Option<PathBuf>,
    pub server: Option<PgServer>,
    pub db: Option<String>,
    pub cfg_duration: u64,
    pub cache: HashMap<(RefKind, usize), Result<f64, String>>,
    pub disabled: Option<String>,
    /// Profile pgbench runs too (`--profile`): whether pg_stat_statements is there.
    pub profile: Option<bool>,
    pub profiles: HashMap<(RefKind, usize), Profile>,
    /// `--paired-references`: measure again for every row. The first reading at each
    /// client count (and its profile) stays in `cache` (the report's references);
    /// each row keeps its own.
    pub paired: bool,
    /// Every reading taken, in order (several per client count when paired).
    pub readings: Vec<(RefKind, usize, f64)>,
}

impl References {
    pub fn run_pgbench(&self, args: &[String]) -> Result<String, String> {
        let bin = self.pgbench.as_ref().ok_or("pgbench not found")?;
        let out = Command::new(bin)
            .args(args)
            .env("PGAPPNAME", "orbit-bench")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run pgbench: {e}"))?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !out.status.success() {
            return Err(format!("pgbench {}: {text}", args.join(" ")));
        }
        Ok(text)
    }

    /// Creates and initialises the pgbench database (scale 10) on first use.
    pub fn prepare(&mut self) -> Result<(), String> {
        if let Some(why) = &self.disabled {
            return Err(why.clone());
        }
        if self.db.is_some() {
            return Ok(());
        }
        let server = self
            .server
            .as_ref()
            .ok_or("no PostgreSQL server to run pgbench against")?;
        if self.pgbench.is_none() {
            return Err("pgbench not found on PATH or under /usr/lib/postgresql/*/bin".into());
        }
        let db = format!("orbit_pgbench_{}", std::process::id());
        let mut conn = PgConnection::establish(&server.admin_url())
            .map_err(|e| format!("pgbench: cannot connect: {e}"))?;
        diesel::sql_query(format!("CREATE DATABASE \"{db}\""))
            .execute(&mut conn)
            .map_err(|e| format!("pgbench: CREATE DATABASE: {e}"))?;
        self.db = Some(db.clone());
        eprintln!("reference: pgbench -i -s 10 into {db}");
        let mut args: Vec<String> = vec!["-i".into(), "-s".into(), "10".into(), "-q".into()];
        args.extend(server.client_args(&db));
        self.run_pgbench(&args).map(|_| ()).inspect_err(|e| {
            self.disabled = Some(e.clone());
        })
    }

    pub fn tps(&mut self, kind: RefKind, clients: usize) -> Result<f64, String> {
        match self.cache.get(&(kind, clients)) {
            // A failed reference is not retried, paired or not.
            Some(r) if !self.paired || r.is_err() => return r.clone(),
            _ => {}
        }
        let result = self.prepare().and_then(|()| {
            let server = self.server.as_ref().ok_or("no server")?;
            let db = self.db.clone().ok_or("no pgbench database")?;
            eprintln!(
                "reference: pgbench {} -c {clients} -j {} -T {}",
                kind.name(),
                clients.min(2),
                self.cfg_duration
            );
            let mut args: Vec<String> = kind.flags().iter().map(|s| s.to_string()).collect();
            args.extend([
                "-c".into(),
                clients.to_string(),
                "-j".into(),
                clients.min(2).to_string(),
                "-T".into(),
                self.cfg_duration.to_string(),
            ]);
            args.extend(server.client_args(&db));
            let probe = self
                .profile
                .map(|pgss| Probe::start(&server.admin_url(), &db, None, pgss));
            let text = self.run_pgbench(&args)?;
            if let Some(probe) = probe {
                let txns = text
                    .lines()
                    .find_map(|l| {
                        l.trim()
                            .strip_prefix("number of transactions actually processed: ")
                    })
                    .and_then(|v| v.split(['/', ' ']).next())
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
                let profile = probe.finish(txns, true);
                self.profiles.entry((kind, clients)).or_insert(profile);
            }
            text.lines()
                .find_map(|l| l.trim().strip_prefix("tps = "))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|v| v.parse::<f64>().ok())
                .ok_or_else(|| format!("no tps in pgbench output: {text}"))
        });
        if let Ok(tps) = result {
            self.readings.push((kind, clients, tps));
        }
        self.cache
            .entry((kind, clients))
            .or_insert_with(|| result.clone());
        result
    }
}

pub fn find_pgbench() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("pgbench").is_file() {
                return Some(dir.join("pgbench"));
            }
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin/pgbench"))
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found.pop()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// References with no server: any measurement fails, so a test sees whether
    /// `tps` measured again or answered from its cache.
    fn references(paired: bool) -> References {
        let mut r = References {
            pgbench: None,
            server: None,
            db: None,
            cfg_duration: 1,
            cache: HashMap::new(),
            disabled: None,
            profile: None,
            profiles: HashMap::new(),
            paired,
            readings: Vec::new(),
        };
        r.cache.insert((RefKind::TpcbLike, 1), Ok(1000.0));
        r
    }

    #[test]
    fn paired_references_measure_again_for_every_row_and_keep_the_first() {
        let mut once = references(false);
        assert_eq!(once.tps(RefKind::TpcbLike, 1), Ok(1000.0));

        let mut paired = references(true);
        let again = paired.tps(RefKind::TpcbLike, 1);
        assert!(again.is_err(), "measured again: {again:?}");
        // The first reading stays the report's reference at that count.
        assert_eq!(paired.cache[&(RefKind::TpcbLike, 1)], Ok(1000.0));

        // A reference that failed is not tried again, paired or not.
        let failed = paired.tps(RefKind::TpcbLike, 8);
        assert!(failed.is_err());
        // Measuring again would now fail with this message instead.
        paired.disabled = Some("would have run".into());
        assert_eq!(paired.tps(RefKind::TpcbLike, 8), failed);
    }
}
