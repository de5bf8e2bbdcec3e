//! Authentication: bearer tokens, the verification cache and the `Caller`.
//!
//! A presented token is checked for format first (no hashing for garbage). A token
//! verified with argon2 is remembered in memory (with its contributor, which a
//! quick write's response names) under an HMAC of the token with a per-process key
//! until it has gone unused for 10 minutes, so later requests skip argon2; failures
//! are never cached. Revocation is still read from the database on
//! every request, so a revoked token is refused on the very next request on any
//! instance.
//!
//! A token is found only under the kind its prefix names. An uncached token whose
//! lookup names no row still runs argon2 (against a dummy hash), so an unknown
//! lookup costs what a wrong secret costs. After `FAILURES_PER_LOOKUP` failed
//! verifications of one lookup from one client address within `FAILURE_WINDOW`
//! (or `FAILURES_PER_LOOKUP_EVERYWHERE` from all addresses), further uncached
//! attempts with that lookup from that address (from any) are 429 without argon2
//! or a database read, so a flood of wrong secrets cannot take the cores honest
//! first requests need, and one address cannot lock the token's owner out from
//! another; a cached token never runs argon2 and is not affected (issue 26,
//! findings 4 and 5).

pub mod token;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::dev::Payload;
use actix_web::http::header;
use actix_web::{FromRequest, HttpMessage, HttpRequest};
use diesel::prelude::*;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

use crate::db::schema::{contributors, tokens};
use crate::db::BindNext;
use crate::db::TxResult;
use crate::error::ApiError;
use crate::model::ContributorActor;
pub use crate::store::contributors::{TokenKey, TokenRow};

diesel::define_sql_function! {
    /// The database clock. A declared function, unlike a `sql` literal, lets diesel
    /// keep the token query prepared (it runs on every authenticated request).
    fn clock_timestamp() -> diesel::sql_types::Timestamptz;
}

diesel::define_sql_function! {
    /// Whether a token's use is due to be recorded (src/db/functions.sql): the one
    /// definition of the last-used interval, which the quick writes read too.
    fn token_use_due(
        last_used: diesel::sql_types::Nullable<diesel::sql_types::Timestamptz>,
        now: diesel::sql_types::Timestamptz,
    ) -> diesel::sql_types::Bool;
}

/// How long a verified token stays cached without a request. A hit needs the exact
/// token (the key is an HMAC of all of it) and revocation is read on every request,
/// so the length only trades memory for argon2 runs: an agent that calls every few
/// minutes (lease renewals, long polls) must not pay ~20 MiB and tens of ms of argon2
/// each time, as it did with 60 s.
const CACHE_TTL: Duration = Duration::from_secs(600);
const CACHE_MAX_ENTRIES: usize = 100_000;
/// Failed verifications of one lookup from one address allowed per window on an
/// instance.
pub const FAILURES_PER_LOOKUP: u32 = 5;
/// Failed verifications of one lookup from all addresses together allowed per
/// window on an instance: what many addresses (a botnet, an IPv6 range) may make
/// an instance spend in argon2 on one token, at the price of refusing its owner's
/// first request there too once that many tried.
pub const FAILURES_PER_LOOKUP_EVERYWHERE: u32 = 10 * FAILURES_PER_LOOKUP;
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);

pub type CacheKey = [u8; 32];

/// Whose failed verifications count together: a token's lookup, from one address
/// (`None`: a request the limiter did not judge) or from all of them.
type FailureKey = (String, Source);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Source {
    Address(Option<IpAddr>),
    Everywhere,
}

#[derive(Clone)]
struct CacheEntry {
    token_id: i64,
    /// The token's contributor, as its row read when the entry was made (a
    /// contributor's row never changes): what a quick write's response names.
    actor: Arc<ContributorActor>,
    /// The last request this token succeeded with on this instance.
    seen_at: Instant,
}

/// A token this instance verified recently (`Bearer::cached`).
#[derive(Clone)]
pub struct Verified {
    pub key: CacheKey,
    pub token_id: i64,
    pub actor: Arc<ContributorActor>,
}

/// Per-process verification cache.
pub struct TokenCache {
    key: [u8; 32],
    entries: Mutex<HashMap<CacheKey, CacheEntry>>,
    /// Failed verifications by lookup and client address: (count, start of the
    /// window).
    failures: Mutex<HashMap<FailureKey, (u32, Instant)>>,
    /// A dummy verification (`token::verify_dummy`) is running on this instance.
    dummy_running: std::sync::atomic::AtomicBool,
    pub hits: std::sync::atomic::AtomicU64,
    pub misses: std::sync::atomic::AtomicU64,
}

impl Default for TokenCache {
    fn default() -> Self {
        let mut key = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut key);
        TokenCache {
            key,
            entries: Mutex::new(HashMap::new()),
            failures: Mutex::new(HashMap::new()),
            dummy_running: Default::default(),
            hits: Default::default(),
            misses: Default::default(),
        }
    }
}

impl TokenCache {
    /// The keyed hash under which a token is cached (and rate limited).
    pub fn cache_key(&self, token: &str) -> CacheKey {
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(token.as_bytes());
        mac.finalize().into_bytes().into()
    }

    fn get(&self, key: &CacheKey) -> Option<CacheEntry> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .get(key)
            .filter(|e| e.seen_at.elapsed() < CACHE_TTL)
            .cloned()
    }

    /// True when the token was verified recently (used by the rate limiter, which
    /// never touches the database).
    pub fn is_verified(&self, key: &CacheKey) -> bool {
        self.get(key).is_some()
    }

    /// Remembers (or refreshes) a verified token and its contributor.
    fn put(&self, key: CacheKey, token_id: i64, actor: &ContributorActor) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = entries.get_mut(&key).filter(|e| e.token_id == token_id) {
            e.seen_at = Instant::now();
            return;
        }
        if entries.len() >= CACHE_MAX_ENTRIES {
            entries.retain(|_, e| e.seen_at.elapsed() < CACHE_TTL);
            if entries.len() >= CACHE_MAX_ENTRIES {
                entries.clear();
            }
        }
        entries.insert(
            key,
            CacheEntry {
                token_id,
                actor: Arc::new(actor.clone()),
                seen_at: Instant::now(),
            },
        );
    }

    /// Counts a request a quick write (`src/perf/quick.rs`) authenticated with a cached
    /// token, and refreshes its entry, as `Bearer::require_with` does.
    pub fn confirm(&self, verified: &Verified) {
        self.hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.put(verified.key, verified.token_id, &verified.actor);
    }

    /// Seconds until `lookup` may be verified again from `from`, when it has used
    /// up its failed verifications for the window from there or from everywhere.
    fn blocked_for(&self, lookup: &str, from: Option<IpAddr>) -> Option<u64> {
        let failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        [
            (Source::Address(from), FAILURES_PER_LOOKUP),
            (Source::Everywhere, FAILURES_PER_LOOKUP_EVERYWHERE),
        ]
        .into_iter()
        .filter_map(|(source, limit)| {
            let (count, since) = failures.get(&(lookup.to_owned(), source))?;
            let left = FAILURE_WINDOW.checked_sub(since.elapsed())?;
            (*count >= limit).then(|| left.as_secs() + 1)
        })
        .max()
    }

    fn failed(&self, lookup: &str, from: Option<IpAddr>) {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        if failures.len() >= CACHE_MAX_ENTRIES {
            failures.retain(|_, (_, since)| since.elapsed() < FAILURE_WINDOW);
            if failures.len() >= CACHE_MAX_ENTRIES {
                failures.clear();
            }
        }
        for source in [Source::Address(from), Source::Everywhere] {
            let entry = failures
                .entry((lookup.to_owned(), source))
                .or_insert((0, Instant::now()));
            if entry.1.elapsed() >= FAILURE_WINDOW {
                *entry = (0, Instant::now());
            }
            entry.0 += 1;
        }
    }

    /// A verification of `lookup` from `from` succeeded: that address starts
    /// afresh (the count of every address stands: it bounds argon2 runs).
    fn succeeded(&self, lookup: &str, from: Option<IpAddr>) {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        failures.remove(&(lookup.to_owned(), Source::Address(from)));
    }

    /// Drops failure windows that have ended and verified tokens not seen within
    /// `CACHE_TTL` (called once a minute), so neither map holds what it no longer
    /// answers from: a token used once stays until then, not until 100,000 others.
    pub fn shrink(&self) {
        self.shrink_at(Instant::now());
    }

    fn shrink_at(&self, now: Instant) {
        let within = |since: Instant, limit: Duration| now.saturating_duration_since(since) < limit;
        {
            let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
            failures.retain(|_, (_, since)| within(*since, FAILURE_WINDOW));
            failures.shrink_to_fit();
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.retain(|_, e| within(e.seen_at, CACHE_TTL));
        entries.shrink_to_fit();
    }

    fn forget(&self, key: &CacheKey) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.remove(key);
    }
}

/// The client's address as the rate limiter judged it (`http::ratelimit` leaves it
/// in the request's extensions): a [`Bearer`] carries it, so failed verifications
/// count per lookup and address. Every route that reads a token is behind the
/// limiter; a request it did not judge (none today) counts as one unknown address.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub IpAddr);

/// The bearer token a request presented, format-checked but not yet verified, and
/// the address it came from. Verification happens inside the request's unit of
/// work (`Bearer::require`, `Bearer::optional`, `Bearer::require_read`).
#[derive(Clone)]
pub struct Bearer {
    token: Option<String>,
    from: Option<IpAddr>,
}

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        f.write_str(if self.token.is_some() {
            "Bearer(<redacted>)"
        } else {
            "Bearer(none)"
        })
    }
}

/// Reads `Authorization: Bearer <token>`. Returns `Ok(None)` when absent and a 401
/// for any other scheme, a malformed token, or two header lines (which of them
/// would be the caller?).
pub fn bearer_from_request(req: &HttpRequest) -> Result<Option<String>, ApiError> {
    let Some(value) = req.headers().get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    if req
        .headers()
        .get_all(header::AUTHORIZATION)
        .nth(1)
        .is_some()
    {
        return Err(ApiError::unauthorized(
            "Send one Authorization header: `Authorization: Bearer <token>`.",
        ));
    }
    let value = value
        .to_str()
        .map_err(|_| ApiError::unauthorized("The Authorization header is not valid."))?;
    let (scheme, token) = value.split_once(' ').unwrap_or((value, ""));
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(ApiError::unauthorized(
            "Use `Authorization: Bearer <token>`.",
        ));
    }
    let token = token.trim();
    if token::parse(token).is_none() {
        return Err(ApiError::unauthorized("The token is invalid."));
    }
    Ok(Some(token.to_owned()))
}

impl FromRequest for Bearer {
    type Error = ApiError;
    type Future = std::future::Ready<Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let from = req.extensions().get::<ClientAddr>().map(|a| a.0);
        std::future::ready(bearer_from_request(req).map(|token| Bearer { token, from }))
    }
}

/// An authenticated contributor.
#[derive(Debug, Clone)]
pub struct Caller {
    pub token_id: i64,
    pub actor: ContributorActor,
}

impl Caller {
    pub fn id(&self) -> i64 {
        self.actor.id
    }
}

/// The columns of a [`TokenRow`].
macro_rules! token_columns {
    () => {
        (
            tokens::id,
            tokens::secret_hash,
            token_use_due(tokens::last_used_at, clock_timestamp()),
            tokens::revoked_at,
            clock_timestamp(),
            (
                contributors::id,
                contributors::kind,
                contributors::name,
                contributors::model_claim,
            ),
        )
    };
}

/// The rows of the tokens `ids` (those that exist, in no order), in one statement:
/// a write group reads its writes' tokens so (`perf::commits`), and each write then
/// checks its own row as [`Bearer::require_read`] does.
pub fn token_rows(conn: &mut PgConnection, ids: &[i64]) -> QueryResult<Vec<TokenRow>> {
    tokens::table
        .inner_join(contributors::table)
        .filter(tokens::id.eq_any(ids))
        .select(token_columns!())
        .load(conn)
}

fn fetch_token(conn: &mut PgConnection, key: TokenKey<'_>) -> QueryResult<Option<TokenRow>> {
    let columns = token_columns!();
    let base = tokens::table.inner_join(contributors::table);
    match key {
        TokenKey::Id(id) => base
            .filter(tokens::id.eq(id))
            .select(columns)
            .first(conn)
            .optional(),
        TokenKey::Lookup(lookup, kind) => base
            .filter(tokens::lookup.eq(lookup))
            .filter(tokens::kind.eq(kind))
            .select(columns)
            .first(conn)
            .optional(),
    }
}

impl Bearer {
    pub fn is_present(&self) -> bool {
        self.token.is_some()
    }

    /// The token's row id and contributor when this instance verified it recently: a quick write
    /// (`src/perf/quick.rs`) then reads revocation in its own statement. `None` for no
    /// token or one that must be verified (the ordinary path does it).
    pub fn cached(&self, cache: &TokenCache) -> Option<Verified> {
        let token = self.token.as_deref()?;
        token::parse(token)?;
        let key = cache.cache_key(token);
        cache.get(&key).map(|e| Verified {
            key,
            token_id: e.token_id,
            actor: e.actor,
        })
    }

    /// The keyed hash of the presented token (what the cache and the limiters key
    /// on), `None` without a token.
    pub fn cache_key(&self, cache: &TokenCache) -> Option<CacheKey> {
        self.token.as_deref().map(|t| cache.cache_key(t))
    }

    /// A caller is required: no token → 401 ([`Bearer::missing`]).
    pub fn require(&self, conn: &mut PgConnection, cache: &TokenCache) -> TxResult<Caller> {
        match self.optional(conn, cache)? {
            Some(c) => Ok(c),
            None => Err(Bearer::missing().into()),
        }
    }

    /// No token: how the pages call the domain's public reads, whatever
    /// `Authorization` a browser sends (they are public and answer no API 401).
    pub fn anonymous() -> Bearer {
        Bearer {
            token: None,
            from: None,
        }
    }

    /// The 401 of a route that needs a token, to a request without one.
    pub fn missing() -> ApiError {
        ApiError::unauthorized("This route needs a bearer token.")
    }

    /// Public routes: no token is fine, but a presented token must be valid.
    pub fn optional(
        &self,
        conn: &mut PgConnection,
        cache: &TokenCache,
    ) -> TxResult<Option<Caller>> {
        if self.token.is_none() {
            return Ok(None);
        }
        let (caller, ()) = self.require_with(conn, cache, |conn, key| {
            Ok(fetch_token(conn, key)?.map(|row| (row, ())))
        })?;
        Ok(Some(caller))
    }

    /// [`Bearer::require`] with the token's row already read in this transaction
    /// (`token_rows`, by a write group): that row serves when it is the one the
    /// cache names; otherwise the row is read as `require` reads it. Every check
    /// (the secret on a miss, revocation, the last-used record) is the same.
    pub fn require_read(
        &self,
        conn: &mut PgConnection,
        cache: &TokenCache,
        mut read: Option<TokenRow>,
    ) -> TxResult<Caller> {
        let (caller, ()) =
            self.require_with(conn, cache, |conn, key| match (key, read.take()) {
                (TokenKey::Id(id), Some(row)) if row.id == id => Ok(Some((row, ()))),
                (key, _) => Ok(fetch_token(conn, key)?.map(|row| (row, ()))),
            })?;
        Ok(caller)
    }

    /// Like [`Bearer::require`], for a route that reads its answer in the same
    /// statement as the token (one round trip instead of two): `fetch` reads the
    /// token's row by `key` together with `T`, which is returned only once the
    /// token has passed every check.
    pub fn require_with<T>(
        &self,
        conn: &mut PgConnection,
        cache: &TokenCache,
        fetch: impl FnOnce(&mut PgConnection, TokenKey<'_>) -> QueryResult<Option<(TokenRow, T)>>,
    ) -> TxResult<(Caller, T)> {
        let Some(token) = &self.token else {
            return Err(Bearer::missing().into());
        };
        let parsed =
            token::parse(token).ok_or_else(|| ApiError::unauthorized("The token is invalid."))?;
        let key = cache.cache_key(token);
        let cached = cache.get(&key).map(|e| e.token_id);
        let by = match cached {
            Some(token_id) => TokenKey::Id(token_id),
            None => {
                if let Some(seconds) = cache.blocked_for(parsed.lookup, self.from) {
                    let refusal = ApiError::too_many_requests(seconds).with_message(format!(
                        "Too many failed verifications of this token. Retry after {seconds} s."
                    ));
                    return Err(refusal.into());
                }
                TokenKey::Lookup(parsed.lookup, parsed.kind.as_db())
            }
        };
        let Some((row, extra)) = fetch(conn, by)? else {
            cache.forget(&key);
            if cached.is_none() {
                if token::verify_dummy(parsed.secret, &cache.dummy_running) {
                    cache
                        .misses
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                cache.failed(parsed.lookup, self.from);
            }
            return Err(ApiError::unauthorized("The token is invalid.").into());
        };
        // The secret is checked before revocation is revealed: knowing a token's
        // public lookup part tells nothing.
        let fresh = cached.is_none();
        if fresh {
            if !token::verify(parsed.secret, &row.secret_hash) {
                cache
                    .misses
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                cache.failed(parsed.lookup, self.from);
                return Err(ApiError::unauthorized("The token is invalid.").into());
            }
            cache.succeeded(parsed.lookup, self.from);
        }
        let caller = admit(conn, cache, key, fresh, row)?;
        Ok((caller, extra))
    }
}

/// A token's row read by id for a token this instance verified (`Bearer::cached`),
/// in a statement of its own (a group of reads, `src/perf/readgroup.rs`): the caller,
/// or the 401 the ordinary path would give.
pub fn admit_cached(
    conn: &mut PgConnection,
    cache: &TokenCache,
    key: CacheKey,
    row: Option<TokenRow>,
) -> TxResult<Caller> {
    let Some(row) = row else {
        cache.forget(&key);
        return Err(ApiError::unauthorized("The token is invalid.").into());
    };
    admit(conn, cache, key, false, row)
}

/// What every authentication does with the token's row once read: `fresh` when
/// the secret was just verified with argon2 (a cache miss), not cached.
fn admit(
    conn: &mut PgConnection,
    cache: &TokenCache,
    key: CacheKey,
    fresh: bool,
    row: TokenRow,
) -> TxResult<Caller> {
    let counter = if fresh { &cache.misses } else { &cache.hits };
    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if row.revoked_at.is_some() {
        cache.forget(&key);
        return Err(ApiError::unauthorized("The token has been revoked.").into());
    }
    let (id, kind, name, model_claim) = row.contributor;
    let actor = ContributorActor {
        id,
        kind,
        name,
        model_claim,
    };
    // Written after a verification, refreshed on every later success: a token in
    // use is verified with argon2 once per process (revocation is read from the
    // database on every request anyway).
    cache.put(key, row.id, &actor);
    if row.use_due {
        // Never wait for this bookkeeping: another request of the same token may
        // hold the row; it records the use then.
        crate::db::sql(
            "UPDATE tokens SET last_used_at = $2 WHERE id = ( \
                 SELECT id FROM tokens WHERE id = $1 FOR UPDATE SKIP LOCKED)",
        )
        .bind::<diesel::sql_types::BigInt, _>(row.id)
        .bind::<diesel::sql_types::Timestamptz, _>(row.now)
        .execute(conn)?;
    }
    Ok(Caller {
        token_id: row.id,
        actor,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `shrink` drops a verified token not seen within the TTL and keeps one seen
    /// since (the clock moved on by the TTL and a second, as `shrink_at` sees it).
    #[test]
    fn shrink_forgets_tokens_past_their_ttl() {
        let cache = TokenCache::default();
        let actor = ContributorActor {
            id: 1,
            kind: "AGENT".into(),
            name: "a".into(),
            model_claim: None,
        };
        let (old, fresh) = (cache.cache_key("old"), cache.cache_key("fresh"));
        cache.put(old, 1, &actor);
        let later = Instant::now() + CACHE_TTL + Duration::from_secs(1);
        cache.put(fresh, 2, &actor);
        cache
            .entries
            .lock()
            .unwrap()
            .get_mut(&fresh)
            .unwrap()
            .seen_at = later;
        cache.shrink_at(later);
        let entries = cache.entries.lock().unwrap();
        assert!(!entries.contains_key(&old));
        assert!(entries.contains_key(&fresh));
    }
}
