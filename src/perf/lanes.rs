//! Lanes: the one queue mechanism behind every grouped database round trip — the
//! quick writes (`quick`), the grouped ordinary writes (`commits`) and the grouped
//! reads (`readgroup`).
//!
//! Requests queue by route (an orbit, a kind of read...). A lane is a blocking
//! thread that takes everything queued on its route (up to the group size) and runs
//! it as one group; requests that arrive meanwhile wait for the next group. An idle
//! route starts a lane at once, so a lone request runs alone and grouping adds no
//! wait: it only gathers the requests that would otherwise have queued for a thread,
//! a connection or a row lock. Up to `per_route` lanes run on one route at once, and
//! up to `borrow` more while all routes together run fewer than `budget` lanes (a
//! busy route takes the share of idle ones; a borrowed lane leaves once the others
//! need it back).
//! A lane busy with one group for longer than half the deadline no longer counts
//! (its connection presumably hangs: a half-open TCP connection, which no server
//! timeout ends); a new lane takes the queue, and the stuck one leaves when it wakes.
//! A request waits at most the deadline for its answer, then gets 503. One still
//! queued then is withdrawn and never runs, so the 503 changed nothing; one whose
//! group has started may still commit (a retry with its Idempotency-Key replays it
//! or runs it once). [`Hints`]
//! remembers the orbit each token last wrote to: the route its next write takes.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::error::{ApiError, ApiResult};

/// Runs one group of a route: one answer per request, in the requests' order.
pub type Run<R, J, T> = dyn Fn(&R, &mut [J]) -> Vec<ApiResult<T>> + Send + Sync;

/// How a route's lanes treat a queued request.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Lanes one route runs at once.
    pub per_route: usize,
    /// Lanes one route may run past `per_route` while all routes together run
    /// fewer than `budget` (0: none).
    pub borrow: usize,
    /// Lanes of all routes at once under which a route may borrow.
    pub budget: usize,
    /// The most requests in one group.
    pub max_group: usize,
    /// How long a request waits for its answer before it is answered 503.
    pub deadline: Duration,
    /// Whether a request whose client hung up is dropped from the queue unrun: right
    /// for reads, not for writes (a write a client gave up on runs, as it would on
    /// the ordinary path). A request still queued at its deadline is withdrawn
    /// whatever this says (its 503 then means it never runs).
    pub skip_abandoned: bool,
    /// What a request is, for the log ("grouped read", "quick write"...).
    pub what: &'static str,
}

/// A queued request: its ticket (which `submit` withdraws it by), the job, and where
/// its answer goes.
struct Queued<J, T> {
    ticket: u64,
    job: J,
    done: oneshot::Sender<ApiResult<T>>,
}

type Waiting<J, T> = VecDeque<Queued<J, T>>;

struct Route<J, T> {
    waiting: Waiting<J, T>,
    /// Groups of this route running now (taken, and not yet answered).
    running: usize,
    /// The lanes that count as running, by id, with when each started its current
    /// group (or started at all).
    lanes: HashMap<u64, Instant>,
}

struct State<R, J, T> {
    routes: HashMap<R, Route<J, T>>,
    next_lane: u64,
    next_ticket: u64,
}

/// The queues of one kind of grouped work.
pub struct Lanes<R, J, T> {
    shape: Shape,
    run: Box<Run<R, J, T>>,
    /// Groups run, and the requests they answered.
    pub groups: AtomicU64,
    pub answered: AtomicU64,
    state: Mutex<State<R, J, T>>,
}

impl<R, J, T> Lanes<R, J, T>
where
    R: Copy + Eq + Hash + Send + 'static,
    J: Send + 'static,
    T: Send + 'static,
{
    pub fn new(shape: Shape, run: Box<Run<R, J, T>>) -> Lanes<R, J, T> {
        Lanes {
            shape: Shape {
                per_route: shape.per_route.max(1),
                max_group: shape.max_group.max(1),
                ..shape
            },
            run,
            groups: AtomicU64::new(0),
            answered: AtomicU64::new(0),
            state: Mutex::new(State {
                routes: HashMap::new(),
                next_lane: 0,
                next_ticket: 0,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State<R, J, T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Requests queued for their next group, on every route.
    pub fn waiting(&self) -> usize {
        self.state().routes.values().map(|r| r.waiting.len()).sum()
    }

    /// `(groups run, requests answered, requests waiting)`.
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.groups.load(Ordering::Relaxed),
            self.answered.load(Ordering::Relaxed),
            self.waiting() as u64,
        )
    }

    /// Runs `job` in the next group of `route` and waits for its answer: 503 past the
    /// deadline (the lane may be stuck on a hung connection), withdrawn from the queue
    /// if its group has not taken it yet; 500 if the lane dropped it (it panicked).
    pub async fn submit(self: &Arc<Self>, route: R, job: J) -> ApiResult<T> {
        self.submit_until(route, job, Instant::now() + self.shape.deadline)
            .await
    }

    /// [`Lanes::submit`] with its 503 at `until` (a write's one deadline, part of
    /// which an earlier attempt may have spent) instead of the deadline from now.
    pub async fn submit_until(self: &Arc<Self>, route: R, job: J, until: Instant) -> ApiResult<T> {
        let (done, mut answer) = oneshot::channel();
        let (start, ticket) = {
            let mut state = self.state();
            let lane_id = state.next_lane;
            let ticket = state.next_ticket;
            state.next_ticket += 1;
            let now = Instant::now();
            let all = self.lanes_counting(&state, now);
            let queue = state.routes.entry(route).or_insert_with(|| Route {
                waiting: VecDeque::new(),
                running: 0,
                lanes: HashMap::new(),
            });
            queue.waiting.push_back(Queued { ticket, job, done });
            let stuck = self.shape.deadline / 2;
            queue
                .lanes
                .retain(|_, since| now.duration_since(*since) < stuck);
            let own = queue.lanes.len();
            let start = own < self.shape.per_route
                || (own < self.shape.per_route + self.shape.borrow && all < self.shape.budget);
            if start {
                queue.lanes.insert(lane_id, now);
                state.next_lane += 1;
            }
            (start.then_some(lane_id), ticket)
        };
        if let Some(id) = start {
            let lanes = self.clone();
            actix_web::rt::task::spawn_blocking(move || lanes.lane(route, id));
        }
        let what = self.shape.what;
        match tokio::time::timeout_at(tokio::time::Instant::from_std(until), &mut answer).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => {
                tracing::error!("a {what}'s group ended without an answer");
                Err(ApiError::internal())
            }
            Err(_) if self.withdraw(route, ticket) => {
                tracing::warn!("a {what} waited past its deadline for its group; withdrawn unrun");
                Err(ApiError::unavailable())
            }
            // Taken by a group meanwhile: its answer, if it came just now.
            Err(_) => answer.try_recv().unwrap_or_else(|_| {
                tracing::warn!("a {what}'s group ran past its deadline; it may still commit");
                Err(ApiError::unavailable())
            }),
        }
    }

    /// Takes the request of `ticket` out of `route`'s queue: true if it was still
    /// there (no group has taken it, and none will).
    fn withdraw(&self, route: R, ticket: u64) -> bool {
        let mut state = self.state();
        let Some(queue) = state.routes.get_mut(&route) else {
            return false;
        };
        let Some(at) = queue.waiting.iter().position(|q| q.ticket == ticket) else {
            return false;
        };
        queue.waiting.remove(at);
        if queue.waiting.is_empty() && queue.lanes.is_empty() && queue.running == 0 {
            state.routes.remove(&route);
        }
        true
    }

    /// The lanes of every route that count (not presumed stuck) at `now`. Only a
    /// shape that borrows reads it: for one that does not (every shape but the quick
    /// writes'), it is 0 without walking the routes on every submit.
    fn lanes_counting(&self, state: &State<R, J, T>, now: Instant) -> usize {
        if self.shape.borrow == 0 {
            return 0;
        }
        let stuck = self.shape.deadline / 2;
        state
            .routes
            .values()
            .flat_map(|r| r.lanes.values())
            .filter(|since| now.duration_since(**since) < stuck)
            .count()
    }

    /// Lane `id` of `route`: runs groups until nothing waits, until it no longer
    /// counts, or, when its route runs more than `per_route` lanes, until all routes
    /// together run more than the budget (it gives its borrowed share back).
    fn lane(&self, route: R, id: u64) {
        loop {
            let group: Waiting<J, T> = {
                let mut state = self.state();
                let all = self.lanes_counting(&state, Instant::now());
                let Some(queue) = state.routes.get_mut(&route) else {
                    return;
                };
                if !queue.lanes.contains_key(&id) {
                    // Presumed stuck, and replaced meanwhile.
                    return;
                }
                if self.shape.skip_abandoned {
                    queue.waiting.retain(|q| !q.done.is_closed());
                }
                if queue.lanes.len() > self.shape.per_route && all > self.shape.budget {
                    queue.lanes.remove(&id);
                    return;
                }
                if queue.waiting.is_empty() {
                    queue.lanes.remove(&id);
                    if queue.lanes.is_empty() {
                        state.routes.remove(&route);
                    }
                    return;
                }
                queue.lanes.insert(id, Instant::now());
                queue.running += 1;
                let n = queue.waiting.len().min(self.shape.max_group);
                queue.waiting.drain(..n).collect()
            };
            let (mut jobs, senders): (Vec<J>, Vec<_>) =
                group.into_iter().map(|q| (q.job, q.done)).unzip();
            // A panic answers the group's requests with 500 (their senders drop) and
            // leaves the lane running for the rest.
            let answers = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                (self.run)(&route, &mut jobs)
            }));
            // Done before anyone is answered: a request sent after its answer never
            // sees this group as running.
            if let Some(queue) = self.state().routes.get_mut(&route) {
                queue.running = queue.running.saturating_sub(1);
            }
            let Ok(mut answers) = answers else {
                tracing::error!("a group of {}s panicked", self.shape.what);
                continue;
            };
            if answers.len() != senders.len() {
                tracing::error!(
                    "a group of {}s answered a different number",
                    self.shape.what
                );
                answers = senders.iter().map(|_| Err(ApiError::internal())).collect();
            }
            self.groups.fetch_add(1, Ordering::Relaxed);
            self.answered
                .fetch_add(senders.len() as u64, Ordering::Relaxed);
            for (done, answer) in senders.into_iter().zip(answers) {
                // The request may have gone (its client hung up).
                let _ = done.send(answer);
            }
        }
    }
}

/// Token ids whose orbit hint is remembered at most (then the hints start over).
const MAX_HINTS: usize = 65_536;

/// Which orbit each verified token last wrote to: where its next write most likely
/// goes, so writes of one orbit queue together (`quick`, `commits`).
#[derive(Default)]
pub struct Hints {
    orbits: Mutex<HashMap<i64, i64>>,
}

impl Hints {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<i64, i64>> {
        self.orbits.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The orbit `token_id` last wrote to, if this instance saw it.
    pub fn orbit_of(&self, token_id: i64) -> Option<i64> {
        self.map().get(&token_id).copied()
    }

    /// Remembers that `token_id` wrote to `orbit_id`.
    pub fn learn(&self, token_id: i64, orbit_id: i64) {
        let mut map = self.map();
        if map.len() >= MAX_HINTS && !map.contains_key(&token_id) {
            map.clear();
        }
        map.insert(token_id, orbit_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(per_route: usize, deadline_ms: u64) -> Shape {
        Shape {
            per_route,
            borrow: 0,
            budget: 0,
            max_group: 64,
            deadline: Duration::from_millis(deadline_ms),
            skip_abandoned: true,
            what: "test request",
        }
    }

    /// A group whose run hangs (a connection that never answers, which no server
    /// timeout ends) stops counting as a lane once it has run for longer than a
    /// request may wait: the next request starts a new lane instead of waiting.
    #[actix_web::test]
    async fn a_lane_stuck_past_the_deadline_is_replaced() {
        let (release, hang) = std::sync::mpsc::channel::<()>();
        let hang = Mutex::new(hang);
        let run = move |_: &(), keys: &mut [u32]| {
            if keys.contains(&0) {
                let _ = hang.lock().unwrap().recv();
            }
            keys.iter().map(|k| Ok(k * 10)).collect()
        };
        let lanes = Arc::new(Lanes::new(shape(1, 300), Box::new(run)));
        let stuck = actix_web::rt::spawn({
            let lanes = lanes.clone();
            async move { lanes.submit((), 0).await }
        });
        let stuck = stuck.await.expect("the stuck request's task");
        assert_eq!(
            stuck.unwrap_err().status,
            actix_web::http::StatusCode::SERVICE_UNAVAILABLE
        );
        // Past the deadline, the stuck lane no longer counts.
        assert_eq!(lanes.submit((), 7).await.unwrap(), 70);
        assert_eq!(lanes.submit((), 8).await.unwrap(), 80);
        release.send(()).unwrap();
        // The stuck lane, once it wakes, finishes its group (its request has gone)
        // and leaves without taking another; the new one has left too.
        let deadline = Instant::now() + Duration::from_secs(10);
        while lanes.counts().0 < 3 || !lanes.state().routes.is_empty() {
            assert!(Instant::now() < deadline, "lanes left running");
            actix_web::rt::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(lanes.counts(), (3, 3, 0));
    }

    /// One route of write lanes (one lane, requests kept when their client left)
    /// whose group holding request 0 hangs until `release` is sent; request 0 has
    /// been submitted (`held`) and its group runs; `ran`: every request run.
    struct HeldLane {
        lanes: Arc<Lanes<(), u32, u32>>,
        release: std::sync::mpsc::Sender<()>,
        held: actix_web::rt::task::JoinHandle<ApiResult<u32>>,
        ran: Arc<Mutex<Vec<u32>>>,
    }

    async fn held_lane(deadline_ms: u64) -> HeldLane {
        let (release, hang) = std::sync::mpsc::channel::<()>();
        let hang = Mutex::new(hang);
        let ran = Arc::new(Mutex::new(Vec::new()));
        let seen = ran.clone();
        let run = move |_: &(), keys: &mut [u32]| {
            if keys.contains(&0) {
                let _ = hang.lock().unwrap().recv();
            }
            seen.lock().unwrap().extend(keys.iter().copied());
            keys.iter().map(|k| Ok(k * 10)).collect()
        };
        let writes = Shape {
            skip_abandoned: false,
            ..shape(1, deadline_ms)
        };
        let lanes = Arc::new(Lanes::new(writes, Box::new(run)));
        let held = actix_web::rt::spawn({
            let lanes = lanes.clone();
            async move { lanes.submit((), 0).await }
        });
        while lanes.state().routes.get(&()).is_none_or(|r| r.running == 0) {
            actix_web::rt::time::sleep(Duration::from_millis(5)).await;
        }
        HeldLane {
            lanes,
            release,
            held,
            ran,
        }
    }

    impl HeldLane {
        /// Lets the held group go, waits (up to 10 s) for the lane to leave, and
        /// returns every request that ran and request 0's answer.
        async fn released(self) -> (Vec<u32>, ApiResult<u32>) {
            self.release.send(()).unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            while !self.lanes.state().routes.is_empty() {
                assert!(Instant::now() < deadline, "the lane kept running");
                actix_web::rt::time::sleep(Duration::from_millis(10)).await;
            }
            let answer = self.held.await.expect("the held request's task");
            let ran = self.ran.lock().unwrap().clone();
            (ran, answer)
        }
    }

    fn assert_unavailable<T: std::fmt::Debug>(answer: ApiResult<T>) {
        assert_eq!(
            answer.unwrap_err().status,
            actix_web::http::StatusCode::SERVICE_UNAVAILABLE
        );
    }

    /// A write still queued at its deadline is withdrawn: its 503 means it never
    /// runs, even after the stuck group before it ends (a write a client merely left
    /// still runs: the shape does not skip abandoned requests).
    #[actix_web::test]
    async fn a_request_still_queued_at_its_deadline_never_runs() {
        let held = held_lane(300).await;
        let lanes = held.lanes.clone();
        assert_unavailable(lanes.submit((), 5).await);
        assert_eq!(lanes.counts().2, 0, "the request stayed queued");
        let (ran, stuck) = held.released().await;
        assert_unavailable(stuck);
        assert_eq!(ran, vec![0], "a withdrawn request ran");
        assert_eq!(lanes.counts(), (1, 1, 0));
    }

    /// A request may bring its own deadline (`submit_until`: a write's one deadline,
    /// part of which its quick attempt spent): its 503 comes then, not a whole
    /// `deadline` later, and, withdrawn still queued, it never runs; one whose
    /// deadline has passed is answered at once.
    #[actix_web::test]
    async fn a_request_answers_at_its_own_deadline() {
        let held = held_lane(60_000).await;
        let lanes = held.lanes.clone();
        let start = Instant::now();
        let until = start + Duration::from_millis(200);
        assert_unavailable(lanes.submit_until((), 5, until).await);
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{:?}",
            start.elapsed()
        );
        assert_unavailable(lanes.submit_until((), 6, Instant::now()).await);
        assert_eq!(lanes.counts().2, 0, "a request stayed queued");
        let (ran, first) = held.released().await;
        assert_eq!(first.unwrap(), 0);
        assert_eq!(ran, vec![0], "a withdrawn request ran");
    }

    /// Requests that queue while a group runs go together in the next group, and
    /// each route has its own queue.
    #[actix_web::test]
    async fn requests_that_queue_meanwhile_share_the_next_group() {
        let (release, hold) = std::sync::mpsc::channel::<()>();
        let hold = Mutex::new(hold);
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let seen = sizes.clone();
        let run = move |route: &u8, keys: &mut [u32]| {
            if keys.contains(&0) {
                let _ = hold.lock().unwrap().recv();
            }
            seen.lock().unwrap().push((*route, keys.len()));
            keys.iter().map(|k| Ok(k + 1)).collect()
        };
        let lanes = Arc::new(Lanes::new(shape(1, 10_000), Box::new(run)));
        let first = actix_web::rt::spawn({
            let lanes = lanes.clone();
            async move { lanes.submit(1u8, 0).await }
        });
        while lanes.counts().2 > 0 || lanes.state().routes.is_empty() {
            actix_web::rt::time::sleep(Duration::from_millis(5)).await;
        }
        let rest: Vec<_> = (1..=5)
            .map(|k| {
                let lanes = lanes.clone();
                actix_web::rt::spawn(async move { lanes.submit(1u8, k).await })
            })
            .collect();
        let other = lanes.clone();
        assert_eq!(other.submit(2u8, 40).await.unwrap(), 41);
        while lanes.counts().2 < 5 {
            actix_web::rt::time::sleep(Duration::from_millis(5)).await;
        }
        release.send(()).unwrap();
        assert_eq!(first.await.unwrap().unwrap(), 1);
        for (k, r) in (1..=5).zip(rest) {
            assert_eq!(r.await.unwrap().unwrap(), k + 1);
        }
        let sizes = sizes.lock().unwrap().clone();
        assert_eq!(sizes, vec![(2, 1), (1, 1), (1, 5)]);
    }

    /// Keys a test holds: a group with one of them waits until it is let go.
    #[derive(Default)]
    struct Gate {
        held: Mutex<std::collections::HashSet<u32>>,
        changed: std::sync::Condvar,
    }

    impl Gate {
        fn hold(&self, key: u32) {
            self.held.lock().unwrap().insert(key);
        }

        fn let_go(&self, key: u32) {
            self.held.lock().unwrap().remove(&key);
            self.changed.notify_all();
        }

        fn let_all_go(&self) {
            self.held.lock().unwrap_or_else(|p| p.into_inner()).clear();
            self.changed.notify_all();
        }

        fn pass(&self, key: u32) {
            let mut held = self.held.lock().unwrap();
            while held.contains(&key) {
                held = self.changed.wait(held).unwrap();
            }
        }
    }

    /// Lets every held key go when the test ends, failed ones included: the
    /// runtime waits for the lanes' threads before the failure is reported.
    struct LetGo(Arc<Gate>);

    impl Drop for LetGo {
        fn drop(&mut self) {
            self.0.let_all_go();
        }
    }

    /// A route whose lane is busy runs a second one beside it while all routes
    /// together run fewer lanes than the budget, and not once they run as many; a
    /// borrowed lane leaves after its group when the routes need the budget back.
    #[actix_web::test]
    async fn a_busy_route_borrows_a_lane_only_while_the_others_leave_room() {
        let gate = Arc::new(Gate::default());
        let _let_go = LetGo(gate.clone());
        let seen = gate.clone();
        let run = move |_: &u8, keys: &mut [u32]| {
            keys.iter().for_each(|k| seen.pass(*k));
            keys.iter().map(|k| Ok(k + 1)).collect()
        };
        let lanes = Arc::new(Lanes::new(
            Shape {
                borrow: 1,
                budget: 2,
                ..shape(1, 60_000)
            },
            Box::new(run),
        ));
        let send = |route: u8, key: u32| {
            let lanes = lanes.clone();
            actix_web::rt::spawn(async move { lanes.submit(route, key).await })
        };
        let running =
            |lanes: &Lanes<u8, u32, u32>| lanes.lanes_counting(&lanes.state(), Instant::now());
        let settle = || actix_web::rt::time::sleep(Duration::from_millis(200));

        // Route 1's lane waits on key 0; its next request borrows a lane and is
        // answered meanwhile.
        gate.hold(0);
        let first = send(1, 0);
        settle().await;
        let meanwhile = actix_web::rt::time::timeout(Duration::from_secs(10), lanes.submit(1, 100));
        assert_eq!(meanwhile.await.expect("no lane was borrowed").unwrap(), 101);
        assert!(!first.is_finished());

        // Route 2 takes the budget's other lane: route 1 borrows none now.
        gate.hold(1);
        let other = send(2, 1);
        settle().await;
        assert_eq!(running(&lanes), 2);
        let behind = send(1, 101);
        settle().await;
        assert_eq!(
            lanes.counts().2,
            1,
            "route 1 borrowed a lane past the budget"
        );
        gate.let_go(0);
        assert_eq!(first.await.unwrap().unwrap(), 1);
        assert_eq!(behind.await.unwrap().unwrap(), 102);

        // Route 1 borrows while route 2 is idle; once route 2 runs again, the
        // borrowed lane leaves after its group and route 1's queue waits for its own.
        gate.let_go(1);
        assert_eq!(other.await.unwrap().unwrap(), 2);
        gate.hold(2);
        gate.hold(3);
        let own = send(1, 2);
        settle().await;
        let borrowed = send(1, 3);
        settle().await;
        assert_eq!(running(&lanes), 2, "route 1 borrowed the idle share");
        gate.hold(4);
        let back = send(2, 4);
        settle().await;
        let queued = [send(1, 102), send(1, 103)];
        settle().await;
        gate.let_go(3);
        assert_eq!(borrowed.await.unwrap().unwrap(), 4);
        settle().await;
        assert_eq!(lanes.counts().2, 2, "the borrowed lane took another group");
        assert_eq!(running(&lanes), 2);
        gate.let_go(2);
        assert_eq!(own.await.unwrap().unwrap(), 3);
        for (k, r) in [103, 104].into_iter().zip(queued) {
            assert_eq!(r.await.unwrap().unwrap(), k);
        }
        gate.let_go(4);
        assert_eq!(back.await.unwrap().unwrap(), 5);
    }
}
