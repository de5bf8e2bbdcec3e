//! The caller's webhook subscriptions, `/api/v1/me/webhooks` (contract section 15):
//! parse, call the verb in `domain::webhooks`, shape the answer.

use crate::http::params::Path;
use actix_web::{delete, get, post, HttpResponse};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::auth::Bearer;
use crate::domain::idempotency::{IdemHeader, IdempotencyKeyOptional};
use crate::domain::orbits::Empty;
use crate::domain::webhooks::{self as domain, CreateWebhook, Delivery, Webhook};
use crate::error::ApiResult;
use crate::http::api::responses::WriteErrors;
use crate::http::api::{ok_json, page_json, respond, State};
use crate::http::json::Body;
use crate::model::{PageMeta, PageParams};

#[derive(Serialize, ToSchema)]
pub struct WebhookData {
    pub data: Webhook,
}

#[derive(Serialize, ToSchema)]
pub struct WebhookPage {
    pub data: Vec<Webhook>,
    pub meta: PageMeta,
}

#[derive(Serialize, ToSchema)]
pub struct DeliveryPage {
    /// The latest 100 attempts, oldest first.
    pub data: Vec<Delivery>,
    /// `next_after` is always null: the log is not paged.
    pub meta: PageMeta,
}

/// Subscribe to an orbit's changes: each is POSTed to `url`, signed (Standard
/// Webhooks), in revision order, at least once, starting after the orbit's
/// current revision.
///
/// The answer carries the `secret` (`whsec_...`), shown only here. At most 10 per
/// contributor (409 `webhook_limit`); a URL whose host is or resolves to a
/// loopback, private, link-local, multicast or unspecified address is 422
/// `webhook_url_forbidden`. Honours `Idempotency-Key` when sent.
#[utoipa::path(
    tag = "Webhooks",
    request_body = CreateWebhook,
    params(IdempotencyKeyOptional),
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 201, body = WebhookData), WriteErrors),
)]
#[post("/me/webhooks")]
pub async fn create_webhook(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    body: Body<CreateWebhook>,
) -> ApiResult<HttpResponse> {
    let parsed = body.check().cloned();
    let written = domain::create(&state, bearer, key, parsed, body.canonical.clone()).await?;
    Ok(respond(written))
}

/// The caller's webhook subscriptions, ascending by id (never their secrets).
#[utoipa::path(
    tag = "Webhooks",
    params(PageParams),
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = WebhookPage), WriteErrors),
)]
#[get("/me/webhooks")]
pub async fn list_webhooks(
    state: State,
    bearer: Bearer,
    query: crate::http::params::Query<PageParams>,
) -> ApiResult<HttpResponse> {
    page_json(&domain::list(&state, bearer, query.into_inner()).await?)
}

/// One of the caller's subscriptions (no secret). Another contributor's is 404.
#[utoipa::path(
    tag = "Webhooks",
    params(("id" = i64, Path, minimum = 1, description = "The subscription's id.")),
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = WebhookData), WriteErrors),
)]
#[get("/me/webhooks/{id}")]
pub async fn get_webhook(state: State, bearer: Bearer, path: Path<i64>) -> ApiResult<HttpResponse> {
    ok_json(&domain::get(&state, bearer, path.into_inner()).await?)
}

/// Delete one of the caller's subscriptions and its delivery log; answers it as it
/// was. Nothing more is sent (a delivery already in flight completes).
#[utoipa::path(
    tag = "Webhooks",
    params(("id" = i64, Path, minimum = 1, description = "The subscription's id.")),
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = WebhookData), WriteErrors),
)]
#[delete("/me/webhooks/{id}")]
pub async fn delete_webhook(
    state: State,
    bearer: Bearer,
    path: Path<i64>,
    body: Body<Empty>,
) -> ApiResult<HttpResponse> {
    let body = body.check().map(|_| ());
    ok_json(&domain::delete(&state, bearer, path.into_inner(), body).await?)
}

/// Enable a DISABLED subscription: delivery resumes after its `delivered_through`,
/// with a fresh count of attempts. An ACTIVE one is answered as it is.
#[utoipa::path(
    tag = "Webhooks",
    params(("id" = i64, Path, minimum = 1, description = "The subscription's id.")),
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = WebhookData), WriteErrors),
)]
#[post("/me/webhooks/{id}/enable")]
pub async fn enable_webhook(
    state: State,
    bearer: Bearer,
    path: Path<i64>,
    body: Body<Empty>,
) -> ApiResult<HttpResponse> {
    let body = body.check().map(|_| ());
    ok_json(&domain::enable(&state, bearer, path.into_inner(), body).await?)
}

/// The latest 100 delivery attempts of one of the caller's subscriptions, oldest
/// first: `{revision, attempt, status_code, error, duration_ms, attempted_at}`.
#[utoipa::path(
    tag = "Webhooks",
    params(("id" = i64, Path, minimum = 1, description = "The subscription's id.")),
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = DeliveryPage), WriteErrors),
)]
#[get("/me/webhooks/{id}/deliveries")]
pub async fn list_deliveries(
    state: State,
    bearer: Bearer,
    path: Path<i64>,
) -> ApiResult<HttpResponse> {
    let data = domain::deliveries(&state, bearer, path.into_inner()).await?;
    page_json(&crate::model::Page {
        data,
        meta: PageMeta { next_after: None },
    })
}
