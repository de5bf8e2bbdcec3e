//! Orbit membership: list, add or change a role, remove (contract section 4): the
//! role rules, the units of work and the list, for `http::api::members` and the MCP
//! tools.
//!
//! Roles `OWNER > MAINTAINER > CONTRIBUTOR`. A MAINTAINER may add, change and remove
//! CONTRIBUTORs and MAINTAINERs; only an OWNER may grant, change or remove OWNER.
//! Any member may remove itself. The last OWNER cannot be removed or demoted.
//! A change holds the membership it changes exclusively before it acts
//! (`store::orbits::lock_change`), so it is ordered against that member's writes.

use actix_web::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::db::TxResult;
use crate::domain::access;
use crate::domain::auth::{Bearer, Caller};
use crate::domain::idempotency::{Gate, Operation};
use crate::domain::orbits::{Empty, MemberWritten};
use crate::domain::revision::Change;
use crate::domain::write::{claim, public_page, Reply};
use crate::domain::Core;
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::model::{Page, PageParams, Validate};
use crate::store::contributors as contributors_store;
use crate::store::orbits::{self as store, Member, Role};

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutMember {
    pub role: Role,
}

impl Validate for PutMember {
    fn validate(&self, _: &mut FieldErrors) {}
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

/// The caller's role when it may manage memberships at all (a MAINTAINER or an
/// OWNER), else 403, on the membership as `conn` reads it now.
fn manager(conn: &mut diesel::PgConnection, orbit_id: i64, caller: i64) -> TxResult<Role> {
    let role = access::member_or_forbidden(store::role_of(conn, orbit_id, caller)?)?;
    access::at_least(role, Role::Maintainer, access::MANAGING_MEMBERS)
}

/// Whether `caller` may remove `target`'s membership (404 when there is none,
/// whoever asks: the contract's 404 before 403, and the members are public; else
/// 403 when it may not), on the memberships as `conn` reads them now: the target's
/// role and its membership as the answer shows it.
fn removable(
    conn: &mut diesel::PgConnection,
    orbit_id: i64,
    caller: i64,
    target: i64,
) -> TxResult<(Role, Member)> {
    let Some(member) = store::member(conn, orbit_id, target)? else {
        return Err(ApiError::not_found("Membership").into());
    };
    let caller_role = access::member_or_forbidden(store::role_of(conn, orbit_id, caller)?)?;
    let current = Role::parse(&member.role).ok_or(ApiError::internal())?;
    if target != caller && !access::may_manage(caller_role, current) {
        return Err(access::may_not_manage(caller_role).into());
    }
    Ok((current, member))
}

pub static PUT_MEMBER: Operation =
    Operation::ignored("PUT", "/api/v1/orbits/{orbit}/members/{contributor}");

/// Adding a member or changing a role, inside `domain::write::run`'s transaction (REST and MCP).
pub fn put(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    reference: &str,
    target_id: i64,
    body: ApiResult<&PutMember>,
) -> TxResult<Reply> {
    let orbit = access::resolve(conn, reference)?;
    let target = contributors_store::find(conn, target_id)?
        .ok_or_else(|| ApiError::not_found("Contributor"))?;
    // Judged on an unlocked read first, so a refused request takes no lock (the
    // target's, exclusive, would hold up the target's writes), then again under
    // the locks (`lock_change`), on the roles as they are then.
    manager(conn, orbit.id, caller.id())?;
    store::lock_change(conn, orbit.id, caller.id(), target.id)?;
    let caller_role = manager(conn, orbit.id, caller.id())?;
    let new_role = body?.role;
    let current = store::role_of(conn, orbit.id, target.id)?;
    if !access::may_manage(caller_role, new_role)
        || current.is_some_and(|c| !access::may_manage(caller_role, c))
    {
        return Err(access::may_not_manage(caller_role).into());
    }
    claim!(gate, conn, &[orbit.id, target.id]);
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

pub static DELETE_MEMBER: Operation =
    Operation::ignored("DELETE", "/api/v1/orbits/{orbit}/members/{contributor}");

/// Removing a member (or leaving), inside `domain::write::run`'s transaction (REST and MCP).
pub fn remove(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    reference: &str,
    target_id: i64,
    body: ApiResult<&Empty>,
) -> TxResult<Reply> {
    let orbit = access::resolve(conn, reference)?;
    contributors_store::find(conn, target_id)?.ok_or_else(|| ApiError::not_found("Contributor"))?;
    // Judged on an unlocked read first, so a refused request takes no lock, then
    // again under the locks, as `put` does.
    removable(conn, orbit.id, caller.id(), target_id)?;
    store::lock_change(conn, orbit.id, caller.id(), target_id)?;
    let (current, member) = removable(conn, orbit.id, caller.id(), target_id)?;
    body?;
    claim!(gate, conn, &[orbit.id, target_id]);
    // The membership is held exclusively (`lock_change`): the member's writes under
    // way have committed, and its later ones wait for this removal and are then
    // refused, so the work released here is all there is. Then the member's tasks
    // (inside), then the OWNER rows.
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

/// An orbit's members, ascending by contributor id (REST and MCP).
pub async fn list(
    core: &Core,
    params: PageParams,
    bearer: Bearer,
    reference: String,
) -> ApiResult<Page<Member>> {
    let cursor = params.checked()?;
    public_page(
        core,
        bearer,
        cursor,
        |m: &Member| m.contributor.id,
        move |conn, cursor| {
            let orbit = access::resolve(conn, &reference)?;
            Ok(store::members(conn, orbit.id, cursor)?)
        },
    )
    .await
}
