//! The reads this service runs in groups (`perf::readgroup`): `GET /me` of a token
//! this instance verified, and anonymous `GET` of one task or one contribution; and
//! the reads that REST and MCP share: `GET /me`'s answer, a task, a task's
//! checkpoints.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use utoipa::ToSchema;

use crate::db::{PgPool, TxResult};
use crate::domain::auth::{Bearer, CacheKey, TokenCache};
use crate::error::ApiError;
use crate::model::ContributorActor;
use crate::perf::readgroup::{by_ids, Load, ReadGroups};
use crate::store::contributors::{self as store, MembershipSummary};

/// The kinds of reads run in groups, each its own queue with `ORBIT_READ_LANES`
/// lanes: `GET /me` of a token this instance verified, and anonymous `GET` of one
/// task or one contribution.
pub struct Reads {
    pub me: Arc<ReadGroups<(CacheKey, i64), Me>>,
    pub task: Arc<ReadGroups<i64, Option<crate::store::tasks::Task>>>,
    pub contribution: Arc<ReadGroups<i64, Option<crate::store::contributions::Contribution>>>,
}

impl Reads {
    pub fn new(lanes: usize, deadline: Duration, pool: &PgPool, tokens: Arc<TokenCache>) -> Reads {
        Reads {
            me: Arc::new(ReadGroups::on_pool(
                lanes,
                deadline,
                pool.clone(),
                me_group(tokens),
            )),
            task: Arc::new(ReadGroups::on_pool(
                lanes,
                deadline,
                pool.clone(),
                by_ids(crate::store::tasks::tasks_by_ids),
            )),
            contribution: Arc::new(ReadGroups::on_pool(
                lanes,
                deadline,
                pool.clone(),
                by_ids(crate::store::contributions::contributions_by_ids),
            )),
        }
    }

    /// `(groups run, reads answered, reads waiting)` over every kind.
    pub fn counts(&self) -> (u64, u64, u64) {
        let each = [
            self.me.counts(),
            self.task.counts(),
            self.contribution.counts(),
        ];
        each.iter()
            .fold((0, 0, 0), |a, c| (a.0 + c.0, a.1 + c.1, a.2 + c.2))
    }
}

/// The caller and its memberships.
#[derive(Debug, Serialize, ToSchema)]
pub struct Me {
    pub contributor: ContributorActor,
    pub memberships: Vec<MembershipSummary>,
}

/// Reads a group of `GET /me` requests with one statement, then checks each token
/// as the ordinary path does (revocation, `last_used_at`).
pub fn me_group(tokens: Arc<TokenCache>) -> Box<Load<(CacheKey, i64), Me>> {
    Box::new(move |conn, keys| {
        let ids: Vec<i64> = keys.iter().map(|(_, id)| *id).collect();
        let found = store::tokens_with_memberships(conn, &ids).map_err(ApiError::from)?;
        Ok(keys
            .iter()
            .zip(found)
            .map(|((key, _), found)| {
                let (row, memberships) = found.map_or((None, Vec::new()), |(r, m)| (Some(r), m));
                let caller = crate::domain::auth::admit_cached(conn, &tokens, *key, row)?;
                Ok(Me {
                    contributor: caller.actor,
                    memberships,
                })
            })
            .collect())
    })
}

/// The caller and its memberships (REST and MCP), read with the token in one
/// statement.
pub fn me_of(
    conn: &mut diesel::PgConnection,
    bearer: &Bearer,
    tokens: &TokenCache,
) -> TxResult<Me> {
    let (caller, memberships) = bearer.require_with(conn, tokens, store::token_with_memberships)?;
    Ok(Me {
        contributor: caller.actor,
        memberships,
    })
}

/// A task, or 404 (`GET /tasks/{id}`, the `get_task` tool).
pub fn task(conn: &mut diesel::PgConnection, id: i64) -> TxResult<crate::store::tasks::Task> {
    crate::store::tasks::task(conn, id)?.ok_or_else(|| ApiError::not_found("Task").into())
}

/// A page of a task's checkpoints, ascending; 404 for no such task
/// (`GET /tasks/{id}/checkpoints`, the `list_checkpoints` tool).
pub fn checkpoints(
    conn: &mut diesel::PgConnection,
    task_id: i64,
    cursor: crate::model::Cursor,
) -> TxResult<crate::model::Page<crate::store::tasks::Checkpoint>> {
    crate::store::tasks::task_orbit(conn, task_id)?.ok_or_else(|| ApiError::not_found("Task"))?;
    let rows = crate::store::tasks::checkpoints_of_task(conn, task_id, cursor)?;
    Ok(cursor.page(rows, |c| c.id))
}
