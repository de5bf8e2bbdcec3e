//! Test 1 of docs/RELIABILITY.md. Many instances: three `serve` processes on one
//! database, 16 agents racing for 200 tasks. No two leases of a task ever overlap, and
//! every promise holds.

use super::audit::ack_counts;
use super::fleet::LoadRun;
use crate::harness::sql_i64;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_instances_never_overlap_leases() {
    let mut run = LoadRun::start("oc-rel-many", 1, &[]).await;
    run.race().finish().await;

    let (acks, audit) = run.audit();
    run.report("many_instances_never_overlap_leases", &audit, "");
    run.assert_promises_kept(&audit, "");
    // The run exercised what it claims to: contention, expiry, handoffs.
    let counts = ack_counts(&acks);
    for kind in ["acquire", "checkpoint", "release", "offer", "accept"] {
        assert!(
            counts.get(kind).copied().unwrap_or(0) > 0,
            "no {kind} succeeded: {counts:?}"
        );
    }
    let conflicts = run.net.stats.conflicts.lock().unwrap().clone();
    assert!(
        conflicts.get("lease_conflict").copied().unwrap_or(0) > 0,
        "agents never met: {conflicts:?}"
    );
    let expired = sql_i64(
        &mut run.db.conn(),
        "SELECT count(*) AS n FROM leases WHERE expires_at <= clock_timestamp() AND released_at IS NULL",
    );
    assert!(expired > 0, "no lease ever ran out");
    run.assert_alive(0);
}
