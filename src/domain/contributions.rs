//! Contributions and their revisions (contract section 6): the units of work and
//! reads behind `http::api::contributions` and the MCP tools.
//!
//! A contribution is created at revision 1; only its author writes the next
//! revision, naming the revision it started from (`base_revision`), so two edits
//! based on the same revision cannot both win. Every revision stays readable and
//! unchanged. Assessments are in `domain::assessments`.

use actix_web::http::StatusCode;
use serde::Deserialize;
use serde_json::json;
use utoipa::{IntoParams, ToSchema};

use crate::db::TxResult;
use crate::domain::access;
use crate::domain::auth::{Bearer, Caller};
use crate::domain::idempotency::{Gate, Operation};
use crate::domain::marks::Marks;
use crate::domain::revision::{Change, PENDING};
use crate::domain::write::{claim, public_list, public_page, public_read, Quick, Reply, Unit};
use crate::domain::Core;
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::model::{
    page_problems, query_cursor, verbatim, Cursor, Page, PageParams, Validate, MAX_PAGE,
};
use crate::perf::listcache::ListRoute;
use crate::perf::quick::QuickCall;
use crate::store::contributions::{
    self as store, Contribution, ContributionKind, ContributionRevision, VerdictCounts,
};
use crate::store::{problems, refs};

/// Body of `POST /api/v1/orbits/{orbit}/contributions`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateContribution {
    pub kind: ContributionKind,
    #[schema(min_length = 1, max_length = 200)]
    pub title: String,
    /// Stored and returned verbatim. May be empty.
    #[schema(max_length = 65536)]
    pub body: String,
    /// A problem of the same orbit.
    #[schema(minimum = 1)]
    pub problem_id: Option<i64>,
    /// A task of the same orbit.
    #[schema(minimum = 1)]
    pub task_id: Option<i64>,
    /// Artifacts of the same orbit (at most 100).
    #[schema(max_items = 100)]
    pub artifact_ids: Option<Vec<i64>>,
}

impl Validate for CreateContribution {
    fn validate(&self, e: &mut FieldErrors) {
        e.text("title", &self.title, 1, 200);
        e.text("body", &self.body, 0, 65536);
        if let Some(ids) = &self.artifact_ids {
            verbatim::ids(e, "artifact_ids", ids);
        }
    }
}

/// 422 for every referenced id that is not in the orbit, all reported together.
fn check_refs(
    conn: &mut diesel::PgConnection,
    orbit_id: i64,
    problem_id: Option<i64>,
    task_id: Option<i64>,
    artifact_ids: Option<&[i64]>,
) -> TxResult<()> {
    let mut errors = FieldErrors::default();
    if let Some(id) = problem_id {
        if !refs::problem_in_orbit(conn, orbit_id, id)? {
            errors.add("problem_id", "no such problem in this orbit");
        }
    }
    if let Some(id) = task_id {
        if !refs::task_in_orbit(conn, orbit_id, id)? {
            errors.add("task_id", "no such task in this orbit");
        }
    }
    if let Some(ids) = artifact_ids {
        if !refs::artifacts_in_orbit(conn, orbit_id, ids)? {
            errors.add("artifact_ids", "every artifact must exist in this orbit");
        }
    }
    errors.finish()?;
    Ok(())
}

/// Reads a contribution back inside the write's transaction (before the revision,
/// so the orbit lock is held only for the last statements before commit).
pub fn written_contribution(conn: &mut diesel::PgConnection, id: i64) -> TxResult<Contribution> {
    Ok(store::contribution(conn, id)?.ok_or(ApiError::internal())?)
}

pub static CREATE_CONTRIBUTION: Operation =
    Operation::required("POST", "/api/v1/orbits/{orbit}/contributions");

/// Contribution creation, inside `domain::write::run`'s transaction (REST and MCP),
/// in the orbit named by `reference` (id or slug), at revision 1.
fn create(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    reference: &str,
    body: ApiResult<&CreateContribution>,
) -> TxResult<Reply> {
    let orbit = access::member_orbit(conn, reference, caller.id())?;
    let value = body?;
    check_refs(
        conn,
        orbit.id,
        value.problem_id,
        value.task_id,
        value.artifact_ids.as_deref(),
    )?;
    claim!(gate, conn, &[orbit.id]);
    let id = store::insert(
        conn,
        orbit.id,
        value.kind,
        caller.id(),
        value.problem_id,
        value.task_id,
        &value.title,
        &value.body,
        value.artifact_ids.as_deref().unwrap_or_default(),
    )?;
    if let Some(problem_id) = value.problem_id {
        problems::count_contribution(conn, problem_id, value.kind)?;
    }
    let mut contribution = written_contribution(conn, id)?;
    contribution.orbit_revision =
        Some(gate.record(orbit.id, caller.id(), created(&contribution))?);
    Reply::created(&contribution, orbit.id)
}

/// Contribution creation in the orbit named by `reference` (id or slug), as its
/// REST route and MCP tool run it: [`create`], tried first as a quick write when
/// the orbit is named by its id and the body is valid ([`quick_create`]).
pub fn create_unit(
    reference: String,
    body: ApiResult<&CreateContribution>,
) -> Unit<CreateContribution> {
    let quick = access::orbit_id_of(&reference)
        .zip(body.ok())
        .and_then(|(orbit_id, value)| quick_create(orbit_id, value));
    Unit::new(quick, move |c, who, g, b| create(c, who, g, &reference, b))
}

/// Contribution creation as a quick write (`perf::quick`), for an orbit named by
/// its id and a contribution with no problem, task or artifacts (the ordinary path
/// checks those): answered as [`create`] answers it, with marks for what the
/// statement chooses (the contribution's id and times). A new contribution is at
/// revision 1, by its caller, with no assessments.
fn quick_create(orbit_id: i64, value: &CreateContribution) -> Option<Quick> {
    let no_artifacts = value.artifact_ids.as_ref().is_none_or(Vec::is_empty);
    if value.problem_id.is_some() || value.task_id.is_some() || !no_artifacts {
        return None;
    }
    let kind = value.kind.as_str();
    let (title, body) = (value.title.clone(), value.body.clone());
    Some(Quick {
        call: QuickCall::CreateContribution {
            orbit_id,
            kind,
            title: title.clone(),
            body: body.clone(),
        },
        render: Box::new(move |actor| {
            let mut marks = Marks::default();
            let contribution = Contribution {
                id: marks.number("id"),
                orbit_id,
                kind: kind.into(),
                revision: 1,
                title,
                body,
                author: actor.clone(),
                problem_id: None,
                task_id: None,
                artifact_ids: Vec::new(),
                verdict_counts: VerdictCounts::default(),
                created_at: marks.time("created_at"),
                updated_at: marks.time("updated_at"),
                orbit_revision: Some(PENDING),
            };
            let reply = Reply::new(StatusCode::CREATED, &contribution, None).ok()?;
            marks.rendered(reply, created(&contribution))
        }),
    })
}

/// The change of a contribution's creation.
fn created(contribution: &Contribution) -> Change<'static> {
    Change {
        kind: "contribution.created",
        entity_type: "contribution",
        entity_id: contribution.id,
        task_id: contribution.task_id,
        summary: format!(
            "contribution {} ({}) created",
            contribution.id, contribution.kind
        ),
    }
}

/// The query of `GET /api/v1/orbits/{orbit}/contributions` (and of its tool).
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ContributionQuery {
    /// Only contributions of this kind.
    pub kind: Option<ContributionKind>,
    /// Only contributions of this problem.
    #[param(minimum = 1)]
    pub problem_id: Option<i64>,
    /// Only contributions of this task.
    #[param(minimum = 1)]
    pub task_id: Option<i64>,
    /// Page size, 1..100 (default 50).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<i64>,
    /// Return contributions with an id greater than this.
    #[param(minimum = 0)]
    pub after: Option<i64>,
}

impl Validate for ContributionQuery {
    fn validate(&self, e: &mut FieldErrors) {
        page_problems(e, self.limit, self.after, MAX_PAGE);
        if self.problem_id.is_some_and(|id| id < 1) {
            e.add("problem_id", "must be a positive id");
        }
        if self.task_id.is_some_and(|id| id < 1) {
            e.add("task_id", "must be a positive id");
        }
    }
}

impl ContributionQuery {
    /// The list cache's key of this query at `cursor`: its parameters, defaults applied.
    fn cache_params(&self, cursor: Cursor) -> String {
        let kind = self.kind.map(ContributionKind::as_str);
        format!(
            "kind={kind:?}&problem_id={:?}&task_id={:?}&after={}&limit={}",
            self.problem_id, self.task_id, cursor.after, cursor.limit
        )
    }
}

/// A page of an orbit's contributions, through the list cache (REST and MCP).
pub async fn list(
    core: &Core,
    q: ContributionQuery,
    bearer: Bearer,
    reference: String,
) -> ApiResult<actix_web::web::Bytes> {
    let cursor = query_cursor(&q, q.limit, q.after)?;
    let params = q.cache_params(cursor);
    let kind = q.kind.map(ContributionKind::as_str);
    public_list(
        core,
        bearer,
        reference,
        ListRoute::Contributions,
        params,
        move |conn, orbit_id| {
            Ok(
                store::contributions_page(conn, orbit_id, kind, q.problem_id, q.task_id, cursor)?
                    .map(|(rows, stamp)| (cursor.page(rows, |c| c.id), stamp)),
            )
        },
    )
    .await
}

/// Body of `POST /api/v1/contributions/{contribution}/revisions`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviseContribution {
    /// The revision this edit starts from: must be the current one.
    #[schema(minimum = 1)]
    pub base_revision: i64,
    /// Absent: the base revision's title.
    #[schema(min_length = 1, max_length = 200)]
    pub title: Option<String>,
    /// Absent: the base revision's body.
    #[schema(max_length = 65536)]
    pub body: Option<String>,
    /// Absent: the base revision's artifacts. Artifacts of the same orbit.
    #[schema(max_items = 100)]
    pub artifact_ids: Option<Vec<i64>>,
}

impl Validate for ReviseContribution {
    fn validate(&self, e: &mut FieldErrors) {
        if self.base_revision < 1 {
            e.add("base_revision", "must be at least 1");
        }
        if let Some(t) = &self.title {
            e.text("title", t, 1, 200);
        }
        if let Some(b) = &self.body {
            e.text("body", b, 0, 65536);
        }
        if let Some(ids) = &self.artifact_ids {
            verbatim::ids(e, "artifact_ids", ids);
        }
    }
}

pub static REVISE_CONTRIBUTION: Operation =
    Operation::required("POST", "/api/v1/contributions/{contribution}/revisions");

/// The next revision, inside `domain::write::run`'s transaction (REST and MCP).
fn revise(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    id: i64,
    body: ApiResult<&ReviseContribution>,
) -> TxResult<Reply> {
    let (head, role) = store::peek_as(conn, id, caller.id())?
        .ok_or_else(|| ApiError::not_found("Contribution"))?;
    access::member_or_forbidden(role)?;
    if head.author_id != caller.id() {
        return Err(ApiError::forbidden(
            "not_author",
            "Only the author of a contribution may revise it. Post your own \
             contribution or an assessment instead.",
        )
        .into());
    }
    let value = body?;
    check_refs(
        conn,
        head.orbit_id,
        None,
        None,
        value.artifact_ids.as_deref(),
    )?;
    claim!(gate, conn, &[id]);
    let head = store::lock(conn, id)?;
    let Some(new_revision) = store::insert_revision(
        conn,
        id,
        value.base_revision,
        value.title.as_deref(),
        value.body.as_deref(),
        value.artifact_ids.as_deref(),
    )?
    else {
        // `contribution_revise` decided: base_revision is not the current one.
        let message = if value.base_revision > head.revision {
            // Not a revision anyone read: no one has moved on from it.
            "base_revision is ahead of the contribution's current revision \
             (details.current_revision). Read the current revision, merge your change, and \
             send it with that base_revision."
        } else {
            "The contribution has moved on since base_revision. Read the current \
             revision, merge your change, and send it with that base_revision."
        };
        return Err(ApiError::conflict("revision_conflict", message)
            .with_details(json!({ "current_revision": head.revision }))
            .into());
    };
    if let Some(problem_id) = head.problem_id {
        problems::uncount_verdicts(conn, problem_id, &head.verdicts)?;
    }
    let mut contribution = written_contribution(conn, id)?;
    contribution.orbit_revision = Some(gate.record(
        head.orbit_id,
        caller.id(),
        revised(id, head.task_id, new_revision),
    )?);
    Reply::created(&contribution, head.orbit_id)
}

/// Contribution `id`'s next revision, as its REST route and MCP tool run it:
/// [`revise`], tried first as a quick write when the body is valid
/// ([`quick_revise`]).
pub fn revise_unit(id: i64, body: ApiResult<&ReviseContribution>) -> Unit<ReviseContribution> {
    let quick = body.ok().and_then(|value| quick_revise(id, value));
    Unit::new(quick, move |c, who, g, b| revise(c, who, g, id, b))
}

/// The next revision as a quick write (`perf::quick`), when the request names no
/// artifacts (the ordinary path checks those): answered as [`revise`] answers it,
/// with marks for what the statement reads or chooses (the fields the revision
/// keeps, the orbit, the task, the times). The statement declines a contribution
/// with a problem (the ordinary path adjusts its counters) or with artifacts, a
/// caller who is not its author, a base revision that is not current, and a kept
/// text holding U+0001 (`Marks::text`).
fn quick_revise(id: i64, value: &ReviseContribution) -> Option<Quick> {
    if value.artifact_ids.is_some() {
        return None;
    }
    let (title, body) = (value.title.clone(), value.body.clone());
    let revision = value.base_revision + 1;
    Some(Quick {
        call: QuickCall::Revise {
            contribution_id: id,
            base_revision: value.base_revision,
            title: title.clone(),
            body: body.clone(),
        },
        render: Box::new(move |actor| {
            let mut marks = Marks::default();
            let task_id = marks.number("task_id");
            let contribution = Contribution {
                id,
                orbit_id: marks.number("orbit_id"),
                kind: marks.text("kind"),
                revision,
                title: title.unwrap_or_else(|| marks.text("title")),
                body: body.unwrap_or_else(|| marks.text("body")),
                author: actor.clone(),
                problem_id: None,
                task_id: Some(task_id),
                artifact_ids: Vec::new(),
                verdict_counts: VerdictCounts::default(),
                created_at: marks.time("created_at"),
                updated_at: marks.time("updated_at"),
                orbit_revision: Some(PENDING),
            };
            let reply = Reply::new(StatusCode::CREATED, &contribution, None).ok()?;
            marks.rendered(reply, revised(id, Some(task_id), revision))
        }),
    })
}

/// The change of a contribution's next revision.
fn revised(id: i64, task_id: Option<i64>, revision: i64) -> Change<'static> {
    Change {
        kind: "contribution.revised",
        entity_type: "contribution",
        entity_id: id,
        task_id,
        summary: format!("contribution {id} revised to revision {revision}"),
    }
}

/// A contribution at its current revision (REST and MCP).
pub async fn get(core: &Core, bearer: Bearer, id: i64) -> ApiResult<Contribution> {
    let c = match &core.reads {
        // Anonymous: no token to check, so the read can share a group's statement.
        Some(reads) if !bearer.is_present() => reads.contribution.read(id).await?,
        _ => public_read(core, bearer, move |conn| Ok(store::contribution(conn, id)?)).await?,
    };
    c.ok_or_else(|| ApiError::not_found("Contribution"))
}

/// A contribution's revisions, ascending by revision number (REST and MCP).
pub async fn revisions(
    core: &Core,
    params: PageParams,
    bearer: Bearer,
    id: i64,
) -> ApiResult<Page<ContributionRevision>> {
    let cursor = params.checked()?;
    public_page(
        core,
        bearer,
        cursor,
        |r: &ContributionRevision| r.revision,
        move |conn, cursor| {
            store::peek(conn, id)?.ok_or_else(|| ApiError::not_found("Contribution"))?;
            Ok(store::revisions(conn, id, cursor)?)
        },
    )
    .await
}

/// One revision of a contribution, exactly as it was written (REST and MCP).
pub async fn revision(
    core: &Core,
    bearer: Bearer,
    id: i64,
    n: i64,
) -> ApiResult<ContributionRevision> {
    public_read(core, bearer, move |conn| {
        store::peek(conn, id)?.ok_or_else(|| ApiError::not_found("Contribution"))?;
        store::revision(conn, id, n)?
            .ok_or_else(|| ApiError::not_found("Contribution revision").into())
    })
    .await
}
