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
