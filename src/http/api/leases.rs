//! Leases and the fence check (contract section 8). The units of work, the duration
//! rule and the reads are `domain::leases`; the lease decision is `domain::fence`.

use crate::http::params::Path;
use actix_web::{get, post, HttpResponse};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::auth::Bearer;
use crate::domain::idempotency::{IdemHeader, IdempotencyKeyRequired};
use crate::domain::leases::{
    self, min_duration, AcquireLease, FenceVerdict, LeaseVersionBody, RenewLease,
};
use crate::error::ApiResult;
use crate::http::api::responses::{ReadErrors, WriteErrors};
use crate::http::api::{ok_json, page_json, write, write_unit, State};
use crate::http::json::Body;
use crate::model::{PageMeta, PageParams};
use crate::store::tasks::Lease;

#[derive(Serialize, ToSchema)]
pub struct LeaseData {
    pub data: Lease,
}

#[derive(Serialize, ToSchema)]
pub struct LeasePage {
    pub data: Vec<Lease>,
    pub meta: PageMeta,
}

/// Acquire a lease on a task: `lease_version = task.lease_version + 1`.
///
/// 409 `lease_conflict` (someone else holds it; only `details.expires_at` is
/// revealed), `lease_already_held` (`details.lease_id`, `lease_version`: renew it instead),
/// `handed_off` (you have a pending handoff on the task: withdraw it first),
/// `task_closed`. Acquiring supersedes the task's pending handoffs.
#[utoipa::path(
    tag = "Leases",
    params(("task" = i64, Path, minimum = 1), IdempotencyKeyRequired),
    request_body(content = AcquireLease, description = "Optional: no body, an empty body and `{}` are the same."),
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 201, body = LeaseData), WriteErrors),
)]
#[post("/tasks/{task}/leases")]
pub async fn acquire_lease(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    path: Path<i64>,
    body: Body<AcquireLease>,
) -> ApiResult<HttpResponse> {
    let task_id = path.into_inner();
    let min = min_duration(&state.config);
    let unit = leases::acquire_unit(task_id, min, body.check());
    write_unit(&leases::ACQUIRE_LEASE, &state, bearer, key, body, unit).await
}

/// A task's lease history, ascending.
#[utoipa::path(
    tag = "Leases",
    params(("task" = i64, Path, minimum = 1), PageParams),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = LeasePage), ReadErrors),
)]
#[get("/tasks/{task}/leases")]
pub async fn list_leases(
    state: State,
    bearer: Bearer,
    path: Path<i64>,
    query: crate::http::params::Query<PageParams>,
) -> ApiResult<HttpResponse> {
    let page = leases::list(&state, query.into_inner(), bearer, path.into_inner()).await?;
    page_json(&page)
}

/// Read a lease.
#[utoipa::path(
    tag = "Leases",
    params(("lease" = i64, Path, minimum = 1)),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = LeaseData), ReadErrors),
)]
#[get("/leases/{lease}")]
pub async fn get_lease(state: State, bearer: Bearer, path: Path<i64>) -> ApiResult<HttpResponse> {
    let id = path.into_inner();
    ok_json(&leases::get(&state, bearer, id).await?)
}

/// Renew a lease you hold (lease-protected): same version, `expires_at = now + duration`.
#[utoipa::path(
    tag = "Leases",
    params(("lease" = i64, Path, minimum = 1), IdempotencyKeyRequired),
    request_body = RenewLease,
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = LeaseData), WriteErrors),
)]
#[post("/leases/{lease}/renew")]
pub async fn renew_lease(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    path: Path<i64>,
    body: Body<RenewLease>,
) -> ApiResult<HttpResponse> {
    let lease_id = path.into_inner();
    let min = min_duration(&state.config);
    write(
        &leases::RENEW_LEASE,
        &state,
        bearer,
        key,
        body,
        move |c, who, g, b| leases::renew(c, who, g, min, lease_id, b),
    )
    .await
}

/// Release a lease you hold (lease-protected). Allowed while your handoff is pending.
#[utoipa::path(
    tag = "Leases",
    params(("lease" = i64, Path, minimum = 1), IdempotencyKeyRequired),
    request_body = LeaseVersionBody,
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = LeaseData), WriteErrors),
)]
#[post("/leases/{lease}/release")]
pub async fn release_lease(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    path: Path<i64>,
    body: Body<LeaseVersionBody>,
) -> ApiResult<HttpResponse> {
    let lease_id = path.into_inner();
    let unit = leases::release_unit(lease_id, body.check());
    write_unit(&leases::RELEASE_LEASE, &state, bearer, key, body, unit).await
}

#[derive(Serialize, ToSchema)]
pub struct FenceData {
    pub data: FenceVerdict,
}

/// Check the fence right before an irreversible outside effect.
///
/// 200 `PROCEED` when your lease is the task's current active lease and you have no
/// pending handoff on it; otherwise 409 with the lease codes. Writes nothing, advances
/// no revision, and is never replayed: the `Idempotency-Key` header is ignored.
#[utoipa::path(
    tag = "Leases",
    params(("task" = i64, Path, minimum = 1)),
    request_body = LeaseVersionBody,
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = FenceData), WriteErrors),
)]
#[post("/tasks/{task}/fence")]
pub async fn check_fence(
    state: State,
    bearer: Bearer,
    path: Path<i64>,
    body: Body<LeaseVersionBody>,
) -> ApiResult<HttpResponse> {
    let task_id = path.into_inner();
    let verdict = leases::check_fence(&state, bearer, task_id, body.into_parsed()).await?;
    ok_json(&verdict)
}
