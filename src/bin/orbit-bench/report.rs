//! Reporting: the rows, the targets, the Markdown table and the JSON report.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::cli::{RefKind, Scenario};
use crate::events::{EventStats, WITH, WITHOUT};
use crate::profile::{profile_table, Profile};

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub scenario: String,
    pub shape: String,
    pub clients: usize,
    /// Which run of the row (`--repeats`), from 1.
    pub repeat: u32,
    pub requests: u64,
    pub requests_per_s: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub errors: u64,
    pub error_kinds: BTreeMap<String, u64>,
    pub reference: Option<String>,
    pub reference_tps: Option<f64>,
    pub ratio: Option<f64>,
    pub note: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<Profile>,
    /// The `events` scenario's subscribers, write-to-event latency and RSS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<EventStats>,
}

impl Row {
    pub fn skipped(scenario: Scenario, shape: &str, clients: usize, note: String) -> Row {
        Row {
            scenario: scenario.name().into(),
            shape: shape.into(),
            clients,
            repeat: 1,
            requests: 0,
            requests_per_s: None,
            p50_ms: None,
            p99_ms: None,
            errors: 0,
            error_kinds: BTreeMap::new(),
            reference: None,
            reference_tps: None,
            ratio: None,
            note: Some(note),
            profile: None,
            events: None,
        }
    }
}

pub fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map(|v| format!("{v:.digits$}"))
        .unwrap_or_else(|| "—".into())
}

pub fn markdown_table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| scenario | shape | clients | requests/s | p50 ms | p99 ms | errors | reference TPS | ratio |\n\
         |---|---|---:|---:|---:|---:|---:|---|---:|\n",
    );
    let repeated = rows.iter().any(|r| r.repeat > 1);
    for r in rows {
        let shape = if repeated {
            format!("{} #{}", r.shape, r.repeat)
        } else {
            r.shape.clone()
        };
        let reference = match (&r.reference, r.reference_tps) {
            (Some(k), Some(t)) => format!("{k} {t:.0}"),
            (Some(k), None) => format!("{k} n/a"),
            _ => "—".into(),
        };
        let rps = match (&r.note, r.requests_per_s) {
            (Some(note), None) => note.clone(),
            _ => fmt_opt(r.requests_per_s, 1),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.scenario,
            shape,
            r.clients,
            rps,
            fmt_opt(r.p50_ms, 2),
            fmt_opt(r.p99_ms, 2),
            r.errors,
            reference,
            fmt_opt(r.ratio, 2),
        ));
    }
    out
}

#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub target: String,
    pub measured: String,
    pub status: &'static str,
}

pub fn target(name: &str, measured: String, met: Option<bool>) -> Target {
    Target {
        target: name.into(),
        measured,
        status: match met {
            Some(true) => "met",
            Some(false) => "missed",
            None => "not measured",
        },
    }
}

/// The run of `scenario`/`shape` at `clients` lowest in `key` (None: not counted),
/// with that value: the worst run a target judges when `--repeats` ran it more than once.
fn worst_run<'a>(
    rows: &'a [Row],
    (scenario, shape, clients): (&str, &str, usize),
    key: impl Fn(&Row) -> Option<f64>,
) -> Option<(f64, &'a Row)> {
    rows.iter()
        .filter(|r| r.scenario == scenario && r.shape == shape && r.clients == clients)
        .filter_map(|r| Some((key(r)?, r)))
        .min_by(|(a, _), (b, _)| a.total_cmp(b))
}

/// The run a target without a ratio judges: the slowest.
pub fn find<'a>(rows: &'a [Row], scenario: &str, shape: &str, clients: usize) -> Option<&'a Row> {
    worst_run(rows, (scenario, shape, clients), |r| r.requests_per_s).map(|(_, r)| r)
}

/// The run a ratio target judges, with its ratio: the one lowest against its
/// reference (the slowest run when one reference serves every run; with
/// `--paired-references`, each run against its own).
fn lowest_ratio<'a>(
    rows: &'a [Row],
    scenario: &str,
    shape: &str,
    clients: usize,
) -> Option<(f64, &'a Row)> {
    worst_run(rows, (scenario, shape, clients), |r| r.ratio)
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct Memory {
    pub pid: Option<u32>,
    pub idle_after_start_kib: Option<u64>,
    pub idle_before_load_kib: Option<u64>,
    pub rss_at_end_kib: Option<u64>,
    pub peak_hwm_kib: Option<u64>,
}

pub fn mib(kib: Option<u64>) -> String {
    kib.map(|k| format!("{:.1} MiB", k as f64 / 1024.0))
        .unwrap_or_else(|| "n/a".into())
}

/// Sets each `events` row's throughput ratio against the row of the same client
/// count without subscribers.
pub fn link_events(rows: &mut [Row]) {
    let base: Vec<(usize, f64)> = rows
        .iter()
        .filter(|r| r.scenario == "events" && r.shape == WITHOUT)
        .filter_map(|r| Some((r.clients, r.requests_per_s?)))
        .collect();
    for r in rows.iter_mut().filter(|r| r.shape == WITH) {
        let Some(rps) = r.requests_per_s else {
            continue;
        };
        let Some(ev) = r.events.as_mut() else {
            continue;
        };
        ev.throughput_ratio = base
            .iter()
            .find(|(c, _)| *c == r.clients)
            .filter(|(_, b)| *b > 0.0)
            .map(|(_, b)| rps / b);
    }
}

/// The `events` targets of issue 21, on the 8-client row with subscribers.
fn event_targets(rows: &[Row], out: &mut Vec<Target>) {
    let ev = find(rows, "events", WITH, 8).and_then(|r| r.events.as_ref());
    let n = ev.map(|e| e.subscribers).unwrap_or(0);
    out.push(target(
        &format!(
            "events @8 writers, {n} subscribers: write-to-event p99 < 100 ms, no event missing"
        ),
        ev.map(|e| {
            format!(
                "p50 {} ms, p99 {} ms, {} of {} events missing",
                fmt_opt(e.latency_p50_ms, 2),
                fmt_opt(e.latency_p99_ms, 2),
                e.missing_events,
                e.expected_events
            )
        })
        .unwrap_or_else(|| "n/a".into()),
        ev.and_then(|e| Some(e.latency_p99_ms? < 100.0 && e.missing_events == 0)),
    ));
    out.push(target(
        "events @8: lease-cycle throughput with subscribers ≥ 0.85× without",
        ev.and_then(|e| e.throughput_ratio)
            .map(|x| format!("{x:.2}×"))
            .unwrap_or_else(|| "n/a".into()),
        ev.and_then(|e| e.throughput_ratio).map(|x| x >= 0.85),
    ));
    out.push(target(
        "events @8: service RSS < 256 MiB with the streams open (peak VmRSS sampled)",
        ev.map(|e| {
            format!(
                "peak {}, at end {}",
                mib(e.rss_peak_kib),
                mib(e.rss_end_kib)
            )
        })
        .unwrap_or_else(|| "n/a".into()),
        ev.and_then(|e| e.rss_peak_kib).map(|k| k < 256 * 1024),
    ));
}

pub fn evaluate(rows: &[Row], mem: &Memory) -> Vec<Target> {
    let mut out = Vec::new();
    let ratio_of = |s: &str, shape: &str| lowest_ratio(rows, s, shape, 8);
    match ratio_of("lease-cycle", "spread") {
        Some((ratio, r)) => {
            let p99 = r.p99_ms.unwrap_or(f64::MAX);
            out.push(target(
                "lease-cycle spread @8 ≥ 0.6× tpcb-like and p99 < 20 ms",
                format!("{ratio:.2}×, p99 {p99:.1} ms"),
                Some(ratio >= 0.6 && p99 < 20.0),
            ));
        }
        None => out.push(target(
            "lease-cycle spread @8 ≥ 0.6× tpcb-like and p99 < 20 ms",
            "n/a".into(),
            None,
        )),
    }
    let hooks = find(rows, "webhooks", "spread", 8);
    out.push(target(
        "webhooks spread @8 writers ≥ 500 deliveries/s and delivery p99 < 200 ms",
        hooks
            .map(|r| {
                format!(
                    "{:.0}/s, p99 {:.1} ms",
                    r.requests_per_s.unwrap_or(0.0),
                    r.p99_ms.unwrap_or(f64::MAX)
                )
            })
            .unwrap_or_else(|| "n/a".into()),
        hooks.map(|r| {
            r.requests_per_s.unwrap_or(0.0) >= 500.0 && r.p99_ms.unwrap_or(f64::MAX) < 200.0
        }),
    ));
    let hot = ratio_of("lease-cycle", "hot");
    out.push(target(
        "lease-cycle hot @8 ≥ 0.5× tpcb-like",
        hot.map(|(x, _)| format!("{x:.2}×"))
            .unwrap_or_else(|| "n/a".into()),
        hot.map(|(x, _)| x >= 0.5),
    ));
    for (scenario, shapes) in [
        ("public-get", &["task", "contribution", "list"][..]),
        ("authed-get", &["me"][..]),
    ] {
        for shape in shapes {
            let r = ratio_of(scenario, shape);
            out.push(target(
                &format!("{scenario} {shape} @8 ≥ 0.25× select-only"),
                r.map(|(x, _)| format!("{x:.2}×"))
                    .unwrap_or_else(|| "n/a".into()),
                r.map(|(x, _)| x >= 0.25),
            ));
        }
    }
    for (scenario, small, large) in [
        ("changes-feed", "1k", "100k"),
        ("overview", "small", "large"),
    ] {
        let (a, b) = (
            find(rows, scenario, small, 8),
            find(rows, scenario, large, 8),
        );
        let (measured, met) = match (a.and_then(|r| r.p99_ms), b.and_then(|r| r.p99_ms)) {
            (Some(a), Some(b)) if a > 0.0 => {
                let k = b / a;
                (format!("p99 {a:.2} → {b:.2} ms ({k:.2}×)"), Some(k <= 2.0))
            }
            _ => ("n/a".into(), None),
        };
        out.push(target(
            &format!("{scenario} p99 @8 {large} within 2× of {small}"),
            measured,
            met,
        ));
    }
    let page = ratio_of("orbit-page", "1k-tasks");
    out.push(target(
        "orbit-page 1k-tasks @8 ≥ 0.1× select-only and p99 < 30 ms",
        page.map(|(x, r)| format!("{x:.2}×, p99 {:.1} ms", r.p99_ms.unwrap_or(f64::NAN)))
            .unwrap_or_else(|| "n/a".into()),
        page.map(|(x, r)| x >= 0.1 && r.p99_ms.is_some_and(|p| p < 30.0)),
    ));
    event_targets(rows, &mut out);
    let idle = mem.idle_before_load_kib.or(mem.idle_after_start_kib);
    out.push(target(
        "service RSS idle < 64 MiB",
        format!(
            "{} after start, {} before load",
            mib(mem.idle_after_start_kib),
            mib(mem.idle_before_load_kib)
        ),
        idle.map(|k| k < 64 * 1024),
    ));
    let end = mem.peak_hwm_kib.or(mem.rss_at_end_kib);
    out.push(target(
        "service RSS < 256 MiB at the end (judged on the peak, VmHWM)",
        format!(
            "peak {}, at end {}",
            mib(mem.peak_hwm_kib),
            mib(mem.rss_at_end_kib)
        ),
        end.map(|k| k < 256 * 1024),
    ));
    out
}

#[derive(Serialize)]
pub struct Report<'a> {
    pub generated_at: String,
    pub command: Vec<String>,
    pub service: String,
    pub database: String,
    pub clients: &'a [usize],
    pub duration_s: u64,
    pub warmup_s: u64,
    pub machine: Machine,
    pub rows: &'a [Row],
    pub references: Vec<RefRow>,
    pub memory: &'a Memory,
    pub token_cache: Value,
    pub targets: &'a [Target],
    pub spreads: &'a [crate::repeats::Spread],
    pub holds: &'a [crate::repeats::Hold],
    pub notes: &'a [String],
}

#[derive(Serialize)]
pub struct Machine {
    pub cores: usize,
    pub load_average_start: String,
    pub load_average_end: String,
}

#[derive(Serialize)]
pub struct RefRow {
    pub reference: RefKind,
    pub clients: usize,
    pub tps: Option<f64>,
    pub error: Option<String>,
    /// With `--paired-references`: every reading at this client count, in order
    /// (`tps` is the first); each row's `reference_tps` is the one taken before it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub paired_readings: Vec<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<Profile>,
}

pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "n/a".into())
}

pub fn memory_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

impl Report<'_> {
    /// The Markdown the bench prints: the rows, errors, references, memory, the token
    /// cache, notes, the profile (with `--profile`) and the targets (unless `--smoke`).
    pub fn text(&self, profile: bool, smoke: bool) -> String {
        let mut out = String::new();
        out.push_str(&format!(
            "\n## orbit-bench results\n\nservice: {} · database: {} · {} core(s) · load average {} → {} · {} s warm-up + {} s per row\n\n",
            self.service,
            self.database,
            self.machine.cores,
            self.machine.load_average_start,
            self.machine.load_average_end,
            self.warmup_s,
            self.duration_s
        ));
        out.push_str(&markdown_table(self.rows));
        out.push_str(&crate::repeats::text(self.spreads, self.holds));
        let with_errors: Vec<_> = self.rows.iter().filter(|r| r.errors > 0).collect();
        if !with_errors.is_empty() {
            out.push_str("\nerrors:\n");
            for r in with_errors {
                out.push_str(&format!(
                    "- {} {} @{}: {:?}\n",
                    r.scenario, r.shape, r.clients, r.error_kinds
                ));
            }
        }
        let events: Vec<_> = self
            .rows
            .iter()
            .filter_map(|r| Some((r, r.events.as_ref().filter(|e| e.subscribers > 0)?)))
            .collect();
        if !events.is_empty() {
            out.push_str(
                "\nevents (write-to-event latency: the write's response at its client → \
                 the event at each subscriber):\n",
            );
            for (r, e) in events {
                out.push_str(&format!(
                    "- @{} writers, {} subscribers: p50 {} ms, p99 {} ms, max {} ms; \
                     {}/{} events delivered ({} before the write's response), {} reconnect(s); \
                     lease-cycle throughput {}× of the run without subscribers; \
                     service RSS peak {}, at end {}\n",
                    r.clients,
                    e.subscribers,
                    fmt_opt(e.latency_p50_ms, 2),
                    fmt_opt(e.latency_p99_ms, 2),
                    fmt_opt(e.latency_max_ms, 1),
                    e.delivered_events,
                    e.expected_events,
                    e.before_response,
                    e.reconnects,
                    fmt_opt(e.throughput_ratio, 2),
                    mib(e.rss_peak_kib),
                    mib(e.rss_end_kib)
                ));
            }
        }
        if !self.references.is_empty() {
            out.push_str("\nreferences (pgbench on the same server):\n");
            for r in &self.references {
                match (r.tps, &r.error) {
                    (Some(t), _) if r.paired_readings.len() > 1 => {
                        let (lo, hi) = r
                            .paired_readings
                            .iter()
                            .fold((f64::MAX, 0.0f64), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
                        out.push_str(&format!(
                            "- {} @{}: {t:.1} TPS first; paired with each row: {} readings, {lo:.1}-{hi:.1}\n",
                            r.reference.name(),
                            r.clients,
                            r.paired_readings.len()
                        ))
                    }
                    (Some(t), _) => out.push_str(&format!(
                        "- {} @{}: {t:.1} TPS\n",
                        r.reference.name(),
                        r.clients
                    )),
                    (None, Some(e)) => out.push_str(&format!(
                        "- {} @{}: n/a ({})\n",
                        r.reference.name(),
                        r.clients,
                        e.lines().next().unwrap_or("")
                    )),
                    _ => {}
                }
            }
        }
        out.push_str(&format!(
            "\nservice memory (pid {}): idle after start {}, idle before load {}, at end {}, peak (VmHWM) {}\n",
            self.memory.pid.map(|p| p.to_string()).unwrap_or_else(|| "n/a".into()),
            mib(self.memory.idle_after_start_kib),
            mib(self.memory.idle_before_load_kib),
            mib(self.memory.rss_at_end_kib),
            mib(self.memory.peak_hwm_kib)
        ));
        out.push_str(&format!(
            "token cache: {}\n",
            match &self.token_cache {
                Value::String(s) => s.clone(),
                v => match (v["hit_rate_during_load"].as_f64(), v["hit_rate"].as_f64()) {
                    (Some(l), _) => format!(
                        "hit rate during load {:.4} ({:.0} hits, {:.0} misses; overall {:.4})",
                        l,
                        v["hits_during_load"].as_f64().unwrap_or(0.0),
                        v["misses_during_load"].as_f64().unwrap_or(0.0),
                        v["hit_rate"].as_f64().unwrap_or(0.0)
                    ),
                    (None, Some(t)) => format!("hit rate {t:.4}"),
                    _ => "n/a".into(),
                },
            }
        ));
        for note in self.notes {
            out.push_str(&format!("note: {note}\n"));
        }
        if profile {
            out.push_str(
                "\nprofile (per request, or per pgbench transaction; backends = mean number of the \
                 database's connections in each state):\n\n",
            );
            out.push_str(&profile_table(self.rows, &self.references));
            for r in self.rows {
                let Some(p) = &r.profile else { continue };
                if p.top_statements.is_empty() {
                    continue;
                }
                out.push_str(&format!(
                    "\nstatements of {} {} @{} ({:.1} per request):\n",
                    r.scenario,
                    r.shape,
                    r.clients,
                    p.statements_per_unit.unwrap_or(0.0)
                ));
                for st in p.top_statements.iter().take(15) {
                    out.push_str(&format!(
                        "- {:.2}/req, mean {:.3} ms, {:.0}% of time: {}\n",
                        st.calls_per_unit,
                        st.mean_ms,
                        100.0 * st.share_of_time,
                        st.query
                    ));
                }
            }
        }
        if !smoke {
            out.push_str("\n| target (8 clients) | measured | status |\n|---|---|---|\n");
            for t in self.targets {
                out.push_str(&format!(
                    "| {} | {} | {} |\n",
                    t.target, t.measured, t.status
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(shape: &str, rps: f64, ratio: f64) -> Row {
        let mut r = Row::skipped(Scenario::LeaseCycle, shape, 8, String::new());
        (r.requests_per_s, r.ratio, r.p99_ms, r.note) = (Some(rps), Some(ratio), Some(5.0), None);
        r
    }

    #[test]
    fn the_ratio_targets_judge_the_run_lowest_against_its_reference() {
        // The third run was not the slowest but was the lowest against its own
        // (paired) reference: that one counts, not the first run nor the slowest.
        let rows = vec![
            run("spread", 3000.0, 0.75),
            run("spread", 2100.0, 0.62),
            run("spread", 2900.0, 0.55),
            run("hot", 2500.0, 0.6),
        ];
        let targets = evaluate(&rows, &Memory::default());
        let spread = &targets[0];
        assert!(spread.target.starts_with("lease-cycle spread @8"));
        assert_eq!(spread.status, "missed", "{}", spread.measured);
        assert!(spread.measured.starts_with("0.55×"), "{}", spread.measured);
        let hot = targets
            .iter()
            .find(|t| t.target.starts_with("lease-cycle hot @8"));
        assert_eq!(hot.map(|t| t.status), Some("met"));
    }
}
