//! The delivery engine: one per instance, on a thread of its own, beside the
//! request path. It claims subscriptions that have a change to deliver (a claim
//! with an expiry on the subscription's row, `webhook_claim`), sends their changes
//! one at a time in revision order, and records each attempt (`webhook_record`),
//! which moves `delivered_through`, schedules the retry with its backoff, or
//! disables the subscription after the last attempt. No database connection is
//! held while a request is out. Woken by the change hub (a write on any instance)
//! in an orbit that has an ACTIVE subscription ([`WatchedOrbits`], the filter of
//! its `ChangeHub::watch`: a change in any other orbit wakes nothing), and by a
//! periodic sweep, which claims in every orbit and reads the watched orbits again
//! (retries that came due, missed wake-ups, claims left by a killed instance,
//! subscriptions made on another instance).
//!
//! At least once: progress is recorded only after the receiver answered, so an
//! instance killed mid-request leaves that change to be sent again by whichever
//! instance claims the subscription next, after the claim runs out. Exactly one
//! instance delivers a subscription at a time: every record names the claim
//! (instance, `claim_seq`) and changes nothing once it was lost. A live instance
//! whose statements fail (the database restarting, away) asks again
//! ([`persisting`]) while its claim lasts, so a restart costs the delivery the
//! outage, not the rest of the claim; each of its database calls ends at
//! `db::deadline`, as a request's does, so a backend that stops answering costs a
//! call that, not the engine.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use diesel::{PgConnection, QueryResult};
use serde::Serialize;
use tokio::sync::broadcast::Receiver;

use crate::db::{self, PgPool, TxError};
use crate::domain::webhooks::{matches, parse_url, safety, sign, WebhookOrbit};
use crate::domain::Core;
use crate::error::{is_connection_failure, ApiError};
use crate::store::changes::ChangeOut;
use crate::store::webhooks::{self as store, Attempt, Claimed, Policy};

/// Subscriptions one instance delivers at once.
const MAX_RUNNING: usize = 64;
/// Changes read per statement while a subscription is delivered.
const PAGE: i64 = 100;
/// Bytes of a receiver's answer read before it is dropped.
const BODY_CAP: usize = 64 * 1024;
/// How long a receiver's answer is read after its status came.
const BODY_DRAIN: Duration = Duration::from_millis(500);
/// How long a subscription that caught up keeps its claim for its next change.
const LINGER: Duration = Duration::from_millis(100);
/// The least time between two claim passes woken by the change hub.
const PASS_GAP: Duration = Duration::from_millis(5);
/// How long the engine waits for deliveries in flight when it stops.
const STOP_GRACE: Duration = Duration::from_secs(2);
/// Room left in a claim, past an attempt's longest time (the host's lookup and the
/// send's timeout), under which the claim is renewed before the attempt.
const CLAIM_MARGIN: Duration = Duration::from_secs(1);

/// The orbits with an ACTIVE subscription, as this instance last read them: a
/// change in one of them wakes a claim pass, a change anywhere else does not (an
/// orbit without subscriptions, most of them, costs the engine nothing per write).
/// Each sweep reads the set again (so a subscription made on another instance
/// counts here from this instance's next sweep; the other instance claims it at
/// once); a subscription created or enabled on this instance is added at once
/// ([`WatchedOrbits::add`]). An orbit that lost its last subscription stays until
/// the next sweep: it costs a claim pass that finds nothing, never a missed change.
#[derive(Default)]
pub struct WatchedOrbits {
    inner: Mutex<Watched>,
}

#[derive(Default)]
struct Watched {
    orbits: HashSet<i64>,
    /// Counts [`WatchedOrbits::add`]: a sweep's read replaces the set only if
    /// nothing was added while it ran.
    added: u64,
}

impl WatchedOrbits {
    fn lock(&self) -> std::sync::MutexGuard<'_, Watched> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A subscription of `orbit` was created or enabled on this instance. (If its
    /// transaction then rolls back, the entry costs claim passes until the next
    /// sweep.)
    pub fn add(&self, orbit: i64) {
        let mut w = self.lock();
        w.orbits.insert(orbit);
        w.added += 1;
    }

    fn contains(&self, orbit: i64) -> bool {
        self.lock().orbits.contains(&orbit)
    }

    /// The mark a sweep takes before it reads the set from the database.
    fn mark(&self) -> u64 {
        self.lock().added
    }

    /// The set as a sweep read it, which began at `mark`: replaces this one, or is
    /// added to it when an orbit was added meanwhile (the read may predate it).
    fn replace(&self, read: Vec<i64>, mark: u64) {
        let mut w = self.lock();
        if w.added == mark {
            w.orbits = read.into_iter().collect();
        } else {
            w.orbits.extend(read);
        }
    }
}

/// What one delivery POSTs: `{"type", "timestamp", "data": Change + {"orbit"}}`.
#[derive(Serialize)]
pub struct Event<'a> {
    #[serde(rename = "type")]
    pub kind: &'a str,
    /// When the change was made (the same on every retry).
    pub timestamp: String,
    pub data: EventData<'a>,
}

#[derive(Serialize)]
pub struct EventData<'a> {
    #[serde(flatten)]
    pub change: &'a ChangeOut,
    pub orbit: WebhookOrbit,
}

/// The body of the delivery of `change` of the orbit (`id`, `slug`).
pub fn event_body(change: &ChangeOut, orbit_id: i64, slug: &str) -> Vec<u8> {
    let event = Event {
        kind: &change.kind,
        timestamp: crate::model::format_ts(&change.created_at),
        data: EventData {
            change,
            orbit: WebhookOrbit {
                id: orbit_id,
                slug: slug.to_owned(),
            },
        },
    };
    serde_json::to_vec(&event).unwrap_or_default()
}

/// The running engine of this instance.
pub struct Engine {
    ctx: Arc<Ctx>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

struct Ctx {
    core: Core,
    /// `<pid>:<random>`: names this instance's claims.
    instance: String,
    stop: AtomicBool,
    wake: tokio::sync::Notify,
    running: AtomicUsize,
    settings: Settings,
    /// Whether the last claim pass failed: a run of failures is logged at `warn`
    /// once, at its start, and its end at `info`.
    failing: AtomicBool,
}

#[derive(Clone, Copy)]
struct Settings {
    timeout: Duration,
    claim_ms: i64,
    retry_base_ms: i64,
    max_attempts: i32,
    allow_private: bool,
    sweep: Duration,
}

impl Engine {
    /// Starts the engine's thread.
    pub fn start(core: Core) -> Arc<Engine> {
        let c = &core.config;
        let timeout = Duration::from_millis(c.webhook_timeout_ms);
        let settings = Settings {
            timeout,
            // One attempt (the host's lookup, at most `safety::LOOKUP_TIMEOUT`;
            // connect, send, answer) and its record fit in a claim; every recorded
            // delivery renews it.
            claim_ms: (c.webhook_timeout_ms + 5000) as i64,
            retry_base_ms: c.webhook_retry_base_ms as i64,
            max_attempts: c.webhook_max_attempts as i32,
            allow_private: c.webhook_allow_private,
            sweep: Duration::from_millis(c.webhook_retry_base_ms.clamp(50, 1000)),
        };
        let instance = format!(
            "{}:{}",
            std::process::id(),
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        let ctx = Arc::new(Ctx {
            core,
            instance,
            stop: AtomicBool::new(false),
            wake: tokio::sync::Notify::new(),
            running: AtomicUsize::new(0),
            settings,
            failing: AtomicBool::new(false),
        });
        let run = ctx.clone();
        let thread = std::thread::Builder::new()
            .name("orbit-webhooks".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!(error = %e, "webhook delivery cannot start");
                        return;
                    }
                };
                rt.block_on(engine_loop(run));
                rt.shutdown_timeout(Duration::from_millis(200));
            })
            .expect("spawn the webhook delivery thread");
        Arc::new(Engine {
            ctx,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// This instance's name in claims (`<pid>:<random>`).
    pub fn instance(&self) -> &str {
        &self.ctx.instance
    }

    /// Stops claiming, lets deliveries in flight finish (for a moment) and joins
    /// the thread. A delivery cut short is sent again after its claim runs out.
    pub fn stop(&self) {
        self.ctx.stop.store(true, Ordering::Relaxed);
        self.ctx.wake.notify_one();
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

impl Ctx {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.core.hub.is_stopped()
    }
}

fn client(s: &Settings) -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(s.timeout)
        .timeout(s.timeout)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(safety::SafeResolver::shared(s.allow_private))
        .user_agent(concat!(
            "orbit-commons-webhooks/",
            env!("CARGO_PKG_VERSION")
        ))
        .build()
        .expect("build the webhook HTTP client")
}

async fn engine_loop(ctx: Arc<Ctx>) {
    let http = client(&ctx.settings);
    let watched = ctx.core.webhook_orbits.clone();
    let mut changes = ctx.core.hub.watch(move |orbit| watched.contains(orbit));
    let mut next_sweep = tokio::time::Instant::now();
    while !ctx.stopping() {
        let sweep = tokio::time::Instant::now() >= next_sweep;
        if sweep {
            next_sweep = tokio::time::Instant::now() + ctx.settings.sweep;
        }
        claim_pass(&ctx, &http, sweep).await;
        let last_pass = Instant::now();
        // Until a reason to claim: a change in a watched orbit, the end of a
        // delivery (or the stop), the sweep.
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    // The hub is gone (the instance is stopping): the sweep only.
                    tokio::time::sleep_until(next_sweep).await;
                    continue;
                }
                // Under a stream of writes, one pass per few milliseconds covers them
                // all (a subscription being delivered picks up its own new changes
                // without a pass).
                let since = last_pass.elapsed();
                if since < PASS_GAP {
                    tokio::time::sleep(PASS_GAP - since).await;
                }
                changes.borrow_and_update();
            }
            _ = ctx.wake.notified() => {}
            _ = tokio::time::sleep_until(next_sweep) => {}
        }
    }
    let deadline = Instant::now() + STOP_GRACE;
    while ctx.running.load(Ordering::Relaxed) > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Claims what this instance has room for and starts delivering it; a sweep also
/// reads the watched orbits again, in the same blocking hop.
async fn claim_pass(ctx: &Arc<Ctx>, http: &reqwest::Client, sweep: bool) {
    let free = MAX_RUNNING.saturating_sub(ctx.running.load(Ordering::Relaxed));
    if free == 0 && !sweep {
        return;
    }
    let mark = ctx.core.webhook_orbits.mark();
    let (instance, claim_ms) = (ctx.instance.clone(), ctx.settings.claim_ms);
    ctx.core
        .metrics
        .webhook_claim_passes
        .fetch_add(1, Ordering::Relaxed);
    // The claims' leases run from their statement, which starts after this.
    let asked = Instant::now();
    let pass = blocking(&ctx.core.pool, move |c| {
        let claimed = if free > 0 {
            store::claim(c, &instance, free as i32, claim_ms)?
        } else {
            Vec::new()
        };
        let watched = if sweep {
            Some(store::watched_orbits(c)?)
        } else {
            None
        };
        Ok((claimed, watched))
    })
    .await;
    match pass {
        Ok((claimed, watched)) => {
            if ctx.failing.swap(false, Ordering::Relaxed) {
                tracing::info!("webhook claim passes work again");
            }
            if let Some(read) = watched {
                ctx.core.webhook_orbits.replace(read, mark);
            }
            for c in claimed {
                ctx.running.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(run_claim(ctx.clone(), http.clone(), c, asked));
            }
        }
        Err(e) => {
            if !ctx.failing.swap(true, Ordering::Relaxed) {
                tracing::warn!(error = %e, "webhook claim pass failed; retrying every sweep");
            } else {
                tracing::debug!(error = %e, "webhook claim pass failed; retrying");
            }
        }
    }
}

/// Counts a claim's task out when it ends, and asks for a claim pass.
struct Running(Arc<Ctx>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::Relaxed);
        self.0.wake.notify_one();
    }
}

/// Delivers one claimed subscription until it has nothing more to send, an attempt
/// failed (the retry is scheduled), it was disabled, or the claim was lost. `asked`:
/// when the claim's statement was sent (the claim runs from a moment after).
async fn run_claim(ctx: Arc<Ctx>, http: reqwest::Client, mut c: Claimed, asked: Instant) {
    let _running = Running(ctx.clone());
    let s = ctx.settings;
    let claim_for = Duration::from_millis(s.claim_ms as u64);
    // Until when the claim is surely this instance's: renewed by every DELIVERED
    // record, and before an attempt that might not end inside it (page reads and
    // records can wait seconds for a connection): an attempt sent past it could
    // reach the receiver after the next change, sent by whoever claimed meanwhile.
    let mut ours_until = asked + claim_for;
    let mut hub = ctx.core.hub.subscribe();
    let mut lingered = false;
    loop {
        // Wake-ups of changes this read will see are spent; a later one is news.
        while !matches!(
            hub.try_recv(),
            Err(tokio::sync::broadcast::error::TryRecvError::Empty
                | tokio::sync::broadcast::error::TryRecvError::Closed)
        ) {}
        let (orbit, after) = (c.out_orbit, c.out_through);
        let page = match persisting(&ctx, ours_until, move |conn| {
            crate::store::changes::load_page(conn, orbit, after, PAGE)
        })
        .await
        {
            Ok((rows, _)) => rows,
            Err(e) => {
                // The claim runs out and the subscription is taken up again.
                tracing::warn!(webhook = c.out_id, error = %e, "webhook changes unreadable");
                return;
            }
        };
        if page.is_empty() && !lingered && !ctx.stopping() {
            // Caught up: keep the claim a moment for the orbit's next change,
            // which then costs no claim, release or new task.
            lingered = true;
            if next_change(&mut hub, orbit).await {
                continue;
            }
        }
        if page.is_empty() || ctx.stopping() {
            let (id, instance, seq) = (c.out_id, ctx.instance.clone(), c.out_seq);
            let _ = persisting(&ctx, ours_until, move |conn| {
                store::release(conn, id, &instance, seq)
            })
            .await;
            return;
        }
        lingered = false;
        let mut skipped_to = None;
        for change in &page {
            if !matches(c.out_kinds.as_deref(), &change.kind) {
                skipped_to = Some(change.revision);
                continue;
            }
            if ctx.stopping() {
                break;
            }
            let needed = s.timeout + safety::LOOKUP_TIMEOUT + CLAIM_MARGIN;
            if ours_until.saturating_duration_since(Instant::now()) < needed {
                // (The attempt's record, next, renews the claim again.)
                let (id, instance, seq) = (c.out_id, ctx.instance.clone(), c.out_seq);
                let asked = Instant::now();
                let renewed = persisting(&ctx, ours_until, move |conn| {
                    store::renew(conn, id, &instance, seq, s.claim_ms)
                })
                .await;
                if !matches!(renewed, Ok(true)) {
                    // Lost, or unknown: the claim runs out and its holder sends.
                    return;
                }
                ours_until = asked + claim_for;
            }
            let sent = send(&http, &s, &c, change).await;
            let asked = Instant::now();
            let outcome = record(&ctx, &c, ours_until, change.revision, Some(sent.ok), &sent).await;
            match outcome.as_deref() {
                Some("DELIVERED") => {
                    ours_until = asked + claim_for;
                    c.out_through = change.revision;
                    skipped_to = None;
                }
                Some(other) => {
                    if other == "DISABLED" {
                        tracing::warn!(
                            webhook = c.out_id,
                            "webhook disabled after its last attempt"
                        );
                    }
                    return;
                }
                None => return,
            }
        }
        if let Some(revision) = skipped_to {
            let none = Sent::default();
            let asked = Instant::now();
            if record(&ctx, &c, ours_until, revision, None, &none)
                .await
                .as_deref()
                != Some("DELIVERED")
            {
                return;
            }
            ours_until = asked + claim_for;
            c.out_through = revision;
        }
    }
}

/// Waits at most [`LINGER`] for a wake-up of `orbit` (or of every orbit); false
/// when none came.
async fn next_change(hub: &mut Receiver<i64>, orbit: i64) -> bool {
    use tokio::sync::broadcast::error::RecvError;
    let wait = async {
        loop {
            match hub.recv().await {
                Ok(o) if o == orbit || o == crate::domain::feed::ALL_ORBITS => return true,
                Ok(_) => continue,
                Err(RecvError::Lagged(_)) => return true,
                Err(RecvError::Closed) => return false,
            }
        }
    };
    tokio::time::timeout(LINGER, wait).await.unwrap_or(false)
}

/// What one attempt got.
#[derive(Default)]
struct Sent {
    ok: bool,
    status: Option<i32>,
    error: Option<String>,
    duration_ms: i32,
}

async fn record(
    ctx: &Ctx,
    c: &Claimed,
    ours_until: Instant,
    revision: i64,
    ok: Option<bool>,
    sent: &Sent,
) -> Option<String> {
    let s = ctx.settings;
    let (id, instance, seq) = (c.out_id, ctx.instance.clone(), c.out_seq);
    let (status, error, duration_ms) = (sent.status, sent.error.clone(), sent.duration_ms);
    let result = persisting(ctx, ours_until, move |conn| {
        let attempt = Attempt {
            revision,
            ok,
            status,
            error: error.as_deref(),
            duration_ms,
        };
        let policy = Policy {
            retry_base_ms: s.retry_base_ms,
            max_attempts: s.max_attempts,
            claim_ms: s.claim_ms,
        };
        store::record(conn, (id, &instance, seq), &attempt, policy)
    })
    .await;
    match result {
        Ok(outcome) => Some(outcome),
        Err(e) => {
            // Not recorded: the change is sent again once the claim runs out.
            tracing::warn!(webhook = c.out_id, error = %e, "webhook attempt not recorded");
            None
        }
    }
}

/// One POST of one change (the URL checked again first).
async fn send(http: &reqwest::Client, s: &Settings, c: &Claimed, change: &ChangeOut) -> Sent {
    let started = Instant::now();
    let done = |status: Option<i32>, error: Option<String>, ok: bool| Sent {
        ok,
        status,
        error,
        duration_ms: started.elapsed().as_millis().min(i32::MAX as u128) as i32,
    };
    let url = match parse_url(&c.out_url) {
        Ok(u) => u,
        Err(why) => return done(None, Some(format!("the URL {why}")), false),
    };
    if let Err(refusal) = safety::check(&url, s.allow_private).await {
        return done(
            None,
            Some(format!("not sent: {}", refusal.message())),
            false,
        );
    }
    let id = format!("{}.{}", c.out_orbit, change.revision);
    let body = event_body(change, c.out_orbit, &c.out_slug);
    let timestamp = Utc::now().timestamp();
    let Some(signature) = sign::signature(&c.out_secret, &id, timestamp, &body) else {
        return done(None, Some("the secret cannot sign".into()), false);
    };
    let response = http
        .post(url)
        .header("content-type", "application/json")
        .header("webhook-id", &id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .body(body)
        .send()
        .await;
    match response {
        Ok(mut r) => {
            let status = r.status();
            // Read a little of the answer (so the connection can be reused), briefly,
            // then drop it. The status decides (contract section 15: "a 2xx within
            // 10 s is success"): a body that trickles or breaks off changes nothing
            // (a review's receiver answered 200 at once and sent its body at 10 B/s;
            // that delivery was counted a timeout and sent seven times).
            let drain = async {
                let mut read = 0usize;
                while read < BODY_CAP {
                    match r.chunk().await {
                        Ok(Some(chunk)) => read += chunk.len(),
                        Ok(None) | Err(_) => break,
                    }
                }
            };
            let _ = tokio::time::timeout(BODY_DRAIN, drain).await;
            let code = Some(status.as_u16() as i32);
            if status.is_success() {
                done(code, None, true)
            } else if status.is_redirection() {
                // 304 or 300 is no redirect, but no delivery either.
                let why = if matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308) {
                    "redirects are not followed"
                } else {
                    "only a 2xx answer counts as delivered"
                };
                done(code, Some(format!("HTTP {status}: {why}")), false)
            } else {
                done(code, Some(format!("HTTP {status}")), false)
            }
        }
        Err(e) if e.is_timeout() => done(None, Some(timed_out(s)), false),
        Err(e) => {
            let e = e.without_url();
            let mut text = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(inner) = source {
                text.push_str(": ");
                text.push_str(&inner.to_string());
                source = inner.source();
            }
            text.truncate(500);
            done(None, Some(text), false)
        }
    }
}

fn timed_out(s: &Settings) -> String {
    format!("no answer within {} ms", s.timeout.as_millis())
}

/// [`blocking`], asked again while it fails (the database restarting, away: a
/// refused connection, a pool timeout), backing off from 100 ms to 1 s, until
/// `until` (the end of the claim as this instance counts it) or the engine stops.
/// Safe to repeat: a read, a renewal, a record and a release change nothing once
/// the claim was lost, and a record of a delivery already recorded is not logged
/// twice (`webhook_record`). Giving up at once would leave the claim to run out
/// before anyone delivers again. (A database server that hangs without failing
/// holds one attempt until `db::deadline`, [`blocking`].)
async fn persisting<T, F>(ctx: &Ctx, until: Instant, work: F) -> Result<T, String>
where
    T: Send + 'static,
    F: FnOnce(&mut PgConnection) -> QueryResult<T> + Clone + Send + 'static,
{
    let mut pause = Duration::from_millis(100);
    loop {
        match blocking(&ctx.core.pool, work.clone()).await {
            Ok(v) => return Ok(v),
            Err(e) if ctx.stopping() || Instant::now() + pause >= until => return Err(e),
            Err(_) => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// Runs database work on a blocking thread, on a pooled connection, within the
/// request path's limit (`db::read`, `db::deadline`): a server that stops answering
/// on that connection (its backend frozen) costs a pass or an attempt the deadline
/// and the connection, not the engine's loop; work no thread had taken up by then
/// never runs. A statement's own failure comes back in the database's words (the
/// engine logs it); a lost connection is noted as the request path notes it.
async fn blocking<T, F>(pool: &PgPool, work: F) -> Result<T, String>
where
    T: Send + 'static,
    F: FnOnce(&mut PgConnection) -> QueryResult<T> + Send + 'static,
{
    db::read(pool, move |conn| {
        work(conn).map_err(|e| {
            if is_connection_failure(&e) {
                TxError::Db(e)
            } else {
                TxError::Api(ApiError::internal().with_message(e.to_string()))
            }
        })
    })
    .await
    .map_err(|e| format!("{e}: {}", e.body.message))
}
