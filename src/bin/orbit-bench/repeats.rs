//! Repeated rows (`--repeats`, issue 25): each group's spread across its runs,
//! whether throughput in one orbit holds from 8 clients up, and issue 25's two
//! targets against tpcb-like (the lease cycle at one client, the hot write mix at 32),
//! each judged on the worst run.

use serde::Serialize;

use crate::report::{fmt_opt, target, Row, Target};

/// One group of runs of a row: a scenario, a shape and a client count.
#[derive(Debug, Clone, Serialize)]
pub struct Spread {
    pub scenario: String,
    pub shape: String,
    pub clients: usize,
    pub runs: usize,
    pub min_rps: f64,
    pub median_rps: f64,
    pub max_rps: f64,
    /// (highest − lowest) / median.
    pub spread: f64,
    /// The slowest run's latencies.
    pub worst_p50_ms: Option<f64>,
    pub worst_p99_ms: Option<f64>,
    /// The lowest of the runs' ratios: the slowest run's with one reference per
    /// client count; with `--paired-references`, each run against its own.
    pub worst_ratio: Option<f64>,
    pub errors: u64,
}

/// Issue 25's target for one orbit: throughput at more than 8 clients against the
/// 8-client figure (its median run), judged on the worst run.
#[derive(Debug, Clone, Serialize)]
pub struct Hold {
    pub scenario: String,
    pub shape: String,
    pub clients: usize,
    pub worst_rps: f64,
    pub eight_clients_median_rps: f64,
    pub ratio: f64,
    /// At least 0.9×.
    pub met: bool,
}

/// The rows of one orbit (every client in one): where the hold is judged.
fn one_orbit(scenario: &str, shape: &str) -> bool {
    let base = shape.trim_end_matches(" unsettled");
    match scenario {
        "lease-cycle-fresh" | "big-orbit" => true,
        "lease-cycle" | "write-mix" => base == "hot",
        _ => false,
    }
}

/// Every group of measured rows, in the rows' order.
pub fn spreads(rows: &[Row]) -> Vec<Spread> {
    let mut out: Vec<Spread> = Vec::new();
    let mut groups: Vec<(&str, &str, usize, Vec<&Row>)> = Vec::new();
    for r in rows.iter().filter(|r| r.requests_per_s.is_some()) {
        match groups
            .iter_mut()
            .find(|g| g.0 == r.scenario && g.1 == r.shape && g.2 == r.clients)
        {
            Some(g) => g.3.push(r),
            None => groups.push((&r.scenario, &r.shape, r.clients, vec![r])),
        }
    }
    for (scenario, shape, clients, runs) in groups {
        let mut rps: Vec<f64> = runs.iter().filter_map(|r| r.requests_per_s).collect();
        rps.sort_by(f64::total_cmp);
        let (min, max) = (rps[0], rps[rps.len() - 1]);
        let mid = rps.len() / 2;
        let median = if rps.len().is_multiple_of(2) {
            (rps[mid - 1] + rps[mid]) / 2.0
        } else {
            rps[mid]
        };
        let worst = runs
            .iter()
            .min_by(|a, b| {
                a.requests_per_s
                    .unwrap_or(0.0)
                    .total_cmp(&b.requests_per_s.unwrap_or(0.0))
            })
            .copied();
        out.push(Spread {
            scenario: scenario.to_owned(),
            shape: shape.to_owned(),
            clients,
            runs: runs.len(),
            min_rps: min,
            median_rps: median,
            max_rps: max,
            spread: if median > 0.0 {
                (max - min) / median
            } else {
                0.0
            },
            worst_p50_ms: worst.and_then(|r| r.p50_ms),
            worst_p99_ms: worst.and_then(|r| r.p99_ms),
            worst_ratio: runs.iter().filter_map(|r| r.ratio).min_by(f64::total_cmp),
            errors: runs.iter().map(|r| r.errors).sum(),
        });
    }
    out
}

/// The hold of every one-orbit group above 8 clients that has an 8-client group.
pub fn holds(spreads: &[Spread]) -> Vec<Hold> {
    spreads
        .iter()
        .filter(|s| s.clients > 8 && one_orbit(&s.scenario, &s.shape))
        .filter_map(|s| {
            let eight = spreads
                .iter()
                .find(|e| e.scenario == s.scenario && e.shape == s.shape && e.clients == 8)?;
            let ratio = s.min_rps / eight.median_rps.max(f64::MIN_POSITIVE);
            Some(Hold {
                scenario: s.scenario.clone(),
                shape: s.shape.clone(),
                clients: s.clients,
                worst_rps: s.min_rps,
                eight_clients_median_rps: eight.median_rps,
                ratio,
                met: ratio >= 0.9,
            })
        })
        .collect()
}

/// Issue 25's targets against tpcb-like, each on the worst run of every group it
/// covers (its lowest ratio, and the slowest run's p50): every lease-cycle row at
/// one client ≥ 0.8× with p50 < 1.2 ms (a single agent must not be slower than on
/// Titen), and the hot write mix at 32 clients ≥ 0.6×, settled or not. "not
/// measured" when no such row ran or has no reference.
pub fn worst_run_targets(spreads: &[Spread]) -> Vec<Target> {
    let lease_cycle = |s: &Spread| match s.scenario.as_str() {
        "lease-cycle" | "lease-cycle-fresh" => true,
        "big-orbit" => s.shape.starts_with("lease-cycle"),
        _ => false,
    };
    let one: Vec<&Spread> = spreads
        .iter()
        .filter(|s| s.clients == 1 && lease_cycle(s))
        .collect();
    let hot_mix: Vec<&Spread> = spreads
        .iter()
        .filter(|s| s.clients == 32 && s.scenario == "write-mix" && s.shape.starts_with("hot"))
        .collect();
    vec![
        worst_target(
            "lease cycle @1 (every lease-cycle row, its worst run) ≥ 0.8× tpcb-like and p50 < 1.2 ms",
            &one,
            |ratio, p50| ratio >= 0.8 && p50 < 1.2,
        ),
        worst_target(
            "write-mix hot @32 (settled and unsettled, the worst run) ≥ 0.6× tpcb-like",
            &hot_mix,
            |ratio, _| ratio >= 0.6,
        ),
    ]
}

/// One target over the groups `worst`, each judged on its worst run: met when each
/// meets `ok(ratio, p50)`; measured as the lowest ratio and the highest p50, and the
/// rows that missed.
fn worst_target(name: &str, worst: &[&Spread], ok: impl Fn(f64, f64) -> bool) -> Target {
    let judged: Vec<(&Spread, f64, f64)> = worst
        .iter()
        .filter_map(|s| Some((*s, s.worst_ratio?, s.worst_p50_ms?)))
        .collect();
    if judged.is_empty() || judged.len() < worst.len() {
        return target(name, "n/a".into(), None);
    }
    let lowest = judged.iter().map(|j| j.1).fold(f64::INFINITY, f64::min);
    let p50 = judged.iter().map(|j| j.2).fold(0.0, f64::max);
    let missed: Vec<String> = judged
        .iter()
        .filter(|(_, ratio, p50)| !ok(*ratio, *p50))
        .map(|(r, ratio, p50)| format!("{} {} {ratio:.2}× p50 {p50:.2} ms", r.scenario, r.shape))
        .collect();
    let rows = if judged.len() == 1 { "row" } else { "rows" };
    let mut measured = format!(
        "{} {rows}: lowest {lowest:.2}×, highest p50 {p50:.2} ms",
        judged.len()
    );
    if !missed.is_empty() {
        measured.push_str(&format!("; missed: {}", missed.join(", ")));
    }
    target(name, measured, Some(missed.is_empty()))
}

/// The spreads (when any group has more than one run) and the holds, as text.
pub fn text(spreads: &[Spread], holds: &[Hold]) -> String {
    let mut out = String::new();
    if spreads.iter().any(|s| s.runs > 1) {
        out.push_str(
            "\nrepeats (requests/s over the runs; p50/p99 of the slowest run):\n\n\
             | scenario | shape | clients | runs | lowest | median | highest | spread | p50 ms | p99 ms | errors |\n\
             |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for s in spreads {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.0} % | {} | {} | {} |\n",
                s.scenario,
                s.shape,
                s.clients,
                s.runs,
                s.min_rps,
                s.median_rps,
                s.max_rps,
                s.spread * 100.0,
                fmt_opt(s.worst_p50_ms, 2),
                fmt_opt(s.worst_p99_ms, 2),
                s.errors
            ));
        }
    }
    if !holds.is_empty() {
        out.push_str(
            "\none orbit from 8 clients up (issue 25: the worst run ≥ 0.9× the 8-client median):\n",
        );
        for h in holds {
            out.push_str(&format!(
                "- {} {} @{}: {:.1} against {:.1} = {:.2}× — {}\n",
                h.scenario,
                h.shape,
                h.clients,
                h.worst_rps,
                h.eight_clients_median_rps,
                h.ratio,
                if h.met { "met" } else { "missed" }
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(scenario: &str, shape: &str, clients: usize, rps: f64, p99: f64) -> Row {
        let mut r = Row::skipped(
            crate::cli::Scenario::LeaseCycle,
            shape,
            clients,
            String::new(),
        );
        r.scenario = scenario.into();
        r.requests_per_s = Some(rps);
        r.p50_ms = Some(p99 / 4.0);
        r.p99_ms = Some(p99);
        r.note = None;
        r
    }

    #[test]
    fn the_hold_is_the_slowest_run_against_the_eight_client_median() {
        let rows = vec![
            row("lease-cycle-fresh", "hot", 8, 1000.0, 5.0),
            row("lease-cycle-fresh", "hot", 8, 1200.0, 4.0),
            row("lease-cycle-fresh", "hot", 8, 800.0, 9.0),
            row("lease-cycle-fresh", "hot", 32, 1100.0, 20.0),
            row("lease-cycle-fresh", "hot", 32, 850.0, 30.0),
            row("lease-cycle", "spread", 32, 10.0, 1.0),
            row("lease-cycle", "spread", 8, 100.0, 1.0),
        ];
        let spreads = spreads(&rows);
        let eight = &spreads[0];
        assert_eq!(
            (eight.runs, eight.min_rps, eight.median_rps, eight.max_rps),
            (3, 800.0, 1000.0, 1200.0)
        );
        assert!((eight.spread - 0.4).abs() < 1e-9);
        assert_eq!(eight.worst_p99_ms, Some(9.0), "the slowest run's p99");
        let holds = holds(&spreads);
        // Spread shapes are not one orbit: only the hot 32-client group is judged.
        assert_eq!(holds.len(), 1);
        assert_eq!(holds[0].clients, 32);
        assert!((holds[0].ratio - 0.85).abs() < 1e-9);
        assert!(!holds[0].met);
        assert!(text(&spreads, &holds).contains("0.85× — missed"));
    }

    #[test]
    fn issue_25_ratio_targets_are_judged_on_the_worst_run_of_each_row() {
        let with_ratio = |mut r: Row, ratio: f64| {
            r.ratio = Some(ratio);
            r
        };
        let mut rows = vec![
            with_ratio(row("lease-cycle", "hot", 1, 900.0, 4.0), 0.9),
            with_ratio(row("lease-cycle", "hot", 1, 700.0, 4.4), 0.7),
            with_ratio(
                row("big-orbit", "lease-cycle unsettled", 1, 950.0, 4.0),
                0.95,
            ),
            // Not a lease-cycle row: not judged at one client.
            with_ratio(row("big-orbit", "write-mix", 1, 10.0, 4.0), 0.01),
            with_ratio(row("write-mix", "hot unsettled", 32, 3000.0, 20.0), 0.75),
            with_ratio(row("write-mix", "spread", 32, 10.0, 20.0), 0.01),
        ];
        let [one, mix] = <[Target; 2]>::try_from(worst_run_targets(&spreads(&rows)))
            .ok()
            .unwrap();
        // The slower of the two hot runs counts: 0.7× misses.
        assert_eq!(one.status, "missed", "{}", one.measured);
        assert!(one.measured.contains("lowest 0.70×"), "{}", one.measured);
        assert!(
            one.measured.contains("missed: lease-cycle hot 0.70×"),
            "{}",
            one.measured
        );
        assert_eq!(mix.status, "met", "{}", mix.measured);
        assert!(
            mix.measured.starts_with("1 row: lowest 0.75×"),
            "{}",
            mix.measured
        );

        // p50 is the second half of the lease-cycle target.
        rows.retain(|r| r.requests_per_s != Some(700.0));
        let one = &worst_run_targets(&spreads(&rows))[0];
        assert_eq!(one.status, "met", "{}", one.measured);
        rows[0].p50_ms = Some(1.3);
        assert_eq!(worst_run_targets(&spreads(&rows))[0].status, "missed");

        // No row with a reference: not measured.
        assert_eq!(worst_run_targets(&[])[1].status, "not measured");

        // Paired references: a faster run lower against its own reference counts.
        let paired = vec![
            with_ratio(row("lease-cycle", "hot", 1, 800.0, 4.0), 0.9),
            with_ratio(row("lease-cycle", "hot", 1, 1000.0, 4.0), 0.7),
        ];
        assert_eq!(spreads(&paired)[0].worst_ratio, Some(0.7));
    }
}
