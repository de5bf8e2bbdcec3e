//! Orbit membership: list, add or change a role, remove (contract section 4).
//!
//! Roles `OWNER > MAINTAINER > CONTRIBUTOR`. A MAINTAINER may add, change and remove
//! CONTRIBUTORs and MAINTAINERs; only an OWNER may grant, change or remove OWNER.
//! Any member may remove itself. The last OWNER cannot be removed or demoted.

use actix_web::http::StatusCode;
use actix_web::{delete, get, put, web, HttpResponse};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::db::TxResult;
use crate::domain::access;
use crate::domain::auth::{Bearer, Caller};
use crate::domain::idempotency::{Gate, IdemHeader, Operation};
use crate::domain::revision::Change;
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::http::api::orbits::{Empty, MemberWritten, MemberWrittenData};
use crate::http::api::public_read;
use crate::http::api::responses::{ReadErrors, WriteErrors};
use crate::http::api::{page_json, write, Reply, State};
use crate::http::json::{Body, Validate};
use crate::model::{PageMeta, PageParams};
use crate::store::contributors as contributors_store;
use crate::store::orbits::{self as store, Member, Role};

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
    path: web::Path<String>,
    query: crate::http::json::Query<PageParams>,
) -> ApiResult<HttpResponse> {
    let cursor = query.into_inner().checked()?;
    let reference = path.into_inner();
    let rows = public_read(&state, bearer, move |conn| page(conn, &reference, cursor)).await?;
    page_json(&cursor.page(rows, |m| m.contributor.id))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutMember {
    pub role: Role,
}

impl Validate for PutMember {
    fn validate(&self, _: &mut FieldErrors) {}
}

/// The caller may act on a member whose role is `target` (current or new) only if
/// it is an OWNER, or a MAINTAINER and the role is not OWNER.
fn may_manage(caller: Role, target: Role) -> bool {
    match caller {
        Role::Owner => true,
        Role::Maintainer => target != Role::Owner,
        Role::Contributor => false,
    }
}

fn forbidden_for(caller: Role) -> ApiError {
    if caller == Role::Maintainer {
        ApiError::forbidden(
            "insufficient_role",
            "Only an OWNER may grant, change or remove the OWNER role.",
        )
    } else {
        ApiError::forbidden(
            "insufficient_role",
            "Managing members needs the MAINTAINER role or higher.",
        )
    }
}

fn last_owner() -> ApiError {
    ApiError::conflict(
        "last_owner",
        "The last OWNER of an orbit cannot be removed or demoted. Make someone else OWNER first.",
    )
}

/// Refuses a change that would leave the orbit without an OWNER.
fn check_last_owner(
    conn: &mut diesel::PgConnection,
    orbit_id: i64,
    current: Option<Role>,
    new: Option<Role>,
) -> TxResult<()> {
    if current == Some(Role::Owner) && new != Some(Role::Owner) {
        let owners = store::lock_owners(conn, orbit_id)?;
        if owners <= 1 {
            return Err(last_owner().into());
        }
    }
    Ok(())
}

pub static PUT_MEMBER: Operation =
    Operation::ignored("PUT", "/api/v1/orbits/{orbit}/members/{contributor}");

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
    path: web::Path<(String, i64)>,
    body: Body<PutMember>,
) -> ApiResult<HttpResponse> {
    let (reference, target_id) = path.into_inner();
    let canonical = body.canonical.clone();
    write(
        &state,
        bearer,
        IdemHeader::default(),
        &PUT_MEMBER,
        canonical,
        move |conn, caller, gate| put(conn, caller, gate, &reference, target_id, &body),
    )
    .await
}

/// Adding a member or changing a role, inside `domain::write::run`'s transaction (REST and MCP).
pub fn put(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    reference: &str,
    target_id: i64,
    body: &Body<PutMember>,
) -> TxResult<Reply> {
    let orbit = access::resolve(conn, reference)?;
    let target = contributors_store::find(conn, target_id)?
        .ok_or_else(|| ApiError::not_found("Contributor"))?;
    let caller_role = access::require_member(conn, orbit.id, caller.id())?;
    if caller_role == Role::Contributor {
        return Err(forbidden_for(caller_role).into());
    }
    let new_role = body.check()?.role;
    let current = store::role_of(conn, orbit.id, target.id)?;
    if !may_manage(caller_role, new_role) || current.is_some_and(|c| !may_manage(caller_role, c)) {
        return Err(forbidden_for(caller_role).into());
    }
    if let Some(stored) = gate.claim(conn, &[orbit.id, target.id])? {
        return Ok(Reply::replayed(stored));
    }
    check_last_owner(conn, orbit.id, current, Some(new_role))?;
    let added = store::upsert_member(conn, orbit.id, target.id, new_role)?;
    let (kind, summary) = if added {
        (
            "member.added",
            format!("contributor {} added as {}", target.id, new_role.as_str()),
        )
    } else {
        (
            "member.updated",
            format!(
                "contributor {} role {} -> {}",
                target.id,
                current.map(Role::as_str).unwrap_or("NONE"),
                new_role.as_str()
            ),
        )
    };
    let orbit_revision = gate.record(
        orbit.id,
        caller.id(),
        Change {
            kind,
            entity_type: "member",
            entity_id: target.id,
            task_id: None,
            summary,
        },
    )?;
    let member = store::member(conn, orbit.id, target.id)?.ok_or(ApiError::internal())?;
    let status = if added {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Reply::new(
        status,
        &MemberWritten {
            member,
            orbit_revision,
        },
        Some(orbit.id),
    )
}

/// A removed membership.
#[derive(Debug, Serialize, ToSchema)]
pub struct MemberRemoved {
    #[serde(flatten)]
    pub member: Member,
    /// The orbit revision this write produced.
    pub orbit_revision: i64,
}

#[derive(Serialize, ToSchema)]
pub struct MemberRemovedData {
    pub data: MemberRemoved,
}

pub static DELETE_MEMBER: Operation =
    Operation::ignored("DELETE", "/api/v1/orbits/{orbit}/members/{contributor}");

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
    path: web::Path<(String, i64)>,
    body: Body<Empty>,
) -> ApiResult<HttpResponse> {
    let (reference, target_id) = path.into_inner();
    write(
        &state,
        bearer,
        IdemHeader::default(),
        &DELETE_MEMBER,
        body.canonical.clone(),
        move |conn, caller, gate| remove(conn, caller, gate, &reference, target_id, &body),
    )
    .await
}

/// Removing a member (or leaving), inside `domain::write::run`'s transaction (REST and MCP).
pub fn remove(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    reference: &str,
    target_id: i64,
    body: &Body<Empty>,
) -> TxResult<Reply> {
    let orbit = access::resolve(conn, reference)?;
    contributors_store::find(conn, target_id)?.ok_or_else(|| ApiError::not_found("Contributor"))?;
    let caller_role = access::require_member(conn, orbit.id, caller.id())?;
    let Some(member) = store::member(conn, orbit.id, target_id)? else {
        return Err(ApiError::not_found("Membership").into());
    };
    let current = Role::parse(&member.role).ok_or(ApiError::internal())?;
    if target_id != caller.id() && !may_manage(caller_role, current) {
        return Err(forbidden_for(caller_role).into());
    }
    body.check()?;
    if let Some(stored) = gate.claim(conn, &[orbit.id, target_id])? {
        return Ok(Reply::replayed(stored));
    }
    // Lock order: the member's tasks (inside) before the membership rows.
    let released = crate::store::tasks::release_member_work(conn, orbit.id, target_id)?;
    check_last_owner(conn, orbit.id, Some(current), None)?;
    if !store::delete_member(conn, orbit.id, target_id)? {
        return Err(ApiError::not_found("Membership").into());
    }
    let mut summary = if target_id == caller.id() {
        format!("contributor {target_id} left")
    } else {
        format!("contributor {target_id} removed")
    };
    for part in released {
        summary.push_str("; ");
        summary.push_str(&part);
    }
    let orbit_revision = gate.record(
        orbit.id,
        caller.id(),
        Change {
            kind: "member.removed",
            entity_type: "member",
            entity_id: target_id,
            task_id: None,
            summary,
        },
    )?;
    Reply::ok(
        &MemberRemoved {
            member,
            orbit_revision,
        },
        orbit.id,
    )
}

/// A page of an orbit's members (REST and MCP).
pub fn page(
    conn: &mut diesel::PgConnection,
    reference: &str,
    cursor: crate::model::Cursor,
) -> TxResult<Vec<Member>> {
    let orbit = access::resolve(conn, reference)?;
    Ok(store::members(conn, orbit.id, cursor)?)
}
