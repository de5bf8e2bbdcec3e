//! `orbit-bench`: measures the service against the database's own limit (issue 9).
//!
//! ```text
//! cargo run --release --bin orbit-bench -- --scenario all
//! cargo run --release --bin orbit-bench -- --scenario lease-cycle --clients 8 --duration 20
//! cargo run --release --bin orbit-bench -- --smoke
//! ```
//!
//! Unless `--url` is given, the bench starts the `orbit-commons` binary that sits
//! next to its own executable as a separate process, on a fresh database: a new
//! database `orbit_bench_<pid>` on the server at `DATABASE_URL`, or, without
//! `DATABASE_URL`, a private cluster under the temporary directory. It seeds data
//! through the real API (bulk rows with SQL into the same database), runs every
//! scenario for a fixed duration after a warm-up with N concurrent virtual agents
//! (each with its own token), and measures `pgbench -b tpcb-like` and `pgbench -S`
//! at the same client counts on the same PostgreSQL server as references. It prints
//! a Markdown table and writes the same rows as JSON, with the service's memory,
//! the token cache hit rate and every target marked met or missed.
//!
//! Every figure is a ratio against the reference measured in the same run: the
//! machine is small and shared, so absolute numbers mean little.

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use diesel::sql_types::{Array, BigInt, Nullable, Text};
use diesel::{Connection, PgConnection, QueryableByName, RunQueryDsl};
use orbit_commons::db::embedded::Cluster;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde_json::{json, Value};

// ---------------------------------------------------------------------------
// Command line

#[derive(Parser, Debug, Clone)]
#[command(
    name = "orbit-bench",
    about = "Load-tests Orbit Commons against pgbench on the same PostgreSQL server (issue 9)."
)]
struct Args {
    /// Scenarios: `all` or a comma-separated list of lease-cycle, handoff-chain,
    /// idempotent-replay, public-get, authed-get, changes-feed, overview.
    #[arg(long, default_value = "all")]
    scenario: String,

    /// Client counts (concurrent virtual agents), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    clients: Vec<usize>,

    /// Measured seconds per scenario, shape and client count (also pgbench's -T).
    #[arg(long, default_value_t = 10)]
    duration: u64,

    /// Warm-up seconds before each measurement (requests made then are not counted).
    #[arg(long, default_value_t = 2)]
    warmup: u64,

    /// Target a running service instead of starting one. Set DATABASE_URL to that
    /// service's database to enable bulk seeding and the pgbench references.
    #[arg(long)]
    url: Option<String>,

    /// With --url: the service's process id, to report its memory.
    #[arg(long)]
    pid: Option<u32>,

    /// Where to write the JSON results.
    #[arg(long, default_value = "target/bench/results.json")]
    json: PathBuf,

    /// Skip the pgbench references.
    #[arg(long)]
    no_pgbench: bool,

    /// CI smoke run: authed-get, 1 client, 2 s, no pgbench; checks the tool runs.
    #[arg(long)]
    smoke: bool,

    /// Also profile every row: CPU per request of the service, its database backends
    /// and the load generator; transactions and (with pg_stat_statements, which is
    /// preloaded into the private cluster for this) statements per request; what the
    /// backends wait on. Sampling costs a little throughput: take the headline table
    /// from a run without it.
    #[arg(long)]
    profile: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Scenario {
    LeaseCycle,
    HandoffChain,
    IdempotentReplay,
    PublicGet,
    AuthedGet,
    ChangesFeed,
    Overview,
}

impl Scenario {
    const ALL: [Scenario; 7] = [
        Scenario::LeaseCycle,
        Scenario::HandoffChain,
        Scenario::IdempotentReplay,
        Scenario::PublicGet,
        Scenario::AuthedGet,
        Scenario::ChangesFeed,
        Scenario::Overview,
    ];

    fn name(self) -> &'static str {
        match self {
            Scenario::LeaseCycle => "lease-cycle",
            Scenario::HandoffChain => "handoff-chain",
            Scenario::IdempotentReplay => "idempotent-replay",
            Scenario::PublicGet => "public-get",
            Scenario::AuthedGet => "authed-get",
            Scenario::ChangesFeed => "changes-feed",
            Scenario::Overview => "overview",
        }
    }

    /// The pgbench reference a scenario is compared with.
    fn reference(self) -> RefKind {
        match self {
            Scenario::LeaseCycle | Scenario::HandoffChain | Scenario::IdempotentReplay => {
                RefKind::TpcbLike
            }
            _ => RefKind::SelectOnly,
        }
    }

    fn parse_list(text: &str) -> Result<Vec<Scenario>, String> {
        let mut out = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if part == "all" {
                out.extend(Scenario::ALL);
                continue;
            }
            let s = Scenario::ALL
                .into_iter()
                .find(|s| s.name() == part)
                .ok_or_else(|| {
                    format!(
                        "unknown scenario `{part}`; use all or one of: {}",
                        Scenario::ALL.map(|s| s.name()).join(", ")
                    )
                })?;
            out.push(s);
        }
        out.sort();
        out.dedup();
        if out.is_empty() {
            return Err("no scenario given".into());
        }
        Ok(out)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
enum RefKind {
    TpcbLike,
    SelectOnly,
}

impl RefKind {
    fn name(self) -> &'static str {
        match self {
            RefKind::TpcbLike => "tpcb-like",
            RefKind::SelectOnly => "select-only",
        }
    }

    fn flags(self) -> &'static [&'static str] {
        match self {
            RefKind::TpcbLike => &["-b", "tpcb-like"],
            RefKind::SelectOnly => &["-S"],
        }
    }
}

// ---------------------------------------------------------------------------
// The PostgreSQL server, the service process, cleanup

/// Where the databases live.
enum PgServer {
    /// The server at DATABASE_URL (an admin URL on it).
    Url(String),
    /// A private cluster under a temporary directory.
    Cluster { cluster: Cluster, dir: PathBuf },
}

impl PgServer {
    fn url_for(&self, db: &str) -> String {
        match self {
            PgServer::Url(url) => replace_db(url, db),
            PgServer::Cluster { cluster, .. } => cluster.url_for(db),
        }
    }

    fn admin_url(&self) -> String {
        match self {
            PgServer::Url(url) => url.clone(),
            PgServer::Cluster { cluster, .. } => cluster.url_for("postgres"),
        }
    }

    fn describe(&self) -> String {
        match self {
            PgServer::Url(url) => format!("DATABASE_URL server ({})", redact(url)),
            PgServer::Cluster { cluster, .. } => {
                format!("private cluster (socket {})", cluster.socket_dir.display())
            }
        }
    }
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db`.
fn redact(url: &str) -> String {
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
fn replace_db(url: &str, db: &str) -> String {
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

fn admin_exec(server: &PgServer, sql: &str) -> Result<(), String> {
    let mut conn = PgConnection::establish(&server.admin_url())
        .map_err(|e| format!("cannot connect to the PostgreSQL server: {e}"))?;
    diesel::sql_query(sql)
        .execute(&mut conn)
        .map(|_| ())
        .map_err(|e| format!("{sql}: {e}"))
}

/// Drops bench databases left by bench processes that no longer run.
fn drop_stale_databases(server: &PgServer) {
    #[derive(QueryableByName)]
    struct Name {
        #[diesel(sql_type = Text)]
        datname: String,
    }
    let Ok(mut conn) = PgConnection::establish(&server.admin_url()) else {
        return;
    };
    let names: Vec<Name> = diesel::sql_query(
        "SELECT datname FROM pg_database \
         WHERE datname LIKE 'orbit\\_bench\\_%' OR datname LIKE 'orbit\\_pgbench\\_%'",
    )
    .load(&mut conn)
    .unwrap_or_default();
    for n in names {
        let Some(pid) = n
            .datname
            .rsplit('_')
            .next()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = diesel::sql_query(format!(
                "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
                n.datname
            ))
            .execute(&mut conn);
        }
    }
}

/// Stops and removes private clusters of bench processes that no longer run.
fn remove_stale_clusters() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("orbit-bench-")
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let pidfile = entry.path().join("postgres/data/postmaster.pid");
        if let Some(pm) = std::fs::read_to_string(pidfile)
            .ok()
            .and_then(|t| t.lines().next().and_then(|l| l.trim().parse::<i32>().ok()))
        {
            // SAFETY: sending a signal has no memory-safety preconditions. SIGQUIT is
            // PostgreSQL's immediate shutdown of the orphaned postmaster we started.
            unsafe {
                libc::kill(pm, libc::SIGQUIT);
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let _ = std::fs::remove_dir_all(entry.path());
    }
}

/// Everything the run created, torn down in `Drop` order: service, databases, cluster.
struct Resources {
    service: Option<Child>,
    service_pid: Option<u32>,
    server: Option<PgServer>,
    bench_db: Option<String>,
    pgbench_db: Option<String>,
}

impl Resources {
    fn stop_service(&mut self) {
        let Some(mut child) = self.service.take() else {
            return;
        };
        // SAFETY: signalling the child process we started, by its id.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            match child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return;
                }
            }
        }
    }

    fn cleanup(&mut self) {
        self.stop_service();
        if let Some(server) = &self.server {
            for db in [self.bench_db.take(), self.pgbench_db.take()]
                .into_iter()
                .flatten()
            {
                if let Err(e) = admin_exec(
                    server,
                    &format!("DROP DATABASE IF EXISTS \"{db}\" WITH (FORCE)"),
                ) {
                    eprintln!("warning: could not drop database {db}: {e}");
                }
            }
        }
        if let Some(PgServer::Cluster { mut cluster, dir }) = self.server.take() {
            cluster.stop();
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Drop for Resources {
    fn drop(&mut self) {
        self.cleanup();
    }
}

fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

/// The `orbit-commons` binary next to this executable. Under `cargo run` (which
/// builds only the bench), it is (re)built first with the same profile, so the bench
/// never measures a stale service.
fn service_binary() -> Result<PathBuf, String> {
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

fn spawn_service(database_url: &str, port: u16, log: &Path) -> Result<Child, String> {
    let bin = service_binary()?;
    let log_file =
        std::fs::File::create(log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
    let err_file = log_file.try_clone().map_err(|e| e.to_string())?;
    let data_dir = std::env::temp_dir().join(format!("orbit-bench-{}-svc", std::process::id()));
    Command::new(&bin)
        .arg("serve")
        .env("DATABASE_URL", database_url)
        .env("ORBIT_BIND", format!("127.0.0.1:{port}"))
        .env("ORBIT_LOG", "warn")
        .env("ORBIT_DATA_DIR", data_dir)
        .env("ORBIT_REGISTER_RATE_LIMIT_PER_HOUR", "10000000")
        .env("ORBIT_RATE_LIMIT_PER_MINUTE", "10000000")
        .env("ORBIT_ANON_RATE_LIMIT_PER_MINUTE", "10000000")
        .stdin(Stdio::null())
        .stdout(log_file)
        .stderr(err_file)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))
}

/// `VmRSS` and `VmHWM` of a process, in KiB.
fn memory_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

fn find_pgbench() -> Option<PathBuf> {
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

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "n/a".into())
}

// ---------------------------------------------------------------------------
// HTTP

/// The load generator's HTTP/1.1 client: persistent keep-alive connections, each
/// request written in one buffer and its response read by Content-Length (or
/// chunked). Like wrk or pgbench, it does as little as a client can, so the CPU
/// of this small machine goes to the service and the database being measured; a
/// general-purpose client (reqwest) cost about 30 us of CPU per request here,
/// half the service's own cost on a GET.
#[derive(Clone)]
struct Api {
    http: Arc<Http>,
    base: String,
}

struct Http {
    /// `host:port` to connect to.
    addr: String,
    /// Idle keep-alive connections; a request takes one and puts it back.
    idle: std::sync::Mutex<Vec<Conn>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    Get,
    Post,
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Method::Get => "GET",
            Method::Post => "POST",
        })
    }
}

/// Why a round trip failed: a reused connection that the server had already
/// closed fails before any byte of a response, and the request is sent again on
/// a new connection (the server never saw it).
enum Fail {
    Stale(String),
    Broken(String),
}

struct Conn {
    stream: tokio::net::TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    async fn open(addr: &str) -> Result<Conn, String> {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("transport: connect {addr}: {e}"))?;
        stream
            .set_nodelay(true)
            .map_err(|e| format!("transport: {e}"))?;
        Ok(Conn {
            stream,
            buf: Vec::with_capacity(16 * 1024),
        })
    }

    /// Reads at least one more byte into the buffer; false at end of stream.
    async fn fill(&mut self) -> Result<bool, String> {
        use tokio::io::AsyncReadExt as _;
        match self.stream.read_buf(&mut self.buf).await {
            Ok(0) => Ok(false),
            Ok(_) => Ok(true),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Sends one request and reads its response; the flag says whether the
    /// connection can carry another request.
    async fn round_trip(&mut self, request: &[u8]) -> Result<(Resp, bool), Fail> {
        use tokio::io::AsyncWriteExt as _;
        self.buf.clear();
        if let Err(e) = self.stream.write_all(request).await {
            return Err(Fail::Stale(format!("transport: {e}")));
        }
        // The head.
        let (status, head_len, length, chunked, mut keep, replayed) = loop {
            match self.fill().await {
                Ok(true) => {}
                Ok(false) if self.buf.is_empty() => {
                    return Err(Fail::Stale("transport: connection closed".into()))
                }
                Ok(false) => return Err(Fail::Broken("transport: closed mid-response".into())),
                Err(e) if self.buf.is_empty() => {
                    return Err(Fail::Stale(format!("transport: {e}")))
                }
                Err(e) => return Err(Fail::Broken(format!("transport: {e}"))),
            }
            let mut headers = [httparse::EMPTY_HEADER; 48];
            let mut parsed = httparse::Response::new(&mut headers);
            let head_len = match parsed.parse(&self.buf) {
                Ok(httparse::Status::Complete(n)) => n,
                Ok(httparse::Status::Partial) => continue,
                Err(e) => return Err(Fail::Broken(format!("transport: bad response: {e}"))),
            };
            let status = parsed.code.unwrap_or(0);
            let mut length = None;
            let mut chunked = false;
            let mut keep = parsed.version == Some(1);
            let mut replayed = false;
            for h in parsed.headers.iter() {
                let value = std::str::from_utf8(h.value).unwrap_or("").trim();
                if h.name.eq_ignore_ascii_case("content-length") {
                    length = value.parse::<usize>().ok();
                } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                    chunked = value.eq_ignore_ascii_case("chunked");
                } else if h.name.eq_ignore_ascii_case("connection") {
                    keep = !value.eq_ignore_ascii_case("close");
                } else if h.name.eq_ignore_ascii_case("idempotency-replayed") {
                    replayed = true;
                }
            }
            break (status, head_len, length, chunked, keep, replayed);
        };
        let broken = |e: String| Fail::Broken(format!("transport: {e}"));
        // The body.
        let body = if status == 204 || status == 304 || (100..200).contains(&status) {
            Vec::new()
        } else if chunked {
            let mut body = Vec::new();
            let mut at = head_len;
            loop {
                let line_end = loop {
                    if let Some(i) = self.buf[at..].windows(2).position(|w| w == b"\r\n") {
                        break at + i;
                    }
                    if !self.fill().await.map_err(broken)? {
                        return Err(broken("closed mid-chunk".into()));
                    }
                };
                let size_text = std::str::from_utf8(&self.buf[at..line_end]).unwrap_or("");
                let size_text = size_text.split(';').next().unwrap_or("").trim();
                let size = usize::from_str_radix(size_text, 16)
                    .map_err(|_| broken(format!("bad chunk size {size_text:?}")))?;
                let data = line_end + 2;
                // A chunk, or the last (empty) chunk and the final CRLF.
                while self.buf.len() < data + size + 2 {
                    if !self.fill().await.map_err(broken)? {
                        return Err(broken("closed mid-chunk".into()));
                    }
                }
                if size == 0 {
                    break;
                }
                body.extend_from_slice(&self.buf[data..data + size]);
                at = data + size + 2;
            }
            body
        } else if let Some(n) = length {
            while self.buf.len() < head_len + n {
                if !self.fill().await.map_err(broken)? {
                    return Err(broken("closed mid-body".into()));
                }
            }
            self.buf[head_len..head_len + n].to_vec()
        } else {
            // Neither length nor chunks: the body runs to the end of the stream.
            while self.fill().await.map_err(broken)? {}
            keep = false;
            self.buf[head_len..].to_vec()
        };
        Ok((
            Resp {
                status,
                body,
                replayed,
            },
            keep,
        ))
    }
}

#[derive(Debug, Clone)]
struct Agent {
    id: i64,
    token: String,
}

/// A response: status, body, and whether it was an idempotent replay.
struct Resp {
    status: u16,
    body: Vec<u8>,
    replayed: bool,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// `409 lease_conflict`-style label for an unexpected answer.
    fn label(&self) -> String {
        let code = self.json()["code"].as_str().unwrap_or("").to_owned();
        if code.is_empty() {
            self.status.to_string()
        } else {
            format!("{} {code}", self.status)
        }
    }
}

impl Api {
    fn new(base: &str) -> Result<Api, String> {
        let base = base.trim_end_matches('/').to_owned();
        let authority = base
            .strip_prefix("http://")
            .ok_or_else(|| format!("{base}: only http:// URLs can be benched"))?;
        let addr = authority.split('/').next().unwrap_or(authority).to_owned();
        if authority != addr {
            return Err(format!(
                "{base}: give the service's root URL, without a path"
            ));
        }
        Ok(Api {
            http: Arc::new(Http {
                addr,
                idle: std::sync::Mutex::new(Vec::new()),
            }),
            base,
        })
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        key: Option<&str>,
        body: Option<&Value>,
    ) -> Result<Resp, String> {
        use std::fmt::Write as _;
        let payload = body.map(|b| serde_json::to_vec(b).unwrap_or_default());
        let mut head = String::with_capacity(256);
        let _ = write!(
            head,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\n",
            self.http.addr
        );
        if let Some(t) = token {
            let _ = write!(head, "Authorization: Bearer {t}\r\n");
        }
        if let Some(k) = key {
            let _ = write!(head, "Idempotency-Key: {k}\r\n");
        }
        match &payload {
            Some(p) => {
                let _ = write!(
                    head,
                    "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    p.len()
                );
            }
            None if method == Method::Post => head.push_str("Content-Length: 0\r\n\r\n"),
            None => head.push_str("\r\n"),
        }
        let mut request = head.into_bytes();
        if let Some(p) = payload {
            request.extend_from_slice(&p);
        }
        let attempt = async {
            // A pooled connection the server has closed meanwhile fails before any
            // response byte: the request goes again on a new connection.
            let pooled = self
                .http
                .idle
                .lock()
                .map(|mut idle| idle.pop())
                .ok()
                .flatten();
            if let Some(mut conn) = pooled {
                match conn.round_trip(&request).await {
                    Ok((resp, keep)) => {
                        if keep {
                            self.put_back(conn);
                        }
                        return Ok(resp);
                    }
                    Err(Fail::Broken(e)) => return Err(e),
                    Err(Fail::Stale(_)) => {}
                }
            }
            let mut conn = Conn::open(&self.http.addr).await?;
            match conn.round_trip(&request).await {
                Ok((resp, keep)) => {
                    if keep {
                        self.put_back(conn);
                    }
                    Ok(resp)
                }
                Err(Fail::Broken(e) | Fail::Stale(e)) => Err(e),
            }
        };
        match tokio::time::timeout(Duration::from_secs(30), attempt).await {
            Ok(r) => r,
            Err(_) => Err("transport: timed out after 30 s".into()),
        }
    }

    fn put_back(&self, conn: Conn) {
        if let Ok(mut idle) = self.http.idle.lock() {
            idle.push(conn);
        }
    }

    async fn get(&self, path: &str, token: Option<&str>) -> Result<Resp, String> {
        self.send(Method::Get, path, token, None, None).await
    }

    /// A keyed POST with a fresh Idempotency-Key.
    async fn post_keyed(&self, path: &str, token: &str, body: &Value) -> Result<Resp, String> {
        let key = uuid::Uuid::new_v4().to_string();
        self.send(Method::Post, path, Some(token), Some(&key), Some(body))
            .await
    }

    /// Seeding helper: the request must answer `expect`; returns the JSON body.
    async fn must(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        keyed: bool,
        body: Option<Value>,
        expect: u16,
    ) -> Result<Value, String> {
        let key = keyed.then(|| uuid::Uuid::new_v4().to_string());
        let r = self
            .send(method, path, token, key.as_deref(), body.as_ref())
            .await?;
        if r.status != expect {
            return Err(format!(
                "{method} {path}: expected {expect}, got {}: {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            ));
        }
        Ok(r.json())
    }

    async fn register(&self, name: &str) -> Result<Agent, String> {
        let v = self
            .must(
                Method::Post,
                "/api/v1/contributors",
                None,
                false,
                Some(json!({"type": "AGENT", "name": name, "model_claim": "orbit-bench"})),
                201,
            )
            .await?;
        Ok(Agent {
            id: v["data"]["contributor"]["id"]
                .as_i64()
                .ok_or("no contributor id")?,
            token: v["data"]["token"].as_str().ok_or("no token")?.to_owned(),
        })
    }

    async fn create_orbit(&self, owner: &Agent, slug: &str) -> Result<i64, String> {
        let v = self
            .must(
                Method::Post,
                "/api/v1/orbits",
                Some(&owner.token),
                false,
                Some(json!({"slug": slug, "name": slug})),
                201,
            )
            .await?;
        v["data"]["id"].as_i64().ok_or_else(|| "no orbit id".into())
    }

    async fn join(&self, agent: &Agent, orbit: i64) -> Result<(), String> {
        self.must(
            Method::Post,
            &format!("/api/v1/orbits/{orbit}/join"),
            Some(&agent.token),
            false,
            None,
            201,
        )
        .await
        .map(|_| ())
    }

    async fn create_task(&self, who: &Agent, orbit: i64, title: &str) -> Result<i64, String> {
        let v = self
            .must(
                Method::Post,
                &format!("/api/v1/orbits/{orbit}/tasks"),
                Some(&who.token),
                true,
                Some(json!({"title": title})),
                201,
            )
            .await?;
        v["data"]["id"].as_i64().ok_or_else(|| "no task id".into())
    }

    async fn wait_ready(&self, child: Option<&mut Child>, log: &Path) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(180);
        let mut child = child;
        loop {
            if let Ok(r) = self.get("/readyz", None).await {
                if r.status == 200 {
                    return Ok(());
                }
            }
            if let Some(c) = child.as_deref_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    let tail = std::fs::read_to_string(log).unwrap_or_default();
                    return Err(format!(
                        "the service exited ({status}) before it was ready:\n{tail}"
                    ));
                }
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{}/readyz did not answer 200 within 180 s",
                    self.base
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `(hits, misses)` from /metrics, when the service exposes them.
    async fn token_cache_counters(&self) -> Option<(f64, f64)> {
        let r = self.get("/metrics", None).await.ok()?;
        if r.status != 200 {
            return None;
        }
        let text = String::from_utf8_lossy(&r.body).into_owned();
        let read = |name: &str| -> Option<f64> {
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .find(|l| l.split(['{', ' ']).next() == Some(name))
                .and_then(|l| l.split_whitespace().last())
                .and_then(|v| v.parse::<f64>().ok())
        };
        Some((
            read("orbit_token_cache_hits_total")?,
            read("orbit_token_cache_misses_total")?,
        ))
    }
}

// ---------------------------------------------------------------------------
// Measurement

#[derive(Clone, Copy)]
struct Window {
    from: Instant,
    until: Instant,
}

/// One virtual client's record of one measurement.
struct Rec {
    window: Window,
    latencies_us: Vec<u32>,
    errors: u64,
    kinds: BTreeMap<String, u64>,
    /// Every completed request, warm-up included (for CPU per request).
    all: u64,
}

impl Rec {
    fn new(window: Window) -> Rec {
        Rec {
            window,
            latencies_us: Vec::with_capacity(4096),
            errors: 0,
            kinds: BTreeMap::new(),
            all: 0,
        }
    }

    fn running(&self) -> bool {
        Instant::now() < self.window.until
    }

    /// Records a request that started at `t0`; only completions inside the window count.
    fn done(&mut self, t0: Instant, outcome: Result<(), String>) {
        let now = Instant::now();
        self.all += 1;
        if now < self.window.from || now >= self.window.until {
            return;
        }
        match outcome {
            Ok(()) => {
                let us = now.duration_since(t0).as_micros().min(u32::MAX as u128) as u32;
                self.latencies_us.push(us);
            }
            Err(kind) => {
                self.errors += 1;
                *self.kinds.entry(kind).or_default() += 1;
            }
        }
    }

    /// Checks `r` answered `expect` (and was a replay when `replay`), records it, and
    /// returns the response when it did.
    fn check(
        &mut self,
        t0: Instant,
        r: Result<Resp, String>,
        expect: u16,
        replay: bool,
    ) -> Option<Resp> {
        match r {
            Ok(resp) if resp.status == expect && (!replay || resp.replayed) => {
                self.done(t0, Ok(()));
                Some(resp)
            }
            Ok(resp) if resp.status == expect => {
                self.done(t0, Err("not replayed".into()));
                None
            }
            Ok(resp) => {
                self.done(t0, Err(resp.label()));
                None
            }
            Err(e) => {
                let kind = if e.contains("timed out") {
                    "timeout".to_owned()
                } else {
                    "transport error".to_owned()
                };
                self.done(t0, Err(kind));
                None
            }
        }
    }
}

#[derive(Debug, Clone, Serialize)]
struct Row {
    scenario: String,
    shape: String,
    clients: usize,
    requests: u64,
    requests_per_s: Option<f64>,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    errors: u64,
    error_kinds: BTreeMap<String, u64>,
    reference: Option<String>,
    reference_tps: Option<f64>,
    ratio: Option<f64>,
    note: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    profile: Option<Profile>,
}

impl Row {
    fn skipped(scenario: Scenario, shape: &str, clients: usize, note: String) -> Row {
        Row {
            scenario: scenario.name().into(),
            shape: shape.into(),
            clients,
            requests: 0,
            requests_per_s: None,
            p50_ms: None,
            p99_ms: None,
            errors: 0,
            error_kinds: BTreeMap::new(),
            reference: None,
            reference_tps: None,
            ratio: None,
            note: Some(note),
            profile: None,
        }
    }
}

fn percentile(sorted: &[u32], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1] as f64 / 1000.0)
}

/// Waits (at most 30 s) until no autovacuum worker runs on the server, then asks
/// for a checkpoint (ignored where the role may not). Best effort: errors are
/// ignored.
fn settle(admin_url: &str) {
    #[derive(QueryableByName)]
    struct Busy {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let Ok(mut conn) = PgConnection::establish(admin_url) else {
        return;
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let busy: Result<Busy, _> = diesel::sql_query(
            "SELECT count(*) AS n FROM pg_stat_activity \
             WHERE backend_type = 'autovacuum worker'",
        )
        .get_result(&mut conn);
        match busy {
            Ok(b) if b.n > 0 => std::thread::sleep(Duration::from_millis(200)),
            _ => break,
        }
    }
    let _ = diesel::sql_query("CHECKPOINT").execute(&mut conn);
}

/// Runs `clients` virtual clients concurrently for warm-up + duration. Each client
/// gets its state from `states` and returns it (so the next run continues from it).
async fn measure<S, F, Fut>(cfg: &RunCfg, states: Vec<S>, client: F) -> (Vec<S>, Rec)
where
    S: Send + 'static,
    F: Fn(S, Rec) -> Fut,
    Fut: std::future::Future<Output = (S, Rec)> + Send + 'static,
{
    let start = Instant::now();
    let window = Window {
        from: start + cfg.warmup,
        until: start + cfg.warmup + cfg.duration,
    };
    let handles: Vec<_> = states
        .into_iter()
        .map(|s| tokio::spawn(client(s, Rec::new(window))))
        .collect();
    let mut out_states = Vec::with_capacity(handles.len());
    let mut total = Rec::new(window);
    for h in handles {
        match h.await {
            Ok((s, rec)) => {
                out_states.push(s);
                total.latencies_us.extend(rec.latencies_us);
                total.errors += rec.errors;
                total.all += rec.all;
                for (k, v) in rec.kinds {
                    *total.kinds.entry(k).or_default() += v;
                }
            }
            Err(e) => {
                total.errors += 1;
                *total
                    .kinds
                    .entry(format!("client panicked: {e}"))
                    .or_default() += 1;
            }
        }
    }
    (out_states, total)
}

struct RunCfg {
    warmup: Duration,
    duration: Duration,
}

// ---------------------------------------------------------------------------
// Seeding

/// Rows inserted with SQL straight into the service's database.
struct Bulk {
    url: String,
}

#[derive(QueryableByName)]
struct IdRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

impl Bulk {
    fn conn(&self) -> Result<PgConnection, String> {
        PgConnection::establish(&self.url).map_err(|e| format!("bulk seeding: cannot connect: {e}"))
    }

    /// Inserts `n` OPEN tasks into `orbit` with their `task.created` change rows,
    /// keeping the orbit's revisions dense (the orbit row is locked, the change rows
    /// take the next `n` revisions, and `orbits.revision` ends at the new maximum).
    fn tasks(
        &self,
        orbit: i64,
        creator: i64,
        n: usize,
        problem: Option<i64>,
    ) -> Result<Vec<i64>, String> {
        let mut conn = self.conn()?;
        let ids = conn
            .transaction::<Vec<i64>, diesel::result::Error, _>(|c| {
                let rev0: IdRow =
                    diesel::sql_query("SELECT revision AS id FROM orbits WHERE id = $1 FOR UPDATE")
                        .bind::<BigInt, _>(orbit)
                        .get_result(c)?;
                let ids: Vec<IdRow> = diesel::sql_query(
                    "INSERT INTO tasks (orbit_id, problem_id, title, description, created_by) \
                     SELECT $1, $2, 'bench task ' || g, 'seeded by orbit-bench', $3 \
                     FROM generate_series(1, $4) AS g RETURNING id",
                )
                .bind::<BigInt, _>(orbit)
                .bind::<Nullable<BigInt>, _>(problem)
                .bind::<BigInt, _>(creator)
                .bind::<BigInt, _>(n as i64)
                .load(c)?;
                let mut ids: Vec<i64> = ids.into_iter().map(|r| r.id).collect();
                ids.sort_unstable();
                diesel::sql_query(
                    "INSERT INTO changes (orbit_id, revision, kind, entity_type, entity_id, \
                                          task_id, contributor_id, summary) \
                     SELECT $1, $2 + u.ord, 'task.created', 'task', u.id, u.id, $3, \
                            'task ' || u.id || ' created' \
                     FROM unnest($4::bigint[]) WITH ORDINALITY AS u(id, ord)",
                )
                .bind::<BigInt, _>(orbit)
                .bind::<BigInt, _>(rev0.id)
                .bind::<BigInt, _>(creator)
                .bind::<Array<BigInt>, _>(&ids)
                .execute(c)?;
                diesel::sql_query("UPDATE orbits SET revision = $2 WHERE id = $1")
                    .bind::<BigInt, _>(orbit)
                    .bind::<BigInt, _>(rev0.id + ids.len() as i64)
                    .execute(c)?;
                Ok(ids)
            })
            .map_err(|e| format!("bulk task insert: {e}"))?;
        if let Some(p) = problem {
            // The overview counts a problem's tasks from its counters row.
            if let Err(e) = diesel::sql_query(
                "UPDATE problem_counters SET tasks_open = tasks_open + $2 WHERE problem_id = $1",
            )
            .bind::<BigInt, _>(p)
            .bind::<BigInt, _>(ids.len() as i64)
            .execute(&mut conn)
            {
                eprintln!("warning: problem {p}'s task counter not updated: {e}");
            }
        }
        Ok(ids)
    }

    /// Gives the bulk-loaded tables statistics, as a database that grew through use
    /// would have. Tables still empty are left never-analyzed: statistics saying
    /// "empty" would make the planner trust their tiny size and keep sequential-scan
    /// plans for the tables the load then fills (autovacuum would fix that only
    /// after its next round, a minute later).
    fn analyze(&self) -> Result<(), String> {
        let mut conn = self.conn()?;
        diesel::sql_query(
            "DO $$ DECLARE t regclass; filled boolean; BEGIN \
                 FOR t IN SELECT c.oid FROM pg_class c \
                          JOIN pg_namespace n ON n.oid = c.relnamespace \
                          WHERE n.nspname = current_schema() AND c.relkind = 'r' LOOP \
                     EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s)', t) INTO filled; \
                     IF filled THEN EXECUTE format('ANALYZE %s', t); END IF; \
                 END LOOP; \
             END $$",
        )
        .execute(&mut conn)
        .map(|_| ())
        .map_err(|e| e.to_string())
    }

    /// Inserts `n` contributions of a problem (one revision each) with their
    /// `contribution.created` change rows, and adds them to the problem's counters,
    /// as the service would have. Follows the knowledge migration's schema.
    fn contributions(&self, orbit: i64, author: i64, problem: i64, n: usize) -> Result<(), String> {
        let mut conn = self.conn()?;
        conn.transaction::<(), diesel::result::Error, _>(|c| {
            let rev0: IdRow =
                diesel::sql_query("SELECT revision AS id FROM orbits WHERE id = $1 FOR UPDATE")
                    .bind::<BigInt, _>(orbit)
                    .get_result(c)?;
            let ids: Vec<IdRow> = diesel::sql_query(
                "INSERT INTO contributions (orbit_id, kind, author_id, problem_id, title, body, \
                                            created_at, updated_at) \
                 SELECT $1, (ARRAY['ATTEMPT','OBSERVATION','CLAIM','QUESTION','NOTE'])[1 + g % 5], \
                        $2, $3, 'bench contribution ' || g, 'seeded by orbit-bench', \
                        clock_timestamp(), clock_timestamp() \
                 FROM generate_series(1, $4) AS g RETURNING id",
            )
            .bind::<BigInt, _>(orbit)
            .bind::<BigInt, _>(author)
            .bind::<BigInt, _>(problem)
            .bind::<BigInt, _>(n as i64)
            .load(c)?;
            let mut ids: Vec<i64> = ids.into_iter().map(|r| r.id).collect();
            ids.sort_unstable();
            diesel::sql_query(
                "INSERT INTO contribution_revisions (contribution_id, revision, title, body, \
                                                     created_at) \
                 SELECT u.id, 1, 'bench contribution ' || u.id, 'seeded by orbit-bench', \
                        clock_timestamp() \
                 FROM unnest($1::bigint[]) AS u(id)",
            )
            .bind::<Array<BigInt>, _>(&ids)
            .execute(c)?;
            diesel::sql_query(
                "UPDATE problem_counters pc SET \
                     attempt = pc.attempt + k.attempt, observation = pc.observation + k.observation, \
                     claim = pc.claim + k.claim, question = pc.question + k.question, \
                     note = pc.note + k.note \
                 FROM (SELECT count(*) FILTER (WHERE kind = 'ATTEMPT') AS attempt, \
                              count(*) FILTER (WHERE kind = 'OBSERVATION') AS observation, \
                              count(*) FILTER (WHERE kind = 'CLAIM') AS claim, \
                              count(*) FILTER (WHERE kind = 'QUESTION') AS question, \
                              count(*) FILTER (WHERE kind = 'NOTE') AS note \
                       FROM contributions WHERE id = ANY($2::bigint[])) AS k \
                 WHERE pc.problem_id = $1",
            )
            .bind::<BigInt, _>(problem)
            .bind::<Array<BigInt>, _>(&ids)
            .execute(c)?;
            diesel::sql_query(
                "INSERT INTO changes (orbit_id, revision, kind, entity_type, entity_id, \
                                      task_id, contributor_id, summary) \
                 SELECT $1, $2 + u.ord, 'contribution.created', 'contribution', u.id, NULL, $3, \
                        'contribution ' || u.id || ' created' \
                 FROM unnest($4::bigint[]) WITH ORDINALITY AS u(id, ord)",
            )
            .bind::<BigInt, _>(orbit)
            .bind::<BigInt, _>(rev0.id)
            .bind::<BigInt, _>(author)
            .bind::<Array<BigInt>, _>(&ids)
            .execute(c)?;
            diesel::sql_query("UPDATE orbits SET revision = $2 WHERE id = $1")
                .bind::<BigInt, _>(orbit)
                .bind::<BigInt, _>(rev0.id + ids.len() as i64)
                .execute(c)?;
            Ok(())
        })
        .map_err(|e| format!("bulk contribution insert: {e}"))
    }
}

/// Fresh-task cursor of one lease-cycle client: cycles use the next task each time,
/// wrapping around (a released task can be leased again) if the pool runs out.
struct TaskPool {
    tasks: Arc<Vec<i64>>,
    next: Arc<AtomicUsize>,
}

impl TaskPool {
    fn take(&self) -> i64 {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        self.tasks[i % self.tasks.len()]
    }
}

/// The state of one handoff chain: a task passed back and forth between two agents.
#[derive(Clone)]
struct Chain {
    agents: [Agent; 2],
    task: i64,
    checkpoint: i64,
    holder: usize,
    version: i64,
}

struct BigOrbit {
    label: &'static str,
    orbit: i64,
    revision: i64,
    problem: Option<i64>,
}

/// Everything seeded.
#[derive(Default)]
struct World {
    agents: Vec<Agent>,
    partners: Vec<Agent>,
    hot_owner: Option<Agent>,
    spread_orbits: Vec<i64>,
    hot_orbit: Option<i64>,
    spread_pools: Vec<TaskPool>,
    hot_pools: Vec<TaskPool>,
    chains: Vec<Chain>,
    replay: Vec<(i64, String)>,
    /// Contributions in the hot orbit, read by `public-get contribution`.
    hot_contributions: Vec<i64>,
    big: Vec<BigOrbit>,
    knowledge: Option<bool>,
    notes: Vec<String>,
}

async fn register_many(api: &Api, prefix: &str, n: usize) -> Result<Vec<Agent>, String> {
    let mut out: Vec<Option<Agent>> = vec![None; n];
    let mut set = tokio::task::JoinSet::new();
    let mut next = 0;
    // A few at a time: each registration runs argon2 in the service.
    while next < n || !set.is_empty() {
        while next < n && set.len() < 4 {
            let api = api.clone();
            let name = format!("{prefix}-{next}");
            let i = next;
            set.spawn(async move { (i, api.register(&name).await) });
            next += 1;
        }
        if let Some(done) = set.join_next().await {
            let (i, agent) = done.map_err(|e| e.to_string())?;
            out[i] = Some(agent?);
        }
    }
    Ok(out.into_iter().flatten().collect())
}

struct Seeder<'a> {
    api: &'a Api,
    bulk: Option<&'a Bulk>,
    run_tag: String,
}

/// Tasks per lease-cycle client: seeded with SQL when the database is reachable.
const POOL_SQL: usize = 1000;
const POOL_HTTP: usize = 8;

impl Seeder<'_> {
    async fn tasks(
        &self,
        who: &Agent,
        orbit: i64,
        n: usize,
        problem: Option<i64>,
    ) -> Result<Vec<i64>, String> {
        if let Some(bulk) = self.bulk {
            let bulk_url = bulk.url.clone();
            let creator = who.id;
            return tokio::task::spawn_blocking(move || {
                Bulk { url: bulk_url }.tasks(orbit, creator, n, problem)
            })
            .await
            .map_err(|e| e.to_string())?;
        }
        let mut ids = Vec::with_capacity(n);
        for i in 0..n {
            ids.push(
                self.api
                    .create_task(who, orbit, &format!("bench task {i}"))
                    .await?,
            );
        }
        Ok(ids)
    }

    async fn seed(
        &self,
        world: &mut World,
        scenarios: &[Scenario],
        max_c: usize,
    ) -> Result<(), String> {
        let api = self.api;
        let tag = &self.run_tag;
        let has = |s: Scenario| scenarios.contains(&s);
        let need_spread = has(Scenario::LeaseCycle)
            || has(Scenario::HandoffChain)
            || has(Scenario::IdempotentReplay);
        let need_hot = has(Scenario::LeaseCycle) || has(Scenario::PublicGet);
        let need_big = has(Scenario::ChangesFeed) || has(Scenario::Overview);

        eprintln!("seeding: registering {max_c} agents");
        world.agents = register_many(api, &format!("bench-{tag}-a"), max_c).await?;
        if need_spread {
            eprintln!("seeding: {max_c} spread orbits");
            for (i, a) in world.agents.iter().enumerate() {
                world
                    .spread_orbits
                    .push(api.create_orbit(a, &format!("bench-{tag}-s{i}")).await?);
            }
        }
        if need_hot || need_big {
            let owner = api.register(&format!("bench-{tag}-hot-owner")).await?;
            if need_hot {
                let hot = api
                    .create_orbit(&owner, &format!("bench-{tag}-hot"))
                    .await?;
                for a in &world.agents {
                    api.join(a, hot).await?;
                }
                world.hot_orbit = Some(hot);
            }
            world.hot_owner = Some(owner);
        }
        if has(Scenario::LeaseCycle) {
            let per = if self.bulk.is_some() {
                POOL_SQL
            } else {
                POOL_HTTP
            };
            eprintln!("seeding: {per} tasks per lease-cycle client and shape");
            for (i, a) in world.agents.iter().enumerate() {
                let ids = self.tasks(a, world.spread_orbits[i], per, None).await?;
                world.spread_pools.push(TaskPool {
                    tasks: Arc::new(ids),
                    next: Arc::new(AtomicUsize::new(0)),
                });
            }
            let hot = world.hot_orbit.ok_or("no hot orbit")?;
            for a in &world.agents {
                let ids = self.tasks(a, hot, per, None).await?;
                world.hot_pools.push(TaskPool {
                    tasks: Arc::new(ids),
                    next: Arc::new(AtomicUsize::new(0)),
                });
            }
        } else if has(Scenario::PublicGet) {
            let hot = world.hot_orbit.ok_or("no hot orbit")?;
            let owner = world.hot_owner.clone().ok_or("no hot owner")?;
            self.tasks(&owner, hot, 100, None).await?;
        }
        if has(Scenario::PublicGet) {
            let hot = world.hot_orbit.ok_or("no hot orbit")?;
            let owner = world.hot_owner.clone().ok_or("no hot owner")?;
            let kinds = ["ATTEMPT", "OBSERVATION", "CLAIM", "QUESTION", "NOTE"];
            for i in 0..32 {
                let v = api
                    .must(
                        Method::Post,
                        &format!("/api/v1/orbits/{hot}/contributions"),
                        Some(&owner.token),
                        true,
                        Some(
                            json!({"kind": kinds[i % 5], "title": format!("read me {i}"),
                                    "body": "seeded by orbit-bench for public-get"}),
                        ),
                        201,
                    )
                    .await?;
                world
                    .hot_contributions
                    .push(v["data"]["id"].as_i64().ok_or("no contribution id")?);
            }
        }
        if has(Scenario::HandoffChain) {
            eprintln!("seeding: {max_c} handoff chains");
            world.partners = register_many(api, &format!("bench-{tag}-p"), max_c).await?;
            for i in 0..max_c {
                let (a, b) = (world.agents[i].clone(), world.partners[i].clone());
                let orbit = world.spread_orbits[i];
                api.join(&b, orbit).await?;
                let task = api.create_task(&a, orbit, "handoff chain").await?;
                let lease = api
                    .must(
                        Method::Post,
                        &format!("/api/v1/tasks/{task}/leases"),
                        Some(&a.token),
                        true,
                        Some(json!({"duration_seconds": 3600})),
                        201,
                    )
                    .await?;
                let version = lease["data"]["lease_version"]
                    .as_i64()
                    .ok_or("no version")?;
                let ck = api
                    .must(
                        Method::Post,
                        &format!("/api/v1/tasks/{task}/checkpoints"),
                        Some(&a.token),
                        true,
                        Some(json!({"lease_version": version, "summary": "start",
                                    "state": {"step": 0}})),
                        201,
                    )
                    .await?;
                world.chains.push(Chain {
                    agents: [a, b],
                    task,
                    checkpoint: ck["data"]["id"].as_i64().ok_or("no checkpoint id")?,
                    holder: 0,
                    version,
                });
            }
        }
        if has(Scenario::IdempotentReplay) {
            for (i, a) in world.agents.iter().enumerate() {
                let key = format!("bench-replay-{tag}-{i}");
                let path = format!("/api/v1/orbits/{}/tasks", world.spread_orbits[i]);
                let r = api
                    .send(
                        Method::Post,
                        &path,
                        Some(&a.token),
                        Some(&key),
                        Some(&json!({"title": "replayed task"})),
                    )
                    .await?;
                if r.status != 201 {
                    return Err(format!("replay seed: {}", String::from_utf8_lossy(&r.body)));
                }
                world.replay.push((world.spread_orbits[i], key));
            }
        }
        if need_big {
            self.seed_big(world, has(Scenario::Overview)).await?;
        }
        if let Some(bulk) = self.bulk {
            let url = bulk.url.clone();
            tokio::task::spawn_blocking(move || Bulk { url }.analyze())
                .await
                .map_err(|e| e.to_string())??;
        }
        Ok(())
    }

    /// Whether the knowledge routes exist: a route-level 404 ("No route matches")
    /// means they do not.
    async fn knowledge_present(&self, world: &World) -> Result<bool, String> {
        let owner = world.hot_owner.as_ref().ok_or("no owner")?;
        let r = self
            .api
            .get("/api/v1/problems/1/overview", Some(&owner.token))
            .await?;
        if r.status != 404 {
            return Ok(true);
        }
        let msg = r.json()["message"].as_str().unwrap_or("").to_owned();
        Ok(!msg.contains("No route"))
    }

    /// The 1k and 100k orbits: with the knowledge routes, a problem whose rows are
    /// half contributions and half tasks (the five newest contributions made through
    /// the API); without them, tasks only. Every row has its change row, so the
    /// orbit's revision is about the row count.
    async fn seed_big(&self, world: &mut World, overview: bool) -> Result<(), String> {
        let owner = world.hot_owner.clone().ok_or("no owner")?;
        let knowledge = overview && self.knowledge_present(world).await?;
        world.knowledge = Some(knowledge);
        for (label, rows) in [("1k", 1_000usize), ("100k", 100_000usize)] {
            if self.bulk.is_none() && rows > 2_000 {
                world.notes.push(format!(
                    "the {label} orbit needs SQL bulk seeding: set DATABASE_URL to the service's database"
                ));
                continue;
            }
            eprintln!("seeding: the {label} orbit ({rows} rows)");
            let orbit = self
                .api
                .create_orbit(&owner, &format!("bench-{}-big-{label}", self.run_tag))
                .await?;
            let mut problem = None;
            let mut n_tasks = rows - 1;
            if knowledge {
                let v = self
                    .api
                    .must(
                        Method::Post,
                        &format!("/api/v1/orbits/{orbit}/problems"),
                        Some(&owner.token),
                        true,
                        Some(json!({"title": format!("bench problem {label}"),
                                    "statement": "seeded by orbit-bench"})),
                        201,
                    )
                    .await?;
                let p = v["data"]["id"].as_i64().ok_or("no problem id")?;
                problem = Some(p);
                let n_contrib = rows / 2 - 5;
                n_tasks = rows - 2 - rows / 2;
                match &self.bulk {
                    Some(bulk) => {
                        let url = bulk.url.clone();
                        let author = owner.id;
                        let r = tokio::task::spawn_blocking(move || {
                            Bulk { url }.contributions(orbit, author, p, n_contrib)
                        })
                        .await
                        .map_err(|e| e.to_string())?;
                        if let Err(e) = r {
                            world.notes.push(format!(
                                "{label} orbit: contributions not bulk-seeded ({e}); tasks only"
                            ));
                        }
                    }
                    None => {
                        for i in 0..n_contrib {
                            self.contribution(&owner, orbit, p, i).await?;
                        }
                    }
                }
            }
            self.tasks(&owner, orbit, n_tasks, problem).await?;
            if let Some(p) = problem {
                for i in 0..5 {
                    self.contribution(&owner, orbit, p, i).await?;
                }
            }
            let v = self
                .api
                .must(
                    Method::Get,
                    &format!("/api/v1/orbits/{orbit}"),
                    None,
                    false,
                    None,
                    200,
                )
                .await?;
            world.big.push(BigOrbit {
                label,
                orbit,
                revision: v["data"]["revision"].as_i64().unwrap_or(0),
                problem,
            });
        }
        Ok(())
    }

    async fn contribution(
        &self,
        owner: &Agent,
        orbit: i64,
        problem: i64,
        i: usize,
    ) -> Result<(), String> {
        let kinds = ["ATTEMPT", "OBSERVATION", "CLAIM", "QUESTION", "NOTE"];
        self.api
            .must(
                Method::Post,
                &format!("/api/v1/orbits/{orbit}/contributions"),
                Some(&owner.token),
                true,
                Some(
                    json!({"kind": kinds[i % 5], "title": format!("bench contribution {i}"),
                            "body": "seeded by orbit-bench", "problem_id": problem}),
                ),
                201,
            )
            .await
            .map(|_| ())
    }
}

// ---------------------------------------------------------------------------
// Scenarios (one async fn per virtual client)

async fn lease_cycle_client(
    (api, agent, pool): (Api, Agent, TaskPool),
    mut rec: Rec,
) -> ((Api, Agent, TaskPool), Rec) {
    let mut step = 0u64;
    while rec.running() {
        let task = pool.take();
        let t0 = Instant::now();
        let r = api
            .post_keyed(
                &format!("/api/v1/tasks/{task}/leases"),
                &agent.token,
                &json!({"duration_seconds": 900}),
            )
            .await;
        let Some(resp) = rec.check(t0, r, 201, false) else {
            continue;
        };
        let v = resp.json();
        let (Some(lease), Some(version)) = (
            v["data"]["id"].as_i64(),
            v["data"]["lease_version"].as_i64(),
        ) else {
            continue;
        };
        step += 1;
        let t0 = Instant::now();
        let r = api
            .post_keyed(
                &format!("/api/v1/tasks/{task}/checkpoints"),
                &agent.token,
                &json!({"lease_version": version, "summary": "bench step",
                        "state": {"step": step, "notes": "checkpoint from orbit-bench"}}),
            )
            .await;
        rec.check(t0, r, 201, false);
        // Always release, even past the window, so the task is free for a later run.
        let t0 = Instant::now();
        let r = api
            .post_keyed(
                &format!("/api/v1/leases/{lease}/release"),
                &agent.token,
                &json!({"lease_version": version}),
            )
            .await;
        rec.check(t0, r, 200, false);
    }
    ((api, agent, pool), rec)
}

/// Re-reads a chain's task after an error: who holds it now, under which version.
async fn resync_chain(api: &Api, chain: &mut Chain) {
    let Ok(r) = api
        .get(&format!("/api/v1/tasks/{}", chain.task), None)
        .await
    else {
        return;
    };
    let v = r.json();
    let lease = &v["data"]["active_lease"];
    if let (Some(who), Some(version)) = (
        lease["contributor"]["id"].as_i64(),
        lease["lease_version"].as_i64(),
    ) {
        if let Some(h) = chain.agents.iter().position(|a| a.id == who) {
            chain.holder = h;
            chain.version = version;
            return;
        }
    }
    // Nobody holds it: the first agent takes it again.
    if let Ok(r) = api
        .post_keyed(
            &format!("/api/v1/tasks/{}/leases", chain.task),
            &chain.agents[0].token,
            &json!({"duration_seconds": 3600}),
        )
        .await
    {
        if let Some(version) = r.json()["data"]["lease_version"].as_i64() {
            chain.holder = 0;
            chain.version = version;
        }
    }
}

async fn handoff_chain_client((api, mut chain): (Api, Chain), mut rec: Rec) -> ((Api, Chain), Rec) {
    while rec.running() {
        let giver = chain.agents[chain.holder].clone();
        let taker = chain.agents[1 - chain.holder].clone();
        let t0 = Instant::now();
        let r = api
            .post_keyed(
                &format!("/api/v1/tasks/{}/handoffs", chain.task),
                &giver.token,
                &json!({"lease_version": chain.version, "checkpoint_id": chain.checkpoint,
                        "to_contributor_id": taker.id, "message": "your turn"}),
            )
            .await;
        let Some(handoff) = rec
            .check(t0, r, 201, false)
            .and_then(|r| r.json()["data"]["id"].as_i64())
        else {
            resync_chain(&api, &mut chain).await;
            continue;
        };
        let t0 = Instant::now();
        let r = api
            .post_keyed(
                &format!("/api/v1/handoffs/{handoff}/accept"),
                &taker.token,
                &json!({"duration_seconds": 3600}),
            )
            .await;
        match rec
            .check(t0, r, 200, false)
            .and_then(|r| r.json()["data"]["lease"]["lease_version"].as_i64())
        {
            Some(v) => {
                chain.version = v;
                chain.holder = 1 - chain.holder;
            }
            None => resync_chain(&api, &mut chain).await,
        }
    }
    ((api, chain), rec)
}

async fn replay_client(
    (api, agent, path, key): (Api, Agent, String, String),
    mut rec: Rec,
) -> ((Api, Agent, String, String), Rec) {
    let body = json!({"title": "replayed task"});
    while rec.running() {
        let t0 = Instant::now();
        let r = api
            .send(
                Method::Post,
                &path,
                Some(&agent.token),
                Some(&key),
                Some(&body),
            )
            .await;
        rec.check(t0, r, 201, true);
    }
    ((api, agent, path, key), rec)
}

/// Anonymous or authenticated GETs of a rotating set of paths.
async fn get_client(
    (api, token, paths, seed): (Api, Option<String>, Arc<Vec<String>>, u64),
    mut rec: Rec,
) -> ((Api, Option<String>, Arc<Vec<String>>, u64), Rec) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    while rec.running() {
        let path = &paths[rng.gen_range(0..paths.len())];
        let t0 = Instant::now();
        let r = api.get(path, token.as_deref()).await;
        rec.check(t0, r, 200, false);
    }
    ((api, token, paths, seed), rec)
}

/// Pages of the change feed from a random `after`.
async fn feed_client(
    (api, orbit, revision, seed): (Api, i64, i64, u64),
    mut rec: Rec,
) -> ((Api, i64, i64, u64), Rec) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let top = (revision - 100).max(0);
    while rec.running() {
        let after = rng.gen_range(0..=top);
        let t0 = Instant::now();
        let r = api
            .get(
                &format!("/api/v1/orbits/{orbit}/changes?after={after}&limit=100"),
                None,
            )
            .await;
        rec.check(t0, r, 200, false);
    }
    ((api, orbit, revision, seed), rec)
}

// ---------------------------------------------------------------------------
// References

struct References {
    pgbench: Option<PathBuf>,
    server: Option<PgServerRef>,
    db: Option<String>,
    cfg_duration: u64,
    cache: HashMap<(RefKind, usize), Result<f64, String>>,
    disabled: Option<String>,
    /// Profile pgbench runs too (`--profile`): whether pg_stat_statements is there.
    profile: Option<bool>,
    profiles: HashMap<(RefKind, usize), Profile>,
}

/// pgbench connection arguments for a database (the database name last).
type ConnArgs = Box<dyn Fn(&str) -> Vec<String> + Send>;

/// What `References` needs of the server (it borrows nothing from `Resources`).
struct PgServerRef {
    admin_url: String,
    /// pgbench connection arguments for a database (the database name last).
    conn_for: ConnArgs,
}

impl PgServerRef {
    fn from(server: &PgServer) -> PgServerRef {
        let conn_for = match server {
            PgServer::Url(url) => {
                let url = url.clone();
                Box::new(move |db: &str| vec![replace_db(&url, db)]) as ConnArgs
            }
            PgServer::Cluster { cluster, .. } => {
                let socket = cluster.socket_dir.display().to_string();
                Box::new(move |db: &str| {
                    vec![
                        "-h".into(),
                        socket.clone(),
                        "-p".into(),
                        "5432".into(),
                        "-U".into(),
                        "orbit".into(),
                        db.into(),
                    ]
                })
            }
        };
        PgServerRef {
            admin_url: server.admin_url(),
            conn_for,
        }
    }
}

impl References {
    fn run_pgbench(&self, args: &[String]) -> Result<String, String> {
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
    fn prepare(&mut self) -> Result<(), String> {
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
        let mut conn = PgConnection::establish(&server.admin_url)
            .map_err(|e| format!("pgbench: cannot connect: {e}"))?;
        diesel::sql_query(format!("CREATE DATABASE \"{db}\""))
            .execute(&mut conn)
            .map_err(|e| format!("pgbench: CREATE DATABASE: {e}"))?;
        self.db = Some(db.clone());
        eprintln!("reference: pgbench -i -s 10 into {db}");
        let mut args: Vec<String> = vec!["-i".into(), "-s".into(), "10".into(), "-q".into()];
        args.extend((server.conn_for)(&db));
        self.run_pgbench(&args).map(|_| ()).inspect_err(|e| {
            self.disabled = Some(e.clone());
        })
    }

    fn tps(&mut self, kind: RefKind, clients: usize) -> Result<f64, String> {
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
            args.extend((server.conn_for)(&db));
            let probe = self
                .profile
                .map(|pgss| Probe::start(&server.admin_url, &db, None, pgss));
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

// ---------------------------------------------------------------------------
// Profiling (--profile): where the time of each row goes

/// User + system CPU of a process, in microseconds.
fn proc_cpu_us(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the command name: state is field 3 of the file, utime 14, stime 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) * 1_000_000 / clock_ticks())
}

fn clock_ticks() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// Machine-wide (busy, total) CPU time in microseconds, from /proc/stat.
fn machine_cpu_us() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() < 8 {
        return None;
    }
    let idle = v[3] + v[4];
    let total: u64 = v.iter().sum();
    let tck = clock_ticks();
    Some(((total - idle) * 1_000_000 / tck, total * 1_000_000 / tck))
}

/// CPU used by waited-for children (pgbench), in microseconds.
fn children_cpu_us() -> u64 {
    // SAFETY: getrusage writes into the zeroed struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_CHILDREN is a valid selector.
    unsafe {
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru);
    }
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    us(ru.ru_utime) + us(ru.ru_stime)
}

/// The database name in a PostgreSQL URL.
fn db_name_of(url: &str) -> Option<String> {
    let base = url.split('?').next()?;
    let after_scheme = &base[base.find("://")? + 3..];
    let name = &after_scheme[after_scheme.find('/')? + 1..];
    (!name.is_empty()).then(|| name.to_owned())
}

/// Samples `pg_stat_activity` for one database every few milliseconds in its own
/// thread: what the backends are doing (running, waiting on a lock, on WAL, idle
/// inside a transaction while the service works between statements), and their CPU.
struct Sampler {
    stop: Arc<std::sync::atomic::AtomicBool>,
    handle: std::thread::JoinHandle<Sampled>,
}

#[derive(Default)]
struct Sampled {
    rounds: u64,
    states: BTreeMap<String, u64>,
    cpu_first: HashMap<i32, u64>,
    cpu_last: HashMap<i32, u64>,
    error: Option<String>,
}

impl Sampled {
    fn backend_cpu_us(&self) -> u64 {
        self.cpu_last
            .iter()
            .map(|(pid, last)| last.saturating_sub(*self.cpu_first.get(pid).unwrap_or(last)))
            .sum()
    }
}

impl Sampler {
    fn start(admin_url: String, datname: String) -> Sampler {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            #[derive(QueryableByName)]
            struct Activity {
                #[diesel(sql_type = diesel::sql_types::Integer)]
                pid: i32,
                #[diesel(sql_type = Text)]
                state: String,
                #[diesel(sql_type = Text)]
                wait: String,
            }
            let mut out = Sampled::default();
            let mut conn = match PgConnection::establish(&admin_url) {
                Ok(c) => c,
                Err(e) => {
                    out.error = Some(e.to_string());
                    return out;
                }
            };
            while !flag.load(Ordering::Relaxed) {
                let rows: Vec<Activity> = match diesel::sql_query(
                    "SELECT pid, coalesce(state, '') AS state, \
                            coalesce(wait_event_type || ':' || wait_event, '') AS wait \
                     FROM pg_stat_activity \
                     WHERE datname = $1 AND backend_type = 'client backend' \
                       AND pid <> pg_backend_pid()",
                )
                .bind::<Text, _>(&datname)
                .load(&mut conn)
                {
                    Ok(r) => r,
                    Err(e) => {
                        out.error = Some(e.to_string());
                        break;
                    }
                };
                out.rounds += 1;
                for r in rows {
                    let label = match (r.state.as_str(), r.wait.as_str()) {
                        ("active", "") => "active: on CPU".to_owned(),
                        ("active", w) => format!("active: waiting on {w}"),
                        ("idle in transaction", _) => {
                            "idle in transaction (waiting for the client's next statement)"
                                .to_owned()
                        }
                        ("idle", _) => "idle (not in use)".to_owned(),
                        (s, _) => s.to_owned(),
                    };
                    *out.states.entry(label).or_default() += 1;
                    if let Some(cpu) = proc_cpu_us(r.pid as u32) {
                        out.cpu_first.entry(r.pid).or_insert(cpu);
                        out.cpu_last.insert(r.pid, cpu);
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            out
        });
        Sampler { stop, handle }
    }

    fn finish(self) -> Sampled {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

#[derive(Debug, Clone, Serialize)]
struct StatementRow {
    calls_per_unit: f64,
    mean_ms: f64,
    share_of_time: f64,
    query: String,
}

/// What a row cost, per request (or per pgbench transaction).
#[derive(Debug, Clone, Serialize, Default)]
struct Profile {
    span_s: f64,
    units: u64,
    service_cpu_us: Option<f64>,
    backend_cpu_us: Option<f64>,
    client_cpu_us: Option<f64>,
    machine_busy_pct: Option<f64>,
    /// Machine CPU not used by the service, its backends or the load generator
    /// (other builds on a shared machine), as % of the machine.
    others_pct: Option<f64>,
    statements_per_unit: Option<f64>,
    /// Mean number of the database's backends in each state.
    backend_states: BTreeMap<String, f64>,
    top_statements: Vec<StatementRow>,
    note: Option<String>,
}

/// Before/after counters around one measured row.
struct Probe {
    admin_url: String,
    datname: String,
    service_pid: Option<u32>,
    pgss: bool,
    started: Instant,
    service_cpu: Option<u64>,
    self_cpu: Option<u64>,
    children_cpu: u64,
    machine: Option<(u64, u64)>,
    sampler: Option<Sampler>,
}

impl Probe {
    fn start(admin_url: &str, datname: &str, service_pid: Option<u32>, pgss: bool) -> Probe {
        if pgss {
            if let Ok(mut c) = PgConnection::establish(admin_url) {
                let _ = diesel::sql_query("SELECT pg_stat_statements_reset()").execute(&mut c);
            }
        }
        Probe {
            admin_url: admin_url.to_owned(),
            datname: datname.to_owned(),
            service_pid,
            pgss,
            started: Instant::now(),
            service_cpu: service_pid.and_then(proc_cpu_us),
            self_cpu: proc_cpu_us(std::process::id()),
            children_cpu: children_cpu_us(),
            machine: machine_cpu_us(),
            sampler: Some(Sampler::start(admin_url.to_owned(), datname.to_owned())),
        }
    }

    /// `units` requests (or transactions) were completed; `client_is_child` when the
    /// load generator was a waited-for child (pgbench) rather than this process.
    fn finish(mut self, units: u64, client_is_child: bool) -> Profile {
        let sampled = self.sampler.take().map(Sampler::finish).unwrap_or_default();
        let span = self.started.elapsed();
        // Let backends flush their statistics (at most once a second when idle).
        std::thread::sleep(Duration::from_millis(1100));
        let per = |us: u64| (units > 0).then(|| us as f64 / units as f64);
        let service = match (self.service_pid.and_then(proc_cpu_us), self.service_cpu) {
            (Some(b), Some(a)) if !client_is_child => per(b.saturating_sub(a)),
            _ => None,
        };
        let client_us = if client_is_child {
            Some(children_cpu_us().saturating_sub(self.children_cpu))
        } else {
            match (proc_cpu_us(std::process::id()), self.self_cpu) {
                (Some(b), Some(a)) => Some(b.saturating_sub(a)),
                _ => None,
            }
        };
        let backend_us = sampled.backend_cpu_us();
        let (busy_pct, others_pct) = match (machine_cpu_us(), self.machine) {
            (Some((b1, t1)), Some((b0, t0))) if t1 > t0 => {
                let total = (t1 - t0) as f64;
                let busy = (b1 - b0) as f64;
                let ours = backend_us as f64
                    + client_us.unwrap_or(0) as f64
                    + if client_is_child {
                        0.0
                    } else {
                        service.unwrap_or(0.0) * units as f64
                    };
                (
                    Some(100.0 * busy / total),
                    Some((100.0 * (busy - ours) / total).max(0.0)),
                )
            }
            _ => (None, None),
        };
        let mut profile = Profile {
            span_s: span.as_secs_f64(),
            units,
            service_cpu_us: service,
            backend_cpu_us: per(backend_us),
            client_cpu_us: client_us.and_then(per),
            machine_busy_pct: busy_pct,
            others_pct,
            statements_per_unit: None,
            backend_states: sampled
                .states
                .iter()
                .map(|(k, v)| (k.clone(), *v as f64 / sampled.rounds.max(1) as f64))
                .collect(),
            top_statements: Vec::new(),
            note: sampled.error.clone(),
        };
        if self.pgss && units > 0 {
            self.statements(&mut profile, units);
        }
        profile
    }

    fn statements(&self, profile: &mut Profile, units: u64) {
        #[derive(QueryableByName)]
        struct Stmt {
            #[diesel(sql_type = BigInt)]
            calls: i64,
            #[diesel(sql_type = diesel::sql_types::Double)]
            ms: f64,
            #[diesel(sql_type = Text)]
            query: String,
        }
        let Ok(mut conn) = PgConnection::establish(&self.admin_url) else {
            return;
        };
        let rows: Vec<Stmt> = match diesel::sql_query(
            "SELECT s.calls::bigint AS calls, s.total_exec_time AS ms, s.query \
             FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid \
             WHERE d.datname = $1 ORDER BY s.total_exec_time DESC",
        )
        .bind::<Text, _>(&self.datname)
        .load(&mut conn)
        {
            Ok(r) => r,
            Err(e) => {
                profile.note = Some(format!("pg_stat_statements: {e}"));
                return;
            }
        };
        let calls: i64 = rows.iter().map(|r| r.calls).sum();
        let total_ms: f64 = rows.iter().map(|r| r.ms).sum();
        profile.statements_per_unit = Some(calls as f64 / units as f64);
        profile.top_statements = rows
            .iter()
            .take(40)
            .map(|r| StatementRow {
                calls_per_unit: r.calls as f64 / units as f64,
                mean_ms: if r.calls > 0 {
                    r.ms / r.calls as f64
                } else {
                    0.0
                },
                share_of_time: if total_ms > 0.0 { r.ms / total_ms } else { 0.0 },
                query: r
                    .query
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
                    .chars()
                    .take(160)
                    .collect(),
            })
            .collect();
    }
}

/// Makes pg_stat_statements available on the private cluster (profile runs only):
/// preloads it and restarts the cluster before the service starts.
fn enable_pgss(server: &PgServer) -> Result<bool, String> {
    #[derive(QueryableByName)]
    struct Setting {
        #[diesel(sql_type = Text)]
        setting: String,
    }
    let preloaded = |server: &PgServer| -> Result<bool, String> {
        let mut conn = PgConnection::establish(&server.admin_url()).map_err(|e| e.to_string())?;
        let s: Setting = diesel::sql_query(
            "SELECT setting FROM pg_settings WHERE name = 'shared_preload_libraries'",
        )
        .get_result(&mut conn)
        .map_err(|e| e.to_string())?;
        Ok(s.setting.contains("pg_stat_statements"))
    };
    if !preloaded(server)? {
        let PgServer::Cluster { cluster, .. } = server else {
            return Ok(false);
        };
        admin_exec(
            server,
            "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'",
        )?;
        cluster.stop_now()?;
        cluster.restart()?;
    }
    admin_exec(server, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")?;
    Ok(true)
}

fn profile_table(rows: &[Row], refs: &[RefRow]) -> String {
    let mut out = String::from(
        "| row | units | service CPU µs | backends CPU µs | client CPU µs | machine busy % | others % | statements | backends: CPU / row lock / object lock / IO+WAL / idle in tx |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    let line = |name: String, p: &Profile| {
        let sum = |pred: &dyn Fn(&str) -> bool| -> f64 {
            p.backend_states
                .iter()
                .filter(|(k, _)| pred(k))
                .map(|(_, v)| *v)
                .sum::<f64>()
                + 0.0
        };
        let cpu = sum(&|k| k == "active: on CPU");
        let lock = sum(&|k| {
            k.starts_with("active: waiting on Lock") && k != "active: waiting on Lock:object"
        });
        let object = sum(&|k| k == "active: waiting on Lock:object");
        let io = sum(&|k| k.contains("IO:") || k.contains("WAL"));
        let idle_tx = sum(&|k| k.starts_with("idle in transaction"));
        format!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {cpu:.2} / {lock:.2} / {object:.2} / {io:.2} / {idle_tx:.2} |\n",
            p.units,
            fmt_opt(p.service_cpu_us, 0),
            fmt_opt(p.backend_cpu_us, 0),
            fmt_opt(p.client_cpu_us, 0),
            fmt_opt(p.machine_busy_pct, 0),
            fmt_opt(p.others_pct, 0),
            fmt_opt(p.statements_per_unit, 1),
        )
    };
    for r in refs {
        if let Some(p) = &r.profile {
            out.push_str(&line(
                format!("pgbench {} @{}", r.reference.name(), r.clients),
                p,
            ));
        }
    }
    for r in rows {
        if let Some(p) = &r.profile {
            out.push_str(&line(
                format!("{} {} @{}", r.scenario, r.shape, r.clients),
                p,
            ));
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Reporting

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map(|v| format!("{v:.digits$}"))
        .unwrap_or_else(|| "—".into())
}

fn markdown_table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| scenario | shape | clients | requests/s | p50 ms | p99 ms | errors | reference TPS | ratio |\n\
         |---|---|---:|---:|---:|---:|---:|---|---:|\n",
    );
    for r in rows {
        let reference = match (&r.reference, r.reference_tps) {
            (Some(k), Some(t)) => format!("{k} {t:.0}"),
            (Some(k), None) => format!("{k} n/a"),
            _ => "—".into(),
        };
        let rps = match (&r.note, r.requests_per_s) {
            (Some(note), None) => note.clone(),
            _ => fmt_opt(r.requests_per_s, 1),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.scenario,
            r.shape,
            r.clients,
            rps,
            fmt_opt(r.p50_ms, 2),
            fmt_opt(r.p99_ms, 2),
            r.errors,
            reference,
            fmt_opt(r.ratio, 2),
        ));
    }
    out
}

#[derive(Debug, Clone, Serialize)]
struct Target {
    target: String,
    measured: String,
    status: &'static str,
}

fn target(name: &str, measured: String, met: Option<bool>) -> Target {
    Target {
        target: name.into(),
        measured,
        status: match met {
            Some(true) => "met",
            Some(false) => "missed",
            None => "not measured",
        },
    }
}

fn find<'a>(rows: &'a [Row], scenario: &str, shape: &str, clients: usize) -> Option<&'a Row> {
    rows.iter().find(|r| {
        r.scenario == scenario
            && r.shape == shape
            && r.clients == clients
            && r.requests_per_s.is_some()
    })
}

#[derive(Debug, Clone, Serialize, Default)]
struct Memory {
    pid: Option<u32>,
    idle_after_start_kib: Option<u64>,
    idle_before_load_kib: Option<u64>,
    rss_at_end_kib: Option<u64>,
    peak_hwm_kib: Option<u64>,
}

fn mib(kib: Option<u64>) -> String {
    kib.map(|k| format!("{:.1} MiB", k as f64 / 1024.0))
        .unwrap_or_else(|| "n/a".into())
}

fn evaluate(rows: &[Row], mem: &Memory) -> Vec<Target> {
    let mut out = Vec::new();
    let ratio_of =
        |s: &str, shape: &str| find(rows, s, shape, 8).and_then(|r| r.ratio.map(|x| (x, r)));
    match ratio_of("lease-cycle", "spread") {
        Some((ratio, r)) => {
            let p99 = r.p99_ms.unwrap_or(f64::MAX);
            out.push(target(
                "lease-cycle spread @8 ≥ 0.6× tpcb-like and p99 < 20 ms",
                format!("{ratio:.2}×, p99 {p99:.1} ms"),
                Some(ratio >= 0.6 && p99 < 20.0),
            ));
        }
        None => out.push(target(
            "lease-cycle spread @8 ≥ 0.6× tpcb-like and p99 < 20 ms",
            "n/a".into(),
            None,
        )),
    }
    let hot = ratio_of("lease-cycle", "hot");
    out.push(target(
        "lease-cycle hot @8 ≥ 0.5× tpcb-like",
        hot.map(|(x, _)| format!("{x:.2}×"))
            .unwrap_or_else(|| "n/a".into()),
        hot.map(|(x, _)| x >= 0.5),
    ));
    for (scenario, shapes) in [
        ("public-get", &["task", "contribution", "list"][..]),
        ("authed-get", &["me"][..]),
    ] {
        for shape in shapes {
            let r = ratio_of(scenario, shape);
            out.push(target(
                &format!("{scenario} {shape} @8 ≥ 0.25× select-only"),
                r.map(|(x, _)| format!("{x:.2}×"))
                    .unwrap_or_else(|| "n/a".into()),
                r.map(|(x, _)| x >= 0.25),
            ));
        }
    }
    for (scenario, small, large) in [
        ("changes-feed", "1k", "100k"),
        ("overview", "small", "large"),
    ] {
        let (a, b) = (
            find(rows, scenario, small, 8),
            find(rows, scenario, large, 8),
        );
        let (measured, met) = match (a.and_then(|r| r.p99_ms), b.and_then(|r| r.p99_ms)) {
            (Some(a), Some(b)) if a > 0.0 => {
                let k = b / a;
                (format!("p99 {a:.2} → {b:.2} ms ({k:.2}×)"), Some(k <= 2.0))
            }
            _ => ("n/a".into(), None),
        };
        out.push(target(
            &format!("{scenario} p99 @8 {large} within 2× of {small}"),
            measured,
            met,
        ));
    }
    let idle = mem.idle_before_load_kib.or(mem.idle_after_start_kib);
    out.push(target(
        "service RSS idle < 64 MiB",
        format!(
            "{} after start, {} before load",
            mib(mem.idle_after_start_kib),
            mib(mem.idle_before_load_kib)
        ),
        idle.map(|k| k < 64 * 1024),
    ));
    let end = mem.peak_hwm_kib.or(mem.rss_at_end_kib);
    out.push(target(
        "service RSS < 256 MiB at the end (judged on the peak, VmHWM)",
        format!(
            "peak {}, at end {}",
            mib(mem.peak_hwm_kib),
            mib(mem.rss_at_end_kib)
        ),
        end.map(|k| k < 256 * 1024),
    ));
    out
}

// ---------------------------------------------------------------------------
// Main

#[derive(Serialize)]
struct Report<'a> {
    generated_at: String,
    command: Vec<String>,
    service: String,
    database: String,
    clients: &'a [usize],
    duration_s: u64,
    warmup_s: u64,
    machine: Machine,
    rows: &'a [Row],
    references: Vec<RefRow>,
    memory: &'a Memory,
    token_cache: Value,
    targets: &'a [Target],
    notes: &'a [String],
}

#[derive(Serialize)]
struct Machine {
    cores: usize,
    load_average_start: String,
    load_average_end: String,
}

#[derive(Serialize)]
struct RefRow {
    reference: RefKind,
    clients: usize,
    tps: Option<f64>,
    error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    profile: Option<Profile>,
}

fn main() -> ExitCode {
    let mut args = Args::parse();
    if args.smoke {
        args.scenario = "authed-get".into();
        args.clients = vec![1];
        args.duration = 2;
        args.warmup = 1;
        args.no_pgbench = true;
    }
    let scenarios = match Scenario::parse_list(&args.scenario) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if args.clients.is_empty() || args.clients.contains(&0) {
        eprintln!("error: --clients needs positive counts, e.g. 1,8,32");
        return ExitCode::from(2);
    }
    if args.duration == 0 {
        eprintln!("error: --duration must be at least 1 second");
        return ExitCode::from(2);
    }
    // One worker thread drives every virtual client (like pgbench's default -j 1):
    // on a 2-core machine a second one only adds wake-ups that steal CPU from the
    // service and the database under test. It stays a multi-thread runtime so
    // that pgbench and the profiler can block in `block_in_place`.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut res = Resources {
        service: None,
        service_pid: None,
        server: None,
        bench_db: None,
        pgbench_db: None,
    };
    let outcome = runtime.block_on(async {
        tokio::select! {
            r = run(&args, &scenarios, &mut res) => r,
            _ = tokio::signal::ctrl_c() => Err("interrupted".to_owned()),
        }
    });
    drop(runtime);
    res.cleanup();
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args, scenarios: &[Scenario], res: &mut Resources) -> Result<(), String> {
    let load_start = load_average();
    let pid = std::process::id();
    let json_dir = args
        .json
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    std::fs::create_dir_all(&json_dir)
        .map_err(|e| format!("cannot create {}: {e}", json_dir.display()))?;
    let database_url = std::env::var("DATABASE_URL")
        .ok()
        .filter(|u| !u.trim().is_empty());
    let mut pgss = false;

    // The database server, the service's database, the service.
    let (base, bulk_url) = match &args.url {
        Some(url) => {
            if let Some(db) = &database_url {
                let server = PgServer::Url(db.clone());
                if args.profile {
                    pgss = enable_pgss(&server)?;
                }
                res.server = Some(server);
            }
            res.service_pid = args.pid;
            (url.clone(), database_url.clone())
        }
        None => {
            let (server, service_db_url) = match &database_url {
                Some(url) => {
                    let server = PgServer::Url(url.clone());
                    drop_stale_databases(&server);
                    let db = format!("orbit_bench_{pid}");
                    admin_exec(&server, &format!("CREATE DATABASE \"{db}\""))?;
                    res.bench_db = Some(db.clone());
                    let db_url = server.url_for(&db);
                    (server, db_url)
                }
                None => {
                    remove_stale_clusters();
                    let dir = std::env::temp_dir().join(format!("orbit-bench-{pid}"));
                    eprintln!(
                        "starting a private PostgreSQL cluster under {}",
                        dir.display()
                    );
                    let (cluster, url) = Cluster::start(&dir)?;
                    (PgServer::Cluster { cluster, dir }, url)
                }
            };
            if args.profile {
                pgss = enable_pgss(&server)?;
            }
            res.server = Some(server);
            let port = free_port()?;
            let log = json_dir.join("service.log");
            let child = spawn_service(&service_db_url, port, &log)?;
            res.service_pid = Some(child.id());
            res.service = Some(child);
            eprintln!(
                "started orbit-commons (pid {}) on 127.0.0.1:{port}; log: {}",
                res.service_pid.unwrap_or(0),
                log.display()
            );
            (format!("http://127.0.0.1:{port}"), Some(service_db_url))
        }
    };
    let database = res
        .server
        .as_ref()
        .map(PgServer::describe)
        .unwrap_or_else(|| "unknown (no DATABASE_URL)".into());
    // Where --profile looks: the admin URL and the service's database name.
    let profiler = match (&res.server, &bulk_url) {
        (Some(server), Some(url)) => db_name_of(url).map(|db| (server.admin_url(), db)),
        _ => None,
    };
    if args.profile && profiler.is_none() {
        eprintln!(
            "warning: --profile needs the service's database (DATABASE_URL); profiling skipped"
        );
    }
    if args.profile && !pgss {
        eprintln!(
            "note: pg_stat_statements is not preloaded on this server: no statement counts \
             (run without DATABASE_URL to profile on a private cluster that has it)"
        );
    }
    let api = Api::new(&base)?;
    let log = json_dir.join("service.log");
    api.wait_ready(res.service.as_mut(), &log).await?;
    eprintln!("service ready at {base}; database: {database}");

    let mut mem = Memory {
        pid: res.service_pid,
        ..Memory::default()
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    mem.idle_after_start_kib = res.service_pid.and_then(memory_kib).map(|m| m.0);

    // Seed.
    let max_c = *args.clients.iter().max().unwrap_or(&1);
    let bulk = bulk_url.map(|url| Bulk { url });
    let seeder = Seeder {
        api: &api,
        bulk: bulk.as_ref(),
        run_tag: format!("{pid}-{}", &uuid::Uuid::new_v4().simple().to_string()[..6]),
    };
    let mut world = World::default();
    let t_seed = Instant::now();
    seeder.seed(&mut world, scenarios, max_c).await?;
    eprintln!("seeded in {:.1} s", t_seed.elapsed().as_secs_f64());
    // Every agent has made one request: the token cache is warm from here on.
    let cache_before = api.token_cache_counters().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    mem.idle_before_load_kib = res.service_pid.and_then(memory_kib).map(|m| m.0);

    let mut refs = References {
        pgbench: find_pgbench(),
        server: res.server.as_ref().map(PgServerRef::from),
        db: None,
        cfg_duration: args.duration,
        cache: HashMap::new(),
        disabled: args
            .no_pgbench
            .then(|| "pgbench references skipped (--no-pgbench)".to_owned()),
        profile: args.profile.then_some(pgss),
        profiles: HashMap::new(),
    };

    let cfg = RunCfg {
        warmup: Duration::from_secs(args.warmup),
        duration: Duration::from_secs(args.duration),
    };
    let mut rows: Vec<Row> = Vec::new();
    for &scenario in scenarios {
        let shapes = shapes_of(scenario, &world);
        for (shape, unavailable) in shapes {
            for &clients in &args.clients {
                if let Some(why) = &unavailable {
                    rows.push(Row::skipped(scenario, &shape, clients, why.clone()));
                    continue;
                }
                // Let the previous row's background work (autovacuum, the checkpoint
                // its writes call for) finish first: on a small machine it would take
                // CPU from whatever is measured next.
                if let Some((admin, _)) = &profiler {
                    tokio::task::block_in_place(|| settle(admin));
                }
                // The reference first, measured while the service idles.
                let kind = scenario.reference();
                let reference = {
                    let refs = &mut refs;
                    tokio::task::block_in_place(|| refs.tps(kind, clients))
                };
                eprintln!(
                    "running {} {shape} with {clients} client(s): {} s warm-up + {} s",
                    scenario.name(),
                    args.warmup,
                    args.duration
                );
                let probe = match (&profiler, args.profile) {
                    (Some((admin, datname)), true) => {
                        Some(Probe::start(admin, datname, res.service_pid, pgss))
                    }
                    _ => None,
                };
                let rec = run_one(&api, &mut world, scenario, &shape, clients, &cfg).await?;
                let all = rec.all;
                let mut row = make_row(scenario, &shape, clients, &cfg, rec, kind, reference.ok());
                if let Some(probe) = probe {
                    row.profile = Some(tokio::task::block_in_place(|| probe.finish(all, false)));
                }
                eprintln!(
                    "  {:.1} req/s, p50 {} ms, p99 {} ms, {} error(s)",
                    row.requests_per_s.unwrap_or(0.0),
                    fmt_opt(row.p50_ms, 2),
                    fmt_opt(row.p99_ms, 2),
                    row.errors
                );
                rows.push(row);
            }
        }
    }

    // Memory and the token cache at the end.
    if let Some((rss, hwm)) = res.service_pid.and_then(memory_kib) {
        mem.rss_at_end_kib = Some(rss);
        mem.peak_hwm_kib = Some(hwm);
    }
    let cache_after = api.token_cache_counters().await;
    let token_cache = match (cache_before, cache_after) {
        (Some((h0, m0)), Some((h1, m1))) => {
            let (dh, dm) = (h1 - h0, m1 - m0);
            let total_rate = if h1 + m1 > 0.0 { h1 / (h1 + m1) } else { 0.0 };
            let load_rate = if dh + dm > 0.0 { dh / (dh + dm) } else { 0.0 };
            json!({"hits": h1, "misses": m1, "hit_rate": total_rate,
                   "hits_during_load": dh, "misses_during_load": dm,
                   "hit_rate_during_load": load_rate})
        }
        (_, Some((h1, m1))) => {
            let rate = if h1 + m1 > 0.0 { h1 / (h1 + m1) } else { 0.0 };
            json!({"hits": h1, "misses": m1, "hit_rate": rate})
        }
        _ => json!("n/a (the service has no /metrics with orbit_token_cache_* counters)"),
    };

    let targets = evaluate(&rows, &mem);
    let mut references = Vec::new();
    let mut keys: Vec<_> = refs.cache.keys().copied().collect();
    keys.sort_by_key(|(k, c)| (k.name(), *c));
    for (kind, clients) in keys {
        let r = &refs.cache[&(kind, clients)];
        references.push(RefRow {
            reference: kind,
            clients,
            tps: r.as_ref().ok().copied(),
            error: r.as_ref().err().cloned(),
            profile: refs.profiles.remove(&(kind, clients)),
        });
    }
    res.pgbench_db = refs.db.take();

    // Print.
    let mut out = String::new();
    out.push_str(&format!(
        "\n## orbit-bench results\n\nservice: {base} · database: {database} · {} core(s) · load average {} → {} · {} s warm-up + {} s per row\n\n",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        load_start,
        load_average(),
        args.warmup,
        args.duration
    ));
    out.push_str(&markdown_table(&rows));
    let with_errors: Vec<_> = rows.iter().filter(|r| r.errors > 0).collect();
    if !with_errors.is_empty() {
        out.push_str("\nerrors:\n");
        for r in with_errors {
            out.push_str(&format!(
                "- {} {} @{}: {:?}\n",
                r.scenario, r.shape, r.clients, r.error_kinds
            ));
        }
    }
    if !references.is_empty() {
        out.push_str("\nreferences (pgbench on the same server):\n");
        for r in &references {
            match (r.tps, &r.error) {
                (Some(t), _) => out.push_str(&format!(
                    "- {} @{}: {t:.1} TPS\n",
                    r.reference.name(),
                    r.clients
                )),
                (None, Some(e)) => out.push_str(&format!(
                    "- {} @{}: n/a ({})\n",
                    r.reference.name(),
                    r.clients,
                    e.lines().next().unwrap_or("")
                )),
                _ => {}
            }
        }
    }
    out.push_str(&format!(
        "\nservice memory (pid {}): idle after start {}, idle before load {}, at end {}, peak (VmHWM) {}\n",
        mem.pid.map(|p| p.to_string()).unwrap_or_else(|| "n/a".into()),
        mib(mem.idle_after_start_kib),
        mib(mem.idle_before_load_kib),
        mib(mem.rss_at_end_kib),
        mib(mem.peak_hwm_kib)
    ));
    out.push_str(&format!(
        "token cache: {}\n",
        match &token_cache {
            Value::String(s) => s.clone(),
            v => match (v["hit_rate_during_load"].as_f64(), v["hit_rate"].as_f64()) {
                (Some(l), _) => format!(
                    "hit rate during load {:.4} ({:.0} hits, {:.0} misses; overall {:.4})",
                    l,
                    v["hits_during_load"].as_f64().unwrap_or(0.0),
                    v["misses_during_load"].as_f64().unwrap_or(0.0),
                    v["hit_rate"].as_f64().unwrap_or(0.0)
                ),
                (None, Some(t)) => format!("hit rate {t:.4}"),
                _ => "n/a".into(),
            },
        }
    ));
    for note in &world.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    if args.profile {
        out.push_str(
            "\nprofile (per request, or per pgbench transaction; backends = mean number of the \
             database's connections in each state):\n\n",
        );
        out.push_str(&profile_table(&rows, &references));
        for r in &rows {
            let Some(p) = &r.profile else { continue };
            if p.top_statements.is_empty() {
                continue;
            }
            out.push_str(&format!(
                "\nstatements of {} {} @{} ({:.1} per request):\n",
                r.scenario,
                r.shape,
                r.clients,
                p.statements_per_unit.unwrap_or(0.0)
            ));
            for st in p.top_statements.iter().take(15) {
                out.push_str(&format!(
                    "- {:.2}/req, mean {:.3} ms, {:.0}% of time: {}\n",
                    st.calls_per_unit,
                    st.mean_ms,
                    100.0 * st.share_of_time,
                    st.query
                ));
            }
        }
    }
    if !args.smoke {
        out.push_str("\n| target (8 clients) | measured | status |\n|---|---|---|\n");
        for t in &targets {
            out.push_str(&format!(
                "| {} | {} | {} |\n",
                t.target, t.measured, t.status
            ));
        }
    }
    println!("{out}");
    let _ = std::io::stdout().flush();

    let report = Report {
        generated_at: chrono::Utc::now().to_rfc3339(),
        command: std::env::args().collect(),
        service: base.clone(),
        database,
        clients: &args.clients,
        duration_s: args.duration,
        warmup_s: args.warmup,
        machine: Machine {
            cores: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            load_average_start: load_start,
            load_average_end: load_average(),
        },
        rows: &rows,
        references,
        memory: &mem,
        token_cache,
        targets: &targets,
        notes: &world.notes,
    };
    let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    std::fs::write(&args.json, text)
        .map_err(|e| format!("cannot write {}: {e}", args.json.display()))?;
    eprintln!("results written to {}", args.json.display());
    Ok(())
}

/// The shapes of a scenario, each with a reason when it cannot run.
fn shapes_of(scenario: Scenario, world: &World) -> Vec<(String, Option<String>)> {
    match scenario {
        Scenario::LeaseCycle => vec![("spread".into(), None), ("hot".into(), None)],
        Scenario::HandoffChain => vec![("spread".into(), None)],
        Scenario::IdempotentReplay => vec![("spread".into(), None)],
        Scenario::PublicGet => vec![
            ("task".into(), None),
            ("contribution".into(), None),
            ("list".into(), None),
        ],
        Scenario::AuthedGet => vec![("me".into(), None)],
        Scenario::ChangesFeed => ["1k", "100k"]
            .iter()
            .map(|label| {
                let missing = (!world.big.iter().any(|b| b.label == *label))
                    .then(|| "not available: orbit not seeded (needs DATABASE_URL)".to_owned());
                (label.to_string(), missing)
            })
            .collect(),
        Scenario::Overview => [("small", "1k"), ("large", "100k")]
            .iter()
            .map(|(shape, label)| {
                let missing = if world.knowledge == Some(false) {
                    Some(
                        "not available: GET /api/v1/problems/{id}/overview is not a route yet"
                            .to_owned(),
                    )
                } else if !world
                    .big
                    .iter()
                    .any(|b| b.label == *label && b.problem.is_some())
                {
                    Some("not available: orbit not seeded (needs DATABASE_URL)".to_owned())
                } else {
                    None
                };
                (shape.to_string(), missing)
            })
            .collect(),
    }
}

fn make_row(
    scenario: Scenario,
    shape: &str,
    clients: usize,
    cfg: &RunCfg,
    mut rec: Rec,
    kind: RefKind,
    reference: Option<f64>,
) -> Row {
    rec.latencies_us.sort_unstable();
    let n = rec.latencies_us.len() as u64;
    let rps = n as f64 / cfg.duration.as_secs_f64();
    Row {
        scenario: scenario.name().into(),
        shape: shape.into(),
        clients,
        requests: n,
        requests_per_s: Some(rps),
        p50_ms: percentile(&rec.latencies_us, 0.50),
        p99_ms: percentile(&rec.latencies_us, 0.99),
        errors: rec.errors,
        error_kinds: rec.kinds,
        reference: Some(kind.name().into()),
        reference_tps: reference,
        ratio: reference.filter(|t| *t > 0.0).map(|t| rps / t),
        note: None,
        profile: None,
    }
}

async fn run_one(
    api: &Api,
    world: &mut World,
    scenario: Scenario,
    shape: &str,
    clients: usize,
    cfg: &RunCfg,
) -> Result<Rec, String> {
    let seed = |i: usize| 0x5eed_u64.wrapping_mul(i as u64 + 1) ^ clients as u64;
    match scenario {
        Scenario::LeaseCycle => {
            let pools = if shape == "hot" {
                &world.hot_pools
            } else {
                &world.spread_pools
            };
            let states: Vec<_> = (0..clients)
                .map(|i| {
                    let p = &pools[i];
                    (
                        api.clone(),
                        world.agents[i].clone(),
                        TaskPool {
                            tasks: p.tasks.clone(),
                            next: p.next.clone(),
                        },
                    )
                })
                .collect();
            let (_, rec) = measure(cfg, states, lease_cycle_client).await;
            Ok(rec)
        }
        Scenario::HandoffChain => {
            let states: Vec<_> = (0..clients)
                .map(|i| (api.clone(), world.chains[i].clone()))
                .collect();
            let (states, rec) = measure(cfg, states, handoff_chain_client).await;
            for (i, (_, chain)) in states.into_iter().enumerate() {
                world.chains[i] = chain;
            }
            Ok(rec)
        }
        Scenario::IdempotentReplay => {
            let states: Vec<_> = (0..clients)
                .map(|i| {
                    let (orbit, key) = &world.replay[i];
                    (
                        api.clone(),
                        world.agents[i].clone(),
                        format!("/api/v1/orbits/{orbit}/tasks"),
                        key.clone(),
                    )
                })
                .collect();
            let (_, rec) = measure(cfg, states, replay_client).await;
            Ok(rec)
        }
        Scenario::PublicGet => {
            let hot = world.hot_orbit.ok_or("no hot orbit")?;
            let paths: Vec<String> = if shape == "list" {
                vec![format!("/api/v1/orbits/{hot}/tasks")]
            } else if shape == "contribution" {
                world
                    .hot_contributions
                    .iter()
                    .map(|c| format!("/api/v1/contributions/{c}"))
                    .collect()
            } else {
                let tasks: Vec<i64> = world
                    .hot_pools
                    .iter()
                    .flat_map(|p| p.tasks.iter().take(32).copied())
                    .collect();
                if tasks.is_empty() {
                    let r = api
                        .get(&format!("/api/v1/orbits/{hot}/tasks?limit=100"), None)
                        .await?;
                    r.json()["data"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|t| t["id"].as_i64())
                        .map(|t| format!("/api/v1/tasks/{t}"))
                        .collect()
                } else {
                    tasks.iter().map(|t| format!("/api/v1/tasks/{t}")).collect()
                }
            };
            if paths.is_empty() {
                return Err("public-get: no tasks to read".into());
            }
            let paths = Arc::new(paths);
            let states: Vec<_> = (0..clients)
                .map(|i| (api.clone(), None, paths.clone(), seed(i)))
                .collect();
            let (_, rec) = measure(cfg, states, get_client).await;
            Ok(rec)
        }
        Scenario::AuthedGet => {
            let paths = Arc::new(vec!["/api/v1/me".to_owned()]);
            let states: Vec<_> = (0..clients)
                .map(|i| {
                    (
                        api.clone(),
                        Some(world.agents[i].token.clone()),
                        paths.clone(),
                        seed(i),
                    )
                })
                .collect();
            let (_, rec) = measure(cfg, states, get_client).await;
            Ok(rec)
        }
        Scenario::ChangesFeed => {
            let big = world
                .big
                .iter()
                .find(|b| b.label == shape)
                .ok_or("orbit not seeded")?;
            let states: Vec<_> = (0..clients)
                .map(|i| (api.clone(), big.orbit, big.revision, seed(i)))
                .collect();
            let (_, rec) = measure(cfg, states, feed_client).await;
            Ok(rec)
        }
        Scenario::Overview => {
            let label = if shape == "small" { "1k" } else { "100k" };
            let problem = world
                .big
                .iter()
                .find(|b| b.label == label)
                .and_then(|b| b.problem)
                .ok_or("problem not seeded")?;
            let paths = Arc::new(vec![format!("/api/v1/problems/{problem}/overview")]);
            let states: Vec<_> = (0..clients)
                .map(|i| (api.clone(), None, paths.clone(), seed(i)))
                .collect();
            let (_, rec) = measure(cfg, states, get_client).await;
            Ok(rec)
        }
    }
}
