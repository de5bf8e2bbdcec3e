//! The change feed: `GET /api/v1/orbits/{orbit}/changes` with long poll. The reads,
//! the shared waits and the per-client limit are `domain::changes`.

use crate::http::params::Path;
use actix_web::{get, HttpResponse};

use crate::domain::auth::Bearer;
use crate::domain::changes::{self, ChangePage, ChangesQuery};
use crate::error::ApiResult;
use crate::http::api::responses::ReadErrors;
use crate::http::api::{json_response, State};

/// Read an orbit's changes in revision order.
///
/// With `wait`, an empty page waits up to that many seconds for the next change
/// (long poll); the wait holds no database connection. `meta.next_after` is the
/// value to pass as `after` next time. An `after` past the orbit's revision is
/// answered at once (an empty page, `meta.orbit_revision` below `after`). A client
/// (a token, or an address without one) may have a few long polls waiting at once
/// (`ORBIT_LONG_POLLS_PER_CLIENT`, default 8); beyond, 429.
#[utoipa::path(
    tag = "Orbits",
    params(("orbit" = String, Path, description = "Orbit id or slug."), ChangesQuery),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = ChangePage), ReadErrors),
)]
#[get("/orbits/{orbit}/changes")]
pub async fn list_changes(
    state: State,
    bearer: Bearer,
    req: actix_web::HttpRequest,
    path: Path<String>,
    query: crate::http::params::Query<ChangesQuery>,
) -> ApiResult<HttpResponse> {
    let addr = state.limits.client_ip(&req);
    let page = changes::read_page(
        &state,
        bearer,
        path.into_inner(),
        query.into_inner(),
        Some(addr),
        crate::http::peer::gone(&req),
    )
    .await?;
    Ok(json_response(
        actix_web::http::StatusCode::OK,
        crate::model::json_bytes(&page)?,
    ))
}
