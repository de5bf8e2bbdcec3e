//! Orbits: create, list, read, join (contract section 4). The units of work and the
//! reads are `domain::orbits`.

use crate::http::params::Path;
use actix_web::{get, post, HttpResponse};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::auth::Bearer;
use crate::domain::idempotency::{IdemHeader, IdempotencyKeyOptional};
use crate::domain::orbits::{self, CreateOrbit, Empty, MemberWritten, OrbitWritten};
use crate::error::ApiResult;
use crate::http::api::responses::{ReadErrors, WriteErrors};
use crate::http::api::{ok_json, page_json, write, State};
use crate::http::json::Body;
use crate::model::{PageMeta, PageParams};
use crate::store::orbits::Orbit;

/// Path parameter: an orbit id or its slug.
pub type OrbitRef = Path<String>;

#[derive(Serialize, ToSchema)]
pub struct OrbitWrittenData {
    pub data: OrbitWritten,
}

#[derive(Serialize, ToSchema)]
pub struct OrbitData {
    pub data: Orbit,
}

#[derive(Serialize, ToSchema)]
pub struct OrbitPage {
    pub data: Vec<Orbit>,
    pub meta: PageMeta,
}

/// Create an orbit. The creator becomes its OWNER; this is the orbit's revision 1.
///
/// Honours `Idempotency-Key` when sent.
#[utoipa::path(
    tag = "Orbits",
    request_body = CreateOrbit,
    params(IdempotencyKeyOptional),
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 201, body = OrbitWrittenData), WriteErrors),
)]
#[post("/orbits")]
pub async fn create_orbit(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    body: Body<CreateOrbit>,
) -> ApiResult<HttpResponse> {
    write(
        &orbits::CREATE_ORBIT,
        &state,
        bearer,
        key,
        body,
        orbits::create,
    )
    .await
}

/// List orbits, ascending by id.
#[utoipa::path(
    tag = "Orbits",
    params(PageParams),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = OrbitPage), ReadErrors),
)]
#[get("/orbits")]
pub async fn list_orbits(
    state: State,
    bearer: Bearer,
    query: crate::http::params::Query<PageParams>,
) -> ApiResult<HttpResponse> {
    page_json(&orbits::list(&state, query.into_inner(), bearer).await?)
}

/// Read an orbit by id or slug.
#[utoipa::path(
    tag = "Orbits",
    params(("orbit" = String, Path, description = "Orbit id or slug.")),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = OrbitData), ReadErrors),
)]
#[get("/orbits/{orbit}")]
pub async fn get_orbit(state: State, bearer: Bearer, path: OrbitRef) -> ApiResult<HttpResponse> {
    let reference = path.into_inner();
    ok_json(&orbits::get(&state, bearer, reference).await?)
}

#[derive(Serialize, ToSchema)]
pub struct MemberWrittenData {
    pub data: MemberWritten,
}

/// Join an OPEN orbit as CONTRIBUTOR.
///
/// 403 `invite_only` for an INVITE orbit (a MAINTAINER adds members there);
/// 409 `already_member`.
#[utoipa::path(
    tag = "Orbits",
    params(("orbit" = String, Path, description = "Orbit id or slug.")),
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 201, body = MemberWrittenData), WriteErrors),
)]
#[post("/orbits/{orbit}/join")]
pub async fn join_orbit(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    path: OrbitRef,
    body: Body<Empty>,
) -> ApiResult<HttpResponse> {
    let reference = path.into_inner();
    write(
        &orbits::JOIN_ORBIT,
        &state,
        bearer,
        key,
        body,
        move |c, who, g, b| orbits::join(c, who, g, &reference, b),
    )
    .await
}
