//! `orbit-bench`: measures the service against the database's own limit (issue 9).
//!
//! ```text
//! cargo run --release --bin orbit-bench -- --scenario all
//! cargo run --release --bin orbit-bench -- --scenario lease-cycle --clients 8 --duration 20
//! cargo run --release --bin orbit-bench -- --smoke
//! ```
//!
//! Unless `--url` is given, the bench starts the `orbit-commons` binary that sits
//! next to its own executable as a separate process, on a fresh database: a new
//! database `orbit_bench_<pid>` on the server at `DATABASE_URL`, or, without
//! `DATABASE_URL`, a private cluster under the temporary directory. It seeds data
//! through the real API (bulk rows with the library's store functions into the same
//! database), runs every
//! scenario for a fixed duration after a warm-up with N concurrent virtual agents
//! (each with its own token), and measures `pgbench -b tpcb-like` and `pgbench -S`
//! at the same client counts on the same PostgreSQL server as references. It prints
//! a Markdown table and writes the same rows as JSON, with the service's memory,
//! the token cache hit rate and every target marked met or missed.
//!
//! Every figure is a ratio against the reference measured in the same run (with
//! `--paired-references`, right before its row): the machine is small and shared,
//! so absolute numbers mean little.
//!
//! The modules: [`cli`] (flags and scenario names), [`service`] (the PostgreSQL
//! server and the service process, through `orbit_commons::testkit`), [`client`]
//! (the load generator's HTTP client), [`seed`], [`scenarios`] (one virtual client
//! per scenario, and the measurement), [`references`] (pgbench), [`profile`]
//! (`--profile`), [`report`] (the table and the JSON) and [`repeats`] (each row's
//! spread over `--repeats` runs, issue 25's hold); [`bulk`] writes large
//! seeds with the library's store functions; [`webhooks`] is the webhook
//! scenario's local receiver; [`events`] the event-stream scenario's subscribers.

mod bulk;
mod cli;
mod client;
mod events;
mod orbit_page;
mod profile;
mod references;
mod repeats;
mod report;
mod scenarios;
mod search;
mod seed;
mod service;
mod webhooks;

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use orbit_commons::testkit::pg::{database_url, db_name_of};
use orbit_commons::testkit::{database, free_port, process, PgServer, PrivateCluster};
use serde_json::json;

use crate::bulk::Bulk;
use crate::cli::{Args, Scenario};
use crate::client::Api;
use crate::profile::{enable_pgss, time_wal_flushes, Probe};
use crate::references::{find_pgbench, References};
use crate::report::{
    evaluate, fmt_opt, link_events, load_average, memory_kib, Machine, Memory, RefRow, Report, Row,
};
use crate::scenarios::measure::{settle, RunCfg};
use crate::scenarios::{make_row, run_one, shapes_of};
use crate::seed::{Seeder, World};
use crate::service::{spawn_service, Resources};

fn main() -> ExitCode {
    let mut args = Args::parse();
    if args.smoke {
        args.scenario = "authed-get,events".into();
        args.subscribers = 20;
        args.clients = vec![1];
        args.duration = 2;
        args.warmup = 1;
        args.no_pgbench = true;
    }
    let scenarios = match Scenario::parse_list(&args.scenario) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if args.clients.is_empty() || args.clients.contains(&0) {
        eprintln!("error: --clients needs positive counts, e.g. 1,8,32");
        return ExitCode::from(2);
    }
    if scenarios.contains(&Scenario::Events) && args.subscribers == 0 {
        eprintln!("error: --subscribers must be at least 1");
        return ExitCode::from(2);
    }
    if args.duration == 0 {
        eprintln!("error: --duration must be at least 1 second");
        return ExitCode::from(2);
    }
    // One worker thread drives every virtual client (like pgbench's default -j 1):
    // on a 2-core machine a second one only adds wake-ups that steal CPU from the
    // service and the database under test. It stays a multi-thread runtime so
    // that pgbench and the profiler can block in `block_in_place`.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if scenarios.contains(&Scenario::Events) {
        // Before the service starts: it inherits the limit.
        if let Err(e) = events::raise_open_files(args.subscribers) {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    }
    let mut res = Resources::default();
    let outcome = runtime.block_on(async {
        tokio::select! {
            r = run(&args, &scenarios, &mut res) => r,
            _ = tokio::signal::ctrl_c() => Err("interrupted".to_owned()),
        }
    });
    drop(runtime);
    res.cleanup();
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args, scenarios: &[Scenario], res: &mut Resources) -> Result<(), String> {
    let load_start = load_average();
    let pid = std::process::id();
    let json_dir = args
        .json
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    std::fs::create_dir_all(&json_dir)
        .map_err(|e| format!("cannot create {}: {e}", json_dir.display()))?;
    let database_url = database_url();
    let mut pgss = false;

    // The database server, the service's database, the service.
    let (base, bulk_url) = match &args.url {
        Some(url) => {
            if let Some(db) = &database_url {
                let server = PgServer::Url(db.clone());
                if args.profile {
                    pgss = enable_pgss(&server, None)?;
                }
                res.server = Some(server);
            }
            res.service_pid = args.pid;
            (url.clone(), database_url.clone())
        }
        None => {
            let (server, service_db_url) = match &database_url {
                Some(url) => {
                    let server = PgServer::Url(url.clone());
                    database::drop_stale(&server, &["orbit_bench_", "orbit_pgbench_"]);
                    let db = format!("orbit_bench_{pid}");
                    database::create(&server, &db, None)?;
                    res.bench_db = Some(db.clone());
                    let db_url = server.url_for(&db);
                    (server, db_url)
                }
                None => {
                    eprintln!(
                        "starting a private PostgreSQL cluster under {}",
                        PrivateCluster::process_dir("orbit-bench").display()
                    );
                    let cluster = PrivateCluster::for_process("orbit-bench")?;
                    let started = (cluster.server(), cluster.url().to_owned());
                    res.cluster = Some(cluster);
                    started
                }
            };
            if args.profile {
                pgss = enable_pgss(&server, res.cluster.as_ref())?;
                time_wal_flushes(&server, res.cluster.as_ref())?;
            }
            res.server = Some(server);
            let port = free_port()?;
            let log = json_dir.join("service.log");
            let service = spawn_service(&service_db_url, port, &log)?;
            res.service_pid = Some(service.pid());
            res.service = Some(service);
            eprintln!(
                "started orbit-commons (pid {}) on 127.0.0.1:{port}; log: {}",
                res.service_pid.unwrap_or(0),
                log.display()
            );
            (format!("http://127.0.0.1:{port}"), Some(service_db_url))
        }
    };
    let database = res
        .server
        .as_ref()
        .map(PgServer::describe)
        .unwrap_or_else(|| "unknown (no DATABASE_URL)".into());
    // Where --profile looks: the admin URL and the service's database name.
    let profiler = match (&res.server, &bulk_url) {
        (Some(server), Some(url)) => db_name_of(url).map(|db| (server.admin_url(), db)),
        _ => None,
    };
    if args.profile && profiler.is_none() {
        eprintln!(
            "warning: --profile needs the service's database (DATABASE_URL); profiling skipped"
        );
    }
    if args.profile && !pgss {
        eprintln!(
            "note: pg_stat_statements is not preloaded on this server: no statement counts \
             (run without DATABASE_URL to profile on a private cluster that has it)"
        );
    }
    let api = Api::new(&base)?;
    process::wait_ready(api.addr(), res.service.as_mut(), Duration::from_secs(180)).await?;
    eprintln!("service ready at {base}; database: {database}");

    let mut mem = Memory {
        pid: res.service_pid,
        ..Memory::default()
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    mem.idle_after_start_kib = res.service_pid.and_then(memory_kib).map(|m| m.0);

    // Seed.
    let max_c = *args.clients.iter().max().unwrap_or(&1);
    let bulk = bulk_url.map(|url| Bulk { url });
    let seeder = Seeder {
        api: &api,
        bulk: bulk.as_ref(),
        run_tag: format!("{pid}-{}", &uuid::Uuid::new_v4().simple().to_string()[..6]),
        big_orbit_tasks: args.big_orbit_tasks,
    };
    let mut world = World::default();
    let t_seed = Instant::now();
    seeder.seed(&mut world, scenarios, max_c).await?;
    eprintln!("seeded in {:.1} s", t_seed.elapsed().as_secs_f64());
    // Every agent has made one request: the token cache is warm from here on.
    let cache_before = api.token_cache_counters().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    mem.idle_before_load_kib = res.service_pid.and_then(memory_kib).map(|m| m.0);

    let mut refs = References {
        pgbench: find_pgbench(),
        server: res.server.clone(),
        db: None,
        cfg_duration: args.duration,
        cache: HashMap::new(),
        disabled: args
            .no_pgbench
            .then(|| "pgbench references skipped (--no-pgbench)".to_owned()),
        profile: args.profile.then_some(pgss),
        profiles: HashMap::new(),
        paired: args.paired_references,
        readings: Vec::new(),
    };

    let cfg = RunCfg {
        warmup: Duration::from_secs(args.warmup),
        duration: Duration::from_secs(args.duration),
        subscribers: args.subscribers,
        service_pid: res.service_pid,
    };
    // Settled rows, and with --unsettled each row also unsettled (first: right
    // after the seeding, before any row settles the server); each run --repeats times.
    let modes: &[bool] = if args.unsettled {
        &[false, true]
    } else {
        &[true]
    };
    let runs: Vec<(bool, u32)> = modes
        .iter()
        .flat_map(|&settled| (1..=args.repeats).map(move |repeat| (settled, repeat)))
        .collect();
    let mut rows: Vec<Row> = Vec::new();
    for &scenario in scenarios {
        for (shape, unavailable) in shapes_of(scenario, &world) {
            for &clients in &args.clients {
                for &(settled, repeat) in &runs {
                    let label = if settled {
                        shape.clone()
                    } else {
                        format!("{shape} unsettled")
                    };
                    let mut row = match &unavailable {
                        Some(why) => Row::skipped(scenario, &label, clients, why.clone()),
                        None => {
                            let what = (scenario, shape.as_str(), label.as_str(), clients, settled);
                            run_row(
                                args,
                                &api,
                                &seeder,
                                &mut world,
                                &mut refs,
                                &profiler,
                                pgss,
                                res.service_pid,
                                &cfg,
                                what,
                            )
                            .await?
                        }
                    };
                    row.repeat = repeat;
                    rows.push(row);
                }
            }
        }
    }

    link_events(&mut rows);

    // Memory and the token cache at the end.
    if let Some((rss, hwm)) = res.service_pid.and_then(memory_kib) {
        mem.rss_at_end_kib = Some(rss);
        mem.peak_hwm_kib = Some(hwm);
    }
    let cache_after = api.token_cache_counters().await;
    let token_cache = match (cache_before, cache_after) {
        (Some((h0, m0)), Some((h1, m1))) => {
            let (dh, dm) = (h1 - h0, m1 - m0);
            let total_rate = if h1 + m1 > 0.0 { h1 / (h1 + m1) } else { 0.0 };
            let load_rate = if dh + dm > 0.0 { dh / (dh + dm) } else { 0.0 };
            json!({"hits": h1, "misses": m1, "hit_rate": total_rate,
                   "hits_during_load": dh, "misses_during_load": dm,
                   "hit_rate_during_load": load_rate})
        }
        (_, Some((h1, m1))) => {
            let rate = if h1 + m1 > 0.0 { h1 / (h1 + m1) } else { 0.0 };
            json!({"hits": h1, "misses": m1, "hit_rate": rate})
        }
        _ => json!("n/a (the service has no /metrics with orbit_token_cache_* counters)"),
    };

    let mut targets = evaluate(&rows, &mem);
    let spreads = repeats::spreads(&rows);
    targets.extend(repeats::worst_run_targets(&spreads));
    let holds = repeats::holds(&spreads);
    let mut references = Vec::new();
    let mut keys: Vec<_> = refs.cache.keys().copied().collect();
    keys.sort_by_key(|(k, c)| (k.name(), *c));
    for (kind, clients) in keys {
        let r = &refs.cache[&(kind, clients)];
        references.push(RefRow {
            reference: kind,
            clients,
            tps: r.as_ref().ok().copied(),
            error: r.as_ref().err().cloned(),
            paired_readings: refs
                .readings
                .iter()
                .filter(|(k, c, _)| refs.paired && (*k, *c) == (kind, clients))
                .map(|(_, _, tps)| *tps)
                .collect(),
            profile: refs.profiles.remove(&(kind, clients)),
        });
    }
    res.pgbench_db = refs.db.take();

    let report = Report {
        generated_at: chrono::Utc::now().to_rfc3339(),
        command: std::env::args().collect(),
        service: base.clone(),
        database,
        clients: &args.clients,
        duration_s: args.duration,
        warmup_s: args.warmup,
        machine: Machine {
            cores: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            load_average_start: load_start,
            load_average_end: load_average(),
        },
        rows: &rows,
        references,
        memory: &mem,
        token_cache,
        targets: &targets,
        spreads: &spreads,
        holds: &holds,
        notes: &world.notes,
    };
    println!("{}", report.text(args.profile, args.smoke));
    let _ = std::io::stdout().flush();

    let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    std::fs::write(&args.json, text)
        .map_err(|e| format!("cannot write {}: {e}", args.json.display()))?;
    eprintln!("results written to {}", args.json.display());
    Ok(())
}

/// One measured row: its own seeding (`lease-cycle-fresh`: its never-leased tasks),
/// the settling of a settled row (no autovacuum running, a CHECKPOINT), the
/// reference, the run and, with `--profile`, its profile.
#[allow(clippy::too_many_arguments)]
async fn run_row(
    args: &Args,
    api: &Api,
    seeder: &Seeder<'_>,
    world: &mut World,
    refs: &mut References,
    profiler: &Option<(String, String)>,
    pgss: bool,
    service_pid: Option<u32>,
    cfg: &RunCfg,
    (scenario, shape, label, clients, settled): (Scenario, &str, &str, usize, bool),
) -> Result<Row, String> {
    if scenario == Scenario::LeaseCycleFresh {
        let n = seed::FRESH_PER_SECOND * (args.warmup + args.duration) as usize;
        world.fresh_pool = Some(seeder.fresh_tasks(world, n).await?);
    }
    // Let the previous row's background work (autovacuum, the checkpoint its writes
    // call for) finish first: on a small machine it would take CPU from whatever is
    // measured next.
    if settled {
        if let Some((admin, _)) = profiler {
            tokio::task::block_in_place(|| settle(admin));
        }
    }
    // The reference first, measured while the service idles.
    let kind = scenario.reference();
    let reference = tokio::task::block_in_place(|| refs.tps(kind, clients));
    eprintln!(
        "running {} {label} with {clients} client(s): {} s warm-up + {} s",
        scenario.name(),
        args.warmup,
        args.duration
    );
    let probe = match (profiler, args.profile) {
        (Some((admin, datname)), true) => Some(Probe::start(admin, datname, service_pid, pgss)),
        _ => None,
    };
    let rec = run_one(api, world, scenario, shape, clients, cfg).await?;
    let all = rec.all;
    let mut row = make_row(scenario, label, clients, cfg, rec, kind, reference.ok());
    if let Some(probe) = probe {
        row.profile = Some(tokio::task::block_in_place(|| probe.finish(all, false)));
    }
    eprintln!(
        "  {:.1} req/s, p50 {} ms, p99 {} ms, {} error(s)",
        row.requests_per_s.unwrap_or(0.0),
        fmt_opt(row.p50_ms, 2),
        fmt_opt(row.p99_ms, 2),
        row.errors
    );
    Ok(row)
}
