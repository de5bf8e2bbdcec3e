//! Webhooks (contract section 15): a contributor's subscriptions to an orbit's
//! changes, POSTed to its URL, signed, in revision order, at least once.
//!
//! This module owns the verbs of `/api/v1/me/webhooks` (one function each, plain
//! parameters, called by the REST handlers; no MCP tool, as
//! `http::mcp::catalogue::NOT_TOOLS` says why), the subscription's shape and its
//! input rules. [`deliver`] is the delivery engine beside them; [`safety`] the
//! address rules; [`sign`] the Standard Webhooks signature. Progress
//! lives in PostgreSQL (`store::webhooks`, migration 9, `webhook_*` in
//! src/db/functions.sql).

pub mod deliver;
pub mod safety;
pub mod sign;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::db::{self, TxError};
use crate::domain::auth::Bearer;
use crate::domain::idempotency::{IdemHeader, Operation};
// The change kinds a `kinds` pattern may name: every kind of the change feed.
use crate::domain::revision::KINDS;
use crate::domain::write::{Reply, Written};
use crate::domain::Core;
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::model::{ts, Page, PageParams};
use crate::store::webhooks::{self as store, DeliveryRow, WebhookRow};

/// At most this many subscriptions per contributor.
pub const LIMIT_PER_CONTRIBUTOR: i64 = 10;

// `expecting` is the whole field error of any other value, in the words search and
// the MCP tools use (serde's own: "data did not match any variant of untagged enum
// OrbitName").
/// An orbit named by id or by slug.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged, expecting = "must be an orbit id or slug")]
pub enum OrbitName {
    Id(i64),
    Slug(String),
}

impl OrbitName {
    fn reference(&self) -> String {
        match self {
            OrbitName::Id(id) => id.to_string(),
            OrbitName::Slug(s) => s.clone(),
        }
    }
}

/// Body of `POST /api/v1/me/webhooks`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWebhook {
    /// The orbit whose changes are sent: its id or its slug.
    pub orbit: OrbitName,
    /// `http` or `https`, at most 2000 characters, written without spaces or
    /// control characters (percent-encode them), with no credentials and a port
    /// other than 0; its host must not be or resolve to a loopback, private,
    /// link-local, multicast or unspecified address.
    #[schema(max_length = 2000)]
    pub url: String,
    /// Change kinds to send (`task.created`) or `prefix.*` (`task.*`); default all.
    pub kinds: Option<Vec<String>>,
    #[schema(max_length = 200)]
    pub description: Option<String>,
}

/// At most this many entries in `kinds`.
const MAX_KINDS: usize = 32;

impl crate::model::Validate for CreateWebhook {
    /// The field rules, every problem listed (the body check runs them).
    fn validate(&self, e: &mut FieldErrors) {
        match &self.orbit {
            OrbitName::Slug(s) => {
                crate::domain::orbits::check_reference(e, "orbit", s);
            }
            OrbitName::Id(id) if *id < 1 => e.add("orbit", crate::domain::orbits::NOT_AN_ORBIT),
            OrbitName::Id(_) => {}
        }
        e.text("url", &self.url, 1, 2000);
        // One problem at a time for a URL: its length or a NUL first.
        if !e.has("url") {
            match parse_url(&self.url) {
                Err(why) => e.add("url", why),
                Ok(url) if url.fragment().is_some() => e.add(
                    "url",
                    "must not carry a #fragment: it is never sent to the server",
                ),
                Ok(url) if url.as_str().chars().count() > 2000 => e.add(
                    "url",
                    "must be at most 2000 characters in its standard form (percent-encoded)",
                ),
                Ok(_) => {}
            }
        }
        if let Some(kinds) = &self.kinds {
            if kinds.is_empty() {
                e.add(
                    "kinds",
                    "must name at least one kind (omit it for every kind)",
                );
            }
            let judged = e.bounded("kinds", kinds, MAX_KINDS, "patterns");
            let mut seen = std::collections::HashSet::new();
            let mut repeated = std::collections::HashSet::new();
            for k in judged {
                if !seen.insert(k) && repeated.insert(k) {
                    e.add(
                        "kinds",
                        format!("{k:?} is given more than once: give it once"),
                    );
                }
                if !valid_pattern(k) {
                    e.add(
                        "kinds",
                        format!(
                            "{k:?} is neither a change kind (such as task.created) nor a \
                             prefix pattern (such as task.*)"
                        ),
                    );
                }
            }
        }
        if let Some(d) = &self.description {
            e.text("description", d, 0, 200);
        }
    }
}

/// An `http` or `https` URL with a host, a port other than 0 and no credentials,
/// written without spaces or control characters: a URL parser drops tabs and line
/// breaks and trims spaces, so such a URL would be stored and shown as sent but
/// delivered to another address.
pub fn parse_url(text: &str) -> Result<reqwest::Url, String> {
    if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(
            "must not contain spaces, tabs, line breaks or other control characters \
             (percent-encode them)"
                .into(),
        );
    }
    let url = reqwest::Url::parse(text).map_err(|e| format!("is not a URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("must be an http or https URL".into());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("must name a host".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry credentials".into());
    }
    if url.port() == Some(0) {
        return Err("must name a port from 1 to 65535".into());
    }
    Ok(url)
}

/// A valid URL ([`parse_url`]) in the standard form it is stored, shown and
/// delivered to: the URL parser's own serialization (`\` read as `/`, `.` and `..`
/// segments resolved, other characters percent-encoded, the host lowercased),
/// without a `#fragment` (never sent; a new subscription may not have one), so the
/// address a subscription shows is the one its deliveries go to, a subscription
/// stored as sent before 2026-12-06 included. A URL that does not parse is
/// returned as stored (the body check refused it already).
pub fn standard_url(text: &str) -> String {
    parse_url(text).map_or_else(
        |_| text.to_owned(),
        |mut url| {
            url.set_fragment(None);
            url.into()
        },
    )
}

/// A kind of [`KINDS`], or `prefix.*` for a prefix some kind has.
pub fn valid_pattern(pattern: &str) -> bool {
    match pattern.strip_suffix(".*") {
        Some(prefix) => KINDS
            .iter()
            .any(|k| k.split_once('.').is_some_and(|(p, _)| p == prefix)),
        None => KINDS.contains(&pattern),
    }
}

/// Whether a change of `kind` is sent to a subscription with these patterns.
pub fn matches(kinds: Option<&[String]>, kind: &str) -> bool {
    let Some(kinds) = kinds else {
        return true;
    };
    kinds.iter().any(|p| match p.strip_suffix(".*") {
        Some(prefix) => kind
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('.')),
        None => p == kind,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum WebhookStatus {
    Active,
    Disabled,
}

/// The orbit of a subscription.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WebhookOrbit {
    #[schema(minimum = 1)]
    pub id: i64,
    pub slug: String,
}

/// A subscription. No `Debug`: at creation it carries the secret, never logged.
#[derive(Clone, Serialize, ToSchema)]
pub struct Webhook {
    pub id: i64,
    pub orbit: WebhookOrbit,
    pub url: String,
    /// The patterns given; `null` for every kind.
    #[schema(required = true)]
    pub kinds: Option<Vec<String>>,
    pub description: String,
    pub status: WebhookStatus,
    /// Why it was DISABLED; `null` while ACTIVE.
    #[schema(required = true)]
    pub disabled_reason: Option<String>,
    /// The last revision handled (delivered, or skipped by `kinds`); delivery goes
    /// on after it.
    pub delivered_through: i64,
    /// `whsec_` + base64 of 32 random bytes: the signing key. Only in the answer to
    /// the create; store it then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    #[serde(with = "ts")]
    pub created_at: DateTime<Utc>,
}

impl Webhook {
    fn of(row: WebhookRow, secret: Option<String>) -> Webhook {
        Webhook {
            id: row.id,
            orbit: WebhookOrbit {
                id: row.orbit_id,
                slug: row.orbit_slug,
            },
            url: standard_url(&row.url),
            kinds: row.kinds,
            description: row.description,
            status: if row.status == "ACTIVE" {
                WebhookStatus::Active
            } else {
                WebhookStatus::Disabled
            },
            disabled_reason: row.disabled_reason,
            delivered_through: row.delivered_through,
            secret,
            created_at: row.created_at,
        }
    }
}

/// One delivery attempt.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Delivery {
    pub revision: i64,
    /// 1 for the first attempt at this revision.
    pub attempt: i32,
    /// The receiver's status; `null` when no response came (timeout, refused...).
    #[schema(required = true)]
    pub status_code: Option<i32>,
    /// What went wrong; `null` for a 2xx.
    #[schema(required = true)]
    pub error: Option<String>,
    pub duration_ms: i32,
    /// When the attempt started (the database's clock when it was recorded, less
    /// `duration_ms`).
    #[serde(with = "ts")]
    pub attempted_at: DateTime<Utc>,
}

impl From<DeliveryRow> for Delivery {
    fn from(r: DeliveryRow) -> Delivery {
        Delivery {
            revision: r.revision,
            attempt: r.attempt,
            status_code: r.status_code,
            error: r.error,
            duration_ms: r.duration_ms,
            attempted_at: r.attempted_at,
        }
    }
}

pub static CREATE: Operation = Operation::optional("POST", "/api/v1/me/webhooks");

fn not_found() -> TxError {
    ApiError::not_found("Webhook").into()
}

/// Creates a subscription for the caller (`body` is the parsed and checked body or
/// its 422; `canonical` its canonical form, for the Idempotency-Key). The URL is
/// resolved and checked here, before the write's transaction, and the refusal
/// raised inside it in the contract's order (401 first).
pub async fn create(
    core: &Core,
    bearer: Bearer,
    key: IdemHeader,
    body: ApiResult<CreateWebhook>,
    canonical: String,
) -> ApiResult<Written> {
    let allow_private = core.config.webhook_allow_private;
    let watched = core.webhook_orbits.clone();
    // The host lookup below may hold a blocking thread for seconds: only for a
    // caller whose token this instance verified, or verifies now (401 first, as the
    // contract's precedence has it). A probe's anonymous creations each made one.
    if bearer.cached(&core.tokens).is_none() {
        let (checked, tokens) = (bearer.clone(), core.tokens.clone());
        db::read(&core.pool, move |conn| {
            checked.require(conn, &tokens)?;
            Ok(())
        })
        .await?;
    }
    // A body that passed its checks has a parsed URL: its check has a result, so
    // an unchecked URL can never be written.
    let safety = match body.as_ref().ok().map(|b| parse_url(&b.url)) {
        Some(Ok(url)) => Some(safety::check(&url, allow_private).await),
        _ => None,
    };
    crate::domain::write::run(
        core,
        bearer,
        key,
        &CREATE,
        canonical,
        None,
        move |conn, caller, gate| {
            let value = body.clone()?;
            let orbit = crate::store::orbits::find(conn, &value.orbit.reference())?
                .ok_or_else(|| ApiError::field("orbit", "no such orbit"))?;
            match &safety {
                Some(Err(safety::Refusal::Forbidden(why))) => {
                    return Err(ApiError::invalid(
                        "webhook_url_forbidden",
                        format!(
                            "Webhooks may not target this URL: {why}. Loopback, private, \
                             link-local, multicast and unspecified addresses are refused."
                        ),
                    )
                    .into())
                }
                Some(Err(safety::Refusal::Unresolved(why))) => {
                    return Err(ApiError::field("url", why.clone()).into())
                }
                _ => {}
            }
            if let Some(stored) = gate.claim(conn, &[])? {
                return Ok(Reply::replayed(stored));
            }
            if store::lock_and_count(conn, caller.id())? >= LIMIT_PER_CONTRIBUTOR {
                return Err(ApiError::conflict(
                    "webhook_limit",
                    format!(
                        "You have {LIMIT_PER_CONTRIBUTOR} webhooks, the most one contributor \
                         may have. Delete one first."
                    ),
                )
                .into());
            }
            let secret = sign::new_secret();
            let row = store::insert(
                conn,
                caller.id(),
                orbit.id,
                &standard_url(&value.url),
                value.kinds.as_deref(),
                value.description.as_deref().unwrap_or(""),
                &secret,
            )?;
            watched.add(orbit.id);
            Reply::new(
                actix_web::http::StatusCode::CREATED,
                &Webhook::of(row, Some(secret)),
                None,
            )
        },
    )
    .await
}

/// The caller's subscriptions, ascending by id (no secrets).
pub async fn list(core: &Core, bearer: Bearer, params: PageParams) -> ApiResult<Page<Webhook>> {
    let cursor = params.checked()?;
    let tokens = core.tokens.clone();
    let rows = db::read(&core.pool, move |conn| {
        let caller = bearer.require(conn, &tokens)?;
        Ok(store::list(conn, caller.id(), cursor)?)
    })
    .await?;
    let page = cursor.page(rows, |w| w.id);
    Ok(Page {
        data: page
            .data
            .into_iter()
            .map(|r| Webhook::of(r, None))
            .collect(),
        meta: page.meta,
    })
}

/// One of the caller's subscriptions (no secret); another's is 404.
pub async fn get(core: &Core, bearer: Bearer, id: i64) -> ApiResult<Webhook> {
    let tokens = core.tokens.clone();
    db::read(&core.pool, move |conn| {
        let caller = bearer.require(conn, &tokens)?;
        let row = store::find(conn, caller.id(), id)?.ok_or_else(not_found)?;
        Ok(Webhook::of(row, None))
    })
    .await
}

/// Deletes one of the caller's subscriptions and its log; returns it as it was. A
/// delivery in flight finishes, but its outcome is not recorded and nothing more
/// is sent. `body` as for [`enable`].
pub async fn delete(
    core: &Core,
    bearer: Bearer,
    id: i64,
    body: ApiResult<()>,
) -> ApiResult<Webhook> {
    let tokens = core.tokens.clone();
    db::transact(&core.pool, move |conn| {
        let caller = bearer.require(conn, &tokens)?;
        let row = store::delete(conn, caller.id(), id)?.ok_or_else(not_found)?;
        // After the 404; its 422 rolls the deletion back.
        body.clone()?;
        Ok(Webhook::of(row, None))
    })
    .await
}

/// Makes a DISABLED subscription ACTIVE: delivery resumes after its
/// `delivered_through`, with a fresh count of attempts. An ACTIVE one is returned
/// as it is. `body` is the request body's check (the route has no body fields): its
/// 422 comes after the 404 and changes nothing.
pub async fn enable(
    core: &Core,
    bearer: Bearer,
    id: i64,
    body: ApiResult<()>,
) -> ApiResult<Webhook> {
    let tokens = core.tokens.clone();
    let (row, changed) = db::transact(&core.pool, move |conn| {
        let caller = bearer.require(conn, &tokens)?;
        let enabled = match store::enable(conn, caller.id(), id)? {
            Some(row) => (row, true),
            None => (
                store::find(conn, caller.id(), id)?.ok_or_else(not_found)?,
                false,
            ),
        };
        // After the 404; its 422 rolls the change back.
        body.clone()?;
        Ok(enabled)
    })
    .await?;
    if changed {
        // Wakes this instance's delivery engine, and the others' if they watch the
        // orbit (otherwise their next sweep claims it).
        core.webhook_orbits.add(row.orbit_id);
        core.hub.publish(row.orbit_id);
    }
    Ok(Webhook::of(row, None))
}

/// The latest 100 delivery attempts of one of the caller's subscriptions, oldest
/// first.
pub async fn deliveries(core: &Core, bearer: Bearer, id: i64) -> ApiResult<Vec<Delivery>> {
    let tokens = core.tokens.clone();
    db::read(&core.pool, move |conn| {
        let caller = bearer.require(conn, &tokens)?;
        store::find(conn, caller.id(), id)?.ok_or_else(not_found)?;
        Ok(store::deliveries(conn, id)?
            .into_iter()
            .map(Delivery::from)
            .collect())
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_and_matching() {
        assert!(valid_pattern("task.created"));
        assert!(valid_pattern("task.*"));
        assert!(!valid_pattern("task.made"));
        assert!(!valid_pattern("tas.*"));
        assert!(!valid_pattern("*"));
        let kinds = vec!["task.*".to_owned(), "member.added".to_owned()];
        assert!(matches(Some(&kinds), "task.completed"));
        assert!(matches(Some(&kinds), "member.added"));
        assert!(!matches(Some(&kinds), "member.removed"));
        assert!(!matches(Some(&["task.*".to_owned()]), "tasks.x"));
        assert!(matches(None, "lease.acquired"));
    }

    #[test]
    fn urls() {
        assert!(parse_url("https://example.com/hook").is_ok());
        assert!(parse_url("ftp://example.com/").is_err());
        assert!(parse_url("http://user:pw@example.com/").is_err());
        assert!(parse_url("not a url").is_err());
        assert!(parse_url("http://example.com/ws\r\npath").is_err());
        assert!(parse_url("http://example.com/ws%0D%0Apath").is_ok());
        assert!(parse_url("http://example.com:0/").is_err());
    }
}
