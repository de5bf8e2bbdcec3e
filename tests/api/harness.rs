//! Test harness: every test gets its own database (cloned from a migrated template)
//! and its own running app on a free port, spoken to over real HTTP.
//!
//! With `DATABASE_URL` set, databases are created on that server. Without it, a
//! private cluster is started for this test process under the system's temporary
//! directory (`orbit-test-<pid>`) with the same embedded-default machinery the binary
//! uses; it is stopped and removed when the process exits, and clusters left by
//! processes that died are removed by the next run. Runs never share a cluster.
//! The cluster, the template and the databases come from `orbit_commons::testkit`
//! (shared with the reliability tests and the bench); this file adds the in-process
//! app and the HTTP helpers, and [`Remote`] for a service running as its own process.

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use diesel::{Connection, PgConnection, RunQueryDsl};
use orbit_commons::config::Config;
use orbit_commons::testkit::{self, database, PgServer, PrivateCluster, Template};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

/// The migrated template every test database is cloned from.
static TEMPLATE: OnceLock<Template> = OnceLock::new();
/// This process's private cluster (without `DATABASE_URL`), removed at exit.
static CLUSTER: OnceLock<Mutex<Option<PrivateCluster>>> = OnceLock::new();

extern "C" fn stop_cluster() {
    if let Some(m) = CLUSTER.get() {
        if let Ok(mut guard) = m.lock() {
            // Dropping it stops the cluster and removes its directory.
            guard.take();
        }
    }
}

fn template() -> &'static Template {
    TEMPLATE.get_or_init(|| {
        let server = PgServer::from_env().unwrap_or_else(|| {
            let cluster = PrivateCluster::for_process("orbit-test")
                .expect("start a private PostgreSQL cluster for tests");
            let server = cluster.server();
            CLUSTER.get_or_init(|| Mutex::new(Some(cluster)));
            // SAFETY: registering a plain extern "C" function.
            unsafe {
                libc::atexit(stop_cluster);
            }
            server
        });
        database::drop_stale(&server, &["orbit_t_", "orbit_tpl_"]);
        let name = format!("orbit_tpl_{}_{}", std::process::id(), testkit::short_id());
        Template::create(server, name).expect("create the template database")
    })
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
        let name = format!("orbit_t_{}_{}", std::process::id(), testkit::short_id());
        let url = template()
            .fresh(&name)
            .unwrap_or_else(|e| panic!("create test database: {e}"));
        TestDb {
            url,
            name,
            owned: true,
        }
    }

    /// A database this test does not create or drop (a private cluster's, which
    /// goes with its cluster).
    pub fn at(url: &str) -> TestDb {
        TestDb {
            name: String::new(),
            url: url.to_owned(),
            owned: false,
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
        if let Some(t) = TEMPLATE.get() {
            let _ = database::drop(t.server(), &self.name);
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

    /// POSTs raw body bytes with extra headers (no Content-Type unless given).
    pub async fn post_raw(
        &self,
        path: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: impl Into<Vec<u8>>,
    ) -> Resp {
        self.send_raw(Method::POST, path, token, headers, Some(body.into()))
            .await
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

    /// POST with this Idempotency-Key.
    pub async fn post_with_key(&self, path: &str, token: &str, key: &str, body: Value) -> Resp {
        self.send(Method::POST, path, Some(token), Some(key), Some(body))
            .await
    }

    /// POST without a body or a key.
    pub async fn post_empty(&self, path: &str, token: &str) -> Resp {
        self.send(Method::POST, path, Some(token), None, None).await
    }

    /// POST with a fresh Idempotency-Key.
    pub async fn post_keyed(&self, path: &str, token: &str, body: Value) -> Resp {
        let key = uuid::Uuid::new_v4().to_string();
        self.send(Method::POST, path, Some(token), Some(&key), Some(body))
            .await
    }

    /// Issues another token to the holder of `token`; returns (token, token id).
    pub async fn another_token(&self, token: &str) -> (String, i64) {
        let r = self
            .send(Method::POST, "/api/v1/me/tokens", Some(token), None, None)
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        (
            r.json["data"]["token"].as_str().expect("token").to_owned(),
            r.json["data"]["token_id"].as_i64().expect("token id"),
        )
    }

    /// Registers a contributor described by `body` (no token).
    pub async fn register(&self, body: Value) -> Resp {
        self.send(Method::POST, "/api/v1/contributors", None, None, Some(body))
            .await
    }

    /// Registers through the legacy agent route (`/api/v1/agents`, no token).
    pub async fn register_legacy(&self, body: Value) -> Resp {
        self.send(Method::POST, "/api/v1/agents", None, None, Some(body))
            .await
    }

    /// Registers an agent; returns (contributor id, token).
    pub async fn agent(&self, name: &str) -> Agent {
        let r = self
            .register(json!({"type": "AGENT", "name": name, "model_claim": "test-model"}))
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

pub use orbit_commons::testkit::Agent;

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

    /// Asserts a 201 and returns the created object's `data.id`.
    #[track_caller]
    pub fn created_id(&self) -> i64 {
        assert_eq!(self.status, StatusCode::CREATED, "{}", self.text);
        self.json["data"]["id"]
            .as_i64()
            .unwrap_or_else(|| panic!("no data.id: {}", self.text))
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

/// Counts, from now on, the updates of each orbit's row (every new version of it),
/// with a trigger this test adds to its own database; read with
/// [`orbit_row_updates`]. A write advances its orbit's revision by updating the
/// row; a group takes its writes' revisions with one update (`reserve_revisions`).
pub fn count_orbit_row_updates(db: &TestDb) {
    use diesel::connection::SimpleConnection;
    db.conn()
        .batch_execute(
            "CREATE TABLE test_orbit_updates (orbit_id bigint NOT NULL); \
             CREATE FUNCTION test_count_orbit_update() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN INSERT INTO test_orbit_updates VALUES (NEW.id); RETURN NULL; END $$; \
             CREATE TRIGGER test_count_orbit_update AFTER UPDATE ON orbits \
             FOR EACH ROW EXECUTE FUNCTION test_count_orbit_update();",
        )
        .expect("add the orbit-update counter");
}

/// The updates of `orbit`'s row since [`count_orbit_row_updates`].
pub fn orbit_row_updates(conn: &mut PgConnection, orbit: i64) -> i64 {
    sql_i64(
        conn,
        &format!("SELECT count(*) AS n FROM test_orbit_updates WHERE orbit_id = {orbit}"),
    )
}

/// A row lock (on one task, or any row: [`RowLock::on`]), held by a connection of
/// the test until released (or dropped, which rolls it back).
pub struct RowLock {
    conn: PgConnection,
    pid: i64,
}

impl RowLock {
    pub fn take(db: &TestDb, task: i64) -> RowLock {
        RowLock::on(db, "tasks", task, "UPDATE")
    }

    /// Locks row `id` of `table` `FOR <strength>` (`UPDATE`, `NO KEY UPDATE`, ...).
    pub fn on(db: &TestDb, table: &str, id: i64, strength: &str) -> RowLock {
        use diesel::connection::SimpleConnection;
        let mut conn = db.conn();
        let pid = sql_i64(&mut conn, "SELECT pg_backend_pid()::bigint AS n");
        conn.batch_execute(&format!(
            "BEGIN; SELECT 1 FROM {table} WHERE id = {id} FOR {strength}"
        ))
        .unwrap_or_else(|e| panic!("lock {table} row {id}: {e}"));
        RowLock { conn, pid }
    }

    /// The backend holding the lock.
    pub fn pid(&self) -> i64 {
        self.pid
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

/// A client of a service running as its own process (`testkit::Service`), with the
/// first steps of every story told against one: register, open an orbit, join it.
pub struct Remote {
    pub client: reqwest::Client,
    pub base: String,
}

impl Remote {
    pub fn new(client: reqwest::Client, base: String) -> Remote {
        Remote { client, base }
    }

    /// Registers an agent.
    pub async fn register(&self, name: &str) -> Agent {
        let r: Value = self
            .client
            .post(format!("{}/api/v1/contributors", self.base))
            .json(&json!({"type": "AGENT", "name": name}))
            .send()
            .await
            .expect("register")
            .json()
            .await
            .expect("json");
        Agent {
            id: r["data"]["contributor"]["id"].as_i64().expect("id"),
            token: r["data"]["token"].as_str().expect("token").to_owned(),
        }
    }

    /// Creates an orbit owned by `owner`; returns its id.
    pub async fn orbit(&self, owner: &Agent, slug: &str) -> i64 {
        let r: Value = self
            .client
            .post(format!("{}/api/v1/orbits", self.base))
            .bearer_auth(&owner.token)
            .json(&json!({"slug": slug, "name": slug}))
            .send()
            .await
            .expect("orbit")
            .json()
            .await
            .expect("json");
        r["data"]["id"].as_i64().expect("orbit id")
    }

    /// `who` joins the orbit.
    pub async fn join(&self, who: &Agent, orbit: i64) {
        let r = self
            .client
            .post(format!("{}/api/v1/orbits/{orbit}/join", self.base))
            .bearer_auth(&who.token)
            .send()
            .await
            .expect("join");
        assert_eq!(r.status(), StatusCode::CREATED);
    }
}

/// The server backends of this test's database other than the asking one: those
/// whose `application_name` is `name` (`orbit-listen`, `orbit-notify`), or with
/// `None` the pool's (no name), once there are `expected` of them (with `None`, at
/// least that many).
pub fn backends(conn: &mut PgConnection, name: Option<&str>, expected: usize) -> Vec<i32> {
    #[derive(diesel::QueryableByName)]
    struct Pid {
        #[diesel(sql_type = diesel::sql_types::Integer)]
        pid: i32,
    }
    let started = std::time::Instant::now();
    loop {
        let pids: Vec<i32> = diesel::sql_query(
            "SELECT pid FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid() \
               AND backend_type = 'client backend' AND application_name = coalesce($1, '')",
        )
        .bind::<diesel::sql_types::Nullable<diesel::sql_types::Text>, _>(name)
        .load::<Pid>(conn)
        .expect("pg_stat_activity")
        .into_iter()
        .map(|p| p.pid)
        .collect();
        if pids.len() == expected || (name.is_none() && pids.len() > expected) {
            return pids;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{pids:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Server processes stopped with `SIGSTOP` (a backend that stops answering while
/// the rest of the database works) until this is dropped.
pub struct Frozen(Vec<i32>);

impl Frozen {
    pub fn stop(pids: Vec<i32>) -> Frozen {
        for &pid in &pids {
            assert_eq!(
                unsafe { libc::kill(pid, libc::SIGSTOP) },
                0,
                "SIGSTOP {pid}"
            );
        }
        Frozen(pids)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        for &pid in &self.0 {
            unsafe { libc::kill(pid, libc::SIGCONT) };
        }
    }
}
