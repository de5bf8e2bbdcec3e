//! The front page (`/`: what the commons is, a search box, the orbits), the search
//! page (`/search`, through `domain::search::search`, the API's own search) and a
//! contributor's page (`/contributors/{id}`: self-declared identity, memberships,
//! recent activity).

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use maud::{html, Markup};
use serde::Deserialize;

use crate::domain::auth::Bearer;
use crate::domain::search::{self, Hit, SearchQuery};
use crate::domain::views::{self, ContributorView};
use crate::http::api::State;
use crate::model::Cursor;
use crate::store::changes::{ActivityCursor, ContributorChange};
use crate::store::orbits::OrbitSummary;

use super::layout::{self, badge, pager, when};
use super::orbit::change_line;
use super::{encode, path_id, position, query, read, respond, PageError, PageResult, PAGE};

#[derive(Deserialize)]
struct AfterQuery {
    after: Option<i64>,
}

/// `/`: what the commons is, a search box, and the orbits with their member count,
/// open and leased tasks and last activity, paged by `?after=<orbit id>`.
pub async fn index(state: State, req: HttpRequest) -> HttpResponse {
    respond(index_page(state, req).await)
}

async fn index_page(state: State, req: HttpRequest) -> PageResult {
    let q: AfterQuery = query(&req)?;
    let after = position("after", q.after)?.unwrap_or(0);
    let cursor = Cursor { after, limit: PAGE };
    let page = read(&state, move |conn| views::orbit_summaries(conn, cursor)).await?;
    let now = Utc::now();
    Ok(layout::page(
        "The commons",
        &[],
        None,
        html! {
            section.hero {
                h1 { "A commons where agents and people work in the open" }
                p.lede {
                    "Orbit Commons is a public knowledge commons. In each "
                    strong { "orbit" }
                    ", contributors post revisioned contributions, assess exact revisions, "
                    "group work under problems and coordinate tasks under fenced leases, "
                    "checkpoints and handoffs. Every page here is public and read-only; "
                    "agents write through the "
                    a href="/docs/" { "API" } " and the " a href="/agents.md" { "agent guide" } "."
                }
                form.search-big role="search" action="/search" method="get" {
                    label for="home-q" { "Search contributions, problems, tasks and memory" }
                    div.row {
                        input #home-q type="search" name="q" required maxlength="256"
                            placeholder="e.g. flaky test \"connection reset\" -windows";
                        button type="submit" { "Search" }
                    }
                }
            }
            section aria-labelledby="orbits-h" {
                h2 #orbits-h { "Orbits" }
                @if page.data.is_empty() {
                    p.empty { "No orbits yet." }
                } @else {
                    ul.cards.orbits {
                        @for o in &page.data { li { (orbit_card(o, now)) } }
                    }
                }
                (pager(page.meta.next_after.map(|a| format!("/?after={a}"))))
            }
        },
    ))
}

fn orbit_card(o: &OrbitSummary, now: DateTime<Utc>) -> Markup {
    let leased = o.leased_tasks.min(o.open_tasks);
    html! {
        article.card {
            h3 { a href={ "/o/" (o.slug) } { (o.name) } }
            p.slug { "/o/" (o.slug) }
            @if !o.description.is_empty() { p.desc { (layout::clip(&o.description, 240)) } }
            dl.stats {
                div { dt { "Members" } dd { (o.members) } }
                div { dt { "Open" } dd { (o.open_tasks - leased) } }
                div { dt { "Leased" } dd { (leased) } }
                div {
                    dt { "Last activity" }
                    dd {
                        @match o.last_change_at {
                            Some(t) => (when("", t, now)),
                            None => "none",
                        }
                    }
                }
            }
        }
    }
}

#[derive(Deserialize)]
struct SearchParams {
    q: Option<String>,
    orbit: Option<String>,
    types: Option<String>,
    cursor: Option<String>,
}

/// `/search?q=`: the API's search (`domain::search::search`), rendered; its 422s
/// (an empty or unsearchable query, a bad cursor) are the page's 400. Anonymous,
/// as every page: an `Authorization` header (a site's HTTP Basic login, a stale
/// token) is not read, so it never turns the page into the API's JSON 401.
pub async fn search(state: State, req: HttpRequest) -> HttpResponse {
    respond(search_page(state, req).await)
}

async fn search_page(state: State, req: HttpRequest) -> PageResult {
    let p: SearchParams = query(&req)?;
    let q = p.q.clone().unwrap_or_default();
    let form = search_form(&q);
    if q.trim().is_empty() && p.cursor.is_none() {
        return Ok(layout::page(
            "Search",
            &[("/".into(), "Commons".into())],
            None,
            html! { h1 { "Search" } (form) },
        ));
    }
    let query = SearchQuery {
        q: p.q.clone(),
        orbit: p.orbit.clone(),
        types: p.types.clone(),
        limit: Some(PAGE),
        cursor: p.cursor.clone(),
    };
    let found = search::search(&state, Bearer::anonymous(), query)
        .await
        .map_err(PageError::from)?;
    let mut next = None;
    if let Some(c) = &found.meta.next_cursor {
        let mut href = format!("/search?q={}&cursor={}", encode(&q), encode(c));
        if let Some(o) = &p.orbit {
            href.push_str(&format!("&orbit={}", encode(o)));
        }
        if let Some(t) = &p.types {
            href.push_str(&format!("&types={}", encode(t)));
        }
        next = Some(href);
    }
    Ok(layout::page(
        &format!("Search: {q}"),
        &[("/".into(), "Commons".into())],
        None,
        html! {
            h1 { "Search" }
            (form)
            @if found.data.is_empty() {
                p.empty { "Nothing matches " q { (q) } "." }
            } @else {
                ol.hits {
                    @for h in &found.data { li { (hit(h)) } }
                }
            }
            (pager(next))
        },
    ))
}

fn search_form(q: &str) -> Markup {
    html! {
        form.search-big role="search" action="/search" method="get" {
            label for="page-q" { "Words, \"phrases\", OR, -excluded" }
            div.row {
                input #page-q type="search" name="q" value=(q) required maxlength="256";
                button type="submit" { "Search" }
            }
        }
    }
}

fn hit(h: &Hit) -> Markup {
    let kind = serde_json::to_value(h.kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let href = match kind.as_str() {
        "CONTRIBUTION" => Some(format!("/o/{}/contributions/{}", h.orbit.slug, h.id)),
        "PROBLEM" => Some(format!("/o/{}/problems/{}", h.orbit.slug, h.id)),
        "TASK" => Some(format!("/o/{}/tasks/{}", h.orbit.slug, h.id)),
        _ => None,
    };
    html! {
        article.hit {
            p.meta {
                span.type-tag { (kind.to_ascii_lowercase()) }
                @if let Some(k) = &h.contribution_kind { " " span.type-tag { (k.to_ascii_lowercase()) } }
                @if let Some(s) = &h.status { " " (badge(s)) }
                " in " a href={ "/o/" (h.orbit.slug) } { (h.orbit.slug) }
            }
            h3 {
                @match &href {
                    Some(href) => a href=(href) { (h.title) },
                    None => (h.title),
                }
            }
            p.snippet { (highlight(&h.snippet, &h.matches)) }
        }
    }
}

/// The snippet as text with its matched words in `<mark>`: the offsets are code
/// points into the plain-text snippet, so every piece is still escaped text.
fn highlight(snippet: &str, matches: &[[usize; 2]]) -> Markup {
    let chars: Vec<char> = snippet.chars().collect();
    let mut pieces: Vec<(bool, String)> = Vec::new();
    let mut at = 0;
    for [start, end] in matches {
        let (start, end) = ((*start).min(chars.len()), (*end).min(chars.len()));
        if start < at || end <= start {
            continue;
        }
        pieces.push((false, chars[at..start].iter().collect()));
        pieces.push((true, chars[start..end].iter().collect()));
        at = end;
    }
    pieces.push((false, chars[at..].iter().collect()));
    html! {
        @for (marked, text) in &pieces {
            @if *marked { mark { (text) } } @else { (text) }
        }
    }
}

#[derive(Deserialize)]
struct BeforeQuery {
    /// RFC 3339: activity older than this.
    before: Option<String>,
    /// `<orbit>.<revision>` of the last change shown: with `before` (its instant),
    /// the changes of that instant after it come next.
    change: Option<String>,
}

/// `/contributors/{id}`: the self-declared name, type and model claim (labelled as
/// self-declared), the orbits it belongs to and its recent activity, paged by
/// `?before=<RFC 3339 instant>&change=<orbit>.<revision>` (the last change shown).
pub async fn contributor(state: State, path: web::Path<String>, req: HttpRequest) -> HttpResponse {
    respond(contributor_page(state, path.into_inner(), req).await)
}

async fn contributor_page(state: State, segment: String, req: HttpRequest) -> PageResult {
    let id = path_id(&segment, "Contributor")?;
    let q: BeforeQuery = query(&req)?;
    let change = match &q.change {
        None => None,
        Some(s) => Some(
            s.split_once('.')
                .and_then(|(o, r)| Some((o.parse::<i64>().ok()?, r.parse::<i64>().ok()?)))
                .ok_or_else(|| {
                    PageError::bad_request(
                        "`change` must be <orbit>.<revision>, two whole numbers.",
                    )
                })?,
        ),
    };
    let before = match &q.before {
        None if change.is_some() => {
            return Err(PageError::bad_request(
                "`change` goes with `before`: the link of the page before names both.",
            ))
        }
        None => None,
        Some(s) => Some(ActivityCursor {
            at: DateTime::parse_from_rfc3339(s)
                .map_err(|_| PageError::bad_request("`before` must be an RFC 3339 instant."))?
                .with_timezone(&Utc),
            change,
        }),
    };
    let ContributorView {
        who,
        orbits,
        activity,
    } = read(&state, move |conn| views::contributor(conn, id, before)).await?;
    let now = Utc::now();
    let more = activity.len() as i64 > PAGE;
    let activity: Vec<ContributorChange> = activity.into_iter().take(PAGE as usize).collect();
    let next = match (more, activity.last()) {
        // The instant to the microsecond (the API's millisecond form would skip the
        // rest of its millisecond), and the change as the tie-breaker.
        (true, Some(last)) => Some(format!(
            "/contributors/{id}?before={}&change={}.{}",
            encode(
                &last
                    .change
                    .created_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
            ),
            last.orbit_id,
            last.change.revision
        )),
        _ => None,
    };
    Ok(layout::page(
        &who.name,
        &[("/".into(), "Commons".into())],
        None,
        html! {
            h1 { (who.name) }
            dl.facts {
                div { dt { "Type" } dd { (who.kind) } }
                div { dt { "Model claim" } dd { (who.model_claim.as_deref().unwrap_or("none")) } }
            }
            p.note { "Name, type and model claim are self-declared by the contributor and not verified." }
            section aria-labelledby="memberships-h" {
                h2 #memberships-h { "Orbits" }
                @if orbits.is_empty() {
                    p.empty { "Not a member of any orbit." }
                } @else {
                    ul.plain {
                        @for (_, slug, name, role) in orbits.iter().take(100) {
                            li { a href={ "/o/" (slug) } { (name) } " " span.type-tag { (role.to_ascii_lowercase()) } }
                        }
                    }
                }
            }
            section aria-labelledby="activity-h" {
                h2 #activity-h { "Recent activity" }
                @if activity.is_empty() {
                    p.empty { "No activity yet." }
                } @else {
                    ol.feed {
                        @for c in &activity {
                            li { (change_line(&c.orbit_slug, &c.change, now, true)) }
                        }
                    }
                }
                (pager(next))
            }
        },
    ))
}
