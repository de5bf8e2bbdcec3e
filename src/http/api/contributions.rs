//! Contributions and their revisions (contract section 6).
//!
//! A contribution is created at revision 1; only its author writes the next
//! revision, naming the revision it started from (`base_revision`), so two edits
//! based on the same revision cannot both win. Every revision stays readable and
//! unchanged. Assessments are in `api::assessments`.

use actix_web::{get, post, web, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::{IntoParams, ToSchema};

use crate::db::TxResult;
use crate::domain::access;
use crate::domain::auth::{Bearer, Caller};
use crate::domain::idempotency::{Gate, IdemHeader, IdempotencyKeyRequired, Operation};
use crate::domain::revision::Change;
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::http::api::public_read;
use crate::http::api::responses::{ReadErrors, WriteErrors};
use crate::http::api::{ok_json, page_json, write, Reply, State};
use crate::http::json::{Body, Validate};
use crate::model::page_bounds;
use crate::model::verbatim;
use crate::model::{PageMeta, PageParams};
use crate::perf::listcache::ListRoute;
use crate::store::contributions::{
    self as store, Contribution, ContributionKind, ContributionRevision,
};
use crate::store::{problems, refs};

#[derive(Serialize, ToSchema)]
pub struct ContributionData {
    pub data: Contribution,
}

#[derive(Serialize, ToSchema)]
pub struct ContributionPage {
    pub data: Vec<Contribution>,
    pub meta: PageMeta,
}

#[derive(Serialize, ToSchema)]
pub struct ContributionRevisionData {
    pub data: ContributionRevision,
}

#[derive(Serialize, ToSchema)]
pub struct ContributionRevisionPage {
    pub data: Vec<ContributionRevision>,
    /// `next_after` is a revision number.
    pub meta: PageMeta,
}

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
        verbatim::text(e, "title", &self.title, 1, 200);
        verbatim::text(e, "body", &self.body, 0, 65536);
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

/// Post a contribution (members only) at revision 1.
///
/// Kinds: ATTEMPT, OBSERVATION, CLAIM, QUESTION, NOTE. Attempts and observations are
/// not verified claims. `problem_id`, `task_id` and `artifact_ids` must name objects
/// of the same orbit (422 otherwise).
#[utoipa::path(
    tag = "Contributions",
    params(("orbit" = String, Path, description = "Orbit id or slug."), IdempotencyKeyRequired),
    request_body = CreateContribution,
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 201, body = ContributionData), WriteErrors),
)]
#[post("/orbits/{orbit}/contributions")]
pub async fn create_contribution(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    path: web::Path<String>,
    body: Body<CreateContribution>,
) -> ApiResult<HttpResponse> {
    let reference = path.into_inner();
    let canonical = body.canonical.clone();
    write(
        &state,
        bearer,
        key,
        &CREATE_CONTRIBUTION,
        canonical,
        move |conn, caller, gate| create(conn, caller, gate, &reference, &body),
    )
    .await
}

/// Contribution creation, inside `domain::write::run`'s transaction (REST and MCP).
/// `reference` is the orbit id or slug.
pub fn create(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    reference: &str,
    body: &Body<CreateContribution>,
) -> TxResult<Reply> {
    let orbit = access::resolve(conn, reference)?;
    access::require_member(conn, orbit.id, caller.id())?;
    let value = body.check()?;
    check_refs(
        conn,
        orbit.id,
        value.problem_id,
        value.task_id,
        value.artifact_ids.as_deref(),
    )?;
    if let Some(stored) = gate.claim(conn, &[orbit.id])? {
        return Ok(Reply::replayed(stored));
    }
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
    let mut out = written_contribution(conn, id)?;
    let rev = gate.record(
        orbit.id,
        caller.id(),
        Change {
            kind: "contribution.created",
            entity_type: "contribution",
            entity_id: id,
            task_id: value.task_id,
            summary: format!("contribution {id} ({}) created", value.kind.as_str()),
        },
    )?;
    out.orbit_revision = Some(rev);
    Reply::created(&out, orbit.id)
}

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

/// List an orbit's contributions (each at its current revision), ascending by id.
#[utoipa::path(
    tag = "Contributions",
    params(("orbit" = String, Path, description = "Orbit id or slug."), ContributionQuery),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = ContributionPage), ReadErrors),
)]
#[get("/orbits/{orbit}/contributions")]
pub async fn list_contributions(
    state: State,
    bearer: Bearer,
    path: web::Path<String>,
    query: crate::http::json::Query<ContributionQuery>,
) -> ApiResult<HttpResponse> {
    let body = list_page(&state, bearer, path.into_inner(), query.into_inner()).await?;
    Ok(crate::http::api::json_response(
        actix_web::http::StatusCode::OK,
        body,
    ))
}

/// A page of an orbit's contributions, through the list cache (REST and MCP).
pub async fn list_page(
    state: &State,
    bearer: Bearer,
    reference: String,
    q: ContributionQuery,
) -> ApiResult<actix_web::web::Bytes> {
    let cursor = page_bounds(q.limit, q.after)?;
    let kind = q.kind.map(ContributionKind::as_str);
    let params = format!(
        "kind={kind:?}&problem_id={:?}&task_id={:?}&after={}&limit={}",
        q.problem_id, q.task_id, cursor.after, cursor.limit
    );
    crate::http::api::public_list(
        state,
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

/// Read a contribution at its current revision.
#[utoipa::path(
    tag = "Contributions",
    params(("contribution" = i64, Path, minimum = 1)),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = ContributionData), ReadErrors),
)]
#[get("/contributions/{contribution}")]
pub async fn get_contribution(
    state: State,
    bearer: Bearer,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let id = path.into_inner();
    let c = match &state.reads {
        // Anonymous: no token to check, so the read can share a group's statement.
        Some(reads) if !bearer.is_present() => reads.contribution.read(id).await?,
        _ => public_read(&state, bearer, move |conn| Ok(read(conn, id)?)).await?,
    };
    ok_json(&c.ok_or_else(|| ApiError::not_found("Contribution"))?)
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
            verbatim::text(e, "title", t, 1, 200);
        }
        if let Some(b) = &self.body {
            verbatim::text(e, "body", b, 0, 65536);
        }
        if let Some(ids) = &self.artifact_ids {
            verbatim::ids(e, "artifact_ids", ids);
        }
    }
}

pub static REVISE_CONTRIBUTION: Operation =
    Operation::required("POST", "/api/v1/contributions/{contribution}/revisions");

/// Write the next revision of your contribution (author only).
///
/// Answers the contribution at `revision = base_revision + 1`, with no assessments
/// yet (earlier revisions keep theirs). Fields left out keep the base revision's
/// values. 409 `revision_conflict` when `base_revision` is not the current revision
/// (`details.current_revision`): read it, merge, and send again.
#[utoipa::path(
    tag = "Contributions",
    params(("contribution" = i64, Path, minimum = 1), IdempotencyKeyRequired),
    request_body = ReviseContribution,
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 201, body = ContributionData), WriteErrors),
)]
#[post("/contributions/{contribution}/revisions")]
pub async fn revise_contribution(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    path: web::Path<i64>,
    body: Body<ReviseContribution>,
) -> ApiResult<HttpResponse> {
    let id = path.into_inner();
    let canonical = body.canonical.clone();
    write(
        &state,
        bearer,
        key,
        &REVISE_CONTRIBUTION,
        canonical,
        move |conn, caller, gate| revise(conn, caller, gate, id, &body),
    )
    .await
}

/// The next revision, inside `domain::write::run`'s transaction (REST and MCP).
pub fn revise(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    id: i64,
    body: &Body<ReviseContribution>,
) -> TxResult<Reply> {
    let head = store::peek(conn, id)?.ok_or_else(|| ApiError::not_found("Contribution"))?;
    access::require_member(conn, head.orbit_id, caller.id())?;
    if head.author_id != caller.id() {
        return Err(ApiError::forbidden(
            "not_author",
            "Only the author of a contribution may revise it. Post your own \
             contribution or an assessment instead.",
        )
        .into());
    }
    let value = body.check()?;
    check_refs(
        conn,
        head.orbit_id,
        None,
        None,
        value.artifact_ids.as_deref(),
    )?;
    if let Some(stored) = gate.claim(conn, &[id])? {
        return Ok(Reply::replayed(stored));
    }
    let head = store::lock(conn, id)?;
    if head.revision != value.base_revision {
        return Err(ApiError::conflict(
            "revision_conflict",
            "The contribution has moved on since base_revision. Read the current \
             revision, merge your change, and send it with that base_revision.",
        )
        .with_details(json!({ "current_revision": head.revision }))
        .into());
    }
    let new_revision = store::insert_revision(
        conn,
        &head,
        value.title.as_deref(),
        value.body.as_deref(),
        value.artifact_ids.as_deref(),
    )?;
    if let Some(problem_id) = head.problem_id {
        problems::uncount_verdicts(conn, problem_id, &head.verdicts)?;
    }
    let mut out = written_contribution(conn, id)?;
    let rev = gate.record(
        head.orbit_id,
        caller.id(),
        Change {
            kind: "contribution.revised",
            entity_type: "contribution",
            entity_id: id,
            task_id: head.task_id,
            summary: format!("contribution {id} revised to revision {new_revision}"),
        },
    )?;
    out.orbit_revision = Some(rev);
    Reply::created(&out, head.orbit_id)
}

/// A contribution's revisions, ascending; `after` and `next_after` are revision numbers.
#[utoipa::path(
    tag = "Contributions",
    params(("contribution" = i64, Path, minimum = 1), PageParams),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = ContributionRevisionPage), ReadErrors),
)]
#[get("/contributions/{contribution}/revisions")]
pub async fn list_revisions(
    state: State,
    bearer: Bearer,
    path: web::Path<i64>,
    query: crate::http::json::Query<PageParams>,
) -> ApiResult<HttpResponse> {
    let cursor = query.into_inner().checked()?;
    let id = path.into_inner();
    let rows = public_read(&state, bearer, move |conn| revisions_page(conn, id, cursor)).await?;
    page_json(&cursor.page(rows, |r| r.revision))
}

/// Read one revision of a contribution exactly as it was written.
#[utoipa::path(
    tag = "Contributions",
    params(("contribution" = i64, Path, minimum = 1), ("n" = i64, Path, minimum = 1)),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = ContributionRevisionData), ReadErrors),
)]
#[get("/contributions/{contribution}/revisions/{n}")]
pub async fn get_revision(
    state: State,
    bearer: Bearer,
    path: web::Path<(i64, i64)>,
) -> ApiResult<HttpResponse> {
    let (id, n) = path.into_inner();
    let r = public_read(&state, bearer, move |conn| read_revision(conn, id, n)).await?;
    ok_json(&r)
}

/// A contribution at its current revision, `None` when there is none (REST and MCP).
pub fn read(conn: &mut diesel::PgConnection, id: i64) -> diesel::QueryResult<Option<Contribution>> {
    store::contribution(conn, id)
}

/// A page of a contribution's revisions (REST and MCP).
pub fn revisions_page(
    conn: &mut diesel::PgConnection,
    id: i64,
    cursor: crate::model::Cursor,
) -> TxResult<Vec<crate::store::contributions::ContributionRevision>> {
    store::peek(conn, id)?.ok_or_else(|| ApiError::not_found("Contribution"))?;
    Ok(store::revisions(conn, id, cursor)?)
}

/// One revision of a contribution (REST and MCP).
pub fn read_revision(
    conn: &mut diesel::PgConnection,
    id: i64,
    n: i64,
) -> TxResult<crate::store::contributions::ContributionRevision> {
    store::peek(conn, id)?.ok_or_else(|| ApiError::not_found("Contribution"))?;
    store::revision(conn, id, n)?.ok_or_else(|| ApiError::not_found("Contribution revision").into())
}
