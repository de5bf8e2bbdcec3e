//! The embedded default: with no `DATABASE_URL`, the service starts (or reuses) a
//! private PostgreSQL cluster under `ORBIT_DATA_DIR/postgres` with the system's
//! `initdb` and `pg_ctl`, talks to it over a Unix socket only, and stops it on
//! shutdown if it started it.
//!
//! `initdb` and `pg_ctl` refuse to run as root. When we are root, they run as the
//! unprivileged `postgres` system user (created by the Debian packages), which is
//! given the cluster directory.

use std::ffi::CString;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What to install when no PostgreSQL server binaries can be found.
pub const INSTALL_HINT: &str =
    "No PostgreSQL server binaries (initdb, pg_ctl) were found on PATH or \
under /usr/lib/postgresql/*/bin: install them (Debian/Ubuntu: `apt-get install postgresql`; \
Fedora: `dnf install postgresql-server`; macOS: `brew install postgresql`) or set DATABASE_URL \
to an existing server.";

const DB_NAME: &str = "orbit";
const SUPERUSER: &str = "orbit";
const PORT: u16 = 5432;

#[derive(Debug)]
pub struct Cluster {
    pub data_dir: PathBuf,
    pub socket_dir: PathBuf,
    bin_dir: PathBuf,
    run_as: Option<(u32, u32)>,
    /// True when this process started the server (and so stops it).
    started_here: bool,
}

fn find_bin_dir() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("initdb").is_file() && dir.join("pg_ctl").is_file() {
                return Some(dir);
            }
        }
    }
    let mut candidates: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|bin| bin.join("initdb").is_file() && bin.join("pg_ctl").is_file())
        .collect();
    // Highest major version first.
    candidates.sort_by_key(|p| {
        std::cmp::Reverse(
            p.parent()
                .and_then(|v| v.file_name())
                .and_then(|v| v.to_str())
                .and_then(|v| v.parse::<u32>().ok())
                .unwrap_or(0),
        )
    });
    candidates.into_iter().next()
}

/// The uid/gid of the unprivileged user to run PostgreSQL as, when we are root.
fn unprivileged_user() -> Result<Option<(u32, u32)>, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let name = std::env::var("ORBIT_PG_USER").unwrap_or_else(|_| "postgres".to_owned());
    let cname = CString::new(name.clone()).map_err(|_| "bad ORBIT_PG_USER".to_owned())?;
    // SAFETY: getpwnam returns a pointer to static storage or null; we copy out at once.
    let pw = unsafe { libc::getpwnam(cname.as_ptr()) };
    if pw.is_null() {
        return Err(format!(
            "running as root, PostgreSQL must run as an unprivileged user, but user `{name}` \
             does not exist: create it (`useradd --system {name}`) or set ORBIT_PG_USER"
        ));
    }
    // SAFETY: pw is non-null and points to a valid passwd struct.
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    Ok(Some((uid, gid)))
}

fn chown_tree(path: &Path, uid: u32, gid: u32) -> Result<(), String> {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: c is a valid NUL-terminated path.
    if unsafe { libc::chown(c.as_ptr(), uid, gid) } != 0 {
        return Err(format!(
            "cannot give {} to the PostgreSQL user: {}",
            path.display(),
            std::io::Error::last_os_error()
        ));
    }
    if path.is_dir() && !path.is_symlink() {
        for entry in std::fs::read_dir(path)
            .map_err(|e| e.to_string())?
            .flatten()
        {
            chown_tree(&entry.path(), uid, gid)?;
        }
    }
    Ok(())
}

impl Cluster {
    /// Prepares (initdb if needed) and starts the cluster under `root`, or reuses a
    /// running one. Returns the connection URL.
    pub fn start(root: &Path) -> Result<(Cluster, String), String> {
        let bin_dir = find_bin_dir().ok_or_else(|| INSTALL_HINT.to_owned())?;
        let run_as = unprivileged_user()?;
        std::fs::create_dir_all(root)
            .map_err(|e| format!("cannot create ORBIT_DATA_DIR {}: {e}", root.display()))?;
        let root = root
            .canonicalize()
            .map_err(|e| format!("cannot resolve {}: {e}", root.display()))?;
        let base = root.join("postgres");
        let data_dir = base.join("data");
        let socket_dir = base.join("run");
        if socket_dir.join(".s.PGSQL.5432").as_os_str().len() > 100 {
            return Err(format!(
                "ORBIT_DATA_DIR {} is too long for a Unix socket path; choose a shorter one",
                root.display()
            ));
        }
        std::fs::create_dir_all(&socket_dir).map_err(|e| e.to_string())?;
        if let Some((uid, gid)) = run_as {
            // The postgres user must be able to reach the directory.
            let mut dir = Some(root.as_path());
            while let Some(d) = dir {
                if let Ok(meta) = std::fs::metadata(d) {
                    let mode = meta.permissions().mode();
                    if mode & 0o001 == 0 {
                        let _ = std::fs::set_permissions(
                            d,
                            std::fs::Permissions::from_mode(mode | 0o011),
                        );
                    }
                }
                dir = d.parent();
            }
            chown_tree(&base, uid, gid)?;
        }
        let mut cluster = Cluster {
            data_dir,
            socket_dir,
            bin_dir,
            run_as,
            started_here: false,
        };
        if !cluster.data_dir.join("PG_VERSION").is_file() {
            cluster.initdb()?;
        }
        if !cluster.is_running() {
            cluster.pg_ctl_start()?;
            cluster.started_here = true;
        }
        cluster.ensure_database()?;
        let url = format!(
            "postgres://{SUPERUSER}@/{DB_NAME}?host={}&port={PORT}",
            cluster.socket_dir.display()
        );
        Ok((cluster, url))
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin_dir.join(program));
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid).gid(gid);
            cmd.env("HOME", &self.data_dir);
        }
        cmd.env("LC_ALL", "C.UTF-8");
        cmd.stdin(Stdio::null());
        cmd
    }

    fn run(&self, mut cmd: Command, what: &str) -> Result<String, String> {
        let out = cmd
            .output()
            .map_err(|e| format!("cannot run {what}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{what} failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// A new cluster in the `C` locale (byte order, compared with `memcmp`) with the
    /// character type `C.UTF-8`, which knows Unicode: full-text search splits words
    /// at `—`, `“` or `…` as a server in a UTF-8 locale does (in plain `C` every
    /// non-ASCII character is a letter). Where the system has no `C.UTF-8`, plain
    /// `C`.
    fn initdb(&self) -> Result<(), String> {
        let mut last = String::new();
        for ctype in ["C.UTF-8", "C"] {
            let mut cmd = self.command("initdb");
            cmd.arg("-D")
                .arg(&self.data_dir)
                .args(["-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "--no-sync"])
                .arg("--locale=C")
                .arg(format!("--lc-ctype={ctype}"));
            match self.run(cmd, "initdb") {
                Ok(_) => return Ok(()),
                Err(e) => {
                    tracing::warn!(ctype, error = %e, "initdb failed; trying the next character type");
                    last = e;
                }
            }
        }
        Err(last)
    }

    pub fn is_running(&self) -> bool {
        let mut cmd = self.command("pg_ctl");
        cmd.arg("status").arg("-D").arg(&self.data_dir);
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        matches!(cmd.status(), Ok(s) if s.success())
    }

    fn pg_ctl_start(&self) -> Result<(), String> {
        let log = self.data_dir.join("server.log");
        let opts = format!(
            "-c listen_addresses='' -c unix_socket_directories='{}' -c unix_socket_permissions=0700 \
             -p {PORT} -c max_connections=200 -c shared_buffers={}kB",
            self.socket_dir.display(),
            shared_buffers_kb(),
        );
        let mut cmd = self.command("pg_ctl");
        cmd.arg("start")
            .arg("-w")
            .arg("-t")
            .arg("60")
            .arg("-D")
            .arg(&self.data_dir)
            .arg("-l")
            .arg(&log)
            .arg("-o")
            .arg(opts);
        // pg_ctl's postmaster must outlive neither our stdout nor our stderr pipes.
        cmd.stdout(Stdio::null()).stderr(Stdio::piped());
        self.run(cmd, "pg_ctl start")
            .map_err(|e| format!("{e} (server log: {})", log.display()))?;
        Ok(())
    }

    fn ensure_database(&self) -> Result<(), String> {
        use diesel::{Connection, PgConnection, RunQueryDsl};
        let admin = format!(
            "postgres://{SUPERUSER}@/postgres?host={}&port={PORT}",
            self.socket_dir.display()
        );
        let mut conn = PgConnection::establish(&admin)
            .map_err(|e| format!("cannot connect to the private cluster: {e}"))?;
        #[derive(diesel::QueryableByName)]
        struct Exists {
            #[diesel(sql_type = diesel::sql_types::Bool)]
            exists: bool,
        }
        let found: Exists = diesel::sql_query(format!(
            "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = '{DB_NAME}') AS exists"
        ))
        .get_result(&mut conn)
        .map_err(|e| e.to_string())?;
        if !found.exists {
            match diesel::sql_query(format!("CREATE DATABASE {DB_NAME}")).execute(&mut conn) {
                Ok(_) => {}
                // Another instance created it at the same moment.
                Err(e) if e.to_string().contains("already exists") => {}
                Err(e) => return Err(format!("cannot create database {DB_NAME}: {e}")),
            }
        }
        Ok(())
    }

    /// A URL for another database on the same cluster (used by the test harness).
    pub fn url_for(&self, database: &str) -> String {
        format!(
            "postgres://{SUPERUSER}@/{database}?host={}&port={PORT}",
            self.socket_dir.display()
        )
    }

    /// Stops the server if this process started it.
    pub fn stop(&mut self) {
        if !self.started_here {
            return;
        }
        let mut cmd = self.command("pg_ctl");
        cmd.arg("stop")
            .arg("-w")
            .arg("-m")
            .arg("fast")
            .arg("-D")
            .arg(&self.data_dir);
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        if let Err(e) = cmd.status() {
            tracing::warn!(error = %e, "could not stop the private PostgreSQL cluster");
        }
        self.started_here = false;
    }

    /// Stops the server immediately (for outage tests).
    pub fn stop_now(&self) -> Result<(), String> {
        let mut cmd = self.command("pg_ctl");
        cmd.args(["stop", "-w", "-m", "immediate", "-D"])
            .arg(&self.data_dir);
        self.run(cmd, "pg_ctl stop").map(|_| ())
    }

    /// Starts the server again after `stop_now`.
    pub fn restart(&self) -> Result<(), String> {
        self.pg_ctl_start()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The private cluster's `shared_buffers`: a quarter of the machine's memory, as
/// PostgreSQL's documentation suggests for a dedicated server, between its default
/// (128 MB) and 1 GiB. With the default, a data set larger than 128 MB (the search
/// bench's is 600 MB) is read through the operating system's cache page by page,
/// and search's walks of an orbit's scattered rows slowed to several times their
/// cost (docs/DECISIONS.md, "Search").
fn shared_buffers_kb() -> u64 {
    const DEFAULT_KB: u64 = 128 * 1024;
    const MAX_KB: u64 = 1024 * 1024;
    let total_kb = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .unwrap_or(0);
    (total_kb / 4).clamp(DEFAULT_KB, MAX_KB)
}
