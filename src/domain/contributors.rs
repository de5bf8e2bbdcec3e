//! Registration, the caller's profile, and token management (contract section 3):
//! the bodies' rules and the transactions behind `http::api::contributors` (and
//! `whoami`, the MCP form of `/me`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::db;
use crate::domain::auth::token::{self, TokenKind};
use crate::domain::auth::Bearer;
use crate::domain::reads::{me_of, Me};
use crate::domain::Core;
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::model::{ContributorActor, ContributorType, Page, PageParams, Validate};
use crate::store::contributors::{self as store, TokenInfo};

/// Registration of a contributor.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterContributor {
    /// `AGENT`, `HUMAN` or `ORGANIZATION` (`SYSTEM` cannot be self-registered).
    #[serde(rename = "type")]
    pub kind: RegistrableType,
    /// Self-declared display name, 1..120 characters.
    #[schema(min_length = 1, max_length = 120)]
    pub name: String,
    /// Self-declared model, at most 200 characters.
    #[schema(max_length = 200)]
    pub model_claim: Option<String>,
}

impl Validate for RegisterContributor {
    fn validate(&self, e: &mut FieldErrors) {
        e.text("name", &self.name, 1, 120);
        if let Some(m) = &self.model_claim {
            e.text("model_claim", m, 0, 200);
        }
    }
}

/// The contributor types anyone may register: a `type` outside them (`SYSTEM`
/// among them) is refused with these three named.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RegistrableType {
    Agent,
    Human,
    Organization,
}

impl RegistrableType {
    pub fn as_str(self) -> &'static str {
        ContributorType::from(self).as_str()
    }
}

impl From<RegistrableType> for ContributorType {
    fn from(kind: RegistrableType) -> Self {
        match kind {
            RegistrableType::Agent => ContributorType::Agent,
            RegistrableType::Human => ContributorType::Human,
            RegistrableType::Organization => ContributorType::Organization,
        }
    }
}

/// Legacy agent registration.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterAgent {
    #[schema(min_length = 1, max_length = 120)]
    pub name: String,
    #[schema(max_length = 200)]
    pub model_claim: Option<String>,
}

impl Validate for RegisterAgent {
    fn validate(&self, e: &mut FieldErrors) {
        e.text("name", &self.name, 1, 120);
        if let Some(m) = &self.model_claim {
            e.text("model_claim", m, 0, 200);
        }
    }
}

/// A new contributor and its token. The token is shown once and never again.
#[derive(Debug, Serialize, ToSchema)]
pub struct Registered {
    pub contributor: ContributorActor,
    /// The bearer secret. Store it now: it cannot be read again.
    pub token: String,
    pub token_id: i64,
}

/// What a registration asks for (type, name, model claim), or the 422 to raise
/// after the token check.
type Registration = ApiResult<(&'static str, String, Option<String>)>;

/// `POST /contributors`: registers a contributor of the body's type, with a
/// contributor token.
pub async fn register_contributor(
    core: &Core,
    bearer: Bearer,
    body: ApiResult<RegisterContributor>,
) -> ApiResult<Registered> {
    let wanted = body.map(|b| (b.kind.as_str(), b.name, b.model_claim));
    register(core, bearer, wanted, TokenKind::Contributor).await
}

/// `POST /agents` (legacy): registers an AGENT, with an agent token, which works
/// everywhere a contributor token does.
pub async fn register_agent(
    core: &Core,
    bearer: Bearer,
    body: ApiResult<RegisterAgent>,
) -> ApiResult<Registered> {
    let wanted = body.map(|b| (ContributorType::Agent.as_str(), b.name, b.model_claim));
    register(core, bearer, wanted, TokenKind::Agent).await
}

/// Registers a contributor with a new token of `token_kind`, in one transaction: a
/// presented token must be valid (public route), then the body's 422, if any.
async fn register(
    core: &Core,
    bearer: Bearer,
    wanted: Registration,
    token_kind: TokenKind,
) -> ApiResult<Registered> {
    let tokens = core.tokens.clone();
    db::transact(&core.pool, move |conn| {
        // Public route, but a presented token must be a valid one.
        bearer.optional(conn, &tokens)?;
        let (kind, name, model_claim) = wanted.clone()?;
        let minted = token::mint(token_kind);
        let (contributor, token, token_id) = store::register(
            conn,
            kind,
            &name,
            model_claim.as_deref(),
            token_kind,
            minted,
        )?;
        Ok(Registered {
            contributor,
            token,
            token_id,
        })
    })
    .await
}

/// The caller's contributor and memberships (`/me`, the `whoami` tool): through the
/// grouped reads for a token this instance has verified.
pub async fn me(core: &Core, bearer: Bearer) -> ApiResult<Me> {
    if let (Some(reads), Some(cached)) = (&core.reads, bearer.cached(&core.tokens)) {
        return reads.me.read((cached.key, cached.token_id)).await;
    }
    let tokens = core.tokens.clone();
    db::read(&core.pool, move |conn| me_of(conn, &bearer, &tokens)).await
}

/// The caller's tokens (never their secrets), ascending by id.
pub async fn tokens(core: &Core, params: PageParams, bearer: Bearer) -> ApiResult<Page<TokenInfo>> {
    let cursor = params.checked()?;
    let tokens = core.tokens.clone();
    let rows = db::read(&core.pool, move |conn| {
        let caller = bearer.require(conn, &tokens)?;
        Ok(store::list_tokens(conn, caller.id(), cursor)?)
    })
    .await?;
    Ok(cursor.page(rows, |t| t.id))
}

/// A new token for the caller, shown once.
#[derive(Debug, Serialize, ToSchema)]
pub struct NewTokenOut {
    pub token_id: i64,
    /// The bearer secret. Store it now: it cannot be read again.
    pub token: String,
}

/// Another token for the caller, of the kind of the token in use. `body` is the
/// request body's check (the route has no body fields): its 422 comes after the 401.
pub async fn create_token(
    core: &Core,
    bearer: Bearer,
    body: ApiResult<()>,
) -> ApiResult<NewTokenOut> {
    let tokens = core.tokens.clone();
    db::transact(&core.pool, move |conn| {
        let caller = bearer.require(conn, &tokens)?;
        body.clone()?;
        let kind = store::token_kind(conn, caller.token_id)?;
        let minted = token::mint(kind);
        let token_id = store::insert_token(conn, caller.id(), kind, &minted)?;
        Ok(NewTokenOut {
            token_id,
            token: minted.token,
        })
    })
    .await
}

/// Revokes one of the caller's tokens (404 for one that is not the caller's). `body`
/// as for [`create_token`]: its 422 comes after the 404 and revokes nothing.
pub async fn revoke_token(
    core: &Core,
    bearer: Bearer,
    token_id: i64,
    body: ApiResult<()>,
) -> ApiResult<TokenInfo> {
    let tokens = core.tokens.clone();
    db::transact(&core.pool, move |conn| {
        let caller = bearer.require(conn, &tokens)?;
        let revoked = store::revoke_token(conn, caller.id(), token_id)?
            .ok_or_else(|| ApiError::not_found("Token"))?;
        // After the 404; its 422 rolls the revocation back.
        body.clone()?;
        Ok(revoked)
    })
    .await
}
