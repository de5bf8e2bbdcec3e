//! Handoffs: offer, accept, decline, withdraw, and the mailboxes (contract 9.2–9.4).
//! The units of work and reads are `domain::handoffs`.

use crate::http::params::Path;
use actix_web::{get, post, HttpResponse};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::auth::Bearer;
use crate::domain::handoffs::{
    self, AcceptHandoff, AcceptedHandoff, DeclineHandoff, MailboxQuery, OfferHandoff,
};
use crate::domain::idempotency::{IdemHeader, IdempotencyKeyRequired};
use crate::domain::leases::min_duration;
use crate::domain::orbits::Empty;
use crate::error::ApiResult;
use crate::http::api::responses::{ReadErrors, WriteErrors};
use crate::http::api::{ok_json, page_json, write, State};
use crate::http::json::Body;
use crate::model::{PageMeta, PageParams};
use crate::store::handoffs::Handoff;

#[derive(Serialize, ToSchema)]
pub struct HandoffData {
    pub data: Handoff,
}

#[derive(Serialize, ToSchema)]
pub struct HandoffPage {
    pub data: Vec<Handoff>,
    pub meta: PageMeta,
}

/// Offer a handoff of a task you hold (lease-protected).
///
/// Creates a PENDING handoff; the task's older PENDING handoff becomes SUPERSEDED.
/// While it is PENDING you are fenced: your checkpoints, completion, renewal, fence
/// checks and re-acquire answer 409 `handed_off`. Release, withdraw and a new offer
/// still work.
#[utoipa::path(
    tag = "Handoffs",
    params(("task" = i64, Path, minimum = 1), IdempotencyKeyRequired),
    request_body = OfferHandoff,
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 201, body = HandoffData), WriteErrors),
)]
#[post("/tasks/{task}/handoffs")]
pub async fn offer_handoff(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    path: Path<i64>,
    body: Body<OfferHandoff>,
) -> ApiResult<HttpResponse> {
    let task_id = path.into_inner();
    let min = min_duration(&state.config);
    write(
        &handoffs::OFFER_HANDOFF,
        &state,
        bearer,
        key,
        body,
        move |c, who, g, b| handoffs::offer(c, who, g, min, task_id, b),
    )
    .await
}

#[derive(Serialize, ToSchema)]
pub struct AcceptedHandoffData {
    pub data: AcceptedHandoff,
}

/// Accept an offered handoff and acquire a new fenced lease. Checkpoints preserve continuity while authorship remains distinct.
///
/// In one transaction: the giver's lease, if still active, ends (`HANDED_OFF`); you
/// get a new lease with `lease_version = task.lease_version + 1`; the handoff becomes
/// ACCEPTED. Resume from the handoff's `checkpoint_id`.
#[utoipa::path(
    tag = "Handoffs",
    operation_id = "accept_handoff",
    summary = "accept handoff",
    params(("handoff" = i64, Path, minimum = 1), IdempotencyKeyRequired),
    request_body(content = AcceptHandoff, description = "Optional: no body, an empty body and `{}` are the same."),
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses(
        (status = 200, description = "Successful operation. Writes include orbit_revision.", body = AcceptedHandoffData),
        (status = 404, description = "Object not found.", body = crate::error::ErrorBody),
        (status = 413, description = "Request exceeds 256 KiB.", body = crate::error::ErrorBody),
        (status = 422, description = "Invalid input.", body = crate::error::ErrorBody),
        (status = 429, description = "Rate limit exceeded.", body = crate::error::ErrorBody),
        (status = 401, description = "Missing, invalid, or revoked token.", body = crate::error::ErrorBody),
        (status = 403, description = "Orbit permission or handoff recipient restriction.", body = crate::error::ErrorBody),
        (status = 409, description = "State, lease, or idempotency conflict.", body = crate::error::ErrorBody),
        (status = 503, description = "The database is unavailable.", body = crate::error::ErrorBody),
    ),
)]
#[post("/handoffs/{handoff}/accept")]
pub async fn accept_handoff(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    path: Path<i64>,
    body: Body<AcceptHandoff>,
) -> ApiResult<HttpResponse> {
    let handoff_id = path.into_inner();
    let min = min_duration(&state.config);
    write(
        &handoffs::ACCEPT_HANDOFF,
        &state,
        bearer,
        key,
        body,
        move |c, who, g, b| handoffs::accept(c, who, g, min, handoff_id, b),
    )
    .await
}

/// Decline a handoff offered to you by name (→ DECLINED; the giver is unfenced).
/// On an open handoff, nobody may decline (403): let it expire or be withdrawn.
#[utoipa::path(
    tag = "Handoffs",
    params(("handoff" = i64, Path, minimum = 1), IdempotencyKeyRequired),
    request_body(content = DeclineHandoff, description = "Optional: no body, an empty body and `{}` are the same."),
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = HandoffData), WriteErrors),
)]
#[post("/handoffs/{handoff}/decline")]
pub async fn decline_handoff(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    path: Path<i64>,
    body: Body<DeclineHandoff>,
) -> ApiResult<HttpResponse> {
    let handoff_id = path.into_inner();
    write(
        &handoffs::DECLINE_HANDOFF,
        &state,
        bearer,
        key,
        body,
        move |c, who, g, b| handoffs::decline(c, who, g, handoff_id, b),
    )
    .await
}

/// Withdraw your own pending handoff (→ WITHDRAWN; you are unfenced).
#[utoipa::path(
    tag = "Handoffs",
    params(("handoff" = i64, Path, minimum = 1), IdempotencyKeyRequired),
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = HandoffData), WriteErrors),
)]
#[post("/handoffs/{handoff}/withdraw")]
pub async fn withdraw_handoff(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    path: Path<i64>,
    body: Body<Empty>,
) -> ApiResult<HttpResponse> {
    let handoff_id = path.into_inner();
    write(
        &handoffs::WITHDRAW_HANDOFF,
        &state,
        bearer,
        key,
        body,
        move |c, who, g, b| handoffs::withdraw(c, who, g, handoff_id, b),
    )
    .await
}

/// Your handoff inbox or outbox.
#[utoipa::path(
    tag = "Handoffs",
    params(MailboxQuery),
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = HandoffPage), WriteErrors),
)]
#[get("/handoffs")]
pub async fn list_handoffs(
    state: State,
    bearer: Bearer,
    query: crate::http::params::Query<MailboxQuery>,
) -> ApiResult<HttpResponse> {
    page_json(&handoffs::mailbox(&state, query.into_inner(), bearer).await?)
}

/// Read a handoff.
#[utoipa::path(
    tag = "Handoffs",
    params(("handoff" = i64, Path, minimum = 1)),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = HandoffData), ReadErrors),
)]
#[get("/handoffs/{handoff}")]
pub async fn get_handoff(state: State, bearer: Bearer, path: Path<i64>) -> ApiResult<HttpResponse> {
    let id = path.into_inner();
    ok_json(&handoffs::get(&state, bearer, id).await?)
}

/// A task's handoffs, ascending.
#[utoipa::path(
    tag = "Handoffs",
    params(("task" = i64, Path, minimum = 1), PageParams),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = HandoffPage), ReadErrors),
)]
#[get("/tasks/{task}/handoffs")]
pub async fn task_handoffs(
    state: State,
    bearer: Bearer,
    path: Path<i64>,
    query: crate::http::params::Query<PageParams>,
) -> ApiResult<HttpResponse> {
    let page = handoffs::of_task(&state, query.into_inner(), bearer, path.into_inner()).await?;
    page_json(&page)
}
