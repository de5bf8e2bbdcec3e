//! Test 2 of docs/RELIABILITY.md. Crash: SIGKILL one instance under load; clients retry
//! elsewhere with the same key, and every write applies exactly once.

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use diesel::PgConnection;
use orbit_commons::testkit::short_id;
use serde_json::json;
use tokio::task::JoinHandle;

use super::audit::ack_counts;
use super::fleet::LoadRun;
use super::load::{Ack, Kind, Net, Stats};
use crate::harness::{sql_i64, Resp, RowLock, TestDb};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_kill_retry_applies_each_write_once() {
    // A lock timeout (half of this) well above the time the two straddling writes
    // below wait on the test's row locks, so neither gives up before the kill; and
    // two write lanes, so that the second of them runs while the first waits.
    let mut run = LoadRun::start(
        "oc-rel-crash",
        2,
        &[
            ("ORBIT_DB_TIMEOUT_MS", "30000".into()),
            ("ORBIT_WRITE_LANES", "2".into()),
        ],
    )
    .await;
    let race = run.race();
    // Two writes are made to straddle the crash deterministically, on tasks of their
    // own that no agent touches, both sent to instance-0 while a row lock held here
    // keeps them inside their transaction:
    // - `lost`: its client gives up (timeout); the lock is lifted, the instance
    //   commits and answers nobody; after the crash its retry must replay the
    //   original lease, not acquire again;
    // - `cut`: still waiting on the lock when the instance is SIGKILLed; its retry
    //   must execute exactly once.
    let mut straddle = Straddle::prepare(&run).await;
    let victim = run.serves[0].base();
    // One after the other: sent together, both could go in one group of quick
    // writes (src/quick.rs), and `lost` would then wait for `cut`'s lock too. Sent
    // once `lost` waits, `cut` runs in the queue's second lane.
    let lost = straddle.send_and_block(Which::Lost, &victim);
    let cut = straddle.send_and_block(Which::Cut, &victim);
    // The `lost` client gives up (as on a timeout): its connection closes unanswered.
    lost.abort();
    assert!(lost.await.is_err(), "the locked write answered");
    straddle.commit_unanswered().await;

    let in_flight_before = Stats::get(&run.net.stats.attempts);
    let retries_before = Stats::get(&run.net.stats.transport_retries);
    let status = run.serves[0].sigkill().expect("kill -9 instance-0");
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    let killed_at = race.started.elapsed();
    assert!(
        cut.await.expect("cut task").is_err(),
        "the `cut` write was answered"
    );
    straddle.cut_never_commits().await;

    // Both retried with the same key on a surviving instance.
    let lost_retry = straddle.retry(Which::Lost, &run.serves[1].base()).await;
    assert_eq!(lost_retry.status, 201, "{}", lost_retry.text);
    assert_eq!(
        lost_retry.header("idempotency-replayed"),
        Some("true"),
        "the committed write ran again"
    );
    let cut_retry = straddle.retry(Which::Cut, &run.serves[2].base()).await;
    assert_eq!(cut_retry.status, 201, "{}", cut_retry.text);
    assert_eq!(
        cut_retry.header("idempotency-replayed"),
        None,
        "a rolled-back write replayed"
    );
    straddle.acknowledge(&run.net, [&lost_retry, &cut_retry]);
    straddle.assert_one_lease_each();

    race.finish().await;

    let (acks, audit) = run.audit();
    let s = &run.net.stats;
    let retries_after_kill = Stats::get(&s.transport_retries) - retries_before;
    run.report(
        "crash_kill_retry_applies_each_write_once",
        &audit,
        &format!(
            "; instance-0 SIGKILLed {:.1} s into the load \
             after {in_flight_before} requests; transport retries after the kill {retries_after_kill}; \
             write committed with its answer lost: retried, replayed (1 lease); write cut by the \
             kill mid-transaction: retried, executed once (1 lease)",
            killed_at.as_secs_f64()
        ),
    );
    run.assert_promises_kept(&audit, " after the crash");
    assert!(
        retries_after_kill > 0,
        "no client ever noticed the crash: the test did not test it"
    );
    let counts = ack_counts(&acks);
    assert!(counts.get("checkpoint").copied().unwrap_or(0) > 0);
    run.assert_alive(1);
}

#[derive(Clone, Copy)]
enum Which {
    Lost,
    Cut,
}

/// One of the two straddling writes: an acquire of a task of its own, under a key
/// of its own, held up by a row lock on that task.
struct Probe {
    task: i64,
    key: String,
    lock: Option<RowLock>,
}

/// The two writes that straddle the crash, the seeder who sends them, and a
/// connection that watches their locks.
struct Straddle {
    client: reqwest::Client,
    seeder: (i64, String),
    monitor: PgConnection,
    probes: [Probe; 2],
}

impl Straddle {
    /// Creates the two tasks (through instances 1 and 2), lets them settle, and
    /// locks both rows.
    async fn prepare(run: &LoadRun) -> Straddle {
        let (seeder_id, seeder) = run.world.seeder.clone();
        let mut tasks = Vec::new();
        for i in 0..2 {
            let key = format!("probe-task-{}", short_id());
            let r = run
                .net
                .write(
                    &mut (i + 1),
                    Kind::CreateTask,
                    seeder_id,
                    &seeder,
                    &key,
                    &format!("/api/v1/orbits/{}/tasks", run.world.orbits[0]),
                    &json!({"title": "probe", "description": key}),
                )
                .await
                .expect("probe task");
            assert_eq!(r.status, 201, "{}", r.json);
            tasks.push(r.json["data"]["id"].as_i64().expect("task id"));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let probe = |task: i64, what: &str, db: &TestDb| Probe {
            task,
            key: format!("{what}-{}", short_id()),
            lock: Some(RowLock::take(db, task)),
        };
        let monitor = run.db.conn();
        Straddle {
            client: run.net.client.clone(),
            seeder: (seeder_id, seeder),
            monitor,
            probes: [
                probe(tasks[0], "lost", &run.db),
                probe(tasks[1], "cut", &run.db),
            ],
        }
    }

    fn probe(&self, which: Which) -> &Probe {
        &self.probes[which as usize]
    }

    fn acquire(&self, which: Which, base: &str, timeout: Duration) -> reqwest::RequestBuilder {
        let p = self.probe(which);
        self.client
            .post(format!("{base}/api/v1/tasks/{}/leases", p.task))
            .bearer_auth(&self.seeder.1)
            .header("Idempotency-Key", &p.key)
            .timeout(timeout)
            .json(&json!({"duration_seconds": 3600}))
    }

    /// Sends the write to `base` and waits until it waits on its row lock.
    fn send_and_block(
        &mut self,
        which: Which,
        base: &str,
    ) -> JoinHandle<reqwest::Result<reqwest::Response>> {
        let sent = tokio::spawn(self.acquire(which, base, Duration::from_secs(60)).send());
        let name = ["lost", "cut"][which as usize];
        let waiters = {
            let lock = self.probes[which as usize].lock.as_ref().expect("lock");
            lock.waiters(&mut self.monitor)
        };
        assert!(
            waiters >= 1,
            "the `{name}` write is not waiting on the lock"
        );
        sent
    }

    /// Lifts the `lost` write's lock and waits until it has committed (answering a
    /// client that is gone).
    async fn commit_unanswered(&mut self) {
        let p = &mut self.probes[Which::Lost as usize];
        p.lock.take().expect("lock").release();
        let committed = Instant::now();
        while sql_i64(
            &mut self.monitor,
            &format!(
                "SELECT count(*) AS n FROM idempotency_keys WHERE key = '{}'",
                p.key
            ),
        ) == 0
        {
            assert!(
                committed.elapsed() < Duration::from_secs(10),
                "the `lost` write never committed"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The `cut` write's statement is still queued on the lock; the server notices
    /// that its client is gone (`client_connection_check_interval`) and cancels it,
    /// so the write cannot commit after its instance died, even as one statement
    /// (src/quick.rs). Then its lock is lifted.
    async fn cut_never_commits(&mut self) {
        let gone = Instant::now();
        let lock = self.probes[Which::Cut as usize].lock.as_ref();
        while lock.expect("lock").waiting_now(&mut self.monitor) > 0 {
            assert!(
                gone.elapsed() < Duration::from_secs(10),
                "the killed instance's statement still waits on the lock"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.probes[Which::Cut as usize]
            .lock
            .take()
            .expect("lock")
            .release();
    }

    /// The same write, same key, sent to another instance.
    async fn retry(&self, which: Which, base: &str) -> Resp {
        let name = ["lost", "cut"][which as usize];
        let sent = self
            .acquire(which, base, Duration::from_secs(20))
            .send()
            .await
            .unwrap_or_else(|e| panic!("retry {name}: {e}"));
        Resp::from(sent).await
    }

    /// Records both retries' answers as acknowledged, for the audit.
    fn acknowledge(&self, net: &Net, answers: [&Resp; 2]) {
        for (p, r) in self.probes.iter().zip(answers) {
            net.stats.acks.lock().unwrap().push(Ack {
                kind: Kind::Acquire,
                key: p.key.clone(),
                agent: self.seeder.0,
                data: r.json["data"].clone(),
            });
        }
    }

    #[track_caller]
    fn assert_one_lease_each(&mut self) {
        for task in self.probes.iter().map(|p| p.task) {
            let n = sql_i64(
                &mut self.monitor,
                &format!("SELECT count(*) AS n FROM leases WHERE task_id = {task}"),
            );
            assert_eq!(
                n, 1,
                "task {task} has {n} leases after one acquire retried across a crash"
            );
        }
    }
}
