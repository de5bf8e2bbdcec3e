//! What each page for people shows (`http::pages`, contract section 16), read on
//! one connection: the orbit a page's path names, the orbit page's board and
//! sections and the long lists behind it, a task's and a contribution's history, a
//! problem's overview, a contributor's memberships and activity, and how much of
//! each list a page shows ([`PAGE`], [`BOARD`]). Reads only: where a page shows
//! what the API answers, the API's own reads (`tasks_page`, the very query behind
//! `GET /orbits/{orbit}/tasks`; `problems::overview`; `reads::task` and
//! `reads::checkpoints`), and store reads of its own for what only the pages show
//! (the front page's orbit summaries, a contributor's memberships and activity, an
//! orbit's newest contributions and changes). `http::pages` parses a request, calls
//! one of these inside its `db::read` (the orbit page's through
//! `write::cached_page`), and renders the answer.

use actix_web::web::Bytes;
use chrono::{DateTime, Utc};
use diesel::PgConnection;
use serde::Deserialize;

use crate::db::TxResult;
use crate::domain::write::cached_page;
use crate::domain::{reads, Core};
use crate::error::{ApiError, ApiResult};
use crate::model::{ContributorActor, Cursor, Page};
use crate::store::changes::{self as changes_store, ActivityCursor, ChangeOut, ContributorChange};
use crate::store::contributions::{
    self as contribution_store, Assessment, Contribution, ContributionRevision,
};
use crate::store::handoffs::{self as handoff_store, Handoff};
use crate::store::orbits::{self as orbit_store, Member, Orbit, OrbitSummary};
use crate::store::problems::{self as problem_store, Problem, ProblemOverview};
use crate::store::tasks::{self as task_store, Checkpoint, Lease, Task};

/// Rows a page shows of one list before it links to the next page.
pub const PAGE: i64 = 25;
/// Cards per column of the orbit page's board before it links to the full list.
pub const BOARD: i64 = 12;

/// The orbit a page's path names by slug (or id), or 404.
pub fn orbit_named(conn: &mut PgConnection, slug: &str) -> TxResult<Orbit> {
    orbit_store::find(conn, slug)?.ok_or_else(|| ApiError::not_found("Orbit").into())
}

/// The four columns of the orbit page's board: a task's state as a person reads it
/// (LEASED is an OPEN task under an active lease).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Column {
    Open,
    Leased,
    Completed,
    Cancelled,
}

impl Column {
    pub const ALL: [Column; 4] = [
        Column::Open,
        Column::Leased,
        Column::Completed,
        Column::Cancelled,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Column::Open => "OPEN",
            Column::Leased => "LEASED",
            Column::Completed => "COMPLETED",
            Column::Cancelled => "CANCELLED",
        }
    }

    /// `(status, leased)` for `store::tasks::tasks_page`.
    fn filter(self) -> (&'static str, Option<bool>) {
        match self {
            Column::Open => ("OPEN", Some(false)),
            Column::Leased => ("OPEN", Some(true)),
            Column::Completed => ("COMPLETED", None),
            Column::Cancelled => ("CANCELLED", None),
        }
    }
}

/// One column of the board: a page of the orbit's tasks in that state, and until
/// when the orbit's active leases keep it exact (`None`: no active lease).
fn column_until(
    conn: &mut PgConnection,
    orbit_id: i64,
    column: Column,
    cursor: Cursor,
) -> TxResult<(Page<Task>, Option<DateTime<Utc>>)> {
    let (status, leased) = column.filter();
    let (rows, until) = task_store::tasks_page(conn, orbit_id, Some(status), leased, cursor)?
        .map(|(rows, stamp)| (rows, stamp.m_valid_until))
        .unwrap_or_default();
    Ok((cursor.page(rows, |t| t.id), until))
}

/// Everything the orbit page shows.
pub struct OrbitView {
    pub orbit: Orbit,
    pub board: Vec<(Column, Page<Task>)>,
    pub handoffs: Page<Handoff>,
    pub problems: Page<Problem>,
    pub contributions: Vec<Contribution>,
    pub members: Page<Member>,
    pub feed: Vec<ChangeOut>,
}

/// How long a rendered orbit page is kept at most, even with nothing expiring: its
/// relative times ("3 min ago") were written with the clock of its rendering (the
/// live script corrects them at load).
const PAGE_FRESH: chrono::TimeDelta = chrono::TimeDelta::seconds(10);

/// The orbit page (`/o/{slug}`) through the list cache, as the API's lists
/// (`domain::write::cached_page`): one statement reads the orbit's revision and the
/// clock, and a page rendered (by `render`) at that revision whose stamp still
/// holds is sent again as it was. A write to the orbit advances its revision, so it
/// is never served stale; time alone ends it at the first lease or handoff expiry
/// it shows, or after `PAGE_FRESH`.
pub async fn orbit_page(
    core: &Core,
    slug: String,
    render: impl FnOnce(OrbitView) -> ApiResult<Bytes>,
) -> ApiResult<Bytes> {
    use crate::perf::listcache::{ListRoute, Probe, Stamp};
    let read = |conn: &mut PgConnection, probe: &Probe| {
        let (view, until) = orbit_view(conn, probe.id)?;
        let stamp = Stamp {
            m_revision: view.orbit.revision,
            m_now: probe.now,
            m_valid_until: Some(until.min(probe.now + PAGE_FRESH)),
        };
        Ok((view, stamp))
    };
    cached_page(
        core,
        None,
        slug,
        ListRoute::OrbitPage,
        String::new(),
        read,
        render,
    )
    .await
}

/// Everything the orbit page shows, and the moment after which time alone could
/// change it (a lease or a handoff running out). The orbit row is read first, so
/// the feed never shows a revision the page's `data-live-after` skips, and so the
/// page's revision is never newer than what it shows.
fn orbit_view(conn: &mut PgConnection, orbit_id: i64) -> TxResult<(OrbitView, DateTime<Utc>)> {
    let orbit = orbit_store::find_by_id(conn, orbit_id)?.ok_or(ApiError::not_found("Orbit"))?;
    let first = |limit| Cursor { after: 0, limit };
    let mut board = Vec::with_capacity(Column::ALL.len());
    let mut until: Option<DateTime<Utc>> = None;
    for column in Column::ALL {
        let (tasks, column_until) = column_until(conn, orbit.id, column, first(BOARD))?;
        until = until.into_iter().chain(column_until).min();
        board.push((column, tasks));
    }
    let handoffs = first(BOARD).page(
        handoff_store::pending_of_orbit(conn, orbit.id, first(BOARD))?,
        |h| h.id,
    );
    let problems = first(BOARD).page(
        problem_store::problems_of_orbit(conn, orbit.id, None, first(BOARD))?,
        |p| p.id,
    );
    let contributions = contribution_store::latest_of_orbit(conn, orbit.id, None, BOARD + 1)?;
    let members = first(BOARD).page(orbit_store::members(conn, orbit.id, first(BOARD))?, |m| {
        m.contributor.id
    });
    let feed = changes_store::latest(conn, orbit.id, orbit.revision, PAGE)?;
    let until = until
        .into_iter()
        .chain(handoffs.data.iter().map(|h| h.expires_at))
        .min();
    let view = OrbitView {
        orbit,
        board,
        handoffs,
        problems,
        contributions,
        members,
        feed,
    };
    Ok((view, until.unwrap_or(DateTime::<Utc>::MAX_UTC)))
}

/// One column of an orbit's board, paged (`/o/{slug}/tasks?state=`).
pub fn orbit_tasks(
    conn: &mut PgConnection,
    slug: &str,
    column: Column,
    cursor: Cursor,
) -> TxResult<(Orbit, Page<Task>)> {
    let orbit = orbit_named(conn, slug)?;
    let (page, _) = column_until(conn, orbit.id, column, cursor)?;
    Ok((orbit, page))
}

/// An orbit's changes, newest first, [`PAGE`] of them up to revision `before`
/// (the newest when `None`).
pub fn orbit_activity(
    conn: &mut PgConnection,
    slug: &str,
    before: Option<i64>,
) -> TxResult<(Orbit, Vec<ChangeOut>)> {
    let orbit = orbit_named(conn, slug)?;
    let before = before.unwrap_or(orbit.revision).min(orbit.revision);
    let changes = changes_store::latest(conn, orbit.id, before, PAGE)?;
    Ok((orbit, changes))
}

/// An orbit's members, paged.
pub fn orbit_members(
    conn: &mut PgConnection,
    slug: &str,
    cursor: Cursor,
) -> TxResult<(Orbit, Page<Member>)> {
    let orbit = orbit_named(conn, slug)?;
    let rows = orbit_store::members(conn, orbit.id, cursor)?;
    Ok((orbit, cursor.page(rows, |m| m.contributor.id)))
}

/// An orbit's problems, paged.
pub fn orbit_problems(
    conn: &mut PgConnection,
    slug: &str,
    cursor: Cursor,
) -> TxResult<(Orbit, Page<Problem>)> {
    let orbit = orbit_named(conn, slug)?;
    let rows = problem_store::problems_of_orbit(conn, orbit.id, None, cursor)?;
    Ok((orbit, cursor.page(rows, |p| p.id)))
}

/// An orbit's contributions, newest first, below id `before`: [`PAGE`] and one
/// more, which says whether a next page exists.
pub fn orbit_contributions(
    conn: &mut PgConnection,
    slug: &str,
    before: Option<i64>,
) -> TxResult<(Orbit, Vec<Contribution>)> {
    let orbit = orbit_named(conn, slug)?;
    let rows = contribution_store::latest_of_orbit(conn, orbit.id, before, PAGE + 1)?;
    Ok((orbit, rows))
}

/// A problem of the orbit the path names: the API's overview. Another orbit's is 404.
pub fn problem(conn: &mut PgConnection, slug: &str, id: i64) -> TxResult<(Orbit, ProblemOverview)> {
    let orbit = orbit_named(conn, slug)?;
    let overview = crate::domain::problems::overview(conn, id)?;
    if overview.problem.orbit_id != orbit.id {
        return Err(ApiError::not_found("Problem").into());
    }
    Ok((orbit, overview))
}

/// A contribution's page: the contribution, and its revisions up to `upto` (the
/// current one when `None`), oldest first, [`PAGE`] of them and the one before the
/// oldest (for its diff), each with its own assessments.
pub struct ContributionView {
    pub orbit: Orbit,
    pub contribution: Contribution,
    pub revisions: Vec<(ContributionRevision, Vec<Assessment>)>,
}

/// The contribution `id` of the orbit the path names (another orbit's is 404).
pub fn contribution(
    conn: &mut PgConnection,
    slug: &str,
    id: i64,
    upto: Option<i64>,
) -> TxResult<ContributionView> {
    let orbit = orbit_named(conn, slug)?;
    let c = contribution_store::contribution(conn, id)?
        .filter(|c| c.orbit_id == orbit.id)
        .ok_or(ApiError::not_found("Contribution"))?;
    let upto = upto.unwrap_or(c.revision).clamp(1, c.revision);
    let after = (upto - PAGE - 1).max(0);
    let rows = contribution_store::revisions(
        conn,
        id,
        Cursor {
            after,
            limit: upto - after,
        },
    )?;
    let mut revisions = Vec::with_capacity(rows.len());
    for r in rows.into_iter().filter(|r| r.revision <= upto) {
        let assessments = contribution_store::assessments(
            conn,
            id,
            Some(r.revision),
            Cursor {
                after: 0,
                limit: 100,
            },
        )?;
        revisions.push((r, assessments));
    }
    Ok(ContributionView {
        orbit,
        contribution: c,
        revisions,
    })
}

/// A task's page: the task (the API's read), its problem, and its leases,
/// checkpoints and handoffs, each list paged by its own cursor.
pub struct TaskView {
    pub orbit: Orbit,
    pub task: Task,
    pub problem: Option<Problem>,
    pub leases: Page<Lease>,
    pub checkpoints: Page<Checkpoint>,
    pub handoffs: Page<Handoff>,
}

/// The cursors of a task page's three lists.
pub struct TaskCursors {
    pub leases: Cursor,
    pub checkpoints: Cursor,
    pub handoffs: Cursor,
}

/// The task `id` of the orbit the path names (another orbit's is 404).
pub fn task(conn: &mut PgConnection, slug: &str, id: i64, at: TaskCursors) -> TxResult<TaskView> {
    let orbit = orbit_named(conn, slug)?;
    let task = reads::task(conn, id)?;
    if task.orbit_id != orbit.id {
        return Err(ApiError::not_found("Task").into());
    }
    let problem = match task.problem_id {
        Some(p) => problem_store::problem(conn, p)?,
        None => None,
    };
    let (lc, hc) = (at.leases, at.handoffs);
    let leases = lc.page(task_store::leases_of_task(conn, id, lc)?, |l| l.id);
    let checkpoints = reads::checkpoints(conn, id, at.checkpoints)?;
    let handoffs = hc.page(handoff_store::handoffs_of_task(conn, id, hc)?, |h| h.id);
    Ok(TaskView {
        orbit,
        task,
        problem,
        leases,
        checkpoints,
        handoffs,
    })
}

/// The orbits of the front page, ascending by id, with their counts.
pub fn orbit_summaries(conn: &mut PgConnection, cursor: Cursor) -> TxResult<Page<OrbitSummary>> {
    let rows = orbit_store::summaries(conn, cursor)?;
    Ok(cursor.page(rows, |o| o.id))
}

/// A contributor's page: who they say they are, their orbits (the first 100:
/// `(orbit id, slug, name, role)`), and their changes, newest first, before
/// `before`: [`PAGE`] and one more, which says whether a next page exists.
pub struct ContributorView {
    pub who: ContributorActor,
    pub orbits: Vec<(i64, String, String, String)>,
    pub activity: Vec<ContributorChange>,
}

/// The contributor `id` (404 when there is none).
pub fn contributor(
    conn: &mut PgConnection,
    id: i64,
    before: Option<ActivityCursor>,
) -> TxResult<ContributorView> {
    let who =
        crate::store::contributors::find(conn, id)?.ok_or(ApiError::not_found("Contributor"))?;
    let orbits = orbit_store::memberships_of(
        conn,
        id,
        Cursor {
            after: 0,
            limit: 100,
        },
    )?;
    let activity = changes_store::of_contributor(conn, id, before, PAGE + 1)?;
    Ok(ContributorView {
        who,
        orbits,
        activity,
    })
}
