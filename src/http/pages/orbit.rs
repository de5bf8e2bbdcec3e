//! An orbit's page (`/o/{slug}`): its tasks as a board by state, pending handoffs,
//! problems, latest contributions, members and activity feed, each section a
//! `data-live` region the live script swaps on a change. And the long lists behind
//! it, paged: `/o/{slug}/tasks?state=`, `/activity`, `/members`, `/problems`,
//! `/contributions`. What each shows is read by `domain::views`.

use actix_web::web::Bytes;
use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use maud::{html, Markup};
use serde::Deserialize;

use crate::domain::views::{self, Column, OrbitView};
use crate::http::api::State;
use crate::model::{Cursor, Page};
use crate::store::changes::ChangeOut;
use crate::store::contributions::Contribution;
use crate::store::handoffs::Handoff;
use crate::store::orbits::{Member, Orbit};
use crate::store::problems::Problem;
use crate::store::tasks::Task;

use super::layout::{self, actor, badge, pager, when, Live};
use super::{position, query, read, respond, PageResult, BOARD, PAGE};

/// What a column of the board holds, in a line under its heading.
fn explain(column: Column) -> &'static str {
    match column {
        Column::Open => "Waiting for someone to lease them.",
        Column::Leased => "Being worked on under a lease.",
        Column::Completed => "Done.",
        Column::Cancelled => "Called off.",
    }
}

/// `/o/{slug}`, through the list cache (`views::orbit_page`).
pub async fn orbit(state: State, path: web::Path<String>) -> HttpResponse {
    let render = |view: OrbitView| Ok(Bytes::from(super::html_text(orbit_markup(&view))));
    match views::orbit_page(&state, path.into_inner(), render).await {
        Ok(body) => super::html_bytes(body),
        Err(e) => super::error_page(e.into()),
    }
}

fn orbit_markup(v: &OrbitView) -> Markup {
    let now = Utc::now();
    let o = &v.orbit;
    let base = format!("/o/{}", o.slug);
    layout::page(
        &o.name,
        &[("/".into(), "Commons".into())],
        Some(Live {
            orbit: &o.slug,
            revision: o.revision,
            task: None,
        }),
        html! {
            (orbit_header(o, now))
            section #board.board-wrap data-live aria-labelledby="board-h" {
                h2 #board-h { "Tasks" }
                div.board {
                    @for (state, tasks) in &v.board {
                        (board_column(&base, *state, tasks, now))
                    }
                }
            }
            div.grid2 {
                section #handoffs data-live aria-labelledby="handoffs-h" {
                    h2 #handoffs-h { "Pending handoffs" }
                    @if v.handoffs.data.is_empty() {
                        p.empty { "No handoff is waiting." }
                    } @else {
                        ul.plain { @for h in &v.handoffs.data { li { (handoff_line(&base, h, now)) } } }
                    }
                }
                section #problems data-live aria-labelledby="problems-h" {
                    h2 #problems-h { "Problems" }
                    (problem_list(&base, &v.problems.data, now))
                    @if v.problems.meta.next_after.is_some() {
                        p { a href={ (base) "/problems" } { "All problems →" } }
                    }
                }
            }
            div.grid2 {
                section #contributions data-live aria-labelledby="contributions-h" {
                    h2 #contributions-h { "Latest contributions" }
                    (contribution_list(&base, v.contributions.iter().take(BOARD as usize), now))
                    @if v.contributions.len() as i64 > BOARD {
                        p { a href={ (base) "/contributions" } { "All contributions →" } }
                    }
                }
                section #members data-live aria-labelledby="members-h" {
                    h2 #members-h { "Members" }
                    (member_list(&v.members.data))
                    @if v.members.meta.next_after.is_some() {
                        p { a href={ (base) "/members" } { "All members →" } }
                    }
                }
            }
            section #feed data-live aria-labelledby="feed-h" {
                h2 #feed-h { "Activity" }
                (feed(&o.slug, &v.feed, now))
                @if v.feed.last().is_some_and(|c| c.revision > 1) {
                    p { a href={ (base) "/activity?before=" (v.feed.last().map_or(0, |c| c.revision - 1)) } { "Older activity →" } }
                }
            }
        },
    )
}

fn orbit_header(o: &Orbit, now: DateTime<Utc>) -> Markup {
    html! {
        header.page-head {
            h1 { (o.name) }
            p.meta {
                span.slug { "/o/" (o.slug) } " · "
                span.type-tag { "join: " (o.join_policy.to_ascii_lowercase()) } " · revision "
                span #orbit-revision { (o.revision) } " · created by " (actor(&o.created_by)) " "
                (when("", o.created_at, now))
            }
            @if !o.description.is_empty() { p.desc { (o.description) } }
        }
    }
}

fn board_column(base: &str, state: Column, tasks: &Page<Task>, now: DateTime<Utc>) -> Markup {
    let label = state.label();
    let id = format!("col-{}", label.to_ascii_lowercase());
    html! {
        section class={ "column c-" (label.to_ascii_lowercase()) } aria-labelledby=(id) {
            h3 #(id) { (badge(label)) }
            p.explain { (explain(state)) }
            @if tasks.data.is_empty() {
                p.empty { "None." }
            } @else {
                ul.tasks {
                    @for t in &tasks.data { li { (task_card(base, t, now)) } }
                }
            }
            @if let Some(after) = tasks.meta.next_after {
                p.more { a href={ (base) "/tasks?state=" (label) "&after=" (after) } { "More " (label.to_ascii_lowercase()) " tasks →" } }
            }
        }
    }
}

/// A task on the board or in a list: its title, and by its state the lease holder
/// with the time left, or when it ended.
pub fn task_card(base: &str, t: &Task, now: DateTime<Utc>) -> Markup {
    html! {
        article.task-card {
            a.title href={ (base) "/tasks/" (t.id) } { (t.title) }
            p.meta {
                span.id { "#" (t.id) }
                @if let Some(l) = &t.active_lease {
                    " · held by " (actor(&l.contributor))
                    " · " strong.left { (when("expires ", l.expires_at, now)) }
                    " · lease v" (l.lease_version)
                } @else if t.status == "OPEN" {
                    " · " (when("created ", t.created_at, now))
                } @else {
                    " · " (t.status.to_ascii_lowercase()) " " (when("", t.updated_at, now))
                }
            }
        }
    }
}

fn handoff_line(base: &str, h: &Handoff, now: DateTime<Utc>) -> Markup {
    html! {
        article.handoff {
            p {
                (badge(&h.status)) " "
                a href={ (base) "/tasks/" (h.task_id) } { "task #" (h.task_id) }
                " from " (actor(&h.from_contributor)) " to "
                @match &h.to_contributor {
                    Some(to) => (actor(to)),
                    None => "any member",
                }
                " · " (when("expires ", h.expires_at, now))
            }
            p.quote { (layout::clip(&h.message, 300)) }
        }
    }
}

pub fn problem_list(base: &str, problems: &[Problem], now: DateTime<Utc>) -> Markup {
    html! {
        @if problems.is_empty() {
            p.empty { "No problems yet." }
        } @else {
            ul.plain {
                @for p in problems {
                    li {
                        (badge(&p.status)) " "
                        a href={ (base) "/problems/" (p.id) } { (p.title) }
                        " · " (when("", p.created_at, now))
                    }
                }
            }
        }
    }
}

pub fn contribution_list<'a>(
    base: &str,
    items: impl Iterator<Item = &'a Contribution>,
    now: DateTime<Utc>,
) -> Markup {
    let items: Vec<&Contribution> = items.collect();
    html! {
        @if items.is_empty() {
            p.empty { "No contributions yet." }
        } @else {
            ul.plain {
                @for c in items {
                    li {
                        span.type-tag { (c.kind.to_ascii_lowercase()) } " "
                        a href={ (base) "/contributions/" (c.id) } { (c.title) }
                        " · rev " (c.revision) " by " (actor(&c.author)) " · " (when("", c.updated_at, now))
                    }
                }
            }
        }
    }
}

fn member_list(members: &[Member]) -> Markup {
    html! {
        @if members.is_empty() {
            p.empty { "No members." }
        } @else {
            ul.plain.members {
                @for m in members {
                    li { (actor(&m.contributor)) " " span.type-tag { (m.role.to_ascii_lowercase()) } }
                }
            }
        }
    }
}

/// The activity feed, newest first.
pub fn feed(slug: &str, changes: &[ChangeOut], now: DateTime<Utc>) -> Markup {
    html! {
        @if changes.is_empty() {
            p.empty { "No activity yet." }
        } @else {
            ol.feed {
                @for c in changes { li { (change_line(slug, c, now, false)) } }
            }
        }
    }
}

/// One change: who did what, to which object (linked), and when.
pub fn change_line(slug: &str, c: &ChangeOut, now: DateTime<Utc>, with_orbit: bool) -> Markup {
    let base = format!("/o/{slug}");
    let target = match c.entity_type.as_str() {
        "problem" => Some((
            format!("{base}/problems/{}", c.entity_id),
            format!("problem #{}", c.entity_id),
        )),
        "contribution" => Some((
            format!("{base}/contributions/{}", c.entity_id),
            format!("contribution #{}", c.entity_id),
        )),
        _ => c
            .task_id
            .map(|t| (format!("{base}/tasks/{t}"), format!("task #{t}"))),
    };
    html! {
        span.rev { "r" (c.revision) } " "
        (actor(&c.contributor)) " "
        code.kind-code { (c.kind) }
        @if let Some((href, label)) = target { " " a href=(href) { (label) } }
        @if with_orbit { " in " a href=(base) { (slug) } }
        " · " (when("", c.created_at, now))
        @if !c.summary.is_empty() { span.summary { " — " bdi { (layout::clip(&c.summary, 200)) } } }
    }
}

#[derive(Deserialize)]
struct TasksQuery {
    state: Option<Column>,
    after: Option<i64>,
}

/// `/o/{slug}/tasks?state=OPEN|LEASED|COMPLETED|CANCELLED&after=<id>`: one column
/// of the board, paged.
pub async fn tasks(state: State, path: web::Path<String>, req: HttpRequest) -> HttpResponse {
    respond(tasks_page(state, path.into_inner(), req).await)
}

async fn tasks_page(state: State, slug: String, req: HttpRequest) -> PageResult {
    let q: TasksQuery = query(&req)?;
    let which = q.state.unwrap_or(Column::Open);
    let after = position("after", q.after)?.unwrap_or(0);
    let cursor = Cursor { after, limit: PAGE };
    let (orbit, page) = read(&state, move |conn| {
        views::orbit_tasks(conn, &slug, which, cursor)
    })
    .await?;
    let now = Utc::now();
    let base = format!("/o/{}", orbit.slug);
    let label = which.label();
    list_page(
        &orbit,
        &format!("{label} tasks"),
        html! {
            nav.tabs aria-label="Task states" {
                @for s in Column::ALL {
                    a href={ (base) "/tasks?state=" (s.label()) } aria-current=[(s == which).then_some("page")] { (s.label()) }
                }
            }
            @if page.data.is_empty() { p.empty { "None." } } @else {
                ul.tasks.wide { @for t in &page.data { li { (task_card(&base, t, now)) } } }
            }
            (pager(page.meta.next_after.map(|a| format!("{base}/tasks?state={label}&after={a}"))))
        },
    )
}

#[derive(Deserialize)]
struct BeforeQuery {
    before: Option<i64>,
}

/// `/o/{slug}/activity?before=<revision>`: the feed, newest first, paged backwards.
pub async fn activity(state: State, path: web::Path<String>, req: HttpRequest) -> HttpResponse {
    respond(activity_page(state, path.into_inner(), req).await)
}

async fn activity_page(state: State, slug: String, req: HttpRequest) -> PageResult {
    let q: BeforeQuery = query(&req)?;
    let before = position("before", q.before)?;
    let (orbit, changes) = read(&state, move |conn| {
        views::orbit_activity(conn, &slug, before)
    })
    .await?;
    let now = Utc::now();
    let next = changes
        .last()
        .filter(|c| c.revision > 1 && changes.len() as i64 == PAGE)
        .map(|c| format!("/o/{}/activity?before={}", orbit.slug, c.revision - 1));
    list_page(
        &orbit,
        "Activity",
        html! { (feed(&orbit.slug, &changes, now)) (pager(next)) },
    )
}

#[derive(Deserialize)]
struct AfterQuery {
    after: Option<i64>,
}

/// `/o/{slug}/members?after=<contributor id>`.
pub async fn members(state: State, path: web::Path<String>, req: HttpRequest) -> HttpResponse {
    respond(members_page(state, path.into_inner(), req).await)
}

async fn members_page(state: State, slug: String, req: HttpRequest) -> PageResult {
    let q: AfterQuery = query(&req)?;
    let cursor = Cursor {
        after: position("after", q.after)?.unwrap_or(0),
        limit: PAGE,
    };
    let (orbit, page) = read(&state, move |conn| {
        views::orbit_members(conn, &slug, cursor)
    })
    .await?;
    let next = page
        .meta
        .next_after
        .map(|a| format!("/o/{}/members?after={a}", orbit.slug));
    list_page(
        &orbit,
        "Members",
        html! { (member_list(&page.data)) (pager(next)) },
    )
}

/// `/o/{slug}/problems?after=<id>`.
pub async fn problems(state: State, path: web::Path<String>, req: HttpRequest) -> HttpResponse {
    respond(problems_page(state, path.into_inner(), req).await)
}

async fn problems_page(state: State, slug: String, req: HttpRequest) -> PageResult {
    let q: AfterQuery = query(&req)?;
    let cursor = Cursor {
        after: position("after", q.after)?.unwrap_or(0),
        limit: PAGE,
    };
    let (orbit, page) = read(&state, move |conn| {
        views::orbit_problems(conn, &slug, cursor)
    })
    .await?;
    let now = Utc::now();
    let base = format!("/o/{}", orbit.slug);
    let next = page
        .meta
        .next_after
        .map(|a| format!("{base}/problems?after={a}"));
    list_page(
        &orbit,
        "Problems",
        html! { (problem_list(&base, &page.data, now)) (pager(next)) },
    )
}

/// `/o/{slug}/contributions?before=<id>`: newest first.
pub async fn contributions(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
) -> HttpResponse {
    respond(contributions_page(state, path.into_inner(), req).await)
}

async fn contributions_page(state: State, slug: String, req: HttpRequest) -> PageResult {
    let q: BeforeQuery = query(&req)?;
    let before = position("before", q.before)?;
    let (orbit, rows) = read(&state, move |conn| {
        views::orbit_contributions(conn, &slug, before)
    })
    .await?;
    let now = Utc::now();
    let base = format!("/o/{}", orbit.slug);
    let next = (rows.len() as i64 > PAGE)
        .then(|| rows.get(PAGE as usize - 1))
        .flatten()
        .map(|c| format!("{base}/contributions?before={}", c.id));
    list_page(
        &orbit,
        "Contributions",
        html! { (contribution_list(&base, rows.iter().take(PAGE as usize), now)) (pager(next)) },
    )
}

/// A list page under an orbit: breadcrumbs back to it, a heading, the list.
fn list_page(orbit: &Orbit, heading: &str, body: Markup) -> PageResult {
    let base = format!("/o/{}", orbit.slug);
    Ok(layout::page(
        &format!("{heading} · {}", orbit.name),
        &[("/".into(), "Commons".into()), (base, orbit.name.clone())],
        None,
        html! { h1 { (heading) } (body) },
    ))
}
