//! Test harness: every test gets its own database (cloned from a migrated template)
//! and its own running app on a free port, spoken to over real HTTP.
//!
//! With `DATABASE_URL` set, databases are created on that server. Without it, a
//! private cluster is started for this test process under the system's temporary
//! directory (`orbit-test-<pid>`) with the same embedded-default machinery the binary
//! uses; it is stopped and removed when the process exits, and clusters left by
//! processes that died are removed by the next run. Runs never share a cluster.

use std::sync::OnceLock;
use std::time::Duration;

use diesel::{Connection, PgConnection, RunQueryDsl};
use orbit_commons::config::Config;
use orbit_commons::db::embedded::Cluster;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

struct Server {
    /// URL of a database used for CREATE/DROP DATABASE.
    admin_url: String,
    /// Builds a URL for a database name.
    url_for: UrlFor,
    template: String,
}

/// Builds the URL of a database on the test server from its name.
type UrlFor = Box<dyn Fn(&str) -> String + Send + Sync>;

static SERVER: OnceLock<Server> = OnceLock::new();
static CLUSTER: OnceLock<std::sync::Mutex<Option<Cluster>>> = OnceLock::new();

fn test_cluster_dir(pid: u32) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("orbit-test-{pid}"))
}

/// Stops and removes clusters of test processes that no longer run.
fn remove_stale_clusters() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("orbit-test-")
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        // An orphaned postmaster: SIGQUIT is PostgreSQL's immediate shutdown.
        let pidfile = entry.path().join("postgres/data/postmaster.pid");
        if let Some(pm) = std::fs::read_to_string(pidfile)
            .ok()
            .and_then(|t| t.lines().next().and_then(|l| l.trim().parse::<i32>().ok()))
        {
            // SAFETY: sending a signal to a process id has no memory-safety preconditions.
            unsafe {
                libc::kill(pm, libc::SIGQUIT);
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let _ = std::fs::remove_dir_all(entry.path());
    }
}

extern "C" fn stop_cluster() {
    if let Some(m) = CLUSTER.get() {
        if let Ok(mut guard) = m.lock() {
            if let Some(mut c) = guard.take() {
                c.stop();
                let _ = std::fs::remove_dir_all(test_cluster_dir(std::process::id()));
            }
        }
    }
}

fn replace_db(url: &str, db: &str) -> String {
    // postgres://user@host:port/db?params
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let path_start = base[scheme_end..].find('/').map(|i| i + scheme_end);
    let head = match path_start {
        Some(i) => &base[..i],
        None => base,
    };
    match query {
        Some(q) => format!("{head}/{db}?{q}"),
        None => format!("{head}/{db}"),
    }
}

fn exec(conn: &mut PgConnection, sql: &str) {
    diesel::sql_query(sql)
        .execute(conn)
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Drops databases left by test processes that no longer run.
fn drop_stale(admin: &mut PgConnection) {
    #[derive(diesel::QueryableByName)]
    struct Name {
        #[diesel(sql_type = diesel::sql_types::Text)]
        datname: String,
    }
    let names: Vec<Name> = diesel::sql_query(
        "SELECT datname FROM pg_database WHERE datname LIKE 'orbit\\_t\\_%' OR datname LIKE 'orbit\\_tpl\\_%'",
    )
    .load(admin)
    .unwrap_or_default();
    for n in names {
        let pid = n
            .datname
            .split('_')
            .nth(2)
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid {
            if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists()
            {
                let _ = diesel::sql_query(format!(
                    "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
                    n.datname
                ))
                .execute(admin);
            }
        }
    }
}

fn server() -> &'static Server {
    SERVER.get_or_init(|| {
        let (admin_url, url_for): (String, UrlFor) = match std::env::var("DATABASE_URL")
            .ok()
            .filter(|u| !u.trim().is_empty())
        {
            Some(url) => {
                let u = url.clone();
                (url, Box::new(move |db: &str| replace_db(&u, db)))
            }
            None => {
                let dir = test_cluster_dir(std::process::id());
                remove_stale_clusters();
                let (cluster, url) =
                    Cluster::start(&dir).expect("start a private PostgreSQL cluster for tests");
                let socket = cluster.socket_dir.clone();
                CLUSTER.get_or_init(|| std::sync::Mutex::new(Some(cluster)));
                // SAFETY: registering a plain extern "C" function.
                unsafe {
                    libc::atexit(stop_cluster);
                }
                (
                    url,
                    Box::new(move |db: &str| {
                        format!("postgres://orbit@/{db}?host={}&port=5432", socket.display())
                    }),
                )
            }
        };
        let mut admin =
            PgConnection::establish(&admin_url).expect("connect to the test database server");
        drop_stale(&mut admin);
        let template = format!("orbit_tpl_{}_{}", std::process::id(), rand_suffix());
        exec(&mut admin, &format!("CREATE DATABASE \"{template}\""));
        orbit_commons::db::migrate(&url_for(&template)).expect("migrate the template database");
        Server {
            admin_url,
            url_for,
            template,
        }
    })
}

fn rand_suffix() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_owned()
}

/// A fresh, migrated database for one test, dropped when the test ends.
pub struct TestDb {
    pub name: String,
    pub url: String,
    /// False for a second handle on the same database (`TestApp::another_instance`),
    /// which must not drop it.
    owned: bool,
}

impl TestDb {
    pub fn new() -> TestDb {
        let s = server();
        let name = format!("orbit_t_{}_{}", std::process::id(), rand_suffix());
        let mut admin = PgConnection::establish(&s.admin_url).expect("connect admin");
        // Concurrent clones of one template can collide on its lock: retry briefly.
        let mut tries = 0;
        loop {
            match diesel::sql_query(format!(
                "CREATE DATABASE \"{name}\" TEMPLATE \"{}\"",
                s.template
            ))
            .execute(&mut admin)
            {
                Ok(_) => break,
                Err(e) if tries < 50 && e.to_string().contains("being accessed") => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("create test database: {e}"),
            }
        }
        TestDb {
            url: (s.url_for)(&name),
            name,
            owned: true,
        }
    }

    pub fn conn(&self) -> PgConnection {
        PgConnection::establish(&self.url).expect("connect to the test database")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        if let Some(s) = SERVER.get() {
            if let Ok(mut admin) = PgConnection::establish(&s.admin_url) {
                let _ = diesel::sql_query(format!(
                    "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
                    self.name
                ))
                .execute(&mut admin);
            }
        }
    }
}

/// The configuration every test app starts from.
pub fn test_config() -> Config {
    let mut c = Config::defaults();
    c.db_pool_size = 8;
    c.workers = Some(2);
    c.register_rate_limit_per_hour = 100_000;
    c.rate_limit_per_minute = 100_000;
    c.anon_rate_limit_per_minute = 100_000;
    c.test_short_durations = true;
    c
}

pub struct TestApp {
    pub addr: std::net::SocketAddr,
    pub base: String,
    pub client: reqwest::Client,
    /// The configuration this app was started with.
    pub config: Config,
    handle: orbit_commons::actix_web::dev::ServerHandle,
    thread: Option<std::thread::JoinHandle<()>>,
    // Declared last: the app stops before its database is dropped.
    pub db: TestDb,
}

impl TestApp {
    pub async fn spawn() -> TestApp {
        Self::spawn_with(|_| {}).await
    }

    pub async fn spawn_with(tweak: impl FnOnce(&mut Config)) -> TestApp {
        let db = TestDb::new();
        let mut config = test_config();
        tweak(&mut config);
        Self::spawn_on(db, config)
    }

    /// Starts an app in its own thread and actix system.
    pub fn spawn_on(db: TestDb, config: Config) -> TestApp {
        let url = db.url.clone();
        let app_config = config.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            orbit_commons::actix_web::rt::System::new().block_on(async move {
                let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
                let state = orbit_commons::build_state(&config, &url);
                let running = orbit_commons::start(listener, state).expect("start app");
                tx.send((running.addr, running.handle.clone()))
                    .expect("send addr");
                let _ = running.server.await;
                running.state.hub.stop();
            })
        });
        let (addr, handle) = rx.recv().expect("app started");
        TestApp {
            addr,
            base: format!("http://{addr}"),
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .expect("client"),
            config: app_config,
            handle,
            thread: Some(thread),
            db,
        }
    }

    /// A second instance of the service on the same database (same configuration),
    /// for behaviour that must hold across instances. Dropping it leaves the
    /// database alone.
    pub fn another_instance(&self) -> TestApp {
        self.another_instance_with(|_| {})
    }

    /// [`TestApp::another_instance`] with its configuration changed by `tweak`.
    pub fn another_instance_with(&self, tweak: impl FnOnce(&mut Config)) -> TestApp {
        let db = TestDb {
            name: self.db.name.clone(),
            url: self.db.url.clone(),
            owned: false,
        };
        let mut config = self.config.clone();
        tweak(&mut config);
        Self::spawn_on(db, config)
    }

    /// The values of unlabelled metrics on `/metrics`, in the order of `names`.
    pub async fn metrics<const N: usize>(&self, names: [&str; N]) -> [u64; N] {
        let text = self.get("/metrics", None).await.text;
        names.map(|name| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in\n{text}"))
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Sends a request; `body` None sends no body.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        key: Option<&str>,
        body: Option<Value>,
    ) -> Resp {
        let mut req = self.client.request(method, self.url(path));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(k) = key {
            req = req.header("Idempotency-Key", k);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        Resp::from(req.send().await.expect("request sent")).await
    }

    /// Sends raw body bytes with extra headers (no Content-Type unless given).
    pub async fn send_raw(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Resp {
        let mut req = self.client.request(method, self.url(path));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        if let Some(b) = body {
            req = req.body(b);
        }
        Resp::from(req.send().await.expect("request sent")).await
    }

    pub async fn put(&self, path: &str, token: &str, body: Value) -> Resp {
        self.send(Method::PUT, path, Some(token), None, Some(body))
            .await
    }

    pub async fn delete(&self, path: &str, token: &str) -> Resp {
        self.send(Method::DELETE, path, Some(token), None, None)
            .await
    }

    pub async fn get(&self, path: &str, token: Option<&str>) -> Resp {
        self.send(Method::GET, path, token, None, None).await
    }

    pub async fn post(&self, path: &str, token: &str, body: Value) -> Resp {
        self.send(Method::POST, path, Some(token), None, Some(body))
            .await
    }

    /// POST with a fresh Idempotency-Key.
    pub async fn post_keyed(&self, path: &str, token: &str, body: Value) -> Resp {
        let key = uuid::Uuid::new_v4().to_string();
        self.send(Method::POST, path, Some(token), Some(&key), Some(body))
            .await
    }

    /// Registers an agent; returns (contributor id, token).
    pub async fn agent(&self, name: &str) -> Agent {
        let r = self
            .send(
                Method::POST,
                "/api/v1/contributors",
                None,
                None,
                Some(json!({"type": "AGENT", "name": name, "model_claim": "test-model"})),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        Agent {
            id: r.json["data"]["contributor"]["id"].as_i64().expect("id"),
            token: r.json["data"]["token"].as_str().expect("token").to_owned(),
        }
    }

    /// Creates an OPEN orbit owned by `owner`; returns its id.
    pub async fn orbit(&self, owner: &Agent, slug: &str) -> i64 {
        let r = self
            .post(
                "/api/v1/orbits",
                &owner.token,
                json!({"slug": slug, "name": slug}),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        r.json["data"]["id"].as_i64().expect("orbit id")
    }

    /// `agent` joins the orbit.
    pub async fn join(&self, agent: &Agent, orbit: i64) {
        let r = self
            .send(
                Method::POST,
                &format!("/api/v1/orbits/{orbit}/join"),
                Some(&agent.token),
                None,
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        futures::executor::block_on(self.handle.stop(false));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[derive(Debug, Clone)]
pub struct Agent {
    pub id: i64,
    pub token: String,
}

/// A response with its body read.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub bytes: Vec<u8>,
    pub text: String,
    pub json: Value,
}

impl Resp {
    pub async fn from(r: reqwest::Response) -> Resp {
        let status = r.status();
        let headers = r.headers().clone();
        let bytes = r.bytes().await.expect("body").to_vec();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Resp {
            status,
            headers,
            bytes,
            text,
            json,
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts the status and that the body is the error envelope
    /// (`{message, code, errors?, details?}` as JSON, nothing else); returns the code.
    #[track_caller]
    pub fn assert_envelope(&self, status: u16) -> String {
        assert_eq!(self.status.as_u16(), status, "body: {}", self.text);
        assert!(
            self.header("content-type")
                .is_some_and(|c| c.starts_with("application/json")),
            "error without JSON content type: {:?} {}",
            self.header("content-type"),
            self.text
        );
        let obj = self
            .json
            .as_object()
            .unwrap_or_else(|| panic!("error body is not a JSON object: {}", self.text));
        assert!(obj["message"].is_string(), "no message: {}", self.text);
        let code = obj["code"]
            .as_str()
            .unwrap_or_else(|| panic!("no code: {}", self.text));
        assert!(
            !code.is_empty()
                && code
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
            "code is not snake_case: {code}"
        );
        for k in obj.keys() {
            assert!(
                matches!(k.as_str(), "message" | "code" | "errors" | "details"),
                "unexpected envelope field {k}: {}",
                self.text
            );
        }
        code.to_owned()
    }

    /// Asserts the status and the error envelope's code.
    #[track_caller]
    pub fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status.as_u16(), status, "body: {}", self.text);
        assert_eq!(self.json["code"], code, "body: {}", self.text);
        assert!(
            self.json["message"].is_string(),
            "envelope without message: {}",
            self.text
        );
        assert!(
            self.header("content-type")
                .is_some_and(|c| c.starts_with("application/json")),
            "error without JSON content type"
        );
    }
}

/// Runs a query that returns one BIGINT column named `n`.
pub fn sql_i64(conn: &mut PgConnection, sql: &str) -> i64 {
    #[derive(diesel::QueryableByName)]
    struct N {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    diesel::sql_query(sql)
        .get_result::<N>(conn)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .n
}

/// A row lock on one task, held by a connection of the test until released (or
/// dropped, which rolls it back).
pub struct RowLock {
    conn: PgConnection,
    pid: i64,
}

impl RowLock {
    pub fn take(db: &TestDb, task: i64) -> RowLock {
        use diesel::connection::SimpleConnection;
        let mut conn = db.conn();
        let pid = sql_i64(&mut conn, "SELECT pg_backend_pid()::bigint AS n");
        conn.batch_execute(&format!(
            "BEGIN; SELECT 1 FROM tasks WHERE id = {task} FOR UPDATE"
        ))
        .expect("lock the task row");
        RowLock { conn, pid }
    }

    /// Sessions blocked by this lock now.
    pub fn waiting_now(&self, monitor: &mut PgConnection) -> i64 {
        sql_i64(
            monitor,
            &format!(
                "SELECT count(*) AS n FROM pg_stat_activity WHERE {} = ANY(pg_blocking_pids(pid))",
                self.pid
            ),
        )
    }

    /// Sessions waiting for this lock (polled for up to 20 s until there is one).
    pub fn waiters(&self, monitor: &mut PgConnection) -> i64 {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let n = self.waiting_now(monitor);
            if n > 0 || std::time::Instant::now() > deadline {
                return n;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn release(mut self) {
        use diesel::connection::SimpleConnection;
        self.conn
            .batch_execute("COMMIT")
            .expect("release the row lock");
    }
}
