//! Live events (contract section 14): `GET /api/v1/orbits/{orbit}/events`, read as a
//! raw Server-Sent Events stream over real HTTP — order and resume, across
//! instances, a reconnect during a burst, the per-client limit, a stalled reader,
//! keep-alives, the end of a stream, shutdown, and bad input.

use std::io::Read;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::harness::{Agent, TestApp, TestDb};

/// One block of the stream (the text between blank lines).
#[derive(Debug, Clone)]
struct Block {
    id: Option<i64>,
    event: Option<String>,
    data: Option<Value>,
    comment: Option<String>,
    retry: Option<u64>,
}

fn parse_block(text: &str) -> Block {
    let mut b = Block {
        id: None,
        event: None,
        data: None,
        comment: None,
        retry: None,
    };
    for line in text.lines() {
        if let Some(c) = line.strip_prefix(':') {
            b.comment = Some(c.trim().to_owned());
        } else if let Some(v) = line.strip_prefix("id: ") {
            b.id = Some(v.parse().expect("numeric id"));
        } else if let Some(v) = line.strip_prefix("event: ") {
            b.event = Some(v.to_owned());
        } else if let Some(v) = line.strip_prefix("data: ") {
            assert!(b.data.is_none(), "more than one data line: {text}");
            b.data = Some(serde_json::from_str(v).expect("data is JSON"));
        } else if let Some(v) = line.strip_prefix("retry: ") {
            b.retry = Some(v.parse().expect("numeric retry"));
        } else {
            panic!("unexpected line {line:?} in {text:?}");
        }
    }
    b
}

/// Splits complete blocks off the front of `buf`.
fn take_blocks(buf: &mut Vec<u8>) -> Vec<Block> {
    let mut out = Vec::new();
    while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
        let text = String::from_utf8(buf[..end].to_vec()).expect("UTF-8 stream");
        buf.drain(..end + 2);
        out.push(parse_block(&text));
    }
    out
}

/// An open stream, read chunk by chunk as it arrives.
struct Sse {
    resp: reqwest::Response,
    buf: Vec<u8>,
    ready: std::collections::VecDeque<Block>,
    ended: bool,
}

impl Sse {
    async fn open(app: &TestApp, orbit: i64, query: &str, last_event_id: Option<i64>) -> Sse {
        Self::open_as(app, orbit, query, last_event_id, None).await
    }

    async fn open_as(
        app: &TestApp,
        orbit: i64,
        query: &str,
        last_event_id: Option<i64>,
        token: Option<&str>,
    ) -> Sse {
        let resp = Self::request(app, orbit, query, last_event_id, token).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(
            resp.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
        Sse {
            resp,
            buf: Vec::new(),
            ready: Default::default(),
            ended: false,
        }
    }

    async fn request(
        app: &TestApp,
        orbit: i64,
        query: &str,
        last_event_id: Option<i64>,
        token: Option<&str>,
    ) -> reqwest::Response {
        let mut req = app
            .client
            .get(app.url(&format!("/api/v1/orbits/{orbit}/events{query}")));
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id.to_string());
        }
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send().await.expect("stream request")
    }

    /// The next block (comments included); None when the stream ended.
    async fn next_block(&mut self, within: Duration) -> Option<Block> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(b) = self.ready.pop_front() {
                return Some(b);
            }
            if self.ended {
                return None;
            }
            let chunk = tokio::time::timeout_at(deadline, self.resp.chunk())
                .await
                .expect("no block within the time")
                .expect("stream read");
            match chunk {
                Some(c) => {
                    self.buf.extend_from_slice(&c);
                    self.ready.extend(take_blocks(&mut self.buf));
                }
                None => self.ended = true,
            }
        }
    }

    /// The next change event, skipping comments; panics at the end of the stream.
    async fn next_event(&mut self) -> Block {
        loop {
            let b = self
                .next_block(Duration::from_secs(20))
                .await
                .expect("stream ended");
            if b.id.is_some() {
                return b;
            }
            assert!(b.retry.is_none(), "the stream ended early: {b:?}");
        }
    }

    /// The revisions of the next `n` events.
    async fn revisions(&mut self, n: usize) -> Vec<i64> {
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(self.next_event().await.id.unwrap());
        }
        out
    }
}

async fn task(app: &TestApp, agent: &Agent, orbit: i64, title: &str) -> i64 {
    let r = app
        .post_keyed(
            &format!("/api/v1/orbits/{orbit}/tasks"),
            &agent.token,
            json!({"title": title}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.json["data"]["orbit_revision"].as_i64().expect("revision")
}

async fn feed(app: &TestApp, orbit: i64, after: i64) -> Vec<Value> {
    let r = app
        .get(
            &format!("/api/v1/orbits/{orbit}/changes?after={after}&limit=500"),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.json["data"].as_array().unwrap().clone()
}

#[tokio::test]
async fn a_stream_replays_the_feed_in_order_then_goes_live_and_resumes_from_last_event_id() {
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    let b = app.agent("b").await;
    let orbit = app.orbit(&owner, "watched").await;
    app.join(&b, orbit).await;
    for i in 0..3 {
        task(&app, &owner, orbit, &format!("t{i}")).await;
    }
    // Revisions 1..=5 exist. A replay from 0 gives each, as the feed has it.
    let mut s = Sse::open(&app, orbit, "?after=0", None).await;
    let changes = feed(&app, orbit, 0).await;
    assert_eq!(changes.len(), 5);
    for change in &changes {
        let e = s.next_event().await;
        assert_eq!(e.id, change["revision"].as_i64());
        assert_eq!(e.event.as_deref(), change["kind"].as_str());
        assert_eq!(e.data.as_ref(), Some(change), "data is the feed's Change");
    }
    // Then live.
    let rev = task(&app, &b, orbit, "live").await;
    assert_eq!(rev, 6);
    let e = s.next_event().await;
    assert_eq!(e.id, Some(6));
    assert_eq!(e.event.as_deref(), Some("task.created"));
    assert_eq!(e.data.as_ref().unwrap()["contributor"]["id"], b.id);
    assert_eq!(e.data.as_ref().unwrap(), &feed(&app, orbit, 5).await[0]);

    // Resume with Last-Event-ID, which wins over the URL's `after` (an
    // EventSource reconnects to its original URL with the header).
    let mut resumed = Sse::open(&app, orbit, "?after=0", Some(3)).await;
    assert_eq!(resumed.revisions(3).await, vec![4, 5, 6]);
    // Without either: after the current revision, so the next write comes first.
    let mut fresh = Sse::open(&app, orbit, "", None).await;
    task(&app, &owner, orbit, "next").await;
    assert_eq!(fresh.revisions(1).await, vec![7]);
    assert_eq!(resumed.revisions(1).await, vec![7]);
    assert_eq!(s.revisions(1).await, vec![7]);
    // The slug names the orbit too; an `after` past the revision waits for it.
    let mut ahead = Sse::open(&app, orbit, "?after=8", None).await;
    task(&app, &owner, orbit, "8").await;
    task(&app, &owner, orbit, "9").await;
    assert_eq!(ahead.revisions(1).await, vec![9]);
    let r = app
        .client
        .get(app.url("/api/v1/orbits/watched/events?after=7"))
        .send()
        .await
        .unwrap();
    let mut by_slug = Sse {
        resp: r,
        buf: Vec::new(),
        ready: Default::default(),
        ended: false,
    };
    assert_eq!(by_slug.revisions(2).await, vec![8, 9]);
}

#[tokio::test]
async fn a_write_on_another_instance_reaches_a_subscriber_of_the_first() {
    let app = TestApp::spawn().await;
    let other = app.another_instance();
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "two-instances").await;
    let mut s = Sse::open(&app, orbit, "", None).await;
    let mut there = Sse::open(&other, orbit, "", None).await;
    for i in 0..5 {
        task(&other, &owner, orbit, &format!("remote {i}")).await;
    }
    task(&app, &owner, orbit, "local").await;
    assert_eq!(s.revisions(6).await, vec![2, 3, 4, 5, 6, 7]);
    assert_eq!(there.revisions(6).await, vec![2, 3, 4, 5, 6, 7]);
}

/// Writers on two instances make a burst while a subscriber reads part of it,
/// drops its connection and reconnects (to the other instance) with
/// `Last-Event-ID`, several times over: together its streams saw every revision
/// once, in order. Each reconnect's replay races with commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_in_the_middle_of_a_burst_loses_nothing() {
    let app = TestApp::spawn().await;
    let other = app.another_instance();
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "burst").await;
    let writers: Vec<Agent> = {
        let mut v = Vec::new();
        for i in 0..4 {
            let a = app.agent(&format!("w{i}")).await;
            app.join(&a, orbit).await;
            v.push(a);
        }
        v
    };
    let start = 1 + writers.len() as i64;
    const EACH: usize = 30;
    let total = start + (writers.len() * EACH) as i64;
    let burst = {
        let apps = [app.base.clone(), other.base.clone()];
        let client = app.client.clone();
        futures::future::join_all(writers.iter().enumerate().map(|(i, w)| {
            let base = apps[i % 2].clone();
            let client = client.clone();
            let token = w.token.clone();
            async move {
                for n in 0..EACH {
                    let r = client
                        .post(format!("{base}/api/v1/orbits/{orbit}/tasks"))
                        .bearer_auth(&token)
                        .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
                        .json(&json!({"title": format!("w{i} n{n}")}))
                        .send()
                        .await
                        .expect("write");
                    assert_eq!(r.status(), 201);
                }
            }
        }))
    };
    let reader = async {
        let mut seen: Vec<i64> = Vec::new();
        let mut last = start;
        let mut round = 0;
        while last < total {
            let at = if round % 2 == 0 { &app } else { &other };
            let mut s = Sse::open(at, orbit, "", Some(last)).await;
            for _ in 0..7 {
                if last == total {
                    break;
                }
                let id = s.next_event().await.id.unwrap();
                seen.push(id);
                last = id;
            }
            // Dropped mid-burst: the connection closes.
            drop(s);
            round += 1;
        }
        (seen, round)
    };
    let (_, (seen, rounds)) = tokio::join!(burst, reader);
    let expected: Vec<i64> = (start + 1..=total).collect();
    assert_eq!(seen, expected, "after {rounds} connections");
    assert!(rounds >= 3, "{rounds}");
}

#[tokio::test]
async fn a_client_past_its_stream_limit_gets_429_and_a_token_counts_apart() {
    let app = TestApp::spawn_with(|c| {
        c.max_streams_per_client = 2;
        // Longer than the test: a closed stream's place comes back by the probes
        // of a request at the cap, not by a keep-alive that happened to fail.
        c.stream_keepalive_seconds = 15;
    })
    .await;
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "limited").await;
    // A HEAD answers like the GET and holds no place: it has no stream (it once
    // held one, unread, until the stream's time ran out).
    for _ in 0..3 {
        let r = app
            .client
            .head(app.url(&format!("/api/v1/orbits/{orbit}/events")))
            .send()
            .await
            .expect("HEAD");
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.headers()["content-type"].to_str().unwrap(),
            "text/event-stream"
        );
    }
    let first = Sse::open(&app, orbit, "", None).await;
    let mut second = Sse::open(&app, orbit, "", None).await;
    assert_eq!(
        second
            .next_block(Duration::from_secs(5))
            .await
            .and_then(|b| b.comment),
        Some("ok".to_owned())
    );
    // At the cap, a HEAD still answers: it would open nothing.
    let head = app
        .client
        .head(app.url(&format!("/api/v1/orbits/{orbit}/events")))
        .send()
        .await
        .expect("HEAD");
    assert_eq!(head.status(), 200);
    let over = crate::harness::Resp::from(Sse::request(&app, orbit, "", None, None).await).await;
    over.assert_error(429, "rate_limited");
    // When the first stream ends by itself at the latest (`stream_max_seconds`),
    // not 1 s, after which the same request was refused again (a probe, 2026-12-07).
    let after: u64 = over
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .unwrap();
    let max = app.config.stream_max_seconds;
    assert!(
        after > max - 60 && after <= max,
        "Retry-After {after} of {max}"
    );
    let message = over.json["message"].as_str().unwrap();
    assert!(message.contains(&format!("within {after} s")), "{message}");
    // A token is its own client.
    let mut with_token = Sse::open_as(&app, orbit, "", None, Some(&owner.token)).await;
    // A stream its client closed gives its place back to the client's next request
    // at once: the server finds it by writing to the client's streams (until
    // 2026-12-06 only a failed keep-alive found it, up to 30 s later).
    drop(first);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let r = Sse::request(&app, orbit, "", None, None).await;
    assert_eq!(
        r.status(),
        200,
        "the closed stream's place did not come back"
    );
    // The probes' waits (25 ms, doubling), not a keep-alive's 15 s.
    assert!(started.elapsed() < Duration::from_secs(2));
    // The client's open stream was asked to write too (a keep-alive long before its
    // own, 15 s away), and is still served.
    assert_eq!(
        second
            .next_block(Duration::from_secs(2))
            .await
            .and_then(|b| b.comment),
        Some("keep-alive".to_owned())
    );
    task(&app, &owner, orbit, "still live").await;
    assert_eq!(second.revisions(1).await, vec![2]);
    assert_eq!(with_token.revisions(1).await, vec![2]);
}

/// A reader that opens a stream and never reads (its socket's receive buffer kept
/// small): 400 writes still complete, another subscriber still gets every event
/// in order, and what the stalled one was sent is an unbroken run from the start.
/// (Whether it is dropped depends on how much the kernel buffers; the dropping
/// itself is `domain::events`'s unit test.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_reader_does_not_hold_back_writers_or_other_subscribers() {
    let app = TestApp::spawn_with(|c| c.stream_buffer = 4).await;
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "stalled").await;
    let mut stalled = stalled_stream(app.addr, orbit);
    let mut reader = Sse::open(&app, orbit, "", None).await;
    let mut written = 1;
    while written < 401 {
        let titles: Vec<String> = (0..20).map(|i| format!("t{written}-{i}")).collect();
        let writes = futures::future::join_all(titles.iter().map(|t| task(&app, &owner, orbit, t)));
        let revisions = tokio::time::timeout(Duration::from_secs(30), writes)
            .await
            .expect("writes held back by a stalled reader");
        written += revisions.len() as i64;
        // The reading subscriber keeps up, in order.
        let got = reader.revisions(revisions.len()).await;
        let want: Vec<i64> = (written - revisions.len() as i64 + 1..=written).collect();
        assert_eq!(got, want);
    }
    // The stalled reader now reads what it was sent: an unbroken run from 2.
    stalled
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut raw = Vec::new();
    let _ = stalled.read_to_end(&mut raw);
    // The rest of the chunk that carried `: ok`, then the chunks after it.
    let rest = raw.strip_prefix(b"\r\n").unwrap_or(&raw);
    let mut buf = dechunk(rest);
    let blocks = take_blocks(&mut buf);
    let ids: Vec<i64> = blocks.iter().filter_map(|b| b.id).collect();
    let want: Vec<i64> = (2..2 + ids.len() as i64).collect();
    assert_eq!(ids, want, "the stalled stream's events have a hole");
}

/// A GET of the stream on a socket with a small receive buffer, never read.
fn stalled_stream(addr: std::net::SocketAddr, orbit: i64) -> std::net::TcpStream {
    use std::io::Write;
    use std::os::fd::FromRawFd;
    let std::net::SocketAddr::V4(v4) = addr else {
        panic!("IPv4 test address expected")
    };
    // SAFETY: plain socket calls on a descriptor this function owns until it hands
    // it to TcpStream.
    let stream = unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0);
        let size: libc::c_int = 4096;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            &size as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: v4.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*v4.ip()).to_be(),
            },
            sin_zero: [0; 8],
        };
        let rc = libc::connect(
            fd,
            &sa as *const libc::sockaddr_in as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        assert_eq!(rc, 0, "connect: {}", std::io::Error::last_os_error());
        std::net::TcpStream::from_raw_fd(fd)
    };
    let mut s = stream;
    write!(
        s,
        "GET /api/v1/orbits/{orbit}/events HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    // Read only the head and the stream's first comment: the stream is open.
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !seen.ends_with(b": ok\n\n") {
        assert!(
            seen.len() < 4096,
            "no stream: {}",
            String::from_utf8_lossy(&seen)
        );
        s.read_exact(&mut byte).expect("stream head");
        seen.push(byte[0]);
    }
    s
}

/// The payload of an HTTP/1.1 chunked body (as far as it goes).
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = body.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&body[..eol])
            .ok()
            .and_then(|h| usize::from_str_radix(h.trim(), 16).ok());
        let Some(size) = size else { break };
        body = &body[eol + 2..];
        if size == 0 || body.len() < size {
            out.extend_from_slice(&body[..size.min(body.len())]);
            break;
        }
        out.extend_from_slice(&body[..size]);
        body = &body[(size + 2).min(body.len())..];
    }
    out
}

/// However many subscribers an orbit has on an instance, each new change costs
/// that instance about one feed read (the tail's), not one per subscriber.
#[tokio::test]
async fn many_subscribers_are_served_from_one_read_per_change() {
    let app = TestApp::spawn_with(|c| c.max_streams_per_client = 100).await;
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "crowd").await;
    let mut subs = Vec::new();
    for _ in 0..20 {
        subs.push(Sse::open(&app, orbit, "", None).await);
    }
    // Every subscriber has its first event (so its replay was read).
    let rev = task(&app, &owner, orbit, "warm").await;
    for s in subs.iter_mut() {
        assert_eq!(s.revisions(1).await, vec![rev]);
    }
    let [tail_before, own_before] = app
        .metrics([
            "orbit_event_tail_reads_total",
            "orbit_event_own_reads_total",
        ])
        .await;
    const WRITES: i64 = 10;
    for i in 0..WRITES {
        let rev = task(&app, &owner, orbit, &format!("t{i}")).await;
        for s in subs.iter_mut() {
            assert_eq!(s.revisions(1).await, vec![rev]);
        }
    }
    let [tail_after, own_after] = app
        .metrics([
            "orbit_event_tail_reads_total",
            "orbit_event_own_reads_total",
        ])
        .await;
    // One read per write, and a safety read or two of a quiet tail.
    assert!(
        tail_after - tail_before <= WRITES as u64 + 2,
        "{} tail reads for {WRITES} writes",
        tail_after - tail_before
    );
    assert_eq!(own_after, own_before, "a subscriber read the feed itself");
}

#[tokio::test]
async fn a_quiet_stream_gets_keep_alives_and_ends_with_retry_when_its_time_is_up() {
    let app = TestApp::spawn_with(|c| {
        c.stream_keepalive_seconds = 1;
        c.stream_max_seconds = 3;
    })
    .await;
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "quiet").await;
    let mut s = Sse::open(&app, orbit, "", None).await;
    let mut keep_alives = 0;
    let mut retry = None;
    while let Some(b) = s.next_block(Duration::from_secs(10)).await {
        assert!(b.id.is_none(), "{b:?}");
        if b.comment.as_deref() == Some("keep-alive") {
            keep_alives += 1;
        }
        if b.retry.is_some() {
            retry = b.retry;
        }
    }
    assert!(keep_alives >= 2, "{keep_alives} keep-alives");
    assert!(retry.is_some(), "the stream ended without retry:");
}

#[tokio::test]
async fn an_unknown_orbit_is_404_and_a_malformed_resume_point_is_422() {
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "exists").await;
    let get = |path: String, header: Option<&'static str>| {
        let mut req = app.client.get(app.url(&path));
        if let Some(h) = header {
            req = req.header("Last-Event-ID", h);
        }
        async move { crate::harness::Resp::from(req.send().await.unwrap()).await }
    };
    get("/api/v1/orbits/no-such-orbit/events".into(), None)
        .await
        .assert_error(404, "not_found");
    // 404 before 422.
    get("/api/v1/orbits/999999/events".into(), Some("x"))
        .await
        .assert_error(404, "not_found");
    for (query, header, field) in [
        ("?after=-1", None, "after"),
        ("?after=abc", None, "after"),
        ("", Some("abc"), "Last-Event-ID"),
        ("", Some("-5"), "Last-Event-ID"),
        ("?after=1", Some("1.5"), "Last-Event-ID"),
    ] {
        let r = get(format!("/api/v1/orbits/{orbit}/events{query}"), header).await;
        assert_eq!(r.assert_envelope(422), "validation_failed", "{}", r.text);
        assert!(r.json["errors"][field].is_array(), "{}", r.text);
    }
    let r = get(format!("/api/v1/orbits/{orbit}/events?box=1"), None).await;
    r.assert_envelope(422);
    // A bad token is 401 even here.
    let r = app
        .client
        .get(app.url(&format!("/api/v1/orbits/{orbit}/events")))
        .bearer_auth("oc_nope")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

/// SIGTERM to an instance with open streams and a long poll waiting: each stream
/// says `retry:` and ends, the poll answers its empty page at once (the client
/// polls again, elsewhere), and the process exits without waiting out the
/// graceful-shutdown timeout (10 s).
#[tokio::test]
async fn shutdown_ends_open_streams_and_long_polls_and_does_not_wait_for_them() {
    use crate::reliability::fleet::{load_env, start_serve};
    let db = TestDb::new();
    let logs = orbit_commons::testkit::Scratch::new("oc-events").unwrap();
    let mut serve = start_serve(&logs.dir, "events-0", &load_env(&db.url)).await;
    let client = reqwest::Client::new();
    let base = serve.base();
    let r = client
        .post(format!("{base}/api/v1/contributors"))
        .json(&json!({"type": "AGENT", "name": "owner"}))
        .send()
        .await
        .unwrap();
    let token = r.json::<Value>().await.unwrap()["data"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = client
        .post(format!("{base}/api/v1/orbits"))
        .bearer_auth(&token)
        .json(&json!({"slug": "closing", "name": "closing"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let mut streams = Vec::new();
    for _ in 0..3 {
        let resp = client
            .get(format!("{base}/api/v1/orbits/closing/events"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        streams.push(Sse {
            resp,
            buf: Vec::new(),
            ready: Default::default(),
            ended: false,
        });
    }
    // Each stream is open (its first comment arrived).
    for s in streams.iter_mut() {
        assert!(s.next_block(Duration::from_secs(10)).await.is_some());
    }
    let poll = tokio::spawn(
        client
            .get(format!(
                "{base}/api/v1/orbits/closing/changes?after=1&wait=25"
            ))
            .send(),
    );
    // The poll waits (the orbit is at revision 1).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!poll.is_finished(), "the poll did not wait");
    let started = Instant::now();
    // SAFETY: signalling the child process this test started.
    assert_eq!(unsafe { libc::kill(serve.pid() as i32, libc::SIGTERM) }, 0);
    for s in streams.iter_mut() {
        let mut retry = false;
        while let Some(b) = s.next_block(Duration::from_secs(8)).await {
            retry |= b.retry.is_some();
        }
        assert!(retry, "a stream ended without retry:");
    }
    let answer = poll.await.unwrap().expect("the poll is answered, not cut");
    assert_eq!(answer.status(), 200);
    let page: Value = answer.json().await.unwrap();
    assert_eq!(page["data"], json!([]), "{page}");
    assert_eq!(page["meta"]["next_after"], 1, "{page}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the poll waited out its wait"
    );
    loop {
        if serve.exited().is_some() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "the instance waited on its streams"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
