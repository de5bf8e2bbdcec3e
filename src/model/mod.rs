//! Types shared by every resource: actors, timestamps, list envelopes, pagination,
//! how an id is written in a path (`plain_id`), the `Validate` trait of request
//! bodies and their canonical JSON form (`canonical`).

pub mod canonical;
pub mod verbatim;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize, Serializer};
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiResult, FieldErrors};

/// Field-level checks a request body runs after it parsed (its rules live with its
/// operation in `domain`).
pub trait Validate {
    fn validate(&self, errors: &mut FieldErrors);

    /// The checks that depend on the instance's settings ([`Limits`]), reported
    /// beside `validate`'s; none unless a type says so.
    fn validate_within(&self, limits: &Limits, errors: &mut FieldErrors) {
        let _ = (limits, errors);
    }
}

/// The instance's settings that a body's own checks depend on
/// (`domain::leases::limits` reads them from the configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The smallest lease duration and handoff expiry, in seconds.
    pub min_seconds: i64,
}

/// A positive id written as the service writes it, in plain digits with no sign
/// and no leading zero (`5`, not `+5`, `05`, `0` or `-1`), below 2^63: the one
/// reading of an id in a path for every layer (REST paths, `http::params`; pages,
/// `http::pages::path_id`; an orbit reference, `store::orbits::id_of`), so one
/// resource has one URL.
pub fn plain_id(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.is_empty() || b[0] == b'0' || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    text.parse().ok()
}

/// A contributor as other objects name it. `name` and `model_claim` are self-declared.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
pub struct ContributorActor {
    #[schema(minimum = 1)]
    pub id: i64,
    #[serde(rename = "type")]
    #[schema(value_type = ContributorType)]
    pub kind: String,
    pub name: String,
    #[schema(required = true)]
    pub model_claim: Option<String>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ContributorType {
    Agent,
    Human,
    Organization,
    System,
}

impl ContributorType {
    pub fn as_str(self) -> &'static str {
        match self {
            ContributorType::Agent => "AGENT",
            ContributorType::Human => "HUMAN",
            ContributorType::Organization => "ORGANIZATION",
            ContributorType::System => "SYSTEM",
        }
    }
}

/// RFC 3339 UTC with milliseconds, e.g. `2026-07-30T10:58:13.829Z`.
pub fn format_ts(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

pub mod ts {
    use super::*;

    pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_ts(t))
    }
}

pub mod ts_opt {
    use super::*;

    pub fn serialize<S: Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_str(&format_ts(t)),
            None => s.serialize_none(),
        }
    }
}

/// `{"data": ...}`.
#[derive(Debug, Serialize)]
pub struct Data<T> {
    pub data: T,
}

/// A response body's bytes: the one serialization of every JSON answer, REST and
/// MCP (a failure, which none of our types makes, is logged and answered 500).
pub fn json_bytes<T: Serialize + ?Sized>(value: &T) -> ApiResult<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| {
        tracing::error!(error = %e, "cannot serialize a response");
        crate::error::ApiError::internal()
    })
}

/// `{"data": value}`'s bytes ([`json_bytes`]).
pub fn data_bytes<T: Serialize>(data: &T) -> ApiResult<Vec<u8>> {
    json_bytes(&Data { data })
}

/// `{"data": [...], "meta": {"next_after": id|null}}`.
#[derive(Debug, Serialize)]
pub struct Page<T> {
    pub data: Vec<T>,
    pub meta: PageMeta,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PageMeta {
    /// The id to pass as `after` for the next page; null on the last page.
    #[schema(required = true)]
    pub next_after: Option<i64>,
}

/// `?limit=1..100 (default 50)&after=<id>`.
#[derive(Debug, Clone, Copy, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PageParams {
    /// Page size, 1..100 (default 50).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<i64>,
    /// Return items with an id greater than this.
    #[param(minimum = 0)]
    pub after: Option<i64>,
}

impl PageParams {
    pub fn checked(self) -> ApiResult<Cursor> {
        page_bounds(self.limit, self.after)
    }
}

impl Validate for PageParams {
    fn validate(&self, e: &mut FieldErrors) {
        page_problems(e, self.limit, self.after, MAX_PAGE);
    }
}

/// The window of a list request, the one owner of paging (REST and MCP alike):
/// items whose key is greater than `after`, at most `limit` of them. A store
/// function reads [`Cursor::fetch`] rows (one more than the page), and
/// [`Cursor::page`] keeps `limit` of them and tells from the extra row whether a
/// next page exists, so no list runs a count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    pub after: i64,
    pub limit: i64,
}

impl Cursor {
    /// How many rows a store function reads for this page: `limit + 1`.
    pub fn fetch(self) -> i64 {
        self.limit + 1
    }

    /// The page of rows read with [`Cursor::fetch`]: at most `limit` of them, and
    /// `next_after` (the last row's key) when there were more.
    pub fn page<T>(self, mut rows: Vec<T>, key_of: impl Fn(&T) -> i64) -> Page<T> {
        let more = rows.len() as i64 > self.limit;
        rows.truncate(self.limit as usize);
        let next_after = if more { rows.last().map(&key_of) } else { None };
        Page {
            data: rows,
            meta: PageMeta { next_after },
        }
    }
}

/// The cursor of a list request with defaults applied (limit 50, after 0), or 422:
/// for query types that carry filters beside `limit` and `after`.
pub fn page_bounds(limit: Option<i64>, after: Option<i64>) -> ApiResult<Cursor> {
    let mut e = FieldErrors::default();
    page_problems(&mut e, limit, after, MAX_PAGE);
    e.finish()?;
    Ok(Cursor {
        after: after.unwrap_or(0),
        limit: limit.unwrap_or(50),
    })
}

/// The window of a query with filters beside `limit` and `after`: 422 with every
/// problem of the query (its [`Validate`], which the extractor and the MCP
/// arguments judged already), else its cursor.
pub fn query_cursor<Q: Validate>(
    query: &Q,
    limit: Option<i64>,
    after: Option<i64>,
) -> ApiResult<Cursor> {
    let mut e = FieldErrors::default();
    query.validate(&mut e);
    e.finish()?;
    page_bounds(limit, after)
}

/// The most items a list page holds (`limit`), but the change feed's.
pub const MAX_PAGE: i64 = 100;

/// The paging rule's problems, both at once: `limit` 1..=`max` (default 50),
/// `after` not negative. A query's [`Validate`] lists them beside its other
/// problems (`params::Query`), and [`page_bounds`] refuses with them.
pub fn page_problems(e: &mut FieldErrors, limit: Option<i64>, after: Option<i64>, max: i64) {
    if let Some(limit) = limit {
        e.range("limit", limit, 1, max);
    }
    if after.is_some_and(|a| a < 0) {
        e.add("after", "must not be negative");
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Role {
    Contributor,
    Maintainer,
    Owner,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Owner => "OWNER",
            Role::Maintainer => "MAINTAINER",
            Role::Contributor => "CONTRIBUTOR",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "OWNER" => Some(Role::Owner),
            "MAINTAINER" => Some(Role::Maintainer),
            "CONTRIBUTOR" => Some(Role::Contributor),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JoinPolicy {
    #[default]
    Open,
    Invite,
}

impl JoinPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            JoinPolicy::Open => "OPEN",
            JoinPolicy::Invite => "INVITE",
        }
    }
}

/// Which kind of contributor a token was minted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    Contributor,
    Agent,
}

impl TokenKind {
    pub fn as_db(self) -> &'static str {
        match self {
            TokenKind::Contributor => "CONTRIBUTOR",
            TokenKind::Agent => "AGENT",
        }
    }
}

/// A freshly minted token: the full secret string (shown once) and what is stored.
pub struct NewToken {
    pub token: String,
    pub lookup: String,
    pub secret_hash: String,
}
