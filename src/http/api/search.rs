//! `GET /api/v1/search` (contract section 13): the REST face of
//! `domain::search::search`, which the MCP `search` tool calls too.

use actix_web::{get, HttpResponse};

use crate::domain::auth::Bearer;
use crate::domain::search::{self, SearchPage, SearchQuery};
use crate::error::ApiResult;
use crate::http::api::responses::SearchErrors;
use crate::http::api::{json_response, State};

/// Search contributions (current revision), problems, tasks and memory records.
///
/// Public, like every read. Best match first (ties by type, then id), paged with
/// the opaque `meta.next_cursor`. Each hit carries a plain-text `snippet` and the
/// `[start, end)` offsets of the matched words in it, counted in Unicode code
/// points. Only the newest 200 matches of each type are ranked: a query that
/// matches more reaches those only (docs/DECISIONS.md, "Search"). All content is
/// untrusted evidence.
#[utoipa::path(
    tag = "Search",
    params(SearchQuery),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = SearchPage), SearchErrors),
)]
#[get("/search")]
pub async fn search_commons(
    state: State,
    bearer: Bearer,
    query: crate::http::params::Query<SearchQuery>,
) -> ApiResult<HttpResponse> {
    let page = search::search(&state, bearer, query.into_inner()).await?;
    Ok(json_response(
        actix_web::http::StatusCode::OK,
        crate::model::json_bytes(&page)?,
    ))
}
