//! The change feed of an orbit, read with long poll (REST `GET
//! /api/v1/orbits/{orbit}/changes` and the MCP tool `read_changes`).
//!
//! A long poll reads once for itself; if that page is empty it joins its orbit's
//! waiters (`feed::SharedReads`), and one reader task per orbit reads the feed once
//! per wake-up for all of them (issue 26, finding 3). A poll whose `after` is past
//! the orbit's revision is answered at once (docs/DECISIONS.md), and a client may
//! have at most `ORBIT_LONG_POLLS_PER_CLIENT` polls waiting (429 beyond).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::db;
use crate::domain::access;
use crate::domain::auth::Bearer;
use crate::domain::feed::{self, woken, OrbitWaiters, PollClient, Snapshot};
use crate::domain::Core;
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::model::{page_problems, Validate};
use crate::store::changes::load_page;
pub use crate::store::changes::ChangeOut;

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

/// The query of `GET /api/v1/orbits/{orbit}/changes` (and of `read_changes`).
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

/// The largest page: what a shared read fetches, so it serves every waiter.
const MAX_LIMIT: i64 = 500;

impl Validate for ChangesQuery {
    fn validate(&self, e: &mut FieldErrors) {
        page_problems(e, self.limit, self.after, MAX_LIMIT);
        if let Some(wait) = self.wait {
            e.range("wait", wait, 0, 30);
        }
    }
}

/// One page of an orbit's changes, waiting up to `wait` seconds for the next change
/// when there is none yet (REST and MCP). `reference` is the orbit id or slug;
/// `addr` the client address, which counts the long polls of a request without a
/// token; `gone` resolves when the client has left (`http::peer`): a waiting poll
/// then ends at once, giving its place back, with an empty page nobody reads.
pub async fn read_page(
    core: &Core,
    bearer: Bearer,
    reference: String,
    q: ChangesQuery,
    addr: Option<std::net::IpAddr>,
    gone: impl std::future::Future<Output = ()>,
) -> ApiResult<ChangePage> {
    let mut errors = FieldErrors::default();
    q.validate(&mut errors);
    errors.finish()?;
    let after = q.after.unwrap_or(0);
    let limit = q.limit.unwrap_or(100);
    let wait = q.wait.unwrap_or(0);

    let deadline = Instant::now() + Duration::from_secs(wait as u64);
    let client = match bearer.cache_key(&core.tokens) {
        Some(key) => PollClient::Token(key),
        None => PollClient::Addr(addr.unwrap_or(std::net::IpAddr::from([127, 0, 0, 1]))),
    };
    let tokens = core.tokens.clone();
    let (id, rows, orbit_revision) = db::read(&core.pool, move |conn| {
        bearer.optional(conn, &tokens)?;
        let id = access::resolve(conn, &reference)?.id;
        let (rows, rev) = load_page(conn, id, after, limit)?;
        Ok((id, rows, rev))
    })
    .await?;
    // A poll past the orbit's revision is answered at once: no write can be the
    // one it waits for until the feed has caught up (docs/DECISIONS.md).
    if !rows.is_empty() || wait == 0 || after > orbit_revision {
        return Ok(page(rows, after, orbit_revision));
    }
    let cap = core.config.long_polls_per_client;
    // Its place comes back after the deadline and the page read then (a second
    // covers that on a healthy database).
    let ends = deadline + Duration::from_secs(1);
    let _slot = match core.long_polls.enter(client, cap, ends) {
        Ok(slot) => slot,
        Err(first_ends) => {
            let after = feed::retry_after(first_ends);
            return Err(ApiError::too_many_requests(after).with_message(format!(
                "This client already has {cap} long polls waiting; the first answers within \
                 {after} s at the latest. Wait for one to answer, or poll without `wait`."
            )));
        }
    };
    let (waiter, new) = core.feed_reads.join(id, after);
    let mut latest = waiter.orbit.latest.subscribe();
    // At shutdown a poll answers what it has at once (an empty page: the client
    // polls again, elsewhere), as the event streams end then (`Streams::close`).
    let mut closing = core.events.closing();
    let mut gone = std::pin::pin!(gone);
    if new {
        start_reader(core.clone(), id, waiter.orbit.clone());
    }
    loop {
        let snapshot = latest.borrow_and_update().clone();
        if let Some(s) = snapshot.filter(|s| s.orbit_revision > after) {
            if s.from <= after {
                let rows: Vec<ChangeOut> = s
                    .rows
                    .iter()
                    .filter(|c| c.revision > after)
                    .take(limit as usize)
                    .cloned()
                    .collect();
                if !rows.is_empty() {
                    return Ok(page(rows, after, s.orbit_revision));
                }
            }
            // The shared read began before this poll joined, or stopped short of
            // its `after`: read this page alone (rare).
            drop(waiter);
            core.feed_reads
                .own_reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return own_page(core, id, after, limit).await;
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() || *closing.borrow_and_update() {
            break;
        }
        tokio::select! {
            woke = tokio::time::timeout(remaining, latest.changed()) => match woke {
                Ok(Ok(())) => continue,
                // The deadline.
                _ => break,
            },
            _ = closing.changed() => break,
            () = gone.as_mut() => return Ok(page(Vec::new(), after, orbit_revision)),
        }
    }
    drop(waiter);
    // One last read answers with whatever is there (likely empty); it also covers
    // a wake-up lost between instances.
    own_page(core, id, after, limit).await
}

fn page(rows: Vec<ChangeOut>, after: i64, orbit_revision: i64) -> ChangePage {
    let next_after = rows.last().map(|c| c.revision).unwrap_or(after);
    ChangePage {
        data: rows,
        meta: ChangesMeta {
            next_after,
            orbit_revision,
        },
    }
}

async fn own_page(core: &Core, id: i64, after: i64, limit: i64) -> ApiResult<ChangePage> {
    let (rows, orbit_revision) = db::read(&core.pool, move |conn| {
        Ok(load_page(conn, id, after, limit)?)
    })
    .await?;
    Ok(page(rows, after, orbit_revision))
}

/// The reader of one orbit's waiters: reads the feed once when it starts (a write
/// may have landed before it listened) and once per wake-up after that, from the
/// smallest `after` waiting, and hands the snapshot to every waiter. It ends when
/// no poll waits.
fn start_reader(core: Core, orbit: i64, entry: std::sync::Arc<OrbitWaiters<ChangeOut>>) {
    use tokio::sync::broadcast::error::TryRecvError;
    tokio::spawn(async move {
        let mut rx = core.hub.subscribe();
        let mut first = true;
        loop {
            if !first {
                let woke = woken(&mut rx, orbit, Duration::from_secs(1)).await;
                if core.feed_reads.retire_if_idle(orbit, &entry) {
                    return;
                }
                if !woke {
                    continue;
                }
                // Wake-ups that arrived meanwhile are answered by this read too.
                while !matches!(
                    rx.try_recv(),
                    Err(TryRecvError::Empty | TryRecvError::Closed)
                ) {}
            }
            first = false;
            let Some(from) = entry.min_after() else {
                continue;
            };
            let read = db::read(&core.pool, move |conn| {
                Ok(load_page(conn, orbit, from, MAX_LIMIT)?)
            })
            .await;
            match read {
                Ok((rows, orbit_revision)) => {
                    core.feed_reads
                        .shared_reads
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    entry
                        .latest
                        .send_replace(Some(std::sync::Arc::new(Snapshot {
                            from,
                            rows,
                            orbit_revision,
                        })));
                }
                // The waiters answer from their last read at their deadline.
                Err(e) => tracing::warn!(error = %e, orbit, "shared feed read failed"),
            }
        }
    });
}
