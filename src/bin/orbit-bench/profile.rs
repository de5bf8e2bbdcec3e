//! Profiling (`--profile`): where the time of each row goes.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use diesel::sql_types::{BigInt, Bool, Double, Text};
use diesel::{Connection, PgConnection, QueryableByName, RunQueryDsl};
use orbit_commons::testkit::database::admin_exec;
use orbit_commons::testkit::{PgServer, PrivateCluster};
use serde::Serialize;

use crate::report::{fmt_opt, RefRow, Row};

/// User + system CPU of a process, in microseconds.
pub fn proc_cpu_us(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the command name: state is field 3 of the file, utime 14, stime 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) * 1_000_000 / clock_ticks())
}

pub fn clock_ticks() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// Machine-wide (busy, total) CPU time in microseconds, from /proc/stat.
pub fn machine_cpu_us() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() < 8 {
        return None;
    }
    let idle = v[3] + v[4];
    let total: u64 = v.iter().sum();
    let tck = clock_ticks();
    Some(((total - idle) * 1_000_000 / tck, total * 1_000_000 / tck))
}

/// CPU used by waited-for children (pgbench), in microseconds.
pub fn children_cpu_us() -> u64 {
    // SAFETY: getrusage writes into the zeroed struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_CHILDREN is a valid selector.
    unsafe {
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru);
    }
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    us(ru.ru_utime) + us(ru.ru_stime)
}

/// Samples `pg_stat_activity` for one database every few milliseconds in its own
/// thread: what the backends are doing (running, waiting on a lock, on WAL, idle
/// inside a transaction while the service works between statements), and their CPU.
pub struct Sampler {
    pub stop: Arc<std::sync::atomic::AtomicBool>,
    pub handle: std::thread::JoinHandle<Sampled>,
}

#[derive(Default)]
pub struct Sampled {
    pub rounds: u64,
    pub states: BTreeMap<String, u64>,
    pub cpu_first: HashMap<i32, u64>,
    pub cpu_last: HashMap<i32, u64>,
    pub error: Option<String>,
}

impl Sampled {
    pub fn backend_cpu_us(&self) -> u64 {
        self.cpu_last
            .iter()
            .map(|(pid, last)| last.saturating_sub(*self.cpu_first.get(pid).unwrap_or(last)))
            .sum()
    }
}

impl Sampler {
    pub fn start(admin_url: String, datname: String) -> Sampler {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            #[derive(QueryableByName)]
            struct Activity {
                #[diesel(sql_type = diesel::sql_types::Integer)]
                pid: i32,
                #[diesel(sql_type = Text)]
                state: String,
                #[diesel(sql_type = Text)]
                wait: String,
            }
            let mut out = Sampled::default();
            let mut conn = match PgConnection::establish(&admin_url) {
                Ok(c) => c,
                Err(e) => {
                    out.error = Some(e.to_string());
                    return out;
                }
            };
            while !flag.load(Ordering::Relaxed) {
                let rows: Vec<Activity> = match diesel::sql_query(
                    "SELECT pid, coalesce(state, '') AS state, \
                            coalesce(wait_event_type || ':' || wait_event, '') AS wait \
                     FROM pg_stat_activity \
                     WHERE datname = $1 AND backend_type = 'client backend' \
                       AND pid <> pg_backend_pid()",
                )
                .bind::<Text, _>(&datname)
                .load(&mut conn)
                {
                    Ok(r) => r,
                    Err(e) => {
                        out.error = Some(e.to_string());
                        break;
                    }
                };
                out.rounds += 1;
                for r in rows {
                    let label = match (r.state.as_str(), r.wait.as_str()) {
                        ("active", "") => "active: on CPU".to_owned(),
                        ("active", w) => format!("active: waiting on {w}"),
                        ("idle in transaction", _) => {
                            "idle in transaction (waiting for the client's next statement)"
                                .to_owned()
                        }
                        ("idle", _) => "idle (not in use)".to_owned(),
                        (s, _) => s.to_owned(),
                    };
                    *out.states.entry(label).or_default() += 1;
                    if let Some(cpu) = proc_cpu_us(r.pid as u32) {
                        out.cpu_first.entry(r.pid).or_insert(cpu);
                        out.cpu_last.insert(r.pid, cpu);
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            out
        });
        Sampler { stop, handle }
    }

    pub fn finish(self) -> Sampled {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

/// CPU time of the calling thread, in nanoseconds.
fn thread_cpu_ns() -> u64 {
    // SAFETY: clock_gettime writes into the zeroed timespec we pass.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: as above; CLOCK_THREAD_CPUTIME_ID is a valid clock.
    unsafe {
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t);
    }
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// The machine's memory latency while a row runs: once a second, a walk of 100,000
/// dependent loads through one random cycle over 8 MiB, timed in the walking
/// thread's own CPU time (so waiting for a core does not count), in ns per load. On
/// the shared hosts this runs on it moves up to 4× with nothing of ours running (the
/// other tenants' use of the shared caches and memory), and the CPU a one-client
/// request costs every process moves with it (docs/PERFORMANCE.md).
pub struct MemoryWalk {
    stop: Arc<std::sync::atomic::AtomicBool>,
    handle: std::thread::JoinHandle<(Vec<f64>, u64)>,
}

impl MemoryWalk {
    const STEPS: usize = 100_000;

    /// The 2 Mi slots in a random order, linked into one cycle (`next[slot]` is the
    /// slot after it), built once per process.
    fn cycle() -> &'static [u32] {
        static CYCLE: std::sync::OnceLock<Vec<u32>> = std::sync::OnceLock::new();
        CYCLE.get_or_init(|| {
            use rand::{Rng, SeedableRng};
            let n = (8 << 20) / std::mem::size_of::<u32>();
            let mut order: Vec<u32> = (0..n as u32).collect();
            let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
            for i in (1..n).rev() {
                order.swap(i, rng.gen_range(0..=i));
            }
            let mut next = vec![0u32; n];
            for w in 0..n {
                next[order[w] as usize] = order[(w + 1) % n];
            }
            next
        })
    }

    pub fn start() -> MemoryWalk {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let own_start = thread_cpu_ns();
            let next = Self::cycle();
            let (mut samples, mut at) = (Vec::new(), 0u32);
            // At least one walk, however short the row.
            loop {
                let t0 = thread_cpu_ns();
                for _ in 0..Self::STEPS {
                    at = next[at as usize];
                }
                std::hint::black_box(at);
                samples.push(thread_cpu_ns().saturating_sub(t0) as f64 / Self::STEPS as f64);
                // Sleep a second in short steps, so that stopping is prompt.
                for _ in 0..20 {
                    if flag.load(Ordering::Relaxed) {
                        return (samples, thread_cpu_ns().saturating_sub(own_start) / 1000);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        });
        MemoryWalk { stop, handle }
    }

    /// The median ns per load, and the walk's own CPU time in µs.
    pub fn finish(self) -> (Option<f64>, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let (mut samples, own_us) = self.handle.join().unwrap_or_default();
        samples.sort_by(f64::total_cmp);
        (samples.get(samples.len() / 2).copied(), own_us)
    }
}

/// The cluster's WAL counters (`pg_stat_wal`): bytes written, flushes (fdatasync
/// of a commit, or of the WAL writer), and the time spent in the flushes, counted
/// only while `track_wal_io_timing` is on (the bench turns it on in its private
/// cluster for a profiled run: [`time_wal_flushes`]).
#[derive(Debug, Clone, Copy, PartialEq, QueryableByName)]
pub struct WalCounters {
    #[diesel(sql_type = Double)]
    bytes: f64,
    #[diesel(sql_type = BigInt)]
    flushes: i64,
    #[diesel(sql_type = Double)]
    flush_ms: f64,
    #[diesel(sql_type = Bool)]
    timed: bool,
}

impl WalCounters {
    fn read(admin_url: &str) -> Option<WalCounters> {
        let mut conn = PgConnection::establish(admin_url).ok()?;
        diesel::sql_query(
            "SELECT wal_bytes::float8 AS bytes, wal_sync AS flushes, \
                    wal_sync_time AS flush_ms, \
                    current_setting('track_wal_io_timing')::bool AS timed \
             FROM pg_stat_wal",
        )
        .get_result(&mut conn)
        .ok()
    }

    /// Per unit over a row from `before` to `self`: WAL bytes, flushes (below 1:
    /// commits shared a flush), and the mean µs of one flush, which is only known
    /// when the flushes were timed at both ends (else `None`, never 0).
    fn per_unit(&self, before: &WalCounters, units: u64) -> (f64, f64, Option<f64>) {
        let units = units.max(1) as f64;
        let flushes = self.flushes.saturating_sub(before.flushes);
        let mean_us = (self.timed && before.timed && flushes > 0)
            .then(|| (self.flush_ms - before.flush_ms) * 1000.0 / flushes as f64);
        (
            (self.bytes - before.bytes) / units,
            flushes as f64 / units,
            mean_us,
        )
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct StatementRow {
    pub calls_per_unit: f64,
    pub mean_ms: f64,
    pub share_of_time: f64,
    pub query: String,
}

/// What a row cost, per request (or per pgbench transaction).
#[derive(Debug, Clone, Serialize, Default)]
pub struct Profile {
    pub span_s: f64,
    pub units: u64,
    pub service_cpu_us: Option<f64>,
    pub backend_cpu_us: Option<f64>,
    pub client_cpu_us: Option<f64>,
    pub machine_busy_pct: Option<f64>,
    /// Machine CPU not used by the service, its backends or the load generator
    /// (other builds on a shared machine), as % of the machine.
    pub others_pct: Option<f64>,
    pub statements_per_unit: Option<f64>,
    /// The machine's memory latency during the row ([`MemoryWalk`]), ns per load.
    pub memory_walk_ns: Option<f64>,
    /// The cluster's WAL during the row, per unit ([`WalCounters`]): bytes, flushes,
    /// and the mean µs of one flush (`None` when flushes were not timed).
    pub wal_bytes_per_unit: Option<f64>,
    pub wal_flushes_per_unit: Option<f64>,
    pub wal_flush_us: Option<f64>,
    /// Mean number of the database's backends in each state.
    pub backend_states: BTreeMap<String, f64>,
    pub top_statements: Vec<StatementRow>,
    pub note: Option<String>,
}

/// Before/after counters around one measured row.
pub struct Probe {
    pub admin_url: String,
    pub datname: String,
    pub service_pid: Option<u32>,
    pub pgss: bool,
    pub started: Instant,
    pub service_cpu: Option<u64>,
    pub self_cpu: Option<u64>,
    pub children_cpu: u64,
    pub machine: Option<(u64, u64)>,
    pub sampler: Option<Sampler>,
    pub walk: Option<MemoryWalk>,
    pub wal: Option<WalCounters>,
}

impl Probe {
    pub fn start(admin_url: &str, datname: &str, service_pid: Option<u32>, pgss: bool) -> Probe {
        if pgss {
            if let Ok(mut c) = PgConnection::establish(admin_url) {
                let _ = diesel::sql_query("SELECT pg_stat_statements_reset()").execute(&mut c);
            }
        }
        Probe {
            admin_url: admin_url.to_owned(),
            datname: datname.to_owned(),
            service_pid,
            pgss,
            started: Instant::now(),
            service_cpu: service_pid.and_then(proc_cpu_us),
            self_cpu: proc_cpu_us(std::process::id()),
            children_cpu: children_cpu_us(),
            machine: machine_cpu_us(),
            sampler: Some(Sampler::start(admin_url.to_owned(), datname.to_owned())),
            walk: Some(MemoryWalk::start()),
            wal: WalCounters::read(admin_url),
        }
    }

    /// `units` requests (or transactions) were completed; `client_is_child` when the
    /// load generator was a waited-for child (pgbench) rather than this process.
    pub fn finish(mut self, units: u64, client_is_child: bool) -> Profile {
        let sampled = self.sampler.take().map(Sampler::finish).unwrap_or_default();
        let (memory_walk_ns, walk_us) = self.walk.take().map_or((None, 0), MemoryWalk::finish);
        let span = self.started.elapsed();
        // Let backends flush their statistics (at most once a second when idle).
        std::thread::sleep(Duration::from_millis(1100));
        let per = |us: u64| (units > 0).then(|| us as f64 / units as f64);
        let service = match (self.service_pid.and_then(proc_cpu_us), self.service_cpu) {
            (Some(b), Some(a)) if !client_is_child => per(b.saturating_sub(a)),
            _ => None,
        };
        let client_us = if client_is_child {
            Some(children_cpu_us().saturating_sub(self.children_cpu))
        } else {
            match (proc_cpu_us(std::process::id()), self.self_cpu) {
                // Not the walk's own CPU: it measures the machine, not the load.
                (Some(b), Some(a)) => Some(b.saturating_sub(a).saturating_sub(walk_us)),
                _ => None,
            }
        };
        let wal = match (self.wal, WalCounters::read(&self.admin_url)) {
            (Some(before), Some(after)) => Some(after.per_unit(&before, units)),
            _ => None,
        };
        let backend_us = sampled.backend_cpu_us();
        let (busy_pct, others_pct) = match (machine_cpu_us(), self.machine) {
            (Some((b1, t1)), Some((b0, t0))) if t1 > t0 => {
                let total = (t1 - t0) as f64;
                let busy = (b1 - b0) as f64;
                let ours = backend_us as f64
                    + client_us.unwrap_or(0) as f64
                    + if client_is_child {
                        0.0
                    } else {
                        service.unwrap_or(0.0) * units as f64
                    };
                (
                    Some(100.0 * busy / total),
                    Some((100.0 * (busy - ours) / total).max(0.0)),
                )
            }
            _ => (None, None),
        };
        let mut profile = Profile {
            span_s: span.as_secs_f64(),
            units,
            service_cpu_us: service,
            backend_cpu_us: per(backend_us),
            client_cpu_us: client_us.and_then(per),
            machine_busy_pct: busy_pct,
            others_pct,
            statements_per_unit: None,
            memory_walk_ns,
            wal_bytes_per_unit: wal.map(|w| w.0),
            wal_flushes_per_unit: wal.map(|w| w.1),
            wal_flush_us: wal.and_then(|w| w.2),
            backend_states: sampled
                .states
                .iter()
                .map(|(k, v)| (k.clone(), *v as f64 / sampled.rounds.max(1) as f64))
                .collect(),
            top_statements: Vec::new(),
            note: sampled.error.clone(),
        };
        if self.pgss && units > 0 {
            self.statements(&mut profile, units);
        }
        profile
    }

    pub fn statements(&self, profile: &mut Profile, units: u64) {
        #[derive(QueryableByName)]
        struct Stmt {
            #[diesel(sql_type = BigInt)]
            calls: i64,
            #[diesel(sql_type = diesel::sql_types::Double)]
            ms: f64,
            #[diesel(sql_type = Text)]
            query: String,
        }
        let Ok(mut conn) = PgConnection::establish(&self.admin_url) else {
            return;
        };
        let rows: Vec<Stmt> = match diesel::sql_query(
            "SELECT s.calls::bigint AS calls, s.total_exec_time AS ms, s.query \
             FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid \
             WHERE d.datname = $1 ORDER BY s.total_exec_time DESC",
        )
        .bind::<Text, _>(&self.datname)
        .load(&mut conn)
        {
            Ok(r) => r,
            Err(e) => {
                profile.note = Some(format!("pg_stat_statements: {e}"));
                return;
            }
        };
        let calls: i64 = rows.iter().map(|r| r.calls).sum();
        let total_ms: f64 = rows.iter().map(|r| r.ms).sum();
        profile.statements_per_unit = Some(calls as f64 / units as f64);
        profile.top_statements = rows
            .iter()
            .take(40)
            .map(|r| StatementRow {
                calls_per_unit: r.calls as f64 / units as f64,
                mean_ms: if r.calls > 0 {
                    r.ms / r.calls as f64
                } else {
                    0.0
                },
                share_of_time: if total_ms > 0.0 { r.ms / total_ms } else { 0.0 },
                query: r
                    .query
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
                    .chars()
                    .take(160)
                    .collect(),
            })
            .collect();
    }
}

/// Makes pg_stat_statements available on the private cluster (profile runs only):
/// preloads it and restarts the cluster before the service starts.
pub fn enable_pgss(server: &PgServer, cluster: Option<&PrivateCluster>) -> Result<bool, String> {
    #[derive(QueryableByName)]
    struct Setting {
        #[diesel(sql_type = Text)]
        setting: String,
    }
    let preloaded = |server: &PgServer| -> Result<bool, String> {
        let mut conn = PgConnection::establish(&server.admin_url()).map_err(|e| e.to_string())?;
        let s: Setting = diesel::sql_query(
            "SELECT setting FROM pg_settings WHERE name = 'shared_preload_libraries'",
        )
        .get_result(&mut conn)
        .map_err(|e| e.to_string())?;
        Ok(s.setting.contains("pg_stat_statements"))
    };
    if !preloaded(server)? {
        let Some(cluster) = cluster.map(PrivateCluster::cluster) else {
            return Ok(false);
        };
        admin_exec(
            server,
            "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'",
        )?;
        cluster.stop_now()?;
        cluster.restart()?;
    }
    admin_exec(server, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")?;
    Ok(true)
}

/// Times the WAL flushes of the private cluster (profile runs only; a server the
/// bench did not start keeps its settings, and its flushes are timed only if it
/// already does): `track_wal_io_timing` on, applied by a reload.
pub fn time_wal_flushes(server: &PgServer, cluster: Option<&PrivateCluster>) -> Result<(), String> {
    if cluster.is_some() {
        admin_exec(server, "ALTER SYSTEM SET track_wal_io_timing = on")?;
        admin_exec(server, "SELECT pg_reload_conf()")?;
    }
    Ok(())
}

pub fn profile_table(rows: &[Row], refs: &[RefRow]) -> String {
    let mut out = String::from(
        "| row | units | service CPU µs | backends CPU µs | client CPU µs | machine busy % | others % | memory ns | WAL B / flushes / flush µs | statements | backends: CPU / row lock / object lock / IO+WAL / idle in tx |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    let line = |name: String, p: &Profile| {
        let sum = |pred: &dyn Fn(&str) -> bool| -> f64 {
            p.backend_states
                .iter()
                .filter(|(k, _)| pred(k))
                .map(|(_, v)| *v)
                .sum::<f64>()
                + 0.0
        };
        let cpu = sum(&|k| k == "active: on CPU");
        let lock = sum(&|k| {
            k.starts_with("active: waiting on Lock") && k != "active: waiting on Lock:object"
        });
        let object = sum(&|k| k == "active: waiting on Lock:object");
        let io = sum(&|k| k.contains("IO:") || k.contains("WAL"));
        let idle_tx = sum(&|k| k.starts_with("idle in transaction"));
        format!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} / {} / {} | {} | {cpu:.2} / {lock:.2} / {object:.2} / {io:.2} / {idle_tx:.2} |\n",
            p.units,
            fmt_opt(p.service_cpu_us, 0),
            fmt_opt(p.backend_cpu_us, 0),
            fmt_opt(p.client_cpu_us, 0),
            fmt_opt(p.machine_busy_pct, 0),
            fmt_opt(p.others_pct, 0),
            fmt_opt(p.memory_walk_ns, 0),
            fmt_opt(p.wal_bytes_per_unit, 0),
            fmt_opt(p.wal_flushes_per_unit, 2),
            fmt_opt(p.wal_flush_us, 0),
            fmt_opt(p.statements_per_unit, 1),
        )
    };
    for r in refs {
        if let Some(p) = &r.profile {
            out.push_str(&line(
                format!("pgbench {} @{}", r.reference.name(), r.clients),
                p,
            ));
        }
    }
    for r in rows {
        if let Some(p) = &r.profile {
            out.push_str(&line(
                format!("{} {} @{}", r.scenario, r.shape, r.clients),
                p,
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flush_is_timed_only_when_the_timing_was_on_at_both_ends() {
        let at = |bytes, flushes, flush_ms, timed| WalCounters {
            bytes,
            flushes,
            flush_ms,
            timed,
        };
        let before = at(1_000.0, 10, 5.0, true);
        // 400 requests, 100 flushes taking 30 ms in all: a flush per 4 requests, 300 µs.
        let row = at(801_000.0, 110, 35.0, true).per_unit(&before, 400);
        assert_eq!(row, (2_000.0, 0.25, Some(300.0)));
        // Untimed at either end: the time is unknown, not zero.
        let untimed = at(801_000.0, 110, 5.0, false).per_unit(&before, 400);
        assert_eq!(untimed, (2_000.0, 0.25, None));
        let started_untimed =
            at(801_000.0, 110, 35.0, true).per_unit(&at(1_000.0, 10, 5.0, false), 400);
        assert_eq!(started_untimed.2, None);
        // No flush, no mean.
        assert_eq!(before.per_unit(&before, 400), (0.0, 0.0, None));
    }

    #[test]
    fn the_memory_walk_is_one_cycle_through_every_slot() {
        let next = MemoryWalk::cycle();
        assert_eq!(next.len(), 2 << 20);
        let (mut at, mut steps) = (next[0], 1usize);
        while at != 0 {
            at = next[at as usize];
            steps += 1;
        }
        // A shorter cycle would keep the walk inside a cache-sized corner of it.
        assert_eq!(steps, next.len());
        let (ns, own_us) = MemoryWalk::start().finish();
        assert!(ns.is_some_and(|ns| ns > 0.0), "{ns:?}");
        assert!(own_us > 0);
    }
}
