//! The references: `pgbench -b tpcb-like` and `pgbench -S` on the same server, at
//! the same client counts.

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
        if let Some(r) = self.cache.get(&(kind, clients)) {
            return r.clone();
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
                self.profiles
                    .insert((kind, clients), probe.finish(txns, true));
            }
            text.lines()
                .find_map(|l| l.trim().strip_prefix("tps = "))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|v| v.parse::<f64>().ok())
                .ok_or_else(|| format!("no tps in pgbench output: {text}"))
        });
        self.cache.insert((kind, clients), result.clone());
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
