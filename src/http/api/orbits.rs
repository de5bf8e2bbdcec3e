//! Orbits: create, list, read, join (contract section 4).

use actix_web::{get, post, web, HttpResponse};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::db::TxResult;
use crate::domain::access;
use crate::domain::auth::{Bearer, Caller};
use crate::domain::idempotency::{Gate, IdemHeader, IdempotencyKeyOptional, Operation};
use crate::domain::revision::Change;
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::http::api::public_read;
use crate::http::api::responses::{ReadErrors, WriteErrors};
use crate::http::api::{ok_json, page_json, write, Reply, State};
use crate::http::json::{Body, Validate};
use crate::model::{PageMeta, PageParams};
use crate::store::orbits::{self as store, JoinPolicy, Member, Orbit, Role};

/// Path parameter: an orbit id or its slug.
pub type OrbitRef = web::Path<String>;

/// Body of `POST /api/v1/orbits`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateOrbit {
    /// `^[a-z][a-z0-9-]{1,62}$`, unique.
    #[schema(pattern = "^[a-z][a-z0-9-]{1,62}$")]
    pub slug: String,
    #[schema(min_length = 1, max_length = 200)]
    pub name: String,
    #[schema(max_length = 20000)]
    pub description: Option<String>,
    /// Default `OPEN`.
    pub join_policy: Option<JoinPolicy>,
}

pub fn valid_slug(slug: &str) -> bool {
    let b = slug.as_bytes();
    (2..=63).contains(&b.len())
        && b[0].is_ascii_lowercase()
        && b[1..]
            .iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

impl Validate for CreateOrbit {
    fn validate(&self, e: &mut FieldErrors) {
        if !valid_slug(&self.slug) {
            e.add("slug", "must match ^[a-z][a-z0-9-]{1,62}$");
        }
        e.len("name", &self.name, 1, 200);
        if let Some(d) = &self.description {
            e.len("description", d, 0, 20000);
        }
    }
}

/// A write's result: the object plus the orbit revision the write produced.
#[derive(Debug, Serialize, ToSchema)]
pub struct OrbitWritten {
    #[serde(flatten)]
    pub orbit: Orbit,
    /// The orbit revision this write produced.
    pub orbit_revision: i64,
}

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

pub static CREATE_ORBIT: Operation = Operation::optional("POST", "/api/v1/orbits");

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
    let canonical = body.canonical.clone();
    write(
        &state,
        bearer,
        key,
        &CREATE_ORBIT,
        canonical,
        move |conn, caller, gate| create(conn, caller, gate, &body),
    )
    .await
}

/// Creating an orbit, inside `domain::write::run`'s transaction (REST and MCP).
pub fn create(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    body: &Body<CreateOrbit>,
) -> TxResult<Reply> {
    let value = body.check()?;
    if let Some(stored) = gate.claim(conn, &[])? {
        return Ok(Reply::replayed(stored));
    }
    let id = store::insert(
        conn,
        &value.slug,
        &value.name,
        value.description.as_deref().unwrap_or(""),
        value.join_policy.unwrap_or_default(),
        caller.id(),
    )?
    .ok_or_else(|| ApiError::conflict("slug_taken", "An orbit with this slug already exists."))?;
    let orbit_revision = gate.record(
        id,
        caller.id(),
        Change {
            kind: "orbit.created",
            entity_type: "orbit",
            entity_id: id,
            task_id: None,
            summary: format!("orbit {} created", value.slug),
        },
    )?;
    let mut orbit = store::find_by_id(conn, id)?.ok_or(ApiError::internal())?;
    // The orbit is new and not yet visible to others: the change recorded
    // above, applied as the transaction's last statement, makes it revision 1.
    orbit.revision += 1;
    Reply::created(
        &OrbitWritten {
            orbit,
            orbit_revision,
        },
        id,
    )
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
    query: crate::http::json::Query<PageParams>,
) -> ApiResult<HttpResponse> {
    let cursor = query.into_inner().checked()?;
    let rows = public_read(&state, bearer, move |conn| Ok(store::list(conn, cursor)?)).await?;
    page_json(&cursor.page(rows, |o| o.id))
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
    let orbit = public_read(&state, bearer, move |conn| {
        access::resolve(conn, &reference)
    })
    .await?;
    ok_json(&orbit)
}

/// A membership write's result.
#[derive(Debug, Serialize, ToSchema)]
pub struct MemberWritten {
    #[serde(flatten)]
    pub member: Member,
    /// The orbit revision this write produced.
    pub orbit_revision: i64,
}

#[derive(Serialize, ToSchema)]
pub struct MemberWrittenData {
    pub data: MemberWritten,
}

pub static JOIN_ORBIT: Operation = Operation::ignored("POST", "/api/v1/orbits/{orbit}/join");

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
    path: OrbitRef,
    body: Body<Empty>,
) -> ApiResult<HttpResponse> {
    let reference = path.into_inner();
    write(
        &state,
        bearer,
        IdemHeader::default(),
        &JOIN_ORBIT,
        body.canonical.clone(),
        move |conn, caller, gate| join(conn, caller, gate, &reference, &body),
    )
    .await
}

/// Joining, inside `domain::write::run`'s transaction (REST and MCP). `reference` is the
/// orbit id or slug.
pub fn join(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    reference: &str,
    body: &Body<Empty>,
) -> TxResult<Reply> {
    let orbit = access::resolve(conn, reference)?;
    if orbit.join_policy != JoinPolicy::Open.as_str() {
        return Err(ApiError::forbidden(
            "invite_only",
            "This orbit is INVITE only: a MAINTAINER must add you.",
        )
        .into());
    }
    if store::role_of(conn, orbit.id, caller.id())?.is_some() {
        return Err(ApiError::conflict(
            "already_member",
            "You are already a member of this orbit.",
        )
        .into());
    }
    body.check()?;
    if let Some(stored) = gate.claim(conn, &[orbit.id])? {
        return Ok(Reply::replayed(stored));
    }
    if !store::upsert_member(conn, orbit.id, caller.id(), Role::Contributor)? {
        return Err(ApiError::conflict(
            "already_member",
            "You are already a member of this orbit.",
        )
        .into());
    }
    let orbit_revision = gate.record(
        orbit.id,
        caller.id(),
        Change {
            kind: "member.added",
            entity_type: "member",
            entity_id: caller.id(),
            task_id: None,
            summary: format!("contributor {} joined as CONTRIBUTOR", caller.id()),
        },
    )?;
    let member = store::member(conn, orbit.id, caller.id())?.ok_or(ApiError::internal())?;
    Reply::created(
        &MemberWritten {
            member,
            orbit_revision,
        },
        orbit.id,
    )
}

/// A body with no fields: absent, empty or `{}`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

impl Validate for Empty {
    fn validate(&self, _: &mut FieldErrors) {}
}
