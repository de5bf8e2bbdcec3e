//! Who may do what in an orbit: the one owner of the membership and role checks
//! (contract sections 4 and 5), and of the 404 for an orbit named by slug or id.
//! Every write and read that needs one calls these; the answers are worded here. A
//! write's check holds the membership until the write commits (the SQL function
//! `member_role`), so a concurrent removal or role change is ordered wholly before
//! or after it; a read's takes no lock.

use diesel::PgConnection;

use crate::db::TxResult;
use crate::error::ApiError;
use crate::model::Role;
use crate::store::orbits::{find, find_with_role, held_role, role_of, Orbit};

/// How a reference names an orbit by id (`store::orbits::id_of`), for the layers
/// above the store.
pub use crate::store::orbits::id_of as orbit_id_of;

/// Like `find`, but 404 when absent.
pub fn resolve(conn: &mut PgConnection, reference: &str) -> TxResult<Orbit> {
    find(conn, reference)?.ok_or_else(|| ApiError::not_found("Orbit").into())
}

/// The orbit named by id or slug (404) of which the caller is a member (403): what
/// every write into an orbit checks first (the membership held: module doc).
pub fn member_orbit(
    conn: &mut PgConnection,
    reference: &str,
    contributor_id: i64,
) -> TxResult<Orbit> {
    let (orbit, role) = find_with_role(conn, reference, contributor_id)?
        .ok_or_else(|| ApiError::not_found("Orbit"))?;
    member_or_forbidden(role)?;
    Ok(orbit)
}

/// [`member_orbit`] for a read (`find_work`): the same answers, no lock.
pub fn member_orbit_read(
    conn: &mut PgConnection,
    reference: &str,
    contributor_id: i64,
) -> TxResult<Orbit> {
    let orbit = resolve(conn, reference)?;
    member_or_forbidden(role_of(conn, orbit.id, contributor_id)?)?;
    Ok(orbit)
}

/// Writing inside an orbit needs membership: the caller's role (held: module
/// doc), or 403.
pub fn require_member(
    conn: &mut PgConnection,
    orbit_id: i64,
    contributor_id: i64,
) -> TxResult<Role> {
    member_or_forbidden(held_role(conn, orbit_id, contributor_id)?)
}

/// A role already looked up, or 403 `not_a_member`.
pub fn member_or_forbidden(role: Option<Role>) -> TxResult<Role> {
    role.ok_or_else(|| {
        ApiError::forbidden(
            "not_a_member",
            "Only members of this orbit may do this: join it if it is OPEN, or ask one of its \
             MAINTAINERs to add you if it is INVITE only; then send the request again.",
        )
        .into()
    })
}

/// The caller must hold at least `min` in the orbit, else 403 (worded by
/// [`at_least`], naming `action`).
pub fn require_role(
    conn: &mut PgConnection,
    orbit_id: i64,
    contributor_id: i64,
    min: Role,
    action: &str,
) -> TxResult<Role> {
    at_least(require_member(conn, orbit_id, contributor_id)?, min, action)
}

/// A member's role already looked up, when it is at least `min`; else 403
/// `insufficient_role`, saying what `action` ("Cancelling a task") needs.
pub fn at_least(role: Role, min: Role, action: &str) -> TxResult<Role> {
    if role < min {
        return Err(insufficient(min, action).into());
    }
    Ok(role)
}

fn insufficient(min: Role, action: &str) -> ApiError {
    ApiError::forbidden(
        "insufficient_role",
        format!("{action} needs the {} role or higher.", min.as_str()),
    )
}

/// The action a member change is, in a refusal's words.
pub const MANAGING_MEMBERS: &str = "Managing members";

/// Whether a member whose role is `caller` may grant, change or remove a role
/// `target` (another member's, current or new): an OWNER any, a MAINTAINER any
/// but OWNER, a CONTRIBUTOR none.
pub fn may_manage(caller: Role, target: Role) -> bool {
    match caller {
        Role::Owner => true,
        Role::Maintainer => target != Role::Owner,
        Role::Contributor => false,
    }
}

/// The 403 of a caller that may not manage a role ([`may_manage`]): a MAINTAINER
/// touched the OWNER role, or a CONTRIBUTOR tried at all.
pub fn may_not_manage(caller: Role) -> ApiError {
    if caller < Role::Maintainer {
        return insufficient(Role::Maintainer, MANAGING_MEMBERS);
    }
    ApiError::forbidden(
        "insufficient_role",
        "Only an OWNER may grant, change or remove the OWNER role.",
    )
}
