//! The PostgreSQL server and the service process of one run, set up and torn down
//! through `orbit_commons::testkit`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use orbit_commons::testkit::process::Spawn;
use orbit_commons::testkit::{database, PgServer, PrivateCluster, Service};

/// Everything the run created, torn down in this order: service, databases, cluster.
#[derive(Default)]
pub struct Resources {
    pub service: Option<Service>,
    pub service_pid: Option<u32>,
    pub server: Option<PgServer>,
    /// The private cluster, when there is no DATABASE_URL.
    pub cluster: Option<PrivateCluster>,
    pub bench_db: Option<String>,
    pub pgbench_db: Option<String>,
}

impl Resources {
    pub fn cleanup(&mut self) {
        if let Some(mut service) = self.service.take() {
            service.terminate(Duration::from_secs(15));
        }
        if let Some(server) = self.server.take() {
            for db in [self.bench_db.take(), self.pgbench_db.take()]
                .into_iter()
                .flatten()
            {
                if let Err(e) = database::drop(&server, &db) {
                    eprintln!("warning: could not drop database {db}: {e}");
                }
            }
        }
        // Stops the cluster and removes its directory.
        self.cluster.take();
    }
}

impl Drop for Resources {
    fn drop(&mut self) {
        self.cleanup();
    }
}

/// The `orbit-commons` binary next to this executable. Under `cargo run` (which
/// builds only the bench), it is (re)built first with the same profile, so the bench
/// never measures a stale service.
pub fn service_binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find own executable: {e}"))?;
    let dir = exe
        .parent()
        .ok_or("own executable has no directory")?
        .to_path_buf();
    let bin = dir.join("orbit-commons");
    if let (Some(cargo), Some(manifest)) = (
        std::env::var_os("CARGO"),
        std::env::var_os("CARGO_MANIFEST_DIR"),
    ) {
        let profile = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("release")
            .to_owned();
        let profile = if profile == "debug" {
            "dev".to_owned()
        } else {
            profile
        };
        eprintln!("building orbit-commons ({profile} profile) next to the bench");
        let status = Command::new(cargo)
            .args(["build", "--profile", &profile, "--bin", "orbit-commons"])
            .current_dir(manifest)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .map_err(|e| format!("cannot run cargo build: {e}"))?;
        if !status.success() {
            return Err("cargo build --bin orbit-commons failed".into());
        }
    }
    if !bin.is_file() {
        return Err(format!(
            "{} not found: build both binaries first (`cargo build --release --bins`)",
            bin.display()
        ));
    }
    // Run directly (not under cargo): refuse a service binary older than the library
    // it was linked from, which means it was not rebuilt after a change.
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let newest_lib = std::fs::read_dir(dir.join("deps"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("liborbit_commons-") && name.ends_with(".rlib")
        })
        .filter_map(|e| modified(&e.path()))
        .max();
    if let (Some(b), Some(l)) = (modified(&bin), newest_lib) {
        if b < l {
            return Err(format!(
                "{} is older than the library it is built from: run `cargo build --release --bins` first",
                bin.display()
            ));
        }
    }
    Ok(bin)
}

/// Starts `orbit-commons serve` on `port` against `database_url`, its output in `log`.
pub fn spawn_service(database_url: &str, port: u16, log: &Path) -> Result<Service, String> {
    let bin = service_binary()?;
    let data_dir = std::env::temp_dir().join(format!("orbit-bench-{}-svc", std::process::id()));
    Spawn::new(bin, "orbit-commons", log.to_owned())
        .env("DATABASE_URL", database_url)
        .env("ORBIT_LOG", "warn")
        .env("ORBIT_DATA_DIR", data_dir.display().to_string())
        .env("ORBIT_REGISTER_RATE_LIMIT_PER_HOUR", "10000000")
        .env("ORBIT_RATE_LIMIT_PER_MINUTE", "10000000")
        .env("ORBIT_ANON_RATE_LIMIT_PER_MINUTE", "10000000")
        // The events scenario opens its subscribers' streams from one address
        // (the most the setting allows).
        .env("ORBIT_MAX_STREAMS_PER_CLIENT", "10000")
        // The webhooks scenario delivers to a receiver on 127.0.0.1.
        .env("ORBIT_WEBHOOK_ALLOW_PRIVATE", "true")
        .on_port(port)
}
