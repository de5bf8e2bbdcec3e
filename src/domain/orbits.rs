//! Orbits: create, list, read, join (contract section 4): the slug rule, the units of
//! work and the reads behind `http::api::orbits` and the MCP tools, and the empty body
//! that bodiless writes take.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::db::TxResult;
use crate::domain::access;
use crate::domain::auth::{Bearer, Caller};
use crate::domain::idempotency::{Gate, Operation};
use crate::domain::revision::Change;
use crate::domain::write::{claim, public_page, public_read, Reply};
use crate::domain::Core;
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::model::{Page, PageParams, Validate};
use crate::store::orbits::{self as store, JoinPolicy, Member, Orbit, Role};

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

/// The longest slug (the pattern's 1 + 62 characters). No orbit reference, a slug
/// or an id (at most 19 digits), is longer ([`check_reference`]).
pub const MAX_SLUG_CHARS: usize = 63;

/// The words for an orbit given as a field that can name no orbit.
pub const NOT_AN_ORBIT: &str = "must be an orbit id or slug";

/// The one check of an orbit reference given as a field (search's `orbit`, a
/// webhook's, an MCP tool's): an id or a slug is not empty, not longer than a
/// slug, and holds no U+0000. In a REST path such a reference names no orbit: 404.
/// Whether it passed.
pub fn check_reference(e: &mut FieldErrors, field: &str, reference: &str) -> bool {
    let fits = !reference.is_empty()
        && !crate::store::orbits::names_nothing(reference)
        && reference.chars().count() <= MAX_SLUG_CHARS;
    if !fits {
        e.add(field, NOT_AN_ORBIT);
    }
    fits
}

pub fn valid_slug(slug: &str) -> bool {
    let b = slug.as_bytes();
    (2..=MAX_SLUG_CHARS).contains(&b.len())
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
        e.text("name", &self.name, 1, 200);
        if let Some(d) = &self.description {
            e.text("description", d, 0, 20000);
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

pub static CREATE_ORBIT: Operation = Operation::optional("POST", "/api/v1/orbits");

/// Creating an orbit, inside `domain::write::run`'s transaction (REST and MCP).
pub fn create(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    body: ApiResult<&CreateOrbit>,
) -> TxResult<Reply> {
    let value = body?;
    claim!(gate, conn, &[]);
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

/// A membership write's result.
#[derive(Debug, Serialize, ToSchema)]
pub struct MemberWritten {
    #[serde(flatten)]
    pub member: Member,
    /// The orbit revision this write produced.
    pub orbit_revision: i64,
}

pub static JOIN_ORBIT: Operation = Operation::ignored("POST", "/api/v1/orbits/{orbit}/join");

/// Joining, inside `domain::write::run`'s transaction (REST and MCP). `reference` is the
/// orbit id or slug.
pub fn join(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    reference: &str,
    body: ApiResult<&Empty>,
) -> TxResult<Reply> {
    let orbit = access::resolve(conn, reference)?;
    if orbit.join_policy != JoinPolicy::Open.as_str() {
        return Err(ApiError::forbidden(
            "invite_only",
            "This orbit is INVITE only: no one joins it, its MAINTAINERs add its members \
             (GET /api/v1/me lists the orbits you are a member of).",
        )
        .into());
    }
    if store::role_of(conn, orbit.id, caller.id())?.is_some() {
        return Err(already_member().into());
    }
    body?;
    claim!(gate, conn, &[orbit.id]);
    if !store::upsert_member(conn, orbit.id, caller.id(), Role::Contributor)? {
        return Err(already_member().into());
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

/// 409 `already_member`.
fn already_member() -> ApiError {
    ApiError::conflict("already_member", "You are already a member of this orbit.")
}

/// Orbits, ascending by id (REST and MCP).
pub async fn list(core: &Core, params: PageParams, bearer: Bearer) -> ApiResult<Page<Orbit>> {
    let cursor = params.checked()?;
    public_page(
        core,
        bearer,
        cursor,
        |o: &Orbit| o.id,
        |conn, cursor| Ok(store::list(conn, cursor)?),
    )
    .await
}

/// An orbit by id or slug (REST and MCP).
pub async fn get(core: &Core, bearer: Bearer, reference: String) -> ApiResult<Orbit> {
    public_read(core, bearer, move |conn| access::resolve(conn, &reference)).await
}

/// A body with no fields: absent, empty or `{}`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

impl Validate for Empty {
    fn validate(&self, _: &mut FieldErrors) {}
}
