//! Webhook subscriptions and their delivery log (contract section 15): the
//! caller's own rows (`/me/webhooks`), and the delivery engine's claim, record,
//! renewal and release (`domain::webhooks::deliver`), which call the SQL functions
//! `webhook_claim`, `webhook_record`, `webhook_renew` and `webhook_release`
//! (src/db/functions.sql), and the orbits it watches (`watched_orbits`).

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Bool, Integer, Nullable, Text, Timestamptz};

use crate::db::BindNext;
use crate::model::Cursor;

/// A subscription as its owner sees it (the secret only at creation).
#[derive(Debug, Clone, QueryableByName)]
pub struct WebhookRow {
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    #[diesel(sql_type = BigInt)]
    pub orbit_id: i64,
    #[diesel(sql_type = Text)]
    pub orbit_slug: String,
    #[diesel(sql_type = Text)]
    pub url: String,
    #[diesel(sql_type = Nullable<Array<Text>>)]
    pub kinds: Option<Vec<String>>,
    #[diesel(sql_type = Text)]
    pub description: String,
    #[diesel(sql_type = Text)]
    pub status: String,
    #[diesel(sql_type = Nullable<Text>)]
    pub disabled_reason: Option<String>,
    #[diesel(sql_type = BigInt)]
    pub delivered_through: i64,
    #[diesel(sql_type = Timestamptz)]
    pub created_at: DateTime<Utc>,
}

/// The columns of a [`WebhookRow`] from `webhooks w JOIN orbits o`.
macro_rules! columns {
    () => {
        "w.id, w.orbit_id, o.slug AS orbit_slug, w.url, w.kinds, w.description, \
         w.status, w.disabled_reason, w.delivered_through, w.created_at"
    };
}

/// A statement that writes subscriptions in the CTE `w` (`... RETURNING *`) and
/// answers with them as [`WebhookRow`]s.
macro_rules! returning_rows {
    ($cte:literal) => {
        concat!(
            "WITH w AS (",
            $cte,
            ") SELECT ",
            columns!(),
            " FROM w JOIN orbits o ON o.id = w.orbit_id"
        )
    };
}

const COLUMNS: &str = columns!();

/// The one subscription `sql` reads or writes, `$1` its id and `$2` its owner;
/// `None` when it is not theirs.
fn owned(
    conn: &mut PgConnection,
    sql: impl Into<std::borrow::Cow<'static, str>>,
    contributor_id: i64,
    id: i64,
) -> QueryResult<Option<WebhookRow>> {
    crate::db::sql(sql)
        .bind::<BigInt, _>(id)
        .bind::<BigInt, _>(contributor_id)
        .get_result(conn)
        .optional()
}

/// Takes the contributor's row lock (so two creates of one contributor are counted
/// one after the other) and counts its subscriptions. `FOR NO KEY UPDATE`, not `FOR
/// UPDATE`: the write's key claim has already taken `FOR KEY SHARE` on that row (its
/// foreign key), as have the contributor's other writes; `FOR UPDATE` conflicts with
/// those, so two creates each holding one waited for each other (a deadlock).
pub fn lock_and_count(conn: &mut PgConnection, contributor_id: i64) -> QueryResult<i64> {
    #[derive(QueryableByName)]
    struct N {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    crate::db::sql("SELECT id FROM contributors WHERE id = $1 FOR NO KEY UPDATE")
        .bind::<BigInt, _>(contributor_id)
        .execute(conn)?;
    let n: N = crate::db::sql("SELECT count(*) AS n FROM webhooks WHERE contributor_id = $1")
        .bind::<BigInt, _>(contributor_id)
        .get_result(conn)?;
    Ok(n.n)
}

/// A new subscription, starting after the orbit's current revision.
pub fn insert(
    conn: &mut PgConnection,
    contributor_id: i64,
    orbit_id: i64,
    url: &str,
    kinds: Option<&[String]>,
    description: &str,
    secret: &str,
) -> QueryResult<WebhookRow> {
    crate::db::sql(returning_rows!(
        "INSERT INTO webhooks (contributor_id, orbit_id, url, kinds, description, secret, \
                               delivered_through) \
         SELECT $1, o.id, $3, $4, $5, $6, o.revision FROM orbits o WHERE o.id = $2 \
         RETURNING *"
    ))
    .bind::<BigInt, _>(contributor_id)
    .bind::<BigInt, _>(orbit_id)
    .bind::<Text, _>(url)
    .bind::<Nullable<Array<Text>>, _>(kinds)
    .bind::<Text, _>(description)
    .bind::<Text, _>(secret)
    .get_result(conn)
}

/// One of the contributor's subscriptions; `None` when it is not theirs.
pub fn find(
    conn: &mut PgConnection,
    contributor_id: i64,
    id: i64,
) -> QueryResult<Option<WebhookRow>> {
    owned(
        conn,
        format!(
            "SELECT {COLUMNS} FROM webhooks w JOIN orbits o ON o.id = w.orbit_id \
             WHERE w.id = $1 AND w.contributor_id = $2"
        ),
        contributor_id,
        id,
    )
}

/// A page of the contributor's subscriptions, ascending by id.
pub fn list(
    conn: &mut PgConnection,
    contributor_id: i64,
    page: Cursor,
) -> QueryResult<Vec<WebhookRow>> {
    crate::db::sql(format!(
        "SELECT {COLUMNS} FROM webhooks w JOIN orbits o ON o.id = w.orbit_id \
         WHERE w.contributor_id = $1 AND w.id > $2 ORDER BY w.id LIMIT $3"
    ))
    .bind::<BigInt, _>(contributor_id)
    .bind::<BigInt, _>(page.after)
    .bind::<BigInt, _>(page.fetch())
    .load(conn)
}

/// Deletes one of the contributor's subscriptions (and its log); returns it as it was.
pub fn delete(
    conn: &mut PgConnection,
    contributor_id: i64,
    id: i64,
) -> QueryResult<Option<WebhookRow>> {
    let sql =
        returning_rows!("DELETE FROM webhooks WHERE id = $1 AND contributor_id = $2 RETURNING *");
    owned(conn, sql, contributor_id, id)
}

/// Makes a DISABLED subscription ACTIVE again, due now, its attempts reset (an
/// ACTIVE one is left as it is); returns it.
pub fn enable(
    conn: &mut PgConnection,
    contributor_id: i64,
    id: i64,
) -> QueryResult<Option<WebhookRow>> {
    let sql = returning_rows!(
        "UPDATE webhooks SET status = 'ACTIVE', disabled_reason = NULL, attempts = 0, \
                next_attempt_at = clock_timestamp() \
         WHERE id = $1 AND contributor_id = $2 AND status = 'DISABLED' RETURNING *"
    );
    owned(conn, sql, contributor_id, id)
}

/// One attempt in the log.
#[derive(Debug, Clone, QueryableByName)]
pub struct DeliveryRow {
    #[diesel(sql_type = BigInt)]
    pub revision: i64,
    #[diesel(sql_type = Integer)]
    pub attempt: i32,
    #[diesel(sql_type = Nullable<Integer>)]
    pub status_code: Option<i32>,
    #[diesel(sql_type = Nullable<Text>)]
    pub error: Option<String>,
    #[diesel(sql_type = Integer)]
    pub duration_ms: i32,
    #[diesel(sql_type = Timestamptz)]
    pub attempted_at: DateTime<Utc>,
}

/// How many attempts of a subscription its log keeps and shows: the latest
/// (`webhook_record` prunes older ones).
pub const KEPT_ATTEMPTS: i32 = 100;

/// The latest [`KEPT_ATTEMPTS`] attempts of a subscription, oldest first.
pub fn deliveries(conn: &mut PgConnection, webhook_id: i64) -> QueryResult<Vec<DeliveryRow>> {
    crate::db::sql(
        "SELECT revision, attempt, status_code, error, duration_ms, attempted_at FROM ( \
             SELECT * FROM webhook_deliveries WHERE webhook_id = $1 \
             ORDER BY id DESC LIMIT $2) d ORDER BY id",
    )
    .bind::<BigInt, _>(webhook_id)
    .bind::<Integer, _>(KEPT_ATTEMPTS)
    .load(conn)
}

/// A subscription claimed for delivery. No `Debug`: it carries the secret, which
/// is never logged.
#[derive(Clone, QueryableByName)]
pub struct Claimed {
    #[diesel(sql_type = BigInt)]
    pub out_id: i64,
    #[diesel(sql_type = BigInt)]
    pub out_orbit: i64,
    #[diesel(sql_type = Text)]
    pub out_slug: String,
    #[diesel(sql_type = Text)]
    pub out_url: String,
    #[diesel(sql_type = Nullable<Array<Text>>)]
    pub out_kinds: Option<Vec<String>>,
    #[diesel(sql_type = Text)]
    pub out_secret: String,
    #[diesel(sql_type = BigInt)]
    pub out_through: i64,
    #[diesel(sql_type = Integer)]
    pub out_attempts: i32,
    #[diesel(sql_type = BigInt)]
    pub out_seq: i64,
}

/// Claims up to `limit` subscriptions that are due and have a change to deliver.
pub fn claim(
    conn: &mut PgConnection,
    instance: &str,
    limit: i32,
    claim_ms: i64,
) -> QueryResult<Vec<Claimed>> {
    crate::db::sql("SELECT * FROM webhook_claim($1, $2, $3)")
        .bind::<Text, _>(instance)
        .bind::<Integer, _>(limit)
        .bind::<BigInt, _>(claim_ms)
        .load(conn)
}

/// The orbits that have an ACTIVE subscription (the engine's watched orbits).
pub fn watched_orbits(conn: &mut PgConnection) -> QueryResult<Vec<i64>> {
    let rows: Vec<crate::store::rows::Id> =
        crate::db::sql("SELECT DISTINCT orbit_id AS id FROM webhooks WHERE status = 'ACTIVE'")
            .load(conn)?;
    Ok(rows.into_iter().map(|r| r.id).collect())
}

/// One attempt's outcome (`ok` None: only moves over skipped changes).
pub struct Attempt<'a> {
    pub revision: i64,
    pub ok: Option<bool>,
    pub status: Option<i32>,
    pub error: Option<&'a str>,
    pub duration_ms: i32,
}

/// The rules an attempt's record applies.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    pub retry_base_ms: i64,
    pub max_attempts: i32,
    pub claim_ms: i64,
}

/// What the record of an attempt decided: `DELIVERED`, `RETRY`, `DISABLED` or `LOST`.
pub fn record(
    conn: &mut PgConnection,
    (id, instance, seq): (i64, &str, i64),
    attempt: &Attempt<'_>,
    policy: Policy,
) -> QueryResult<String> {
    #[derive(QueryableByName)]
    struct Out {
        #[diesel(sql_type = Text)]
        outcome: String,
    }
    let out: Out = crate::db::sql(
        "SELECT webhook_record($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) AS outcome",
    )
    .bind::<BigInt, _>(id)
    .bind::<Text, _>(instance)
    .bind::<BigInt, _>(seq)
    .bind::<BigInt, _>(attempt.revision)
    .bind::<Nullable<Bool>, _>(attempt.ok)
    .bind::<Nullable<Integer>, _>(attempt.status)
    .bind::<Nullable<Text>, _>(attempt.error)
    .bind::<Integer, _>(attempt.duration_ms)
    .bind::<BigInt, _>(policy.retry_base_ms)
    .bind::<Integer, _>(policy.max_attempts)
    .bind::<BigInt, _>(policy.claim_ms)
    .bind::<Integer, _>(KEPT_ATTEMPTS)
    .get_result(conn)?;
    Ok(out.outcome)
}

/// Extends the claim `(instance, seq)` by `claim_ms` from now (`webhook_renew`):
/// false when it is no longer this instance's (taken by another claim, or the
/// subscription disabled or deleted).
pub fn renew(
    conn: &mut PgConnection,
    id: i64,
    instance: &str,
    seq: i64,
    claim_ms: i64,
) -> QueryResult<bool> {
    #[derive(QueryableByName)]
    struct Renewed {
        #[diesel(sql_type = Bool)]
        renewed: bool,
    }
    let row: Renewed = crate::db::sql("SELECT webhook_renew($1, $2, $3, $4) AS renewed")
        .bind::<BigInt, _>(id)
        .bind::<Text, _>(instance)
        .bind::<BigInt, _>(seq)
        .bind::<BigInt, _>(claim_ms)
        .get_result(conn)?;
    Ok(row.renewed)
}

/// Gives the claim back; `Some(true)` when a change arrived meanwhile, `None` when
/// the claim was no longer this one's.
pub fn release(
    conn: &mut PgConnection,
    id: i64,
    instance: &str,
    seq: i64,
) -> QueryResult<Option<bool>> {
    #[derive(QueryableByName)]
    struct More {
        #[diesel(sql_type = Nullable<Bool>)]
        more: Option<bool>,
    }
    let row: Option<More> = crate::db::sql("SELECT webhook_release($1, $2, $3) AS more")
        .bind::<BigInt, _>(id)
        .bind::<Text, _>(instance)
        .bind::<BigInt, _>(seq)
        .get_result(conn)
        .optional()?;
    Ok(row.and_then(|r| r.more))
}
