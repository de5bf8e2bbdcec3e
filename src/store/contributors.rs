//! Contributors and their tokens.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use serde::Serialize;
use utoipa::ToSchema;

use crate::db::schema::{contributors, memberships, tokens};
use crate::db::BindNext;
use crate::model::Cursor;
use crate::model::{ts, ts_opt, ContributorActor};
use crate::model::{NewToken, TokenKind};

pub type ActorColumns = (
    contributors::id,
    contributors::kind,
    contributors::name,
    contributors::model_claim,
);

pub fn actor_columns() -> ActorColumns {
    (
        contributors::id,
        contributors::kind,
        contributors::name,
        contributors::model_claim,
    )
}

pub type ActorTuple = (i64, String, String, Option<String>);

pub fn actor((id, kind, name, model_claim): ActorTuple) -> ContributorActor {
    ContributorActor {
        id,
        kind,
        name,
        model_claim,
    }
}

pub fn find(conn: &mut PgConnection, id: i64) -> QueryResult<Option<ContributorActor>> {
    contributors::table
        .find(id)
        .select(actor_columns())
        .first::<ActorTuple>(conn)
        .optional()
        .map(|o| o.map(actor))
}

/// Creates the contributor and its first token; returns the token string (shown once).
pub fn register(
    conn: &mut PgConnection,
    kind: &str,
    name: &str,
    model_claim: Option<&str>,
    token_kind: TokenKind,
    minted: NewToken,
) -> QueryResult<(ContributorActor, String, i64)> {
    let row: ActorTuple = diesel::insert_into(contributors::table)
        .values((
            contributors::kind.eq(kind),
            contributors::name.eq(name),
            contributors::model_claim.eq(model_claim),
        ))
        .returning(actor_columns())
        .get_result(conn)?;
    let token_id = insert_token(conn, row.0, token_kind, &minted)?;
    Ok((actor(row), minted.token, token_id))
}

pub fn insert_token(
    conn: &mut PgConnection,
    contributor_id: i64,
    kind: TokenKind,
    minted: &NewToken,
) -> QueryResult<i64> {
    diesel::insert_into(tokens::table)
        .values((
            tokens::contributor_id.eq(contributor_id),
            tokens::kind.eq(kind.as_db()),
            tokens::lookup.eq(&minted.lookup),
            tokens::secret_hash.eq(&minted.secret_hash),
        ))
        .returning(tokens::id)
        .get_result(conn)
}

/// The kind of a token, so a rotated token keeps its family (agent or contributor).
pub fn token_kind(conn: &mut PgConnection, token_id: i64) -> QueryResult<TokenKind> {
    let kind: String = tokens::table
        .find(token_id)
        .select(tokens::kind)
        .first(conn)?;
    Ok(if kind == "AGENT" {
        TokenKind::Agent
    } else {
        TokenKind::Contributor
    })
}

/// A token as its owner sees it: never the secret.
#[derive(Debug, Serialize, ToSchema, Queryable)]
pub struct TokenInfo {
    pub id: i64,
    #[serde(with = "ts")]
    pub created_at: DateTime<Utc>,
    /// Coarse: written at most about once a minute.
    #[serde(serialize_with = "ts_opt::serialize")]
    #[schema(required = true, value_type = Option<String>, format = DateTime)]
    pub last_used_at: Option<DateTime<Utc>>,
    #[serde(serialize_with = "ts_opt::serialize")]
    #[schema(required = true, value_type = Option<String>, format = DateTime)]
    pub revoked_at: Option<DateTime<Utc>>,
}

pub fn list_tokens(
    conn: &mut PgConnection,
    contributor_id: i64,
    page: Cursor,
) -> QueryResult<Vec<TokenInfo>> {
    tokens::table
        .filter(tokens::contributor_id.eq(contributor_id))
        .filter(tokens::id.gt(page.after))
        .order(tokens::id.asc())
        .limit(page.fetch())
        .select((
            tokens::id,
            tokens::created_at,
            tokens::last_used_at,
            tokens::revoked_at,
        ))
        .load(conn)
}

/// Revokes one of the contributor's tokens (idempotent: revoking twice keeps the
/// first time). `None` when the token is not the contributor's.
pub fn revoke_token(
    conn: &mut PgConnection,
    contributor_id: i64,
    token_id: i64,
) -> QueryResult<Option<TokenInfo>> {
    diesel::update(
        tokens::table
            .filter(tokens::id.eq(token_id))
            .filter(tokens::contributor_id.eq(contributor_id)),
    )
    .set(tokens::revoked_at.eq(diesel::dsl::sql::<
        diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>,
    >("COALESCE(revoked_at, clock_timestamp())")))
    .returning((
        tokens::id,
        tokens::created_at,
        tokens::last_used_at,
        tokens::revoked_at,
    ))
    .get_result(conn)
    .optional()
}

/// One of the caller's memberships.
#[derive(Debug, Serialize, ToSchema)]
pub struct MembershipSummary {
    pub orbit_id: i64,
    pub orbit_slug: String,
    pub orbit_name: String,
    #[schema(value_type = crate::model::Role)]
    pub role: String,
    #[serde(with = "ts")]
    pub joined_at: DateTime<Utc>,
}

/// The orbits a contributor belongs to, ascending.
pub fn member_orbit_ids(conn: &mut PgConnection, contributor_id: i64) -> QueryResult<Vec<i64>> {
    memberships::table
        .filter(memberships::contributor_id.eq(contributor_id))
        .order(memberships::orbit_id.asc())
        .select(memberships::orbit_id)
        .load(conn)
}

/// What `GET /me` reads about a token: its row, with its contributor's memberships
/// in orbit order.
pub type TokenWithMemberships = (TokenRow, Vec<MembershipSummary>);

// One row per membership, each repeating the token's columns; a contributor without
// memberships gets one row whose membership columns are null. `g_i` numbers the token
// asked for (1 for a single one). The memberships are put in orbit order in Rust
// rather than by the query (a Sort node costs more to set up than the few rows cost
// to sort).
macro_rules! me_columns {
    () => {
        "t.id, t.secret_hash, token_use_due(t.last_used_at, clock_timestamp()) AS use_due, \
         t.revoked_at, clock_timestamp() AS now, \
         c.id AS contributor_id, c.type AS kind, c.name, c.model_claim, m.orbit_id, m.slug, \
         m.orbit_name, m.role, m.created_at"
    };
}
macro_rules! me_joins {
    () => {
        " JOIN contributors c ON c.id = t.contributor_id \
         LEFT JOIN LATERAL ( \
             SELECT ms.orbit_id, o.slug, o.name AS orbit_name, ms.role, ms.created_at \
             FROM memberships ms JOIN orbits o ON o.id = ms.orbit_id \
             WHERE ms.contributor_id = c.id) m ON true"
    };
}

#[derive(QueryableByName)]
struct MeRow {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    g_i: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    id: i64,
    #[diesel(sql_type = diesel::sql_types::Text)]
    secret_hash: String,
    #[diesel(sql_type = diesel::sql_types::Bool)]
    use_due: bool,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>)]
    revoked_at: Option<DateTime<Utc>>,
    #[diesel(sql_type = diesel::sql_types::Timestamptz)]
    now: DateTime<Utc>,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    contributor_id: i64,
    #[diesel(sql_type = diesel::sql_types::Text)]
    kind: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    name: String,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    model_claim: Option<String>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::BigInt>)]
    orbit_id: Option<i64>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    slug: Option<String>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    orbit_name: Option<String>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    role: Option<String>,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>)]
    created_at: Option<DateTime<Utc>>,
}

/// Puts the rows of `n` tokens' reads together: the answer for token `i` (1-based)
/// at index `i - 1`, `None` where no token row was found.
fn assemble_mes(rows: Vec<MeRow>, n: usize) -> Vec<Option<TokenWithMemberships>> {
    let mut out: Vec<Option<TokenWithMemberships>> = (0..n).map(|_| None).collect();
    for r in rows {
        let Some(slot) = usize::try_from(r.g_i - 1).ok().and_then(|i| out.get_mut(i)) else {
            continue;
        };
        let (_, memberships) = slot.get_or_insert_with(|| {
            (
                TokenRow {
                    id: r.id,
                    secret_hash: r.secret_hash,
                    use_due: r.use_due,
                    revoked_at: r.revoked_at,
                    now: r.now,
                    contributor: (r.contributor_id, r.kind, r.name, r.model_claim),
                },
                Vec::new(),
            )
        });
        if let (Some(orbit_id), Some(orbit_slug), Some(orbit_name), Some(role), Some(joined_at)) =
            (r.orbit_id, r.slug, r.orbit_name, r.role, r.created_at)
        {
            memberships.push(MembershipSummary {
                orbit_id,
                orbit_slug,
                orbit_name,
                role,
                joined_at,
            });
        }
    }
    for (_, memberships) in out.iter_mut().flatten() {
        memberships.sort_unstable_by_key(|m| m.orbit_id);
    }
    out
}

/// A token's row with its contributor's memberships, in one statement (`GET /me`
/// reads both on every call; one round trip instead of two).
pub fn token_with_memberships(
    conn: &mut PgConnection,
    key: TokenKey<'_>,
) -> QueryResult<Option<TokenWithMemberships>> {
    let rows: Vec<MeRow> = match key {
        TokenKey::Id(id) => crate::db::sql(concat!(
            "SELECT 1::bigint AS g_i, ",
            me_columns!(),
            " FROM tokens t",
            me_joins!(),
            " WHERE t.id = $1"
        ))
        .bind::<diesel::sql_types::BigInt, _>(id)
        .load(conn)?,
        TokenKey::Lookup(lookup, kind) => crate::db::sql(concat!(
            "SELECT 1::bigint AS g_i, ",
            me_columns!(),
            " FROM tokens t",
            me_joins!(),
            " WHERE t.lookup = $1 AND t.kind = $2"
        ))
        .bind::<diesel::sql_types::Text, _>(lookup)
        .bind::<diesel::sql_types::Text, _>(kind)
        .load(conn)?,
    };
    Ok(assemble_mes(rows, 1).pop().flatten())
}

/// [`token_with_memberships`] for several tokens by id in one statement (a group
/// of `GET /me` reads, `src/perf/readgroup.rs`): one answer per id, in order; an id may
/// repeat.
pub fn tokens_with_memberships(
    conn: &mut PgConnection,
    ids: &[i64],
) -> QueryResult<Vec<Option<TokenWithMemberships>>> {
    let rows: Vec<MeRow> = crate::db::sql(crate::group_over_ids!(concat!(
        "SELECT ",
        me_columns!(),
        " FROM tokens t",
        me_joins!(),
        " WHERE t.id = q.id"
    )))
    .bind::<diesel::sql_types::Array<diesel::sql_types::BigInt>, _>(ids)
    .load(conn)?;
    Ok(assemble_mes(rows, ids.len()))
}

/// The columns every authenticating query reads: the token, whether its use is due
/// to be recorded (`token_use_due`, src/db/functions.sql), the database clock and
/// the token's contributor as `(id, kind, name, model_claim)`.
#[derive(Queryable, Clone)]
pub struct TokenRow {
    pub id: i64,
    pub secret_hash: String,
    pub use_due: bool,
    pub revoked_at: Option<chrono::DateTime<chrono::Utc>>,
    pub now: chrono::DateTime<chrono::Utc>,
    pub contributor: (i64, String, String, Option<String>),
}

/// Which row a presented token names: the id remembered for a verified token, or
/// the token's public lookup part.
#[derive(Debug, Clone, Copy)]
pub enum TokenKey<'a> {
    Id(i64),
    /// The lookup part and the kind its prefix names (`TokenKind::as_db`).
    Lookup(&'a str, &'static str),
}
