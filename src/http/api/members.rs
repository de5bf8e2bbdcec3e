//! Orbit membership: list, add or change a role, remove (contract section 4). The
//! role rules, units of work and the list are `domain::members`.

use crate::http::params::Path;
use actix_web::{delete, get, put, HttpResponse};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::auth::Bearer;
use crate::domain::idempotency::IdemHeader;
use crate::domain::members::{self, MemberRemoved, PutMember};
use crate::domain::orbits::Empty;
use crate::error::ApiResult;
use crate::http::api::orbits::MemberWrittenData;
use crate::http::api::responses::{ReadErrors, WriteErrors};
use crate::http::api::{page_json, write, State};
use crate::http::json::Body;
use crate::model::{PageMeta, PageParams};
use crate::store::orbits::Member;

#[derive(Serialize, ToSchema)]
pub struct MemberPage {
    pub data: Vec<Member>,
    pub meta: PageMeta,
}

/// List an orbit's members, ascending by contributor id (`after` is a contributor id).
#[utoipa::path(
    tag = "Members",
    params(("orbit" = String, Path, description = "Orbit id or slug."), PageParams),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = MemberPage), ReadErrors),
)]
#[get("/orbits/{orbit}/members")]
pub async fn list_members(
    state: State,
    bearer: Bearer,
    path: Path<String>,
    query: crate::http::params::Query<PageParams>,
) -> ApiResult<HttpResponse> {
    let page = members::list(&state, query.into_inner(), bearer, path.into_inner()).await?;
    page_json(&page)
}

/// Add a member (201; the way into an INVITE orbit) or change a member's role (200).
#[utoipa::path(
    tag = "Members",
    params(
        ("orbit" = String, Path, description = "Orbit id or slug."),
        ("contributor" = i64, Path, minimum = 1, description = "Contributor id."),
    ),
    request_body = PutMember,
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses(
        (status = 200, description = "Role changed.", body = MemberWrittenData),
        (status = 201, description = "Member added.", body = MemberWrittenData),
        WriteErrors
    ),
)]
#[put("/orbits/{orbit}/members/{contributor}")]
pub async fn put_member(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    path: Path<(String, i64)>,
    body: Body<PutMember>,
) -> ApiResult<HttpResponse> {
    let (reference, target_id) = path.into_inner();
    write(
        &members::PUT_MEMBER,
        &state,
        bearer,
        key,
        body,
        move |c, who, g, b| members::put(c, who, g, &reference, target_id, b),
    )
    .await
}

#[derive(Serialize, ToSchema)]
pub struct MemberRemovedData {
    pub data: MemberRemoved,
}

/// Remove a member. Any member may remove itself; the last OWNER cannot leave.
///
/// Answers the membership as it was, with the revision of the removal.
#[utoipa::path(
    tag = "Members",
    params(
        ("orbit" = String, Path, description = "Orbit id or slug."),
        ("contributor" = i64, Path, minimum = 1, description = "Contributor id."),
    ),
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = MemberRemovedData), WriteErrors),
)]
#[delete("/orbits/{orbit}/members/{contributor}")]
pub async fn delete_member(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    path: Path<(String, i64)>,
    body: Body<Empty>,
) -> ApiResult<HttpResponse> {
    let (reference, target_id) = path.into_inner();
    write(
        &members::DELETE_MEMBER,
        &state,
        bearer,
        key,
        body,
        move |c, who, g, b| members::remove(c, who, g, &reference, target_id, b),
    )
    .await
}
