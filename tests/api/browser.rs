//! The pages in a real browser: Debian's `chromium` driven by `chromedriver` over
//! WebDriver (fantoccini). Each test starts its own chromedriver on a free port.
//! A machine without chromedriver FAILS these tests, with the command that
//! installs it (`.ci/run` installs it when missing): they are never skipped.
//!
//! What they assert is what a person sees: the board with the lease holder, a task
//! created through the API appearing on an open orbit page without a reload,
//! escaping, the 404 page; no console errors and no CSP violations (the browser's
//! log, read through chromedriver, and a `securitypolicyviolation` listener); and
//! axe-core (vendored in `tests/fixtures/axe/`) finds no serious or critical
//! accessibility violation on the main pages. Screenshots of the main pages go to
//! `target/screenshots/`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

use crate::harness::TestApp;
use crate::pages::{seed, Seeded, XSS_TITLE};

const INSTALL: &str = "install it with `apt-get install -y chromium chromium-driver` \
    (Debian; .ci/run does this when it runs as root)";

fn find_binary(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path).chain([PathBuf::from("/usr/bin")]) {
        for name in names {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    None
}

/// A chromedriver process and a browser session on it; both end on drop.
pub struct Browser {
    pub client: Client,
    driver: Child,
    port: u16,
    session: String,
    http: reqwest::Client,
}

impl Browser {
    pub async fn start() -> Browser {
        let driver_bin = find_binary(&["chromedriver"]).unwrap_or_else(|| {
            panic!("chromedriver is not installed, so the browser tests cannot run: {INSTALL}")
        });
        let chrome = find_binary(&["chromium", "chromium-browser", "google-chrome"])
            .unwrap_or_else(|| panic!("chromium is not installed: {INSTALL}"));
        let port = orbit_commons::testkit::free_port().expect("a free port for chromedriver");
        let mut driver = Command::new(&driver_bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}; {INSTALL}", driver_bin.display()));
        let url = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = http.get(format!("{url}/status")).send().await {
                if r.status().is_success() {
                    break;
                }
            }
            if let Ok(Some(status)) = driver.try_wait() {
                panic!("chromedriver exited at start ({status}); {INSTALL}");
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not answer on {url}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chrome,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,1000",
                         "--hide-scrollbars", "--lang=en-US"],
            },
            "goog:loggingPrefs": {"browser": "ALL"},
        });
        let caps = caps.as_object().cloned().unwrap_or_default();
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&url)
            .await
            .unwrap_or_else(|e| {
                let _ = driver.kill();
                panic!("cannot open a browser session: {e}; {INSTALL}")
            });
        let session = client
            .session_id()
            .await
            .ok()
            .flatten()
            .expect("a session id");
        Browser {
            client,
            driver,
            port,
            session,
            http,
        }
    }

    /// Loads `url` and installs a `securitypolicyviolation` listener that counts.
    pub async fn open(&self, url: &str) {
        self.client.goto(url).await.expect("navigate");
        self.client
            .execute(
                "window.__csp = window.__csp || [];\
                 document.addEventListener('securitypolicyviolation', function (e) {\
                   window.__csp.push(e.violatedDirective + ' ' + e.blockedURI); });",
                vec![],
            )
            .await
            .expect("install the CSP listener");
    }

    /// The browser's console since the last call (chromedriver's log endpoint).
    pub async fn console(&self) -> Vec<Value> {
        let r = self
            .http
            .post(format!(
                "http://127.0.0.1:{}/session/{}/se/log",
                self.port, self.session
            ))
            .json(&json!({"type": "browser"}))
            .send()
            .await
            .expect("read the browser log");
        let body: Value = r.json().await.expect("log JSON");
        body["value"].as_array().cloned().unwrap_or_default()
    }

    /// Console entries at error level (SEVERE): failed loads, CSP refusals, errors.
    pub async fn console_errors(&self) -> Vec<String> {
        self.console()
            .await
            .into_iter()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// What the page's `securitypolicyviolation` listener saw.
    pub async fn csp_violations(&self) -> Vec<String> {
        let v = self
            .client
            .execute("return window.__csp || [];", vec![])
            .await
            .expect("read the CSP listener");
        v.as_array()
            .into_iter()
            .flatten()
            .map(|x| x.as_str().unwrap_or_default().to_owned())
            .collect()
    }

    pub async fn text_of(&self, css: &str) -> String {
        match self.client.find(Locator::Css(css)).await {
            Ok(e) => e.text().await.expect("text"),
            Err(e) => {
                let url = self.client.current_url().await.map(|u| u.to_string());
                let source = self.client.source().await.unwrap_or_default();
                panic!("no {css} on {url:?}: {e}\n{source}")
            }
        }
    }

    /// Waits up to `secs` for `css`'s text to contain `needle`.
    pub async fn wait_for_text(&self, css: &str, needle: &str, secs: u64) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let text = match self.client.find(Locator::Css(css)).await {
                Ok(e) => e.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            if text.contains(needle) || Instant::now() > deadline {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Saves a screenshot as `target/screenshots/<name>.png`.
    pub async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.expect("screenshot");
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/screenshots");
        std::fs::create_dir_all(&dir).expect("create target/screenshots");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("write the screenshot");
    }

    /// Runs axe-core on the loaded page; returns its serious and critical violations.
    pub async fn axe_serious(&self) -> Vec<String> {
        let axe = include_str!("../fixtures/axe/axe.min.js");
        // Injected through WebDriver (not by the page), so the page's CSP stays as it is.
        self.client
            .execute(axe, vec![])
            .await
            .expect("load axe-core");
        let result = self
            .client
            .execute_async(
                "var done = arguments[arguments.length - 1];\
                 axe.run(document, {resultTypes: ['violations']})\
                   .then(function (r) { done(r.violations.map(function (v) {\
                     return {id: v.id, impact: v.impact, help: v.help,\
                             nodes: v.nodes.map(function (n) { return n.target.join(' '); })};\
                   })); })\
                   .catch(function (e) { done([{id: 'axe-error', impact: 'critical', help: String(e), nodes: []}]); });",
                vec![],
            )
            .await
            .expect("run axe-core");
        result
            .as_array()
            .into_iter()
            .flatten()
            .filter(|v| matches!(v["impact"].as_str(), Some("serious" | "critical")))
            .map(|v| v.to_string())
            .collect()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The session first: chromedriver then quits its Chromium. Killing
        // chromedriver alone left the browser running, orphaned, after every test.
        end_session(self.port, &self.session);
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// `DELETE /session/{id}` on the chromedriver at `port`, blocking (a `Drop` cannot
/// await), answered once chromedriver has quit the browser; bounded by timeouts.
fn end_session(port: u16, session: &str) {
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpStream};
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
        return;
    };
    let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
    let _ = stream.set_read_timeout(Some(Duration::from_secs(15)));
    let request = format!(
        "DELETE /session/{session} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
         Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    if stream.write_all(request.as_bytes()).is_err() {
        return;
    }
    // Until the whole answer is in (its head and `Content-Length` bytes), not
    // until the connection closes, which chromedriver need not do at once.
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(head_end) = answer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&answer[..head_end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if answer.len() >= head_end + 4 + length {
                return;
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The processes descended from `pid` now, from `/proc`.
fn descendants(pid: u32) -> Vec<u32> {
    let mut parent_of = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`: the name may hold spaces and parentheses.
        let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
        let mut fields = after.split_whitespace();
        let state = fields.next().unwrap_or("");
        if let Some(ppid) = fields.next().and_then(|p| p.parse::<u32>().ok()) {
            if state != "Z" {
                parent_of.push((child, ppid));
            }
        }
    }
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
            after.split_whitespace().next() != Some("Z")
        })
        .unwrap_or(false)
}

#[tokio::test]
async fn a_browser_ends_with_its_test() {
    let b = Browser::start().await;
    let browsers = descendants(b.driver.id());
    assert!(
        !browsers.is_empty(),
        "chromedriver {} started no browser",
        b.driver.id()
    );
    drop(b);
    // Quitting takes a moment; an orphaned Chromium would stay.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<u32> = browsers.iter().copied().filter(|p| alive(*p)).collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "browser processes left running after the test: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn seeded() -> (TestApp, Seeded) {
    let app = TestApp::spawn().await;
    let s = seed(&app, "browser-orbit").await;
    (app, s)
}

#[tokio::test]
async fn browser_shows_the_board_with_the_lease_holder_and_live_updates() {
    let (app, s) = seeded().await;
    let b = Browser::start().await;
    b.open(&app.url(&format!("/o/{}", s.slug))).await;

    let leased = b.text_of("section.c-leased").await;
    assert!(leased.contains("Pin the compiler version"), "{leased}");
    assert!(leased.contains("held by Lease Holder Bot"), "{leased}");
    assert!(leased.contains("expires in 10 min"), "{leased}");
    let open = b.text_of("section.c-open").await;
    assert!(open.contains("Write the release notes"), "{open}");
    assert!(b
        .text_of("section.c-completed")
        .await
        .contains("Remove timestamps"));
    assert!(b.text_of("section.c-cancelled").await.contains("COBOL"));
    // The live script connected to the stream.
    let status = b.wait_for_text("#live-status", "Live", 10).await;
    assert!(status.starts_with("Live"), "live status: {status}");
    b.screenshot("orbit").await;

    // A task created through the API appears without a reload.
    b.client
        .execute("window.__same_page = 'yes';", vec![])
        .await
        .unwrap();
    let r = app
        .post_keyed(
            &format!("/api/v1/orbits/{}/tasks", s.orbit),
            &s.owner.token,
            json!({"title": "Appeared while you watched"}),
        )
        .await;
    assert_eq!(r.status.as_u16(), 201, "{}", r.text);
    let open = b
        .wait_for_text("section.c-open", "Appeared while you watched", 15)
        .await;
    assert!(
        open.contains("Appeared while you watched"),
        "not live: {open}"
    );
    let feed = b.wait_for_text("#feed", "task.created", 5).await;
    assert!(feed.contains("task.created"), "{feed}");
    let same = b
        .client
        .execute("return window.__same_page || null;", vec![])
        .await
        .unwrap();
    assert_eq!(same, json!("yes"), "the page was reloaded");

    // A lease taken through the API moves the card to LEASED, also live.
    let new_task = r.json["data"]["id"].as_i64().unwrap();
    let r = app
        .post_keyed(
            &format!("/api/v1/tasks/{new_task}/leases"),
            &s.holder.token,
            json!({}),
        )
        .await;
    assert_eq!(r.status.as_u16(), 201, "{}", r.text);
    let leased = b
        .wait_for_text("section.c-leased", "Appeared while you watched", 15)
        .await;
    assert!(leased.contains("Appeared while you watched"), "{leased}");

    // The task page follows its own task live too.
    b.open(&app.url(&format!("/o/{}/tasks/{new_task}", s.slug)))
        .await;
    b.wait_for_text("#live-status", "Live", 10).await;
    let v = r.json["data"]["lease_version"].as_i64().unwrap();
    let r = app
        .post_keyed(
            &format!("/api/v1/tasks/{new_task}/checkpoints"),
            &s.holder.token,
            json!({"lease_version": v, "summary": "Saved while watched", "state": {"n": 1}}),
        )
        .await;
    assert_eq!(r.status.as_u16(), 201, "{}", r.text);
    let cps = b
        .wait_for_text("#checkpoints", "Saved while watched", 15)
        .await;
    assert!(cps.contains("Saved while watched"), "{cps}");
    // So does a change that names no task but ends its lease: the holder's removal
    // (until 2026-12-05 the page skipped every change of another or no task).
    let r = app
        .send(
            reqwest::Method::DELETE,
            &format!("/api/v1/orbits/{}/members/{}", s.orbit, s.holder.id),
            Some(&s.owner.token),
            None,
            None,
        )
        .await;
    assert_eq!(r.status.as_u16(), 200, "{}", r.text);
    let leases = b.wait_for_text("#leases", "MEMBER REMOVED", 15).await;
    assert!(leases.contains("MEMBER REMOVED"), "not live: {leases}");

    let errors = b.console_errors().await;
    assert!(errors.is_empty(), "console errors: {errors:?}");
    assert!(b.csp_violations().await.is_empty());
}

/// A page whose stream is refused (429: its client's streams are at the cap, as
/// when a person reloads pages whose closed streams still count until their next
/// keep-alive) connects again by itself once there is room, and follows the orbit
/// live; `EventSource` alone gives up after a refusal (a review found such pages
/// frozen until 2026-12-05).
#[tokio::test]
async fn browser_reconnects_after_its_stream_is_refused() {
    let app = TestApp::spawn_with(|c| {
        c.max_streams_per_client = 1;
        c.stream_keepalive_seconds = 1;
    })
    .await;
    let s = seed(&app, "refused-orbit").await;
    // The one stream 127.0.0.1 may have, held here while the page loads.
    let held = app
        .client
        .get(app.url(&format!("/api/v1/orbits/{}/events", s.orbit)))
        .send()
        .await
        .expect("the held stream");
    assert_eq!(held.status().as_u16(), 200);
    let b = Browser::start().await;
    b.open(&app.url(&format!("/o/{}", s.slug))).await;
    let status = b.wait_for_text("#live-status", "Reconnecting", 10).await;
    assert!(status.starts_with("Reconnecting"), "live status: {status}");
    drop(held);
    let status = b.wait_for_text("#live-status", "Live", 40).await;
    assert!(
        status.starts_with("Live"),
        "never connected again: {status}"
    );
    let r = app
        .post_keyed(
            &format!("/api/v1/orbits/{}/tasks", s.orbit),
            &s.owner.token,
            json!({"title": "Seen after the refusal"}),
        )
        .await;
    assert_eq!(r.status.as_u16(), 201, "{}", r.text);
    let open = b
        .wait_for_text("section.c-open", "Seen after the refusal", 15)
        .await;
    assert!(open.contains("Seen after the refusal"), "not live: {open}");
}

#[tokio::test]
async fn browser_shows_untrusted_content_as_text_and_the_404_page() {
    let (app, s) = seeded().await;
    let b = Browser::start().await;
    b.open(&app.url(&format!("/o/{}/tasks/{}", s.slug, s.xss_task)))
        .await;
    assert_eq!(b.text_of("h1").await, XSS_TITLE);
    let ran = b
        .client
        .execute("return window.__xss || null;", vec![])
        .await
        .unwrap();
    assert_eq!(ran, Value::Null, "the title ran as a script");
    let bold = b
        .client
        .execute("return document.querySelectorAll('main b').length;", vec![])
        .await
        .unwrap();
    assert_eq!(bold, json!(0), "the title became markup");
    b.screenshot("task-escaped").await;

    b.open(&app.url("/o/no-such-orbit")).await;
    assert_eq!(b.text_of("h1").await, "Not found");
    assert!(b.text_of("main").await.contains("Orbit not found."));
    b.screenshot("not-found").await;
    // The 404 itself is logged by the browser as a failed load; nothing else is.
    let errors: Vec<String> = b
        .console_errors()
        .await
        .into_iter()
        .filter(|e| !e.contains("404 (Not Found)"))
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:?}");
}

#[tokio::test]
async fn browser_main_pages_pass_axe_without_console_errors_or_csp_violations() {
    let (app, s) = seeded().await;
    let b = Browser::start().await;
    let pages = [
        ("home", "/".to_owned()),
        ("orbit", format!("/o/{}", s.slug)),
        ("task", format!("/o/{}/tasks/{}", s.slug, s.handoff_task)),
        ("problem", format!("/o/{}/problems/{}", s.slug, s.problem)),
        (
            "contribution",
            format!("/o/{}/contributions/{}", s.slug, s.contribution),
        ),
        ("search", "/search?q=tarball".to_owned()),
        ("contributor", format!("/contributors/{}", s.holder.id)),
        ("tasks-list", format!("/o/{}/tasks?state=LEASED", s.slug)),
    ];
    for (name, path) in &pages {
        b.open(&app.url(path)).await;
        // Let the live script connect where there is one.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let serious = b.axe_serious().await;
        assert!(serious.is_empty(), "{name} ({path}): {serious:#?}");
        b.screenshot(name).await;
        let errors = b.console_errors().await;
        assert!(
            errors.is_empty(),
            "{name} ({path}) console errors: {errors:?}"
        );
        let csp = b.csp_violations().await;
        assert!(csp.is_empty(), "{name} ({path}) CSP violations: {csp:?}");
    }

    // At 320 px wide nothing scrolls sideways.
    b.client.set_window_size(320, 900).await.unwrap();
    for (name, path) in &pages[..3] {
        b.open(&app.url(path)).await;
        let overflow = b
            .client
            .execute(
                "return document.documentElement.scrollWidth - document.documentElement.clientWidth;",
                vec![],
            )
            .await
            .unwrap();
        b.screenshot(&format!("{name}-320px")).await;
        let wide = b
            .client
            .execute(
                "var w = document.documentElement.clientWidth; var out = [];\
                 document.querySelectorAll('body *').forEach(function (e) {\
                   var r = e.getBoundingClientRect();\
                   if (r.right > w + 0.5) { out.push(e.tagName + '.' + e.className + ' ' + Math.round(r.right)); } });\
                 return out.slice(0, 5);",
                vec![],
            )
            .await
            .unwrap();
        assert!(
            overflow.as_i64().unwrap_or(1) <= 0,
            "{name} scrolls sideways at 320 px by {overflow} px: {wide}"
        );
    }

    // The checks can fail: an inline script is refused by the CSP, and both the
    // console and the listener see it.
    b.client
        .execute(
            "var s = document.createElement('script'); s.textContent = 'window.__inline = 1';\
             document.body.appendChild(s);",
            vec![],
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let inline = b
        .client
        .execute("return window.__inline || null;", vec![])
        .await
        .unwrap();
    assert_eq!(inline, Value::Null, "an inline script ran");
    let errors = b.console_errors().await;
    assert!(
        errors.iter().any(|e| e.contains("Content Security Policy")),
        "the CSP refusal was not seen in the console: {errors:?}"
    );
    assert!(
        b.csp_violations()
            .await
            .iter()
            .any(|v| v.starts_with("script-src")),
        "the listener saw no violation"
    );
}

/// The live script rewrites every relative time at load and every 15 s: its words
/// must be the server's, or a page would change its wording as it loads. Both are
/// held to tests/fixtures/relative_times.json (the server's side by the unit test
/// `relative_times_read_as_the_shared_table_says`).
#[tokio::test]
async fn browser_relative_times_read_as_the_servers() {
    let app = TestApp::spawn().await;
    let b = Browser::start().await;
    b.open(&app.url("/")).await;
    let table: Vec<(i64, String)> =
        serde_json::from_str(include_str!("../fixtures/relative_times.json")).expect("the table");
    for (offset, words) in table {
        let got = b
            .client
            .execute(
                "return window.orbitRelativeWords(arguments[0]);",
                vec![json!(offset * 1000)],
            )
            .await
            .unwrap();
        assert_eq!(got, json!(words), "{offset} s");
    }
}
