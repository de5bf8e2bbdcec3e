//! Live events (contract section 14): an orbit's change feed as a Server-Sent Events
//! stream, resumable, shared across instances, and how one read serves every
//! subscriber.
//!
//! **Fan-out.** Each orbit with subscribers on this instance has one *tail*: a task
//! that wakes on the change hub ([`ChangeHub`], LISTEN/NOTIFY across instances),
//! reads the new changes once, renders them once as one buffer of SSE frames, and
//! puts that read, shared, into every subscriber's bounded queue with `try_send`
//! (never waiting). A busy orbit's tail reads at most once per
//! `ORBIT_STREAM_BATCH_MS` (default 50 ms): the
//! changes of that moment go out as one batch, which each stream sends as one
//! chunk (one socket write for the batch, not one per change). A subscriber whose
//! queue is full — it stopped reading — is dropped: its stream ends and its client
//! reconnects with `Last-Event-ID`, losing nothing. Writers never wait for a
//! subscriber, and a waiting subscriber holds only its queue: no database
//! connection, no blocking thread.
//!
//! **No gap, no duplicate.** A subscriber joins its orbit's tail *before* it reads
//! its replay from the feed. A frame the tail hands out after the join is in the
//! subscriber's queue; one handed out before was read (so committed) before the
//! replay's read, so the replay has it. The subscriber sends revisions strictly in
//! order, skips those it has sent and fills a hole (not expected) with a read of
//! its own.
//!
//! **The per-client cap.** A client's open streams are counted; at the cap, its
//! streams are first asked to write, so that those whose connections it closed
//! (which only a failed write reveals) give their places back ([`PROBES`]).

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::web::Bytes;
use futures_util::Stream;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::Instant;

use crate::db::{self, PgPool};
use crate::domain::access;
use crate::domain::auth::Bearer;
use crate::domain::feed::{self, woken, OwnedPollSlot, PollClient, PollCounts};
use crate::domain::Core;
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::store::changes::{load_page, ChangeOut};

/// Changes per feed read (replay pages and tail reads).
const PAGE: i64 = 500;

/// How often an idle tail looks for subscribers that went away.
const TAIL_TICK: Duration = Duration::from_secs(1);
/// An idle tail reads the feed once per this many ticks even without a wake-up: a
/// notification lost between instances (a crash between commit and `NOTIFY`) then
/// delays events by at most this long.
const SAFETY_READ_TICKS: u32 = 15;
/// A client at its cap of open streams may hold places for streams whose connection
/// it closed: the server learns of a closed connection only when a write to it
/// fails, and the first write after the close still succeeds (the peer's reset
/// makes the next one fail). So before a 429, the client's streams are asked to
/// write a keep-alive after each of these waits (25 ms, doubling: 375 ms in all,
/// for a connection whose round trip is shorter), and the cap looked at again.
const PROBES: u32 = 4;
const FIRST_PROBE_GAP: Duration = Duration::from_millis(25);
/// What a stream tells the client before it ends: reconnect after this many ms.
const RETRY: &[u8] = b"retry: 1000\n\n";
const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// The frames of one tail read (or replay page), rendered once into one buffer and
/// shared by every subscriber: `ends[i]` is where the frame of `revisions[i]` ends
/// in `bytes`. Revisions ascend by one.
pub struct Batch {
    revisions: Vec<i64>,
    ends: Vec<usize>,
    bytes: Bytes,
}

impl Batch {
    /// The changes' frames: `id: <revision>`, `event: <kind>`, `data: <Change JSON,
    /// one line>` each.
    pub fn render(changes: &[ChangeOut]) -> Batch {
        use std::io::Write as _;
        let mut buf = Vec::with_capacity(changes.len() * 320);
        let mut ends = Vec::with_capacity(changes.len());
        for change in changes {
            let _ = write!(
                buf,
                "id: {}\nevent: {}\ndata: ",
                change.revision, change.kind
            );
            // Serializing a ChangeOut cannot fail (strings, numbers, a timestamp);
            // JSON escapes newlines, so `data` is one line.
            if serde_json::to_writer(&mut buf, change).is_err() {
                buf.extend_from_slice(b"{}");
            }
            buf.extend_from_slice(b"\n\n");
            ends.push(buf.len());
        }
        Batch {
            revisions: changes.iter().map(|c| c.revision).collect(),
            ends,
            bytes: Bytes::from(buf),
        }
    }

    pub fn first(&self) -> Option<i64> {
        self.revisions.first().copied()
    }

    pub fn last(&self) -> Option<i64> {
        self.revisions.last().copied()
    }

    /// The frames after revision `sent`, as one chunk (shared, not copied).
    pub fn after(&self, sent: i64) -> Option<Bytes> {
        let skip = self.revisions.partition_point(|r| *r <= sent);
        if skip == self.revisions.len() {
            return None;
        }
        let start = if skip == 0 { 0 } else { self.ends[skip - 1] };
        Some(self.bytes.slice(start..))
    }
}

/// Shared by the subscribers of one tail read.
type Shared = Arc<Batch>;

/// Where a stream resumes: the `Last-Event-ID` header when present (a browser's
/// `EventSource` sends it on reconnect, beside the URL's original `after`), else
/// `?after=`; `None` starts after the orbit's current revision. An empty header is
/// absent (an `EventSource` whose last id was empty sends none). Malformed → 422,
/// returned by [`open`] after the orbit is known (404 comes first).
pub fn resume_point(last_event_id: Option<&str>, after: Option<&str>) -> ApiResult<Option<i64>> {
    let header = last_event_id.map(str::trim).filter(|v| !v.is_empty());
    let (field, raw) = match (header, after) {
        (Some(h), _) => ("Last-Event-ID", h),
        (None, Some(a)) => ("after", a),
        (None, None) => return Ok(None),
    };
    match raw.parse::<i64>() {
        Ok(n) if n >= 0 => Ok(Some(n)),
        _ => {
            let mut errors = FieldErrors::default();
            errors.add(field, "must be a revision: an integer, 0 or more");
            Err(errors.into_error())
        }
    }
}

/// The streams of this instance: one tail per orbit with subscribers, the per-client
/// count, the shutdown signal and counters for `/metrics`.
pub struct Streams {
    tails: Mutex<HashMap<i64, Arc<Tail>>>,
    clients: Arc<PollCounts>,
    closing: watch::Sender<bool>,
    /// Per client with streams open here: what asks its streams (and no other's) to
    /// write a keep-alive now ([`PROBES`]).
    probes: Mutex<HashMap<PollClient, watch::Sender<u64>>>,
    /// Streams open now.
    pub open: AtomicU64,
    /// Subscribers dropped because their queue was full (they stopped reading).
    pub dropped: AtomicU64,
    /// Feed reads of the tails (one per orbit and wake-up, for every subscriber).
    pub tail_reads: AtomicU64,
    /// Feed reads of one stream: its replay, or a hole it filled.
    pub own_reads: AtomicU64,
}

struct Tail {
    subscribers: Mutex<Vec<mpsc::Sender<Shared>>>,
}

impl Default for Streams {
    fn default() -> Self {
        Streams {
            tails: Mutex::default(),
            clients: Arc::default(),
            closing: watch::Sender::new(false),
            probes: Mutex::default(),
            open: AtomicU64::default(),
            dropped: AtomicU64::default(),
            tail_reads: AtomicU64::default(),
            own_reads: AtomicU64::default(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Streams {
    /// Shutdown: every stream says `retry:` and ends, and every long poll answers
    /// what it has (`changes::read_page`), so a graceful stop does not wait on
    /// them.
    pub fn close(&self) {
        self.closing.send_replace(true);
    }

    /// The shutdown signal of [`Streams::close`], for a long poll to wait on.
    pub fn closing(&self) -> watch::Receiver<bool> {
        self.closing.subscribe()
    }

    /// Joins `orbit`'s tail, starting one that reads from `from` when the orbit has
    /// none; the queue holds at most `ORBIT_STREAM_BUFFER` tail reads.
    fn join(self: &Arc<Self>, core: &Core, orbit: i64, from: i64) -> mpsc::Receiver<Shared> {
        let (tx, rx) = mpsc::channel(core.config.stream_buffer.max(1) as usize);
        let mut tails = lock(&self.tails);
        if let Some(tail) = tails.get(&orbit) {
            lock(&tail.subscribers).push(tx);
            return rx;
        }
        let tail = Arc::new(Tail {
            subscribers: Mutex::new(vec![tx]),
        });
        tails.insert(orbit, tail.clone());
        // Subscribed before the first read: a change committed after that read
        // wakes the tail.
        let wake = core.hub.subscribe();
        let gap = Duration::from_millis(core.config.stream_batch_ms);
        tokio::spawn(run_tail(
            self.clone(),
            core.pool.clone(),
            orbit,
            from,
            tail,
            wake,
            gap,
        ));
        rx
    }

    /// True (and the tail forgotten) when no subscriber is left; decided under the
    /// lock `join` takes.
    fn retire_if_idle(&self, orbit: i64, tail: &Arc<Tail>) -> bool {
        let mut tails = lock(&self.tails);
        let mut subscribers = lock(&tail.subscribers);
        subscribers.retain(|s| !s.is_closed());
        if !subscribers.is_empty() {
            return false;
        }
        if tails.get(&orbit).is_some_and(|t| Arc::ptr_eq(t, tail)) {
            tails.remove(&orbit);
        }
        true
    }

    /// Hands `batch` to every subscriber of `tail`, dropping those whose queue is
    /// full or gone.
    fn fan_out(&self, tail: &Tail, batch: Shared) {
        let mut subscribers = lock(&tail.subscribers);
        subscribers.retain(|s| match s.try_send(batch.clone()) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Relaxed);
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        });
    }
}

/// One orbit's tail: reads the feed after the last revision it handed out, once
/// when it starts and once per wake-up (at most once per `gap`), until no
/// subscriber is left.
async fn run_tail(
    streams: Arc<Streams>,
    pool: PgPool,
    orbit: i64,
    mut last: i64,
    tail: Arc<Tail>,
    mut wake: broadcast::Receiver<i64>,
    gap: Duration,
) {
    use broadcast::error::TryRecvError;
    let mut last_read: Option<Instant> = None;
    loop {
        // Let the changes of a busy moment gather: one read, one batch for them.
        if let Some(at) = last_read {
            tokio::time::sleep_until(at + gap).await;
        }
        last_read = Some(Instant::now());
        // Wake-ups that arrived meanwhile are answered by this read too.
        while !matches!(
            wake.try_recv(),
            Err(TryRecvError::Empty | TryRecvError::Closed)
        ) {}
        loop {
            let from = last;
            let read = db::read(&pool, move |conn| Ok(load_page(conn, orbit, from, PAGE)?)).await;
            let (rows, revision) = match read {
                Ok(r) => r,
                // The next wake-up (or the safety read) tries again.
                Err(e) => {
                    tracing::debug!(error = %e, orbit, "event tail read failed");
                    break;
                }
            };
            streams.tail_reads.fetch_add(1, Relaxed);
            if !rows.is_empty() {
                let batch = Batch::render(&rows);
                last = batch.last().unwrap_or(last);
                streams.fan_out(&tail, Arc::new(batch));
            }
            if (rows.len() as i64) < PAGE || last >= revision {
                break;
            }
        }
        let mut ticks = 0u32;
        loop {
            let woke = woken(&mut wake, orbit, TAIL_TICK).await;
            if streams.retire_if_idle(orbit, &tail) {
                return;
            }
            ticks += 1;
            if woke || ticks >= SAFETY_READ_TICKS {
                break;
            }
        }
    }
}

/// An open event stream: the bytes to send, ending with `retry:` when the server
/// ends it (its time is up, shutdown, or it fell behind).
pub type EventStream = std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, Infallible>> + Send>>;

/// Opens `reference`'s event stream for a client (`addr`, or the presented token)
/// from `after` ([`resume_point`]). Precedence: 401 (a bad token) → 404 → 422 →
/// 429 (the client's open streams, `ORBIT_MAX_STREAMS_PER_CLIENT`). With `head` (a
/// HEAD request, answered without a body) it stops after the checks: `None`, no
/// place under the cap taken and no tail joined.
pub async fn open(
    core: &Core,
    bearer: Bearer,
    reference: String,
    after: ApiResult<Option<i64>>,
    addr: std::net::IpAddr,
    head: bool,
) -> ApiResult<Option<EventStream>> {
    let client = match bearer.cache_key(&core.tokens) {
        Some(key) => PollClient::Token(key),
        None => PollClient::Addr(addr),
    };
    let tokens = core.tokens.clone();
    let (orbit, revision) = db::read(&core.pool, move |conn| {
        bearer.optional(conn, &tokens)?;
        let orbit = access::resolve(conn, &reference)?;
        Ok((orbit.id, orbit.revision))
    })
    .await?;
    let after = after?.unwrap_or(revision);
    if head {
        return Ok(None);
    }
    let streams = core.events.clone();
    let cap = core.config.max_streams_per_client;
    let ends = Instant::now() + Duration::from_secs(core.config.stream_max_seconds);
    let slot = match streams.enter(client, cap, ends).await {
        Ok(slot) => slot,
        Err(first_ends) => {
            let after = feed::retry_after(first_ends);
            return Err(ApiError::too_many_requests(after).with_message(format!(
                "This client already has {cap} event streams open; the first ends by itself \
                 within {after} s. Close one, or follow the feed with one stream per orbit."
            )));
        }
    };
    let queue = streams.join(core, orbit, revision);
    streams.open.fetch_add(1, Relaxed);
    let sub = Subscriber {
        guard: OpenGuard {
            streams: streams.clone(),
            client,
            _slot: slot,
        },
        pool: core.pool.clone(),
        orbit,
        sent: after,
        queue,
        out: VecDeque::from([Bytes::from_static(b": ok\n\n")]),
        replaying: true,
        done: false,
        keep_alive: Duration::from_secs(core.config.stream_keepalive_seconds.clamp(1, 15)),
        quiet_since: Instant::now(),
        deadline: ends,
        closing: streams.closing.subscribe(),
        probe: streams.probe_of(client),
    };
    Ok(Some(Box::pin(futures_util::stream::unfold(sub, next))))
}

impl Streams {
    /// A place under the client's cap of open streams; at the cap, first the
    /// places of streams whose connections the client closed are found ([`PROBES`]).
    /// Refused: when the first of the client's streams ends by itself at the latest.
    async fn enter(
        self: &Arc<Self>,
        client: PollClient,
        cap: u32,
        ends: Instant,
    ) -> Result<OwnedPollSlot, std::time::Instant> {
        let ends = ends.into_std();
        let mut first_ends = match self.clients.enter_owned(client, cap, ends) {
            Ok(slot) => return Ok(slot),
            Err(first) => first,
        };
        let mut gap = FIRST_PROBE_GAP;
        for _ in 0..PROBES {
            if let Some(probe) = lock(&self.probes).get(&client) {
                probe.send_modify(|n| *n += 1);
            }
            tokio::time::sleep(gap).await;
            gap *= 2;
            match self.clients.enter_owned(client, cap, ends) {
                Ok(slot) => return Ok(slot),
                Err(first) => first_ends = first,
            }
        }
        Err(first_ends)
    }

    /// What a new stream of `client` listens to for probes.
    fn probe_of(&self, client: PollClient) -> watch::Receiver<u64> {
        lock(&self.probes)
            .entry(client)
            .or_insert_with(|| watch::Sender::new(0))
            .subscribe()
    }
}

/// Counts the stream as open and holds its place in the client's count until the
/// stream is dropped.
struct OpenGuard {
    streams: Arc<Streams>,
    client: PollClient,
    _slot: OwnedPollSlot,
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.streams.open.fetch_sub(1, Relaxed);
        // The client's last stream here takes its probe with it. (The guard drops
        // before its subscriber's receiver: one receiver left is this stream's.)
        let mut probes = lock(&self.streams.probes);
        if probes
            .get(&self.client)
            .is_some_and(|p| p.receiver_count() <= 1)
        {
            probes.remove(&self.client);
        }
    }
}

struct Subscriber {
    guard: OpenGuard,
    pool: PgPool,
    orbit: i64,
    /// The last revision sent (or the resume point).
    sent: i64,
    queue: mpsc::Receiver<Shared>,
    /// Bytes ready to send, in order.
    out: VecDeque<Bytes>,
    /// Still reading the replay from the feed.
    replaying: bool,
    done: bool,
    keep_alive: Duration,
    /// When the stream last sent something: a keep-alive follows `keep_alive` after.
    quiet_since: Instant,
    deadline: Instant,
    closing: watch::Receiver<bool>,
    /// Where [`Streams::enter`] asks this client's streams to write.
    probe: watch::Receiver<u64>,
}

/// What a waiting stream does next.
enum Step {
    End,
    KeepAlive,
    Queue(Option<Shared>),
}

impl Subscriber {
    fn end(&mut self) {
        self.out.push_back(Bytes::from_static(RETRY));
        self.done = true;
    }

    /// Reads one page of the feed after `sent` into `out`, up to `until`
    /// (inclusive); true when the feed has nothing more up to `until`.
    async fn read_page(&mut self, until: Option<i64>) -> ApiResult<bool> {
        let (orbit, from) = (self.orbit, self.sent);
        let (rows, revision) = db::read(&self.pool, move |conn| {
            Ok(load_page(conn, orbit, from, PAGE)?)
        })
        .await?;
        self.guard.streams.own_reads.fetch_add(1, Relaxed);
        let limit = until.unwrap_or(i64::MAX);
        let full = rows.len() as i64 == PAGE;
        let upto = rows.partition_point(|c| c.revision <= limit);
        let batch = Batch::render(&rows[..upto]);
        if let (Some(bytes), Some(last)) = (batch.after(self.sent), batch.last()) {
            self.out.push_back(bytes);
            self.sent = last;
        }
        Ok(!full || self.sent >= revision.min(limit))
    }

    /// A batch from the tail: its frames after the last revision sent, as one
    /// chunk; a hole before it is read from the feed first.
    async fn accept(&mut self, batch: &Batch) {
        let (Some(first), Some(last)) = (batch.first(), batch.last()) else {
            return;
        };
        if last <= self.sent {
            return;
        }
        while first > self.sent + 1 {
            let before = self.sent;
            match self.read_page(Some(first - 1)).await {
                Ok(_) if self.sent > before => {}
                // The feed cannot fill the hole now: end, the client resumes.
                _ => return self.end(),
            }
        }
        if let Some(bytes) = batch.after(self.sent) {
            self.out.push_back(bytes);
            self.sent = last;
        }
    }

    /// Everything ready to send, as one chunk.
    fn take_out(&mut self) -> Option<Bytes> {
        match self.out.len() {
            0 => None,
            1 => self.out.pop_front(),
            _ => {
                let mut all = actix_web::web::BytesMut::new();
                for b in self.out.drain(..) {
                    all.extend_from_slice(&b);
                }
                Some(all.freeze())
            }
        }
    }
}

async fn next(mut s: Subscriber) -> Option<(Result<Bytes, Infallible>, Subscriber)> {
    loop {
        if let Some(b) = s.take_out() {
            s.quiet_since = Instant::now();
            return Some((Ok(b), s));
        }
        if s.done {
            return None;
        }
        if *s.closing.borrow() {
            s.end();
            continue;
        }
        if s.replaying {
            match s.read_page(None).await {
                Ok(caught_up) => s.replaying = !caught_up,
                Err(_) => s.end(),
            }
            continue;
        }
        let step = tokio::select! {
            _ = s.closing.changed() => Step::End,
            _ = tokio::time::sleep_until(s.deadline) => Step::End,
            _ = tokio::time::sleep_until(s.quiet_since + s.keep_alive) => Step::KeepAlive,
            got = s.queue.recv() => Step::Queue(got),
            probed = s.probe.changed() => match probed {
                Ok(()) => Step::KeepAlive,
                // Not while this stream is open (its guard keeps the probe).
                Err(_) => Step::End,
            },
        };
        match step {
            Step::End => s.end(),
            Step::KeepAlive => s.out.push_back(Bytes::from_static(KEEP_ALIVE)),
            Step::Queue(Some(batch)) => {
                s.accept(&batch).await;
                // Batches that queued meanwhile go out in the same chunk.
                while !s.done {
                    match s.queue.try_recv() {
                        Ok(more) => s.accept(&more).await,
                        Err(_) => break,
                    }
                }
            }
            // Dropped by the tail: it fell a whole queue behind.
            Step::Queue(None) => s.end(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(revision: i64) -> ChangeOut {
        ChangeOut {
            revision,
            kind: "task.created".into(),
            entity_type: "task".into(),
            entity_id: revision,
            task_id: None,
            contributor: crate::model::ContributorActor {
                id: 1,
                kind: "agent".into(),
                name: "a".into(),
                model_claim: None,
            },
            created_at: chrono::Utc::now(),
            summary: "s".into(),
        }
    }

    fn batch(revision: i64) -> Shared {
        Arc::new(Batch::render(&[change(revision)]))
    }

    /// A batch is sent from the first revision not sent yet, frames whole.
    #[test]
    fn a_batch_is_sliced_after_the_last_revision_sent() {
        let b = Batch::render(&[change(4), change(5), change(6)]);
        let all = String::from_utf8(b.after(3).unwrap().to_vec()).unwrap();
        assert!(all.starts_with("id: 4\nevent: task.created\ndata: {"));
        assert_eq!(all.matches("\n\n").count(), 3);
        let tail = String::from_utf8(b.after(5).unwrap().to_vec()).unwrap();
        assert!(tail.starts_with("id: 6\n") && tail.ends_with("}\n\n"));
        assert_eq!(tail.matches("id: ").count(), 1);
        assert!(b.after(6).is_none());
    }

    /// A subscriber whose queue is full is dropped at once; the others keep theirs.
    #[test]
    fn a_full_queue_drops_its_subscriber_and_no_other() {
        let streams = Streams::default();
        let (slow, _slow_rx) = mpsc::channel(1);
        let (fast, mut fast_rx) = mpsc::channel(1);
        let tail = Tail {
            subscribers: Mutex::new(vec![slow, fast]),
        };
        streams.fan_out(&tail, batch(2));
        assert_eq!(fast_rx.try_recv().ok().and_then(|b| b.first()), Some(2));
        streams.fan_out(&tail, batch(3));
        assert_eq!(streams.dropped.load(Relaxed), 1);
        assert_eq!(lock(&tail.subscribers).len(), 1);
        assert_eq!(fast_rx.try_recv().ok().and_then(|b| b.first()), Some(3));
    }

    #[test]
    fn resume_points() {
        assert_eq!(resume_point(None, None).ok(), Some(None));
        assert_eq!(resume_point(Some("7"), Some("2")).ok(), Some(Some(7)));
        assert_eq!(resume_point(Some(""), Some("2")).ok(), Some(Some(2)));
        assert!(resume_point(Some("x"), None).is_err());
        assert!(resume_point(None, Some("-1")).is_err());
    }
}
