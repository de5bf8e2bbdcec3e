//! Wake-ups for long polls of the change feed.
//!
//! Waiters subscribe to an in-process broadcast of orbit ids and hold neither a
//! database connection nor a blocking thread while they wait. A consumer that
//! cares about a few orbits only (the webhook engine) watches them instead
//! ([`ChangeHub::watch`]): a write in any other orbit does not wake it. A single
//! listener thread per instance runs `LISTEN orbit_changes` on its own connection
//! and forwards every notification, so a write on any instance wakes waiters on all
//! of them. Writes on this instance also wake local waiters directly after commit.
//!
//! The `NOTIFY` is sent after the write commits, by one notifier thread per instance
//! on its own connection ([`ChangeHub::publish`]), never inside the write's
//! transaction: PostgreSQL serializes the commits of all notifying transactions of a
//! database under one lock, which would make every orbit's writes wait for each
//! other. A notification lost to a crash between commit and send only delays remote
//! long polls until their timeout; the change itself is committed and in the feed.
//!
//! Neither thread's connection has a deadline (libpq has none to give), so each has a
//! watchdog ([`Beat`]): a thread that has been at the database for [`STALL`] without
//! progress (its server backend stopped answering while the rest of the database
//! works) is replaced by a new one on a new connection, and the stuck one ends when
//! its call returns.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::sql_types::{Array, BigInt};
use diesel::{Connection, PgConnection, RunQueryDsl};
use tokio::sync::{broadcast, watch};

use crate::db::BindNext;
use crate::domain::revision::NOTIFY_CHANNEL;

/// Orbit id 0 means "every orbit" (sent after the listener reconnects, since
/// notifications may have been missed while it was away).
pub const ALL_ORBITS: i64 = 0;

/// Waits up to `within` for a wake-up of `orbit` (or of every orbit) on the hub's
/// broadcast `rx`: `true` when one came. A lagging receiver counts as woken (it may
/// have missed one); a closed hub never wakes.
pub async fn woken(rx: &mut broadcast::Receiver<i64>, orbit: i64, within: Duration) -> bool {
    use broadcast::error::RecvError;
    let wait = async {
        loop {
            match rx.recv().await {
                Ok(o) if o == orbit || o == ALL_ORBITS => return,
                Ok(_) => continue,
                Err(RecvError::Lagged(_)) => return,
                Err(RecvError::Closed) => std::future::pending::<()>().await,
            }
        }
    };
    tokio::time::timeout(within, wait).await.is_ok()
}

/// The least time between two `NOTIFY` batches of one instance.
const NOTIFY_LINGER: Duration = Duration::from_millis(10);

/// How long the listener or the notifier may be at the database without progress
/// before a new thread replaces it.
const STALL: Duration = Duration::from_secs(5);

/// At most this many threads of one kind, stuck ones included: a server that stops
/// answering altogether gets no new thread every [`STALL`], only this many.
const MAX_THREADS: usize = 3;

/// The progress of the listener or the notifier, for its watchdog.
#[derive(Default)]
struct Beat {
    /// The generation that runs; a thread of an older one ends at its next step.
    generation: AtomicU64,
    /// When the running thread last made progress, in ms since the hub began (+1);
    /// 0 while it waits for work rather than for the database.
    at: AtomicU64,
    /// Threads of this kind not yet ended (a replaced one until its call returns).
    threads: AtomicUsize,
}

/// A consumer woken only by changes of the orbits it wants ([`ChangeHub::watch`]).
struct Watch {
    wants: Box<dyn Fn(i64) -> bool + Send + Sync>,
    /// Counts the wake-ups; the receiver waits for it to move.
    woken: watch::Sender<u64>,
}

#[derive(Clone)]
pub struct ChangeHub {
    tx: broadcast::Sender<i64>,
    watches: Arc<RwLock<Vec<Watch>>>,
    stop: Arc<AtomicBool>,
    /// Orbits whose changes committed here and still need a `NOTIFY`.
    outbox: Arc<(Mutex<BTreeSet<i64>>, Condvar)>,
    /// This hub's mark in its `NOTIFY` payloads (`<orbit>:<origin>`): the listener
    /// skips the echo of our own, whose waiters `publish` already woke (one feed
    /// read per change, not two). Until 2026-12-05 the echo was told by the
    /// notifier's backend pid, which a restarted server can give another
    /// instance's notifier: this one then ignored that instance's changes.
    origin: Arc<str>,
    started: Instant,
    listener: Arc<Beat>,
    notifier: Arc<Beat>,
}

impl Default for ChangeHub {
    fn default() -> Self {
        let (tx, _) = broadcast::channel(1024);
        ChangeHub {
            tx,
            watches: Arc::default(),
            stop: Arc::new(AtomicBool::new(false)),
            outbox: Arc::new((Mutex::new(BTreeSet::new()), Condvar::new())),
            origin: uuid::Uuid::new_v4().simple().to_string().into(),
            started: Instant::now(),
            listener: Arc::default(),
            notifier: Arc::default(),
        }
    }
}

impl ChangeHub {
    pub fn subscribe(&self) -> broadcast::Receiver<i64> {
        self.tx.subscribe()
    }

    /// A wake-up for each change of an orbit `wants` accepts, and for
    /// [`ALL_ORBITS`]; a change of any other orbit wakes nothing. Wake-ups that come
    /// while the receiver is busy are one (`changed` then returns at once). A watch
    /// lasts as long as the hub: for a consumer that runs as long as the instance.
    pub fn watch(
        &self,
        wants: impl Fn(i64) -> bool + Send + Sync + 'static,
    ) -> watch::Receiver<u64> {
        let (woken, rx) = watch::channel(0);
        self.watches
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(Watch {
                wants: Box::new(wants),
                woken,
            });
        rx
    }

    /// Wakes this instance's waiters on `orbit_id`.
    pub fn notify(&self, orbit_id: i64) {
        let _ = self.tx.send(orbit_id);
        for w in self
            .watches
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            if orbit_id == ALL_ORBITS || (w.wants)(orbit_id) {
                w.woken.send_modify(|n| *n = n.wrapping_add(1));
            }
        }
    }

    /// After a write committed: wakes local waiters now and queues the `NOTIFY` that
    /// wakes the other instances' waiters.
    pub fn publish(&self, orbit_id: i64) {
        self.notify(orbit_id);
        self.queue_notify(orbit_id);
    }

    /// Queues a `NOTIFY` of `orbit_id` for the other instances.
    fn queue_notify(&self, orbit_id: i64) {
        let (queue, ready) = &*self.outbox;
        let mut q = queue.lock().unwrap_or_else(|p| p.into_inner());
        // The notifier waits only for an empty outbox: whoever filled it woke it.
        if q.is_empty() {
            ready.notify_one();
        }
        q.insert(orbit_id);
    }

    /// Starts the thread that sends queued notifications, coalesced, in one statement
    /// per batch.
    pub fn start_notifier(&self, database_url: String) {
        // A stuck batch is lost with its thread: the new one's first batch wakes
        // every waiter of the other instances instead.
        let stalled = |hub: &ChangeHub| hub.queue_notify(ALL_ORBITS);
        self.supervise(
            "orbit-notify",
            database_url,
            |h| &h.notifier,
            Self::notify_loop,
            stalled,
        );
    }

    /// Runs `run` (generation 0) on a thread named `name`, and a watchdog that starts
    /// it again (the next generation) whenever the running one has been at the
    /// database for [`STALL`] without progress, calling `stalled` first.
    fn supervise(
        &self,
        name: &'static str,
        url: String,
        beat: fn(&ChangeHub) -> &Beat,
        run: fn(&ChangeHub, &str, u64),
        stalled: fn(&ChangeHub),
    ) {
        let start = move |hub: ChangeHub, url: String, generation: u64| {
            beat(&hub).threads.fetch_add(1, Ordering::Relaxed);
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    run(&hub, &url, generation);
                    beat(&hub).threads.fetch_sub(1, Ordering::Relaxed);
                })
                .expect("spawn a change hub thread");
        };
        start(self.clone(), url.clone(), 0);
        let hub = self.clone();
        std::thread::Builder::new()
            .name(format!("{name}-watch"))
            .spawn(move || {
                while !hub.stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_secs(1));
                    let b = beat(&hub);
                    let at = b.at.load(Ordering::Relaxed);
                    let stuck =
                        at != 0 && hub.now_ms().saturating_sub(at) > STALL.as_millis() as u64;
                    if stuck && b.threads.load(Ordering::Relaxed) < MAX_THREADS {
                        tracing::warn!(thread = name, "stuck on its database connection; replaced");
                        let generation = b.generation.fetch_add(1, Ordering::Relaxed) + 1;
                        b.at.store(hub.now_ms(), Ordering::Relaxed);
                        stalled(&hub);
                        start(hub.clone(), url.clone(), generation);
                    }
                }
            })
            .expect("spawn a change hub watchdog");
    }

    /// Milliseconds since the hub began, plus one (a [`Beat`]'s 0 is "idle").
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64 + 1
    }

    /// Whether the thread of `generation` should go on: the instance runs and no
    /// newer thread replaced it. It then records `at` (0: idle) as its progress.
    fn beats(&self, beat: &Beat, generation: u64, at: u64) -> bool {
        let current = !self.stop.load(Ordering::Relaxed)
            && beat.generation.load(Ordering::Relaxed) == generation;
        if current {
            beat.at.store(at, Ordering::Relaxed);
        }
        current
    }

    fn next_batch(&self) -> Vec<i64> {
        let (queue, ready) = &*self.outbox;
        let mut q = queue.lock().unwrap_or_else(|p| p.into_inner());
        if q.is_empty() {
            q = ready
                .wait_timeout(q, Duration::from_millis(500))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        std::mem::take(&mut *q).into_iter().collect()
    }

    fn notify_loop(&self, url: &str, generation: u64) {
        let mut conn: Option<PgConnection> = None;
        while self.beats(&self.notifier, generation, 0) {
            let batch = self.next_batch();
            if batch.is_empty() || !self.beats(&self.notifier, generation, self.now_ms()) {
                continue;
            }
            // One reconnect per batch; a batch that still fails is dropped (remote
            // long polls then wake at their timeout).
            for _ in 0..2 {
                if conn.is_none() {
                    conn = PgConnection::establish(url)
                        .and_then(|mut c| {
                            c.batch_execute("SET application_name = 'orbit-notify'")
                                .map(|_| c)
                                .map_err(|e| diesel::ConnectionError::BadConnection(e.to_string()))
                        })
                        .ok();
                }
                let Some(c) = conn.as_mut() else {
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                };
                let sent = crate::db::sql(
                    "SELECT pg_notify('orbit_changes', o::text || ':' || $2) \
                     FROM unnest($1::bigint[]) AS o",
                )
                .bind::<Array<BigInt>, _>(&batch)
                .bind::<diesel::sql_types::Text, _>(&*self.origin)
                .execute(c);
                match sent {
                    Ok(_) => {
                        // Under load, let the next batch gather for a moment: each
                        // batch is a transaction with its own commit (and every
                        // instance's listener wakes for it), so one per write cost
                        // a busy instance a few percent of its CPU. Remote long
                        // polls wake at most this much later; local ones are woken
                        // directly by `publish`.
                        std::thread::sleep(NOTIFY_LINGER);
                        break;
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "change notifier lost its connection");
                        conn = None;
                    }
                }
            }
        }
    }

    /// Starts the LISTEN thread for this instance.
    pub fn start_listener(&self, database_url: String) {
        // The new listener wakes every waiter once it listens, as after any reconnect.
        let stalled = |_: &ChangeHub| {};
        self.supervise(
            "orbit-listen",
            database_url,
            |h| &h.listener,
            Self::listen_loop,
            stalled,
        );
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// True once [`ChangeHub::stop`] ran (the instance is shutting down).
    pub fn is_stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn listen_loop(&self, url: &str, generation: u64) {
        let mut backoff = Duration::from_millis(100);
        while self.beats(&self.listener, generation, self.now_ms()) {
            let mut conn = match PgConnection::establish(url).and_then(|mut c| {
                c.batch_execute(&format!(
                    "SET application_name = 'orbit-listen'; LISTEN {NOTIFY_CHANNEL}"
                ))
                .map(|_| c)
                .map_err(|e| diesel::ConnectionError::BadConnection(e.to_string()))
            }) {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!(error = %e, "change listener cannot connect; retrying");
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                    continue;
                }
            };
            if !self.beats(&self.listener, generation, self.now_ms()) {
                return;
            }
            self.notify(ALL_ORBITS);
            let mut ticks = 0u32;
            'poll: while self.beats(&self.listener, generation, self.now_ms()) {
                ticks = ticks.wrapping_add(1);
                // A silent network failure is only seen when we talk: ping now and then.
                if ticks.is_multiple_of(250) {
                    if conn.batch_execute("SELECT 1").is_err() {
                        break 'poll;
                    }
                    // A connection that lived this long resets the backoff; one
                    // dropped at once again (a server or proxy that accepts and
                    // closes) waits longer each time.
                    backoff = Duration::from_millis(100);
                }
                for item in conn.notifications_iter() {
                    match item {
                        Ok(n) => {
                            if let Some(orbit_id) = foreign_orbit(&n.payload, &self.origin) {
                                self.notify(orbit_id);
                            }
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, "change listener lost its connection");
                            break 'poll;
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if self.beats(&self.listener, generation, 0) {
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// The orbit of a `NOTIFY` payload (`<orbit>:<origin>`) sent by another instance;
/// `None` for our own echo or a payload that names no orbit. A payload with no
/// origin (an instance of before 2026-12-05, during a rolling deploy) counts as
/// another instance's.
fn foreign_orbit(payload: &str, own: &str) -> Option<i64> {
    let (orbit, origin) = payload.split_once(':').unwrap_or((payload, ""));
    (origin != own).then(|| orbit.parse().ok()).flatten()
}

/// What one shared read of an orbit's feed saw: the changes after `from` (at most
/// a page of the largest size) and the orbit's revision at that read.
pub struct Snapshot<R> {
    pub from: i64,
    pub rows: Vec<R>,
    pub orbit_revision: i64,
}

/// The long polls waiting on one orbit, and the latest shared read for them.
pub struct OrbitWaiters<R> {
    pub latest: tokio::sync::watch::Sender<Option<Arc<Snapshot<R>>>>,
    /// `after` of each waiting poll, counted (a multiset).
    afters: Mutex<std::collections::BTreeMap<i64, usize>>,
}

impl<R> OrbitWaiters<R> {
    /// The smallest `after` among the waiting polls, `None` when none waits.
    pub fn min_after(&self) -> Option<i64> {
        let afters = self.afters.lock().unwrap_or_else(|p| p.into_inner());
        afters.keys().next().copied()
    }
}

/// Shared feed reads (issue 26, finding 3): however many long polls wait on an
/// orbit, one reader per orbit and instance reads the feed once per wake-up and
/// hands every waiter the same snapshot. The reader starts with the orbit's first
/// waiter and ends with its last.
pub struct SharedReads<R> {
    orbits: Mutex<std::collections::HashMap<i64, Arc<OrbitWaiters<R>>>>,
    /// Reads the readers ran, and reads a waiter had to run itself because the
    /// snapshot did not cover its `after` (rare: it joined during a read).
    pub shared_reads: std::sync::atomic::AtomicU64,
    pub own_reads: std::sync::atomic::AtomicU64,
    pub waiting: std::sync::atomic::AtomicU64,
}

impl<R> Default for SharedReads<R> {
    fn default() -> Self {
        SharedReads {
            orbits: Mutex::new(Default::default()),
            shared_reads: Default::default(),
            own_reads: Default::default(),
            waiting: Default::default(),
        }
    }
}

/// A waiting poll's place; leaving it (drop) unregisters the poll.
pub struct Waiter<'a, R> {
    reads: &'a SharedReads<R>,
    pub orbit: Arc<OrbitWaiters<R>>,
    after: i64,
}

impl<R> Drop for Waiter<'_, R> {
    fn drop(&mut self) {
        let mut afters = self.orbit.afters.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = afters.get_mut(&self.after) {
            *n -= 1;
            if *n == 0 {
                afters.remove(&self.after);
            }
        }
        self.reads.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

impl<R> SharedReads<R> {
    /// Registers a poll waiting for changes after `after` on `orbit`. The bool is
    /// true when the orbit had no reader: the caller starts one.
    pub fn join(&self, orbit: i64, after: i64) -> (Waiter<'_, R>, bool) {
        let mut orbits = self.orbits.lock().unwrap_or_else(|p| p.into_inner());
        let mut new = false;
        let entry = orbits
            .entry(orbit)
            .or_insert_with(|| {
                new = true;
                Arc::new(OrbitWaiters {
                    latest: tokio::sync::watch::Sender::new(None),
                    afters: Mutex::new(Default::default()),
                })
            })
            .clone();
        *entry
            .afters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(after)
            .or_default() += 1;
        self.waiting.fetch_add(1, Ordering::Relaxed);
        (
            Waiter {
                reads: self,
                orbit: entry,
                after,
            },
            new,
        )
    }

    /// For the reader: true (and the orbit forgotten) when no poll waits any more,
    /// so the reader ends; decided under the same lock `join` takes.
    pub fn retire_if_idle(&self, orbit: i64, entry: &Arc<OrbitWaiters<R>>) -> bool {
        let mut orbits = self.orbits.lock().unwrap_or_else(|p| p.into_inner());
        if entry.min_after().is_some() {
            return false;
        }
        if orbits.get(&orbit).is_some_and(|e| Arc::ptr_eq(e, entry)) {
            orbits.remove(&orbit);
        }
        true
    }
}

/// Long polls (and event streams) in progress per client (a verified token's
/// keyed hash, or the client address), capped (`ORBIT_LONG_POLLS_PER_CLIENT`,
/// `ORBIT_MAX_STREAMS_PER_CLIENT`), each with the instant it ends at the latest, so
/// that a refusal can say when a place comes back at the latest ([`retry_after`]).
#[derive(Default)]
pub struct PollCounts(Mutex<std::collections::HashMap<PollClient, Places>>);

/// One client's places: when each ends at the latest, by place number.
#[derive(Default)]
struct Places {
    next: u64,
    ends: std::collections::HashMap<u64, Instant>,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum PollClient {
    Token([u8; 32]),
    Addr(std::net::IpAddr),
}

/// One counted long poll; dropping it gives the place back.
pub struct PollSlot<'a> {
    counts: &'a PollCounts,
    client: PollClient,
    place: u64,
}

/// [`PollSlot`] for a place that outlives the request's borrow (an event stream).
pub struct OwnedPollSlot {
    counts: Arc<PollCounts>,
    client: PollClient,
    place: u64,
}

impl PollCounts {
    /// A place for one more long poll of `client`, which ends by `ends`; at the cap,
    /// the instant the first of the client's places ends at the latest.
    pub fn enter(
        &self,
        client: PollClient,
        cap: u32,
        ends: Instant,
    ) -> Result<PollSlot<'_>, Instant> {
        // Built only for a place taken: a slot built for nothing would give a place
        // back when dropped.
        self.take(client, cap, ends).map(|place| PollSlot {
            counts: self,
            client,
            place,
        })
    }

    /// [`PollCounts::enter`], the place owning a handle on the counts.
    pub fn enter_owned(
        self: &Arc<Self>,
        client: PollClient,
        cap: u32,
        ends: Instant,
    ) -> Result<OwnedPollSlot, Instant> {
        self.take(client, cap, ends).map(|place| OwnedPollSlot {
            counts: self.clone(),
            client,
            place,
        })
    }

    fn take(&self, client: PollClient, cap: u32, ends: Instant) -> Result<u64, Instant> {
        let mut counts = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let places = counts.entry(client).or_default();
        if places.ends.len() >= cap.max(1) as usize {
            return Err(places.ends.values().min().copied().unwrap_or(ends));
        }
        let place = places.next;
        places.next += 1;
        places.ends.insert(place, ends);
        Ok(place)
    }

    fn give_back(&self, client: PollClient, place: u64) {
        let mut counts = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(places) = counts.get_mut(&client) {
            places.ends.remove(&place);
            if places.ends.is_empty() {
                counts.remove(&client);
            }
        }
    }
}

impl Drop for PollSlot<'_> {
    fn drop(&mut self) {
        self.counts.give_back(self.client, self.place);
    }
}

impl Drop for OwnedPollSlot {
    fn drop(&mut self) {
        self.counts.give_back(self.client, self.place);
    }
}

/// A refusal's `Retry-After` for a place that comes back by `at` at the latest:
/// whole seconds, rounded up, at least 1.
pub fn retry_after(at: Instant) -> u64 {
    let left = at.saturating_duration_since(Instant::now());
    (left.as_secs() + u64::from(left.subsec_nanos() > 0)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The listener skips its own hub's echo by origin, not by backend pid.
    #[test]
    fn only_another_instances_notifications_wake() {
        let own = ChangeHub::default();
        let other = ChangeHub::default();
        assert_ne!(own.origin, other.origin);
        assert_eq!(
            foreign_orbit(&format!("7:{}", own.origin), &own.origin),
            None
        );
        assert_eq!(
            foreign_orbit(&format!("7:{}", other.origin), &own.origin),
            Some(7)
        );
        assert_eq!(foreign_orbit("7", &own.origin), Some(7));
        assert_eq!(foreign_orbit("x:y", &own.origin), None);
    }

    /// A refused poll leaves the count as it was: until 2026-12-05 the slot built
    /// for a refusal was dropped and gave a place back, so every refused poll let
    /// the next one in (a review found 12 polls waiting under a cap of 8). A
    /// refusal names when the first place ends at the latest.
    #[test]
    fn a_refused_poll_gives_no_place_back() {
        let counts = Arc::new(PollCounts::default());
        let client = PollClient::Addr(std::net::Ipv4Addr::LOCALHOST.into());
        let now = Instant::now();
        let (soon, late) = (now + Duration::from_secs(7), now + Duration::from_secs(30));
        let held = [counts.enter(client, 2, late), counts.enter(client, 2, soon)];
        assert!(held.iter().all(Result::is_ok));
        for _ in 0..3 {
            assert_eq!(counts.enter(client, 2, late).err(), Some(soon));
            assert_eq!(counts.enter_owned(client, 2, late).err(), Some(soon));
        }
        drop(held);
        let again = [counts.enter(client, 2, late), counts.enter(client, 2, late)];
        assert!(again.iter().all(Result::is_ok));
        assert_eq!(counts.enter(client, 2, soon).err(), Some(late));
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds_of_at_least_one() {
        let now = Instant::now();
        assert_eq!(retry_after(now), 1);
        assert_eq!(retry_after(now - Duration::from_secs(3)), 1);
        assert_eq!(retry_after(now + Duration::from_millis(7_300)), 8);
        // Rounded up, with room for the time the test itself takes.
        assert_eq!(
            retry_after(now + Duration::from_secs(900) + Duration::from_millis(500)),
            901
        );
    }

    #[test]
    fn a_watch_wakes_for_its_orbits_and_for_all_but_not_for_others() {
        let hub = ChangeHub::default();
        let mut rx = hub.watch(|orbit| orbit == 7);
        hub.publish(8);
        hub.notify(9);
        assert!(!rx.has_changed().unwrap(), "other orbits wake nothing");
        hub.publish(7);
        hub.publish(7);
        assert!(rx.has_changed().unwrap());
        rx.borrow_and_update();
        assert!(
            !rx.has_changed().unwrap(),
            "two wake-ups while busy are one"
        );
        hub.notify(ALL_ORBITS);
        assert!(
            rx.has_changed().unwrap(),
            "every orbit includes the watched ones"
        );
    }
}
