//! The SQL functions live in one file (src/db/functions.sql), re-applied at every
//! start: a function changed or dropped in the database is put back by the next
//! `migrate`, and an instance then serves writes through it.

use diesel::RunQueryDsl;
use serde_json::json;

use crate::harness::{sql_i64, TestApp, TestDb};

#[actix_web::test]
async fn every_start_reapplies_the_sql_functions() {
    let db = TestDb::new();
    let mut conn = db.conn();
    // A stale body (as an older release would have left it) and a missing function.
    diesel::sql_query(
        "CREATE OR REPLACE FUNCTION lease_end_reason(p_end_reason text, \
         p_expires timestamptz, p_now timestamptz) RETURNS text \
         LANGUAGE sql IMMUTABLE AS $$ SELECT 'stale'::text $$",
    )
    .execute(&mut conn)
    .unwrap();
    diesel::sql_query(
        "DROP FUNCTION quick_batch(int2[], bigint[], bigint[], bigint[], text[], text[], \
         text[], text[], text[], text[], int[], text[], text[])",
    )
    .execute(&mut conn)
    .unwrap();
    // The argument list of 2026-12-01 (the quick functions rendered the bodies then),
    // as a database of that release still has it: dropped, not left as an overload.
    diesel::sql_query(
        "CREATE FUNCTION quick_batch(int2[], bigint[], bigint[], bigint[], text[], text[], \
         text[], text[], text[], text[], int[]) RETURNS int LANGUAGE sql AS $$ SELECT 1 $$",
    )
    .execute(&mut conn)
    .unwrap();
    let current = "SELECT count(*) AS n FROM pg_proc \
                   WHERE proname = 'quick_batch' AND pronargs = 13";
    assert_eq!(sql_i64(&mut conn, current), 0);

    orbit_commons::db::migrate(&db.url).expect("migrate");

    assert_eq!(sql_i64(&mut conn, current), 1);
    assert_eq!(
        sql_i64(
            &mut conn,
            "SELECT count(*) AS n FROM pg_proc WHERE proname = 'quick_batch'"
        ),
        1,
        "the old argument list is dropped"
    );
    assert_eq!(
        sql_i64(
            &mut conn,
            "SELECT (lease_end_reason(NULL, '2026-12-01T10:00:00Z', '2026-12-01T09:00:00Z') \
             IS NULL)::int::int8 AS n"
        ),
        1
    );

    // Reapplying is idempotent, and the service writes through the functions.
    orbit_commons::db::migrate(&db.url).expect("migrate again");
    let app = TestApp::spawn_on(db, crate::harness::test_config());
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "functions").await;
    let task = app
        .post_keyed(
            &format!("/api/v1/orbits/{orbit}/tasks"),
            &owner.token,
            json!({"title": "t"}),
        )
        .await;
    assert_eq!(task.status, 201, "{}", task.text);
    assert_eq!(task.json["data"]["orbit_revision"], 2, "{}", task.text);
}

/// `reserve_revisions` takes a group's revisions of one orbit with one update of its
/// row; `apply_change` hands them out in order (and advances another orbit's row
/// itself), and `revisions_spent` refuses a reservation left unapplied.
#[actix_web::test]
async fn a_reservation_takes_a_groups_revisions_with_one_update() {
    use diesel::connection::SimpleConnection;
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    let (a, b) = (
        app.orbit(&owner, "reserved").await,
        app.orbit(&owner, "other").await,
    );
    crate::harness::count_orbit_row_updates(&app.db);
    let mut conn = app.db.conn();
    let revision = |conn: &mut diesel::PgConnection, orbit: i64| {
        sql_i64(
            conn,
            &format!("SELECT revision AS n FROM orbits WHERE id = {orbit}"),
        )
    };
    let (rev_a, rev_b) = (revision(&mut conn, a), revision(&mut conn, b));
    let apply = |orbit: i64| {
        format!(
            "SELECT apply_change({orbit}, 'test.change', 'test', 1, NULL, {}, 'test', \
             NULL, 0::int2, convert_to('{{\"orbit_revision\":-9223372036854775807}}', \
             'UTF8')) AS n",
            owner.id
        )
    };

    conn.batch_execute("BEGIN").unwrap();
    assert_eq!(
        sql_i64(&mut conn, &format!("SELECT reserve_revisions({a}, 3) AS n")),
        rev_a + 3
    );
    assert_eq!(sql_i64(&mut conn, &apply(a)), rev_a + 1);
    assert_eq!(
        sql_i64(&mut conn, &apply(b)),
        rev_b + 1,
        "another orbit's own"
    );
    assert_eq!(sql_i64(&mut conn, &apply(a)), rev_a + 2);
    let filled = format!(
        "SELECT (current_setting('orbit.body') = '{{\"orbit_revision\":{}}}')::int::int8 AS n",
        rev_a + 2
    );
    assert_eq!(
        sql_i64(&mut conn, &filled),
        1,
        "the body gets the reserved revision"
    );
    assert_eq!(sql_i64(&mut conn, &apply(a)), rev_a + 3);
    assert_eq!(
        sql_i64(&mut conn, "SELECT revisions_spent()::int::int8 AS n"),
        1
    );
    // Spent: the next change advances the row again.
    assert_eq!(sql_i64(&mut conn, &apply(a)), rev_a + 4);
    conn.batch_execute("COMMIT").unwrap();
    assert_eq!(revision(&mut conn, a), rev_a + 4);
    assert_eq!(
        sql_i64(
            &mut conn,
            &format!(
                "SELECT count(*) AS n FROM changes WHERE orbit_id = {a} AND revision > {rev_a}"
            )
        ),
        4,
        "dense: one change a revision"
    );
    assert_eq!(crate::harness::orbit_row_updates(&mut conn, a), 2);
    assert_eq!(crate::harness::orbit_row_updates(&mut conn, b), 1);

    // A reservation not used up is refused, and the transaction leaves nothing.
    conn.batch_execute("BEGIN").unwrap();
    sql_i64(&mut conn, &format!("SELECT reserve_revisions({a}, 2) AS n"));
    sql_i64(&mut conn, &apply(a));
    let left = diesel::sql_query("SELECT revisions_spent()").execute(&mut conn);
    assert!(
        left.is_err_and(|e| e.to_string().contains("reserved revisions left unapplied")),
        "an unspent reservation is refused"
    );
    conn.batch_execute("ROLLBACK").unwrap();
    assert_eq!(revision(&mut conn, a), rev_a + 4);
    // The reservation ended with its transaction.
    assert_eq!(sql_i64(&mut conn, &apply(a)), rev_a + 5);
}

/// `webhook_record` keeps each subscription's latest `KEPT_ATTEMPTS` attempts, also
/// while another subscription logs beside it. (Pruning at every 16th row of the
/// whole table let a subscription that never took such a row grow without bound:
/// two alternating ones here, one of them only ever on odd rows.)
#[actix_web::test]
async fn a_webhooks_log_keeps_its_latest_attempts_beside_another() {
    let app = TestApp::spawn().await;
    let owner = app.agent("owner").await;
    let orbit = app.orbit(&owner, "logged").await;
    let mut conn = app.db.conn();
    // Claimed by the test for an hour, so that no delivery engine takes them.
    let hooks: Vec<i64> = (0..2)
        .map(|_| {
            sql_i64(
                &mut conn,
                &format!(
                    "INSERT INTO webhooks (contributor_id, orbit_id, url, secret, \
                     delivered_through, claimed_by, claim_seq, claim_until) \
                     VALUES ({}, {orbit}, 'https://example.com/', 's', 0, 'test', 1, \
                     now() + interval '1 hour') RETURNING id AS n",
                    owner.id
                ),
            )
        })
        .collect();
    let kept = i64::from(orbit_commons::store::webhooks::KEPT_ATTEMPTS);
    for revision in 1..=kept + 40 {
        for hook in &hooks {
            let delivered = format!(
                "SELECT (webhook_record({hook}, 'test', 1, {revision}, true, 200, NULL, 1, \
                 1000, 6, 3600000, {kept}) = 'DELIVERED')::int::int8 AS n"
            );
            assert_eq!(sql_i64(&mut conn, &delivered), 1, "revision {revision}");
        }
    }
    // An instance of the release before, in a rolling restart, records with
    // eleven arguments (no `p_kept`) and is served by the default.
    let older = format!(
        "SELECT (webhook_record({}, 'test', 1, {}, true, 200, NULL, 1, 1000, 6, 3600000) \
         = 'DELIVERED')::int::int8 AS n",
        hooks[0],
        kept + 41
    );
    assert_eq!(sql_i64(&mut conn, &older), 1);
    for (hook, last) in [(hooks[0], kept + 41), (hooks[1], kept + 40)] {
        let log = |what: &str| {
            format!("SELECT {what} AS n FROM webhook_deliveries WHERE webhook_id = {hook}")
        };
        assert_eq!(sql_i64(&mut conn, &log("count(*)")), kept, "webhook {hook}");
        assert_eq!(sql_i64(&mut conn, &log("min(revision)")), last - kept + 1);
        assert_eq!(sql_i64(&mut conn, &log("max(revision)")), last);
    }
}
