//! The `orbit-page` scenario (issue 23): `GET /o/page-bench`, the HTML orbit page of
//! an orbit with 1,000 tasks and 10,040 changes, read by anonymous clients. The
//! load is `get_client` on that one path; the reference is `pgbench -S`
//! (`RefKind::SelectOnly`) in the same run. Target: ≥ 0.1 × `pgbench -S` at 8
//! clients, p99 < 30 ms.
//!
//! Data set ([`seed`], written through the store with `Bulk`, so every change is
//! the real change of a seeded write): one orbit `page-bench` with 20 members,
//! 1,000 tasks (600 open, 100 leased under active leases that outlast the run, 200
//! completed, 100 cancelled; every task also had two leases with two checkpoints
//! each, released), 20 problems and 200 contributions: 10,040 changes, its revision
//! 10,040. Deterministic; independent of the other seeds. A page read runs the
//! board's four columns, the pending handoffs, problems, latest contributions,
//! members and the feed on one pool checkout.

use crate::bulk::{Bulk, NewContribution, Op, Step, Text};

/// The page the scenario reads.
pub const PATH: &str = "/o/page-bench";

const AGENTS: usize = 20;
const TASKS: usize = 1000;

/// The seeded orbit's changes (and so its revision): the orbit, 19 members, 20
/// problems, 1,000 tasks, 200 contributions, 8 steps of work on every task and
/// the final steps of the completed (3), cancelled (1) and leased (1) ones.
pub const CHANGES: usize = 1 + (AGENTS - 1) + 20 + TASKS + 200 + 8 * TASKS + 200 * 3 + 100 + 100;

/// The work on the tasks: two rounds of lease, two checkpoints and release on
/// every task, then by `g % 10` (`g` = 1..=1000): 0..=5 stay open, 6 and 7 are
/// completed under a third lease, 8 is cancelled by the owner, 9 holds a lease for
/// a day.
fn work(tasks: &[i64], agents: &[i64]) -> Vec<Step> {
    let worker = |g: usize| agents[g % AGENTS];
    let mut steps = Vec::with_capacity(CHANGES);
    for _round in 0..2 {
        for (i, &task) in tasks.iter().enumerate() {
            for op in [
                Op::Acquire(300),
                Op::Checkpoint,
                Op::Checkpoint,
                Op::Release,
            ] {
                steps.push(Step {
                    task,
                    worker: worker(i + 1),
                    op,
                });
            }
        }
    }
    for (i, &task) in tasks.iter().enumerate() {
        let g = i + 1;
        let ops: &[Op] = match g % 10 {
            6 | 7 => &[Op::Acquire(300), Op::Checkpoint, Op::Complete],
            8 => &[Op::Cancel],
            9 => &[Op::Acquire(86_400)],
            _ => &[],
        };
        for &op in ops {
            let worker = if op == Op::Cancel {
                agents[0]
            } else {
                worker(g)
            };
            steps.push(Step { task, worker, op });
        }
    }
    steps
}

/// Loads the data set (some seconds) into the service's database.
pub fn seed(bulk: &Bulk) -> Result<(), String> {
    let agents = bulk.agents("page-agent-", AGENTS, |i| {
        Some(format!("bench-model-{}", (i + 1) % 3))
    })?;
    let owner = agents[0];
    let orbit = bulk.orbits(owner, 1, |_| {
        [
            "page-bench".into(),
            "Orbit page bench".into(),
            "An orbit with a thousand tasks and ten thousand changes, for the orbit page.".into(),
        ]
    })?[0];
    bulk.members(orbit, owner, &agents[1..])?;
    let author = |g: usize| agents[g % AGENTS];
    bulk.problems(20, |i| Text {
        orbit,
        author: author(i + 1),
        first: format!("Bench problem {}", i + 1),
        second: format!("What problem {} is about.", i + 1),
    })?;
    let tasks = bulk.tasks_of(TASKS, None, |i| Text {
        orbit,
        author: author(i + 1),
        first: format!("Bench task {0}: make step {0} work", i + 1),
        second: format!("Description of task {}.", i + 1),
    })?;
    bulk.contributions_of(200, |i| {
        let g = i + 1;
        NewContribution {
            orbit,
            kind: crate::bulk::KINDS[g % 5],
            author: author(g),
            problem: None,
            title: format!("Bench contribution {g}"),
            body: format!("What contribution {g} found."),
        }
    })?;
    bulk.task_work(orbit, &work(&tasks, &agents))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_work_makes_the_changes_the_docs_count() {
        let tasks: Vec<i64> = (1..=TASKS as i64).collect();
        let agents: Vec<i64> = (1..=AGENTS as i64).collect();
        let steps = work(&tasks, &agents);
        let created = 1 + (AGENTS - 1) + 20 + TASKS + 200;
        assert_eq!(created + steps.len(), CHANGES);
        assert_eq!(CHANGES, 10_040);
        let cancels = steps.iter().filter(|s| s.op == Op::Cancel).count();
        assert_eq!(cancels, 100);
    }
}
