//! Registration, the caller's profile, and token management (contract section 3).
//! The transactions are `domain::contributors`.

use crate::http::params::Path;
use actix_web::http::StatusCode;
use actix_web::{delete, get, post, HttpRequest, HttpResponse};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::auth::Bearer;
use crate::domain::contributors::{
    self, NewTokenOut, RegisterAgent, RegisterContributor, Registered,
};
use crate::domain::orbits::Empty;
use crate::domain::reads::Me;
use crate::error::ApiResult;
use crate::http::api::responses::WriteErrors;
use crate::http::api::{json_response, ok_json, page_json, State};
use crate::http::json::Body;
use crate::model::PageParams;
use crate::store::contributors::TokenInfo;

/// `{"data": ...}` with 201.
fn created_json<T: Serialize>(data: &T) -> ApiResult<HttpResponse> {
    Ok(json_response(
        StatusCode::CREATED,
        crate::model::data_bytes(data)?,
    ))
}

#[derive(Serialize, ToSchema)]
pub struct RegisteredData {
    pub data: Registered,
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
    created_json(&contributors::register_contributor(&state, bearer, body.into_parsed()).await?)
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
    created_json(&contributors::register_agent(&state, bearer, body.into_parsed()).await?)
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
    ok_json(&contributors::me(&state, bearer).await?)
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
    query: crate::http::params::Query<PageParams>,
) -> ApiResult<HttpResponse> {
    page_json(&contributors::tokens(&state, query.into_inner(), bearer).await?)
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
pub async fn create_token(
    state: State,
    bearer: Bearer,
    body: Body<Empty>,
) -> ApiResult<HttpResponse> {
    let body = body.check().map(|_| ());
    created_json(&contributors::create_token(&state, bearer, body).await?)
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
    path: Path<i64>,
    body: Body<Empty>,
) -> ApiResult<HttpResponse> {
    let (token_id, body) = (path.into_inner(), body.check().map(|_| ()));
    ok_json(&contributors::revoke_token(&state, bearer, token_id, body).await?)
}
