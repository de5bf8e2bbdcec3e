//! Registration, the caller's profile, and token management (contract section 3).

use actix_web::http::StatusCode;
use actix_web::{delete, get, post, web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::db::{self};
use crate::domain::auth::token::{self, TokenKind};
use crate::domain::auth::Bearer;
use crate::domain::reads::{me_of, Me};
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::http::api::responses::WriteErrors;
use crate::http::api::{json_response, ok_json, page_json, State};
use crate::http::json::{Body, Validate};
use crate::model::{ContributorActor, ContributorType, PageParams};
use crate::store::contributors::{self as store, TokenInfo};

/// Registration of a contributor.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterContributor {
    /// `AGENT`, `HUMAN` or `ORGANIZATION` (`SYSTEM` cannot be self-registered).
    #[serde(rename = "type")]
    #[schema(value_type = RegistrableType)]
    pub kind: ContributorType,
    /// Self-declared display name, 1..120 characters.
    #[schema(min_length = 1, max_length = 120)]
    pub name: String,
    /// Self-declared model, at most 200 characters.
    #[schema(max_length = 200)]
    pub model_claim: Option<String>,
}

impl Validate for RegisterContributor {
    fn validate(&self, e: &mut FieldErrors) {
        e.len("name", &self.name, 1, 120);
        if let Some(m) = &self.model_claim {
            e.len("model_claim", m, 0, 200);
        }
        if self.kind == ContributorType::System {
            e.add("type", "SYSTEM contributors cannot be self-registered");
        }
    }
}

/// The contributor types anyone may register.
#[derive(ToSchema)]
#[schema(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RegistrableType {
    Agent,
    Human,
    Organization,
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
        e.len("name", &self.name, 1, 120);
        if let Some(m) = &self.model_claim {
            e.len("model_claim", m, 0, 200);
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

#[derive(Serialize, ToSchema)]
pub struct RegisteredData {
    pub data: Registered,
}

/// What a registration asks for, or the 422 to raise after the token check.
type Registration = ApiResult<(&'static str, String, Option<String>)>;

async fn register(
    state: &State,
    bearer: Bearer,
    wanted: Registration,
    token_kind: TokenKind,
) -> ApiResult<HttpResponse> {
    let tokens = state.tokens.clone();
    let registered = db::transact(&state.pool, move |conn| {
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
    .await?;
    let body = serde_json::to_vec(&crate::model::Data { data: registered })
        .map_err(|_| ApiError::internal())?;
    Ok(json_response(StatusCode::CREATED, body))
}

/// Register a contributor (person, agent or organization).
///
/// Public and rate-limited per client address (`ORBIT_REGISTER_RATE_LIMIT_PER_HOUR`).
/// Returns the bearer token once.
#[utoipa::path(
    tag = "Contributors",
    request_body = RegisterContributor,
    responses((status = 201, description = "Registered. The token is shown once.", body = RegisteredData), WriteErrors),
)]
#[post("/contributors")]
pub async fn register_contributor(
    state: State,
    req: HttpRequest,
    bearer: Bearer,
    body: Body<RegisterContributor>,
) -> ApiResult<HttpResponse> {
    state.limits.check_register(&req, &state.metrics)?;
    let wanted = body
        .check()
        .map(|b| (b.kind.as_str(), b.name.clone(), b.model_claim.clone()));
    register(&state, bearer, wanted, TokenKind::Contributor).await
}

/// Register an agent (legacy route).
///
/// Same as registering a contributor with `type: AGENT`; the token is an
/// `AgentToken` and works everywhere a contributor token does.
#[utoipa::path(
    tag = "Contributors",
    request_body = RegisterAgent,
    responses((status = 201, description = "Registered. The token is shown once.", body = RegisteredData), WriteErrors),
)]
#[post("/agents")]
pub async fn register_agent(
    state: State,
    req: HttpRequest,
    bearer: Bearer,
    body: Body<RegisterAgent>,
) -> ApiResult<HttpResponse> {
    state.limits.check_register(&req, &state.metrics)?;
    let wanted = body
        .check()
        .map(|b| ("AGENT", b.name.clone(), b.model_claim.clone()));
    register(&state, bearer, wanted, TokenKind::Agent).await
}

#[derive(Serialize, ToSchema)]
pub struct MeData {
    pub data: Me,
}

/// The caller's contributor and memberships.
#[utoipa::path(
    tag = "Contributors",
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = MeData), WriteErrors),
)]
#[get("/me")]
pub async fn me(state: State, bearer: Bearer) -> ApiResult<HttpResponse> {
    if let (Some(reads), Some(cached)) = (&state.reads, bearer.cached(&state.tokens)) {
        return ok_json(&reads.me.read(cached).await?);
    }
    let tokens = state.tokens.clone();
    let me = db::read(&state.pool, move |conn| me_of(conn, &bearer, &tokens)).await?;
    ok_json(&me)
}

#[derive(Serialize, ToSchema)]
pub struct TokenPage {
    pub data: Vec<TokenInfo>,
    pub meta: crate::model::PageMeta,
}

/// The caller's tokens (never their secrets).
#[utoipa::path(
    tag = "Contributors",
    params(PageParams),
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = TokenPage), WriteErrors),
)]
#[get("/me/tokens")]
pub async fn list_tokens(
    state: State,
    bearer: Bearer,
    query: crate::http::json::Query<PageParams>,
) -> ApiResult<HttpResponse> {
    let cursor = query.into_inner().checked()?;
    let tokens = state.tokens.clone();
    let rows = db::read(&state.pool, move |conn| {
        let caller = bearer.require(conn, &tokens)?;
        Ok(store::list_tokens(conn, caller.id(), cursor)?)
    })
    .await?;
    page_json(&cursor.page(rows, |t| t.id))
}

/// A new token for the caller, shown once.
#[derive(Debug, Serialize, ToSchema)]
pub struct NewTokenOut {
    pub token_id: i64,
    /// The bearer secret. Store it now: it cannot be read again.
    pub token: String,
}

#[derive(Serialize, ToSchema)]
pub struct NewTokenData {
    pub data: NewTokenOut,
}

/// Create another token for the caller. The current token stays valid until revoked.
#[utoipa::path(
    tag = "Contributors",
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 201, body = NewTokenData), WriteErrors),
)]
#[post("/me/tokens")]
pub async fn create_token(state: State, bearer: Bearer) -> ApiResult<HttpResponse> {
    let tokens = state.tokens.clone();
    let out = db::transact(&state.pool, move |conn| {
        let caller = bearer.require(conn, &tokens)?;
        let kind = store::token_kind(conn, caller.token_id)?;
        let minted = token::mint(kind);
        let token_id = store::insert_token(conn, caller.id(), kind, &minted)?;
        Ok(NewTokenOut {
            token_id,
            token: minted.token,
        })
    })
    .await?;
    let body =
        serde_json::to_vec(&crate::model::Data { data: out }).map_err(|_| ApiError::internal())?;
    Ok(json_response(StatusCode::CREATED, body))
}

#[derive(Serialize, ToSchema)]
pub struct TokenData {
    pub data: TokenInfo,
}

/// Revoke one of the caller's tokens. It is refused on the very next request, on
/// every instance. Revoking the token in use is allowed.
#[utoipa::path(
    tag = "Contributors",
    params(("token_id" = i64, Path, minimum = 1, description = "The token's id from the list.")),
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = TokenData), WriteErrors),
)]
#[delete("/me/tokens/{token_id}")]
pub async fn revoke_token(
    state: State,
    bearer: Bearer,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let token_id = path.into_inner();
    let tokens = state.tokens.clone();
    let info = db::transact(&state.pool, move |conn| {
        let caller = bearer.require(conn, &tokens)?;
        store::revoke_token(conn, caller.id(), token_id)?
            .ok_or_else(|| ApiError::not_found("Token").into())
    })
    .await?;
    ok_json(&info)
}
