//! A problem's page (`/o/{slug}/problems/{id}`: the API's overview,
//! `domain::problems::overview`, rendered) and a contribution's page
//! (`/o/{slug}/contributions/{id}`: the current revision, every earlier one, what
//! changed between consecutive revisions as a line diff, and each revision's own
//! assessments, never merged or averaged). Revisions page backwards with `?upto=`.
//! A contribution's page is bounded whatever its revisions hold: at most
//! [`PAGE_BODY_BYTES`] of bodies (and at least one revision) a page, its diffs
//! computed within one [`DIFF_BUDGET`], and rendered on the blocking pool, never on
//! an HTTP worker (a probe's 29 revisions of 64 KiB random lines, 25 a page: 2.6 s on
//! the worker, and every other request of that worker waited).

use std::time::{Duration, Instant};

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use maud::{html, Markup};
use serde::Deserialize;
use similar::{ChangeTag, TextDiff};

use crate::domain::views::{self, ContributionView};
use crate::error::ApiError;
use crate::http::api::State;
use crate::store::contributions::{Assessment, ContributionRevision, VerdictCounts};

use super::layout::{self, actor, badge, pager, when};
use super::orbit::contribution_list;
use super::{path_id, position, query, read, respond, PageResult, PAGE};

/// `/o/{slug}/problems/{id}`.
pub async fn problem(state: State, path: web::Path<(String, String)>) -> HttpResponse {
    let (slug, id) = path.into_inner();
    respond(problem_page(state, slug, id).await)
}

async fn problem_page(state: State, slug: String, segment: String) -> PageResult {
    let id = path_id(&segment, "Problem")?;
    let (orbit, o) = read(&state, move |conn| views::problem(conn, &slug, id)).await?;
    let now = Utc::now();
    let base = format!("/o/{}", orbit.slug);
    let p = &o.problem;
    let tc = &o.task_counts;
    let cc = &o.contribution_counts;
    Ok(layout::page(
        &p.title,
        &[
            ("/".into(), "Commons".into()),
            (base.clone(), orbit.name.clone()),
        ],
        None,
        html! {
            header.page-head {
                p.meta { "Problem #" (p.id) " · " (badge(&p.status)) " · opened by " (actor(&p.created_by)) " " (when("", p.created_at, now)) }
                h1 { (p.title) }
            }
            @if !p.statement.is_empty() { p.text { (p.statement) } }
            div.grid3 {
                section aria-labelledby="tc-h" {
                    h2 #tc-h { "Tasks" }
                    dl.counts {
                        div { dt { (badge("OPEN")) } dd { (tc.open) } }
                        div { dt { (badge("LEASED")) } dd { (tc.leased) } }
                        div { dt { (badge("COMPLETED")) } dd { (tc.completed) } }
                        div { dt { (badge("CANCELLED")) } dd { (tc.cancelled) } }
                    }
                }
                section aria-labelledby="cc-h" {
                    h2 #cc-h { "Contributions" }
                    dl.counts {
                        div { dt { "Attempts" } dd { (cc.attempt) } }
                        div { dt { "Observations" } dd { (cc.observation) } }
                        div { dt { "Claims" } dd { (cc.claim) } }
                        div { dt { "Questions" } dd { (cc.question) } }
                        div { dt { "Notes" } dd { (cc.note) } }
                    }
                }
                section aria-labelledby="vc-h" {
                    h2 #vc-h { "Verdicts on current revisions" }
                    (verdicts(&o.verdict_counts))
                }
            }
            section aria-labelledby="latest-h" {
                h2 #latest-h { "Latest contributions" }
                (contribution_list(&base, o.latest_contributions.iter(), now))
            }
            section aria-labelledby="ph-h" {
                h2 #ph-h { "Pending handoffs" }
                @if o.pending_handoffs.is_empty() {
                    p.empty { "No handoff is waiting." }
                } @else {
                    ul.plain {
                        @for h in &o.pending_handoffs {
                            li {
                                a href={ (base) "/tasks/" (h.task_id) } { "task #" (h.task_id) }
                                " from " (actor(&h.from_contributor)) " · " (when("expires ", h.expires_at, now))
                                " — " (layout::clip(&h.message, 200))
                            }
                        }
                    }
                }
            }
            p.small { "Read at orbit revision " (o.orbit_revision) "." }
        },
    ))
}

fn verdicts(v: &VerdictCounts) -> Markup {
    html! {
        dl.counts {
            div { dt { (badge("SUPPORTS")) } dd { (v.supports) } }
            div { dt { (badge("DISPUTES")) } dd { (v.disputes) } }
            div { dt { (badge("INCONCLUSIVE")) } dd { (v.inconclusive) } }
            div { dt { (badge("NEEDS_WORK")) } dd { (v.needs_work) } }
        }
    }
}

#[derive(Deserialize)]
struct RevisionsQuery {
    /// Show revisions up to this one (default: the current revision).
    upto: Option<i64>,
}

/// `/o/{slug}/contributions/{id}`.
pub async fn contribution(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
) -> HttpResponse {
    let (slug, id) = path.into_inner();
    respond(contribution_page(state, slug, id, req).await)
}

/// Bodies one contribution page shows at most (the newest revision always).
const PAGE_BODY_BYTES: usize = 256 * 1024;
/// The time all diffs of one page may take together; past it, `similar` gives a
/// coarser (still correct) diff at once.
const DIFF_BUDGET: Duration = Duration::from_millis(150);

async fn contribution_page(
    state: State,
    slug: String,
    segment: String,
    req: HttpRequest,
) -> PageResult {
    let id = path_id(&segment, "Contribution")?;
    let q: RevisionsQuery = query(&req)?;
    let upto = position("upto", q.upto)?;
    let view = read(&state, move |conn| {
        views::contribution(conn, &slug, id, upto)
    })
    .await?;
    web::block(move || render_contribution(view))
        .await
        .map_err(|_| ApiError::internal().into())
}

fn render_contribution(view: ContributionView) -> Markup {
    let ContributionView {
        orbit,
        contribution: c,
        revisions,
    } = view;
    let now = Utc::now();
    let base = format!("/o/{}", orbit.slug);
    // Newest first; each beside the revision before it. At most PAGE + 1 were read:
    // the extra, oldest one only serves the diff. Bodies beyond PAGE_BODY_BYTES wait
    // for the next page.
    let skip = revisions.len().saturating_sub(PAGE as usize);
    let mut shown: Vec<usize> = Vec::new();
    let mut bytes = 0;
    for i in (skip..revisions.len()).rev() {
        bytes += revisions[i].0.body.len();
        if !shown.is_empty() && bytes > PAGE_BODY_BYTES {
            break;
        }
        shown.push(i);
    }
    let oldest = shown.last().map(|i| revisions[*i].0.revision).unwrap_or(1);
    let next = (oldest > 1).then(|| format!("{base}/contributions/{}?upto={}", c.id, oldest - 1));
    let deadline = Instant::now() + DIFF_BUDGET;
    layout::page(
        &c.title,
        &[
            ("/".into(), "Commons".into()),
            (base.clone(), orbit.name.clone()),
        ],
        None,
        html! {
            header.page-head {
                p.meta {
                    span.type-tag { (c.kind.to_ascii_lowercase()) } " · contribution #" (c.id)
                    " · by " (actor(&c.author)) " · revision " (c.revision)
                    " · " (when("updated ", c.updated_at, now))
                }
                h1 { (c.title) }
                p.meta {
                    @if let Some(p) = c.problem_id { a href={ (base) "/problems/" (p) } { "problem #" (p) } " · " }
                    @if let Some(t) = c.task_id { a href={ (base) "/tasks/" (t) } { "task #" (t) } " · " }
                    "Verdicts on the current revision: "
                    (c.verdict_counts.supports) " supports, " (c.verdict_counts.disputes) " disputes, "
                    (c.verdict_counts.inconclusive) " inconclusive, " (c.verdict_counts.needs_work) " needs work"
                }
            }
            p.note { "Untrusted evidence, shown as plain text. Assessments belong to the exact revision they judged." }
            @for i in &shown {
                (revision_section(&revisions[*i].0, i.checked_sub(1).map(|j| &revisions[j].0), &revisions[*i].1, c.revision, now, deadline))
            }
            (pager(next))
        },
    )
}

fn revision_section(
    r: &ContributionRevision,
    before: Option<&ContributionRevision>,
    assessments: &[Assessment],
    current: i64,
    now: DateTime<Utc>,
    deadline: Instant,
) -> Markup {
    let id = format!("revision-{}", r.revision);
    let heading = format!("{id}-h");
    html! {
        section.revision #(id) aria-labelledby=(heading) {
            h2 #(heading) {
                "Revision " (r.revision)
                @if r.revision == current { " " span.badge.s-current { "CURRENT" } }
            }
            p.meta { (when("written ", r.created_at, now)) }
            h3.rev-title { (r.title) }
            div.body { p.text { (r.body) } }
            @if let Some(b) = before {
                details.diff open[r.revision == current] {
                    summary { "What changed since revision " (b.revision) }
                    (diff(b, r, deadline))
                }
            }
            h3 { "Assessments of revision " (r.revision) }
            @if assessments.is_empty() {
                p.empty { "None for this revision." }
            } @else {
                ul.plain.assessments {
                    @for a in assessments {
                        li {
                            article.assessment {
                                p { (badge(&a.verdict)) " by " (actor(&a.assessor)) " · " (when("", a.created_at, now)) }
                                p.text { (a.rationale) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// What changed between two revisions: the title, and the body as a line diff with
/// a few lines of context (computed by `deadline`, the page's, so huge bodies stay
/// cheap).
fn diff(old: &ContributionRevision, new: &ContributionRevision, deadline: Instant) -> Markup {
    let body = TextDiff::configure()
        .deadline(deadline)
        .diff_lines(old.body.as_str(), new.body.as_str());
    let groups = body.grouped_ops(2);
    html! {
        @if old.title != new.title {
            p { "Title: " del { bdi { (old.title) } } " → " ins { bdi { (new.title) } } }
        }
        @if groups.is_empty() {
            p.empty { "The body did not change." }
        } @else {
            pre.diff tabindex="0" aria-label="Line diff of the body" {
                @for (n, group) in groups.iter().enumerate() {
                    @if n > 0 { span.gap { "⋯\n" } }
                    @for op in group {
                        @for change in body.iter_changes(op) {
                            @match change.tag() {
                                ChangeTag::Delete => del { "- " (change.value()) },
                                ChangeTag::Insert => ins { "+ " (change.value()) },
                                ChangeTag::Equal => span { "  " (change.value()) },
                            }
                            @if change.missing_newline() { "\n" }
                        }
                    }
                }
            }
        }
    }
}
