//! The change feed: `GET /api/v1/orbits/{orbit}/changes` with long poll.

use std::time::{Duration, Instant};

use actix_web::{get, web, HttpResponse};
use chrono::{DateTime, Utc};
use diesel::prelude::*;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::db;
use crate::db::schema::{changes, contributors};
use crate::domain::access;
use crate::domain::auth::Bearer;
use crate::domain::feed::ALL_ORBITS;
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::http::api::responses::ReadErrors;
use crate::http::api::{json_response, State};
use crate::http::state::AppState;
use crate::model::{ts, ContributorActor};
use crate::store::contributors::{actor, actor_columns, ActorTuple};

/// One write in an orbit.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChangeOut {
    pub revision: i64,
    /// e.g. `task.created`, `lease.acquired`, `member.added`.
    pub kind: String,
    pub entity_type: String,
    pub entity_id: i64,
    #[schema(required = true)]
    pub task_id: Option<i64>,
    pub contributor: ContributorActor,
    #[serde(with = "ts")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: DateTime<Utc>,
    /// Names side effects, e.g. a superseded handoff or an expired lease.
    pub summary: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ChangesMeta {
    /// The last revision returned, or `after` itself when the page is empty. Never null.
    pub next_after: i64,
    /// The orbit's revision when the page was read.
    pub orbit_revision: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ChangePage {
    pub data: Vec<ChangeOut>,
    pub meta: ChangesMeta,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ChangesQuery {
    /// Return changes with a revision greater than this (default 0).
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// Page size, 1..500 (default 100).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
    /// Seconds to wait for the next change when there is none yet (0..30, default 0).
    #[param(minimum = 0, maximum = 30)]
    pub wait: Option<i64>,
}

type ChangeTuple = (
    i64,
    String,
    String,
    i64,
    Option<i64>,
    DateTime<Utc>,
    String,
    ActorTuple,
);

fn load_page(
    conn: &mut PgConnection,
    orbit_id: i64,
    after: i64,
    limit: i64,
) -> QueryResult<(Vec<ChangeOut>, i64)> {
    let orbit_revision: i64 = crate::db::schema::orbits::table
        .find(orbit_id)
        .select(crate::db::schema::orbits::revision)
        .first(conn)?;
    let rows: Vec<ChangeTuple> = changes::table
        .inner_join(contributors::table)
        .filter(changes::orbit_id.eq(orbit_id))
        .filter(changes::revision.gt(after))
        .filter(changes::revision.le(orbit_revision))
        .order(changes::revision.asc())
        .limit(limit)
        .select((
            changes::revision,
            changes::kind,
            changes::entity_type,
            changes::entity_id,
            changes::task_id,
            changes::created_at,
            changes::summary,
            actor_columns(),
        ))
        .load(conn)?;
    let out = rows
        .into_iter()
        .map(|t| ChangeOut {
            revision: t.0,
            kind: t.1,
            entity_type: t.2,
            entity_id: t.3,
            task_id: t.4,
            created_at: t.5,
            summary: t.6,
            contributor: actor(t.7),
        })
        .collect();
    Ok((out, orbit_revision))
}

/// Read an orbit's changes in revision order.
///
/// With `wait`, an empty page waits up to that many seconds for the next change
/// (long poll); the wait holds no database connection. `meta.next_after` is the
/// value to pass as `after` next time.
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
    path: web::Path<String>,
    query: web::Query<ChangesQuery>,
) -> ApiResult<HttpResponse> {
    let page = read_page(&state, bearer, path.into_inner(), query.into_inner()).await?;
    let body = serde_json::to_vec(&page).map_err(|_| ApiError::internal())?;
    Ok(json_response(actix_web::http::StatusCode::OK, body))
}

/// One page of an orbit's changes, waiting up to `wait` seconds for the next change
/// when there is none yet (REST and MCP). `reference` is the orbit id or slug.
pub async fn read_page(
    state: &AppState,
    bearer: Bearer,
    reference: String,
    q: ChangesQuery,
) -> ApiResult<ChangePage> {
    let after = q.after.unwrap_or(0);
    let limit = q.limit.unwrap_or(100);
    let wait = q.wait.unwrap_or(0);
    let mut errors = FieldErrors::default();
    if after < 0 {
        errors.add("after", "must not be negative");
    }
    errors.range("limit", limit, 1, 500);
    errors.range("wait", wait, 0, 30);
    errors.finish()?;

    let deadline = Instant::now() + Duration::from_secs(wait as u64);
    let mut orbit_id: Option<i64> = None;
    let mut bearer = Some(bearer);
    loop {
        // Subscribe before reading, so a change that lands in between still wakes us.
        let mut rx = state.hub.subscribe();
        let tokens = state.tokens.clone();
        let reference = reference.clone();
        let auth = bearer.take();
        let known = orbit_id;
        let (id, rows, orbit_revision) = db::read(&state.pool, move |conn| {
            if let Some(b) = auth {
                b.optional(conn, &tokens)?;
            }
            let id = match known {
                Some(id) => id,
                None => access::resolve(conn, &reference)?.id,
            };
            let (rows, rev) = load_page(conn, id, after, limit)?;
            Ok((id, rows, rev))
        })
        .await?;
        orbit_id = Some(id);
        let remaining = deadline.saturating_duration_since(Instant::now());
        if !rows.is_empty() || remaining.is_zero() {
            let next_after = rows.last().map(|c| c.revision).unwrap_or(after);
            return Ok(ChangePage {
                data: rows,
                meta: ChangesMeta {
                    next_after,
                    orbit_revision,
                },
            });
        }
        // Wait for a wake-up concerning this orbit, or the deadline.
        let woke = tokio::time::timeout(remaining, async {
            loop {
                match rx.recv().await {
                    Ok(o) if o == id || o == ALL_ORBITS => return,
                    Ok(_) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => return,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                        std::future::pending::<()>().await
                    }
                }
            }
        })
        .await;
        if woke.is_err() {
            // Deadline: one last read answers with whatever is there (likely empty).
            continue;
        }
    }
}
