//! Where the databases live: the PostgreSQL server at `DATABASE_URL`, or a private
//! cluster started for this process.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::db::embedded::Cluster;

/// How to reach a PostgreSQL server: its admin URL and the URL of any database on
/// it. Cheap to clone; owns nothing (a private cluster is owned by [`PrivateCluster`]).
#[derive(Debug, Clone)]
pub enum PgServer {
    /// The server at a URL (`DATABASE_URL`); that URL is the admin URL.
    Url(String),
    /// A private cluster, reached over the Unix socket in this directory.
    Socket(PathBuf),
}

/// The user and port of every private cluster (see `db::embedded`).
const PRIVATE_USER: &str = "orbit";
const PRIVATE_PORT: u16 = 5432;

impl PgServer {
    /// The server at `DATABASE_URL`, when it is set and not blank.
    pub fn from_env() -> Option<PgServer> {
        database_url().map(PgServer::Url)
    }

    /// The URL of database `db` on this server.
    pub fn url_for(&self, db: &str) -> String {
        match self {
            PgServer::Url(url) => replace_db(url, db),
            PgServer::Socket(socket) => format!(
                "postgres://{PRIVATE_USER}@/{db}?host={}&port={PRIVATE_PORT}",
                socket.display()
            ),
        }
    }

    /// A URL to connect to for CREATE/DROP DATABASE.
    pub fn admin_url(&self) -> String {
        match self {
            PgServer::Url(url) => url.clone(),
            PgServer::Socket(_) => self.url_for("postgres"),
        }
    }

    /// Connection arguments for libpq command-line tools (`pgbench`), database last.
    pub fn client_args(&self, db: &str) -> Vec<String> {
        match self {
            PgServer::Url(_) => vec![self.url_for(db)],
            PgServer::Socket(socket) => vec![
                "-h".into(),
                socket.display().to_string(),
                "-p".into(),
                PRIVATE_PORT.to_string(),
                "-U".into(),
                PRIVATE_USER.into(),
                db.into(),
            ],
        }
    }

    /// One line for a report, without the password.
    pub fn describe(&self) -> String {
        match self {
            PgServer::Url(url) => format!("DATABASE_URL server ({})", redact(url)),
            PgServer::Socket(socket) => {
                format!("private cluster (socket {})", socket.display())
            }
        }
    }
}

/// `DATABASE_URL`, when it is set and not blank.
pub fn database_url() -> Option<String> {
    std::env::var("DATABASE_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db`.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    match (rest.find(':'), rest.find('@')) {
        (Some(c), Some(a)) if c < a => {
            format!("{}{}:***{}", &url[..scheme_end], &rest[..c], &rest[a..])
        }
        _ => url.to_owned(),
    }
}

/// Replaces the database name of a PostgreSQL URL, keeping its query.
pub fn replace_db(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let head = match base[scheme_end..].find('/') {
        Some(i) => &base[..i + scheme_end],
        None => base,
    };
    match query {
        Some(q) => format!("{head}/{db}?{q}"),
        None => format!("{head}/{db}"),
    }
}

/// The database name in a PostgreSQL URL.
pub fn db_name_of(url: &str) -> Option<String> {
    let base = url.split('?').next()?;
    let after_scheme = &base[base.find("://")? + 3..];
    let name = &after_scheme[after_scheme.find('/')? + 1..];
    (!name.is_empty()).then(|| name.to_owned())
}

/// A private PostgreSQL cluster in a directory of its own: stopped and the directory
/// removed when dropped, whatever state its user left it in.
#[derive(Debug)]
pub struct PrivateCluster {
    dir: PathBuf,
    cluster: Option<Cluster>,
    url: String,
}

impl PrivateCluster {
    /// Starts a cluster under `dir` (created if needed).
    pub fn start(dir: &Path) -> Result<PrivateCluster, String> {
        let (cluster, url) = Cluster::start(dir)?;
        Ok(PrivateCluster {
            dir: dir.to_owned(),
            cluster: Some(cluster),
            url,
        })
    }

    /// This process's cluster directory for a prefix: `$TMPDIR/<prefix>-<pid>`.
    pub fn process_dir(prefix: &str) -> PathBuf {
        std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()))
    }

    /// Removes the clusters that dead processes left under `$TMPDIR/<prefix>-<pid>`,
    /// then starts this process's own there.
    pub fn for_process(prefix: &str) -> Result<PrivateCluster, String> {
        remove_stale_clusters(prefix);
        PrivateCluster::start(&PrivateCluster::process_dir(prefix))
    }

    /// The URL of the cluster's default database (`orbit`, as the service uses).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// How to reach it.
    pub fn server(&self) -> PgServer {
        PgServer::Socket(self.cluster().socket_dir.clone())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cluster itself (for `stop_now` / `restart` in outage tests).
    pub fn cluster(&self) -> &Cluster {
        self.cluster.as_ref().expect("a running private cluster")
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        if let Some(mut c) = self.cluster.take() {
            c.stop();
        }
        // A postmaster left behind (e.g. by a failure during a restart).
        let pidfile = self.dir.join("postgres/data/postmaster.pid");
        if quit_postmaster(&pidfile) {
            let deadline = Instant::now() + Duration::from_secs(10);
            while pidfile.exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Sends SIGQUIT (PostgreSQL's immediate shutdown) to the postmaster named by a
/// cluster's pid file; false when there is none.
fn quit_postmaster(pidfile: &Path) -> bool {
    let Some(pid) = std::fs::read_to_string(pidfile)
        .ok()
        .and_then(|t| t.lines().next().and_then(|l| l.trim().parse::<i32>().ok()))
    else {
        return false;
    };
    // SAFETY: sending a signal has no memory-safety preconditions; the pid is the
    // postmaster of a cluster this kit started.
    unsafe {
        libc::kill(pid, libc::SIGQUIT);
    }
    true
}

/// Stops and removes the clusters under `$TMPDIR/<prefix>-<pid>` whose process no
/// longer runs.
pub fn remove_stale_clusters(prefix: &str) {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    let prefix = format!("{prefix}-");
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(&prefix)
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if super::process_alive(pid) {
            continue;
        }
        if quit_postmaster(&entry.path().join("postgres/data/postmaster.pid")) {
            std::thread::sleep(Duration::from_millis(500));
        }
        let _ = std::fs::remove_dir_all(entry.path());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            replace_db("postgres://u:p@h:5432/a?sslmode=disable", "b"),
            "postgres://u:p@h:5432/b?sslmode=disable"
        );
        assert_eq!(replace_db("postgres://u@h", "b"), "postgres://u@h/b");
        assert_eq!(redact("postgres://u:p@h/a"), "postgres://u:***@h/a");
        assert_eq!(db_name_of("postgres://u@h/a?x=1").as_deref(), Some("a"));
        let s = PgServer::Socket("/tmp/s".into());
        assert_eq!(s.url_for("x"), "postgres://orbit@/x?host=/tmp/s&port=5432");
        assert_eq!(s.client_args("x").last().map(String::as_str), Some("x"));
    }
}
