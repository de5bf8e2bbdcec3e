//! The embedded default (issue 2): with no `DATABASE_URL`, `serve` starts a private
//! PostgreSQL cluster under `ORBIT_DATA_DIR`, becomes ready, and stops the cluster
//! again when it is told to shut down.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use orbit_commons::testkit::free_port;

/// The temporary data directory and the server process; cleans up whatever a
/// failing test leaves behind.
struct Serve {
    dir: PathBuf,
    child: Option<Child>,
}

impl Serve {
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("serve.log")).unwrap_or_default()
    }

    fn postmaster_pid(&self) -> PathBuf {
        self.dir.join("postgres/data/postmaster.pid")
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        // A cluster left running by a failure: stop its postmaster (fast shutdown).
        if let Ok(pid) = std::fs::read_to_string(self.postmaster_pid()) {
            if let Some(pid) = pid
                .lines()
                .next()
                .and_then(|l| l.trim().parse::<i32>().ok())
            {
                // SAFETY: sending a signal to a pid read from the cluster's own pid file.
                unsafe {
                    libc::kill(pid, libc::SIGINT);
                }
                let deadline = Instant::now() + Duration::from_secs(20);
                while self.postmaster_pid().exists() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn fresh_dir() -> PathBuf {
    let dir = Path::new("/tmp").join(format!(
        "oc-emb-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    ));
    std::fs::create_dir_all(&dir).expect("create the temporary data directory");
    dir
}

async fn status_of(client: &reqwest::Client, url: &str) -> Option<u16> {
    client
        .get(url)
        .send()
        .await
        .ok()
        .map(|r| r.status().as_u16())
}

#[tokio::test]
async fn serve_without_database_url_starts_and_stops_a_private_cluster() {
    let dir = fresh_dir();
    let port = free_port().expect("a free port");
    let log = std::fs::File::create(dir.join("serve.log")).expect("log file");
    let child = Command::new(env!("CARGO_BIN_EXE_orbit-commons"))
        .arg("serve")
        .env_remove("DATABASE_URL")
        .env("ORBIT_DATA_DIR", &dir)
        .env("ORBIT_BIND", format!("127.0.0.1:{port}"))
        .env("ORBIT_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start orbit-commons serve");
    let mut serve = Serve {
        dir,
        child: Some(child),
    };

    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if status_of(&client, &format!("{base}/readyz")).await == Some(200) {
            break;
        }
        let exited = serve.child.as_mut().unwrap().try_wait().unwrap();
        assert!(
            exited.is_none(),
            "serve exited early ({exited:?}):\n{}",
            serve.log()
        );
        assert!(
            Instant::now() < deadline,
            "/readyz not 200 within 60 s:\n{}",
            serve.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        serve.postmaster_pid().exists(),
        "no cluster under ORBIT_DATA_DIR"
    );
    // It serves real requests against that cluster.
    let r = client
        .post(format!("{base}/api/v1/contributors"))
        .json(&serde_json::json!({"type": "AGENT", "name": "embedded"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);

    let pid = serve.child.as_ref().unwrap().id() as i32;
    // SAFETY: signalling the child we started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = serve.child.as_mut().unwrap().try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "serve did not exit within 30 s of SIGTERM:\n{}",
            serve.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(status.success(), "exit status {status:?}:\n{}", serve.log());
    assert!(
        !serve.postmaster_pid().exists(),
        "the private cluster was left running:\n{}",
        serve.log()
    );
    assert!(
        status_of(&client, &format!("{base}/healthz"))
            .await
            .is_none(),
        "still answering after exit"
    );
}
