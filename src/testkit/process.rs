//! Spawned service instances: `orbit-commons serve` as a child process on a free
//! port with its output in a log file, waited for until ready, and stopped by
//! SIGKILL (a crash), by SIGTERM (a graceful stop) or when dropped.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A port on 127.0.0.1 that was free a moment ago (another process may still take
/// it before the caller binds it: see [`Service::exited_on_port_clash`]).
pub fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

/// A directory of its own under `/tmp` (short, so Unix socket paths inside fit),
/// removed when dropped.
#[derive(Debug)]
pub struct Scratch {
    pub dir: PathBuf,
}

impl Scratch {
    pub fn new(prefix: &str) -> Result<Scratch, String> {
        let dir = Path::new("/tmp").join(format!("{prefix}-{}", super::short_id()));
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        Ok(Scratch { dir })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// How to start one instance.
#[derive(Debug, Clone)]
pub struct Spawn {
    /// The `orbit-commons` binary.
    pub program: PathBuf,
    /// A name for messages (`instance-0`).
    pub name: String,
    /// The file its stdout and stderr go to.
    pub log: PathBuf,
    /// Settings on top of `ORBIT_BIND` (which the kit sets to the port).
    pub env: Vec<(String, String)>,
    /// Drop every inherited `ORBIT_*` setting and `DATABASE_URL` first, so the
    /// instance runs with exactly `env`.
    pub isolate: bool,
}

impl Spawn {
    pub fn new(program: impl Into<PathBuf>, name: &str, log: PathBuf) -> Spawn {
        Spawn {
            program: program.into(),
            name: name.to_owned(),
            log,
            env: Vec::new(),
            isolate: false,
        }
    }

    pub fn env(mut self, key: &str, value: impl Into<String>) -> Spawn {
        self.env.push((key.to_owned(), value.into()));
        self
    }

    pub fn envs<'a>(mut self, env: impl IntoIterator<Item = &'a (&'a str, String)>) -> Spawn {
        self.env
            .extend(env.into_iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
        self
    }

    pub fn isolated(mut self) -> Spawn {
        self.isolate = true;
        self
    }

    /// Starts `serve` on `port`.
    pub fn on_port(&self, port: u16) -> Result<Service, String> {
        let file = File::create(&self.log)
            .map_err(|e| format!("cannot create {}: {e}", self.log.display()))?;
        let err = file.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(&self.program);
        cmd.arg("serve");
        if self.isolate {
            for (k, _) in std::env::vars_os() {
                let k = k.to_string_lossy();
                if k.starts_with("ORBIT_") || k == "DATABASE_URL" {
                    cmd.env_remove(&*k);
                }
            }
        }
        cmd.env("ORBIT_BIND", format!("127.0.0.1:{port}"))
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.program.display()))?;
        Ok(Service {
            name: self.name.clone(),
            port,
            child,
            log: self.log.clone(),
            tail_on_panic: false,
        })
    }

    /// Starts `serve` on a free port and waits until `/readyz` answers 200 (within
    /// `timeout`). A port taken between the probe and the instance's bind is retried
    /// on another port, up to three attempts.
    pub async fn ready(&self, timeout: Duration) -> Result<Service, String> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut service = self.on_port(free_port()?)?;
            match service.wait_ready(timeout).await {
                Ok(()) => return Ok(service),
                Err(_) if attempt < 3 && service.exited_on_port_clash() => continue,
                Err(e) => return Err(format!("{}: {e}", self.name)),
            }
        }
    }
}

/// One running instance; killed when dropped.
#[derive(Debug)]
pub struct Service {
    pub name: String,
    pub port: u16,
    child: Child,
    log: PathBuf,
    tail_on_panic: bool,
}

impl Service {
    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base(&self) -> String {
        format!("http://{}", self.addr())
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// When dropped while the thread panics (a failing test), print the log's tail.
    pub fn tail_on_panic(mut self) -> Service {
        self.tail_on_panic = true;
        self
    }

    /// Its exit status, if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The last 6,000 bytes of its log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let start = text.len().saturating_sub(6000);
        let start = (start..text.len())
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(text.len());
        text[start..].to_owned()
    }

    /// It exited because its port was taken (worth a retry on another).
    pub fn exited_on_port_clash(&mut self) -> bool {
        self.exited().is_some() && self.log_tail().contains("cannot listen")
    }

    /// Polls `/readyz` until it answers 200. Fails when the instance exits first or
    /// `timeout` passes.
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<(), String> {
        wait_ready(&self.addr(), Some(self), timeout).await
    }

    /// SIGKILL, as a crash: no graceful shutdown, no flushing of anything. Returns
    /// the reaped exit status.
    pub fn sigkill(&mut self) -> Result<ExitStatus, String> {
        self.signal(libc::SIGKILL)?;
        self.child
            .wait()
            .map_err(|e| format!("reap {}: {e}", self.name))
    }

    /// SIGTERM (graceful shutdown), then SIGKILL if it has not exited within `grace`.
    pub fn terminate(&mut self, grace: Duration) {
        if !self.alive() {
            return;
        }
        let _ = self.signal(libc::SIGTERM);
        let deadline = Instant::now() + grace;
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return;
                }
            }
        }
    }

    fn signal(&self, signal: libc::c_int) -> Result<(), String> {
        // SAFETY: signalling the child process we started, by its id.
        let rc = unsafe { libc::kill(self.child.id() as i32, signal) };
        if rc == 0 {
            Ok(())
        } else {
            Err(format!(
                "kill -{signal} {}: {}",
                self.child.id(),
                std::io::Error::last_os_error()
            ))
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if self.alive() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if self.tail_on_panic && std::thread::panicking() {
            eprintln!(
                "----- {} (port {}) log tail -----\n{}",
                self.name,
                self.port,
                self.log_tail()
            );
        }
    }
}

/// Polls `http://<addr>/readyz` until it answers 200. Fails when `service` (the
/// instance behind `addr`, when it is ours) exits first or `timeout` passes.
pub async fn wait_ready(
    addr: &str,
    mut service: Option<&mut Service>,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        if http_status(addr, "/readyz").await == Some(200) {
            return Ok(());
        }
        if let Some(s) = service.as_deref_mut() {
            if let Some(status) = s.exited() {
                return Err(format!(
                    "the service exited ({status}) before it was ready:\n{}",
                    s.log_tail()
                ));
            }
        }
        if Instant::now() > deadline {
            let tail = service.map(|s| format!(":\n{}", s.log_tail()));
            return Err(format!(
                "http://{addr}/readyz did not answer 200 within {} s{}",
                timeout.as_secs(),
                tail.unwrap_or_default()
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The status of `GET path` on `addr` over a fresh connection (at most 5 s), or
/// None when there was no answer.
pub async fn http_status(addr: &str, path: &str) -> Option<u16> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut head = Vec::new();
        let mut buf = [0u8; 512];
        while !head.windows(2).any(|w| w == b"\r\n") {
            let n = stream.read(&mut buf).await.ok()?;
            if n == 0 {
                return None;
            }
            head.extend_from_slice(&buf[..n]);
        }
        let line = String::from_utf8_lossy(&head);
        line.split_whitespace().nth(1)?.parse::<u16>().ok()
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .ok()
        .flatten()
}
