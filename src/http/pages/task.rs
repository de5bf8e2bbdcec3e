//! A task's page (`/o/{slug}/tasks/{id}`): the task, its lease history as a
//! timeline, its checkpoints with their state as indented JSON text (at most 256
//! KiB of it a page, each as stored where indenting would blow it up), and its
//! handoffs with their outcome, as `domain::views::task` reads them; the lists page
//! with `?leases_after=`, `?checkpoints_after=`, `?handoffs_after=`.

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use maud::{html, Markup};
use serde::Deserialize;

use crate::domain::views::{self, TaskCursors};
use crate::http::api::State;
use crate::model::Cursor;
use crate::store::handoffs::Handoff;
use crate::store::tasks::{Checkpoint, Lease};

use super::layout::{self, actor, badge, pager, when, Live};
use super::{path_id, position, query, read, respond, PageResult, PAGE};

#[derive(Deserialize)]
struct TaskQuery {
    leases_after: Option<i64>,
    checkpoints_after: Option<i64>,
    handoffs_after: Option<i64>,
}

/// `/o/{slug}/tasks/{id}`.
pub async fn task(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
) -> HttpResponse {
    let (slug, id) = path.into_inner();
    respond(task_page(state, slug, id, req).await)
}

async fn task_page(state: State, slug: String, segment: String, req: HttpRequest) -> PageResult {
    let id = path_id(&segment, "Task")?;
    let q: TaskQuery = query(&req)?;
    let cursor = |after: Option<i64>, name: &str| -> Result<Cursor, super::PageError> {
        Ok(Cursor {
            after: position(name, after)?.unwrap_or(0),
            limit: PAGE,
        })
    };
    let at = TaskCursors {
        leases: cursor(q.leases_after, "leases_after")?,
        checkpoints: cursor(q.checkpoints_after, "checkpoints_after")?,
        handoffs: cursor(q.handoffs_after, "handoffs_after")?,
    };
    let v = read(&state, move |conn| views::task(conn, &slug, id, at)).await?;
    let now = Utc::now();
    let t = &v.task;
    let base = format!("/o/{}", v.orbit.slug);
    let here = format!("{base}/tasks/{}", t.id);
    let state_label = match (&t.active_lease, t.status.as_str()) {
        (Some(_), _) => "LEASED",
        (None, s) => s,
    };
    Ok(layout::page(
        &t.title,
        &[
            ("/".into(), "Commons".into()),
            (base.clone(), v.orbit.name.clone()),
        ],
        Some(Live {
            orbit: &v.orbit.slug,
            revision: v.orbit.revision,
            task: Some(t.id),
        }),
        html! {
            header.page-head {
                p.meta { "Task #" (t.id) }
                h1 { (t.title) }
            }
            section #task-state data-live aria-label="State" {
                p.state-line {
                    (badge(state_label))
                    @if let Some(l) = &t.active_lease {
                        " held by " (actor(&l.contributor)) " · "
                        strong.left { (when("expires ", l.expires_at, now)) }
                        " · lease version " (l.lease_version)
                    }
                }
                dl.facts {
                    div { dt { "Created" } dd { (actor(&t.created_by)) " " (when("", t.created_at, now)) } }
                    div { dt { "Updated" } dd { (when("", t.updated_at, now)) } }
                    div { dt { "Leases issued" } dd { (t.lease_version) } }
                    @if let Some(p) = &v.problem {
                        div { dt { "Problem" } dd { a href={ (base) "/problems/" (p.id) } { (p.title) } } }
                    }
                    @if let Some(s) = &t.completion_summary {
                        div { dt { "Completion summary" } dd { (s) } }
                    }
                    @if let Some(c) = t.result_contribution_id {
                        div { dt { "Result" } dd { a href={ (base) "/contributions/" (c) } { "contribution #" (c) } } }
                    }
                    @if let Some(r) = &t.cancel_reason {
                        div { dt { "Cancel reason" } dd { (r) } }
                    }
                }
                @if !t.description.is_empty() {
                    h2 { "Description" }
                    p.text { (t.description) }
                }
            }
            section #leases data-live aria-labelledby="leases-h" {
                h2 #leases-h { "Lease history" }
                @if v.leases.data.is_empty() {
                    p.empty { "Never leased." }
                } @else {
                    ol.timeline {
                        @for l in &v.leases.data { li { (lease_item(l, now)) } }
                    }
                }
                (pager(v.leases.meta.next_after.map(|a| format!("{here}?leases_after={a}"))))
            }
            section #checkpoints data-live aria-labelledby="checkpoints-h" {
                h2 #checkpoints-h { "Checkpoints" }
                @if v.checkpoints.data.is_empty() {
                    p.empty { "No checkpoints yet." }
                } @else {
                    ol.plain.checkpoints {
                        @for (c, shown) in v.checkpoints.data.iter().zip(shown_states(&v.checkpoints.data)) {
                            li { (checkpoint_item(c, shown, now)) }
                        }
                    }
                }
                (pager(v.checkpoints.meta.next_after.map(|a| format!("{here}?checkpoints_after={a}"))))
            }
            section #task-handoffs data-live aria-labelledby="handoffs-h" {
                h2 #handoffs-h { "Handoffs" }
                @if v.handoffs.data.is_empty() {
                    p.empty { "No handoffs." }
                } @else {
                    ol.plain {
                        @for h in &v.handoffs.data { li { (handoff_item(h, now)) } }
                    }
                }
                (pager(v.handoffs.meta.next_after.map(|a| format!("{here}?handoffs_after={a}"))))
            }
        },
    ))
}

fn lease_item(l: &Lease, now: DateTime<Utc>) -> Markup {
    html! {
        article class=(if l.is_active { "lease active" } else { "lease" }) {
            p {
                strong { "v" (l.lease_version) } " "
                (actor(&l.contributor)) " · acquired " (when("", l.acquired_at, now))
                @if let Some(r) = l.renewed_at { " · renewed " (when("", r, now)) }
            }
            p.meta {
                @if l.is_active {
                    (badge("ACTIVE")) " " strong.left { (when("expires ", l.expires_at, now)) }
                } @else {
                    (badge(l.end_reason.as_deref().unwrap_or("ENDED"))) " "
                    @match l.released_at {
                        Some(at) => (when("ended ", at, now)),
                        None => (when("ran out ", l.expires_at, now)),
                    }
                }
            }
        }
    }
}

/// State text one task page shows at most, its checkpoints together (the first
/// always): past it a state is a link to its API read.
const PAGE_STATE_BYTES: usize = 256 * 1024;
/// How many times its stored text indenting may make a state: past it the state is
/// shown as stored. Each level indents every line below it, so a deeply nested
/// state of 62 KB was 7.9 MB of page (a probe, 2026-12-07: 25 such made one page
/// 189 MB, and four at once raised the service's memory by 730 MB).
const INDENT_GROWTH: usize = 4;

/// The state text each checkpoint of a page shows (`None`: past the page's budget).
fn shown_states(checkpoints: &[Checkpoint]) -> Vec<Option<String>> {
    let mut bytes = 0;
    checkpoints
        .iter()
        .enumerate()
        .map(|(i, c)| {
            if i > 0 && bytes > PAGE_STATE_BYTES {
                return None;
            }
            let stored = c.state.get();
            let text = indented(stored, stored.len().saturating_mul(INDENT_GROWTH))
                .unwrap_or_else(|| stored.to_owned());
            bytes += text.len();
            (i == 0 || bytes <= PAGE_STATE_BYTES).then_some(text)
        })
        .collect()
}

/// `json` indented, if that takes at most `cap` bytes (it stops writing past them).
fn indented(json: &str, cap: usize) -> Option<String> {
    struct Capped(Vec<u8>, usize);
    impl std::io::Write for Capped {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if self.0.len() + b.len() > self.1 {
                return Err(std::io::ErrorKind::FileTooLarge.into());
            }
            self.0.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let value = serde_json::from_str::<serde_json::Value>(json).ok()?;
    let mut out = Capped(Vec::new(), cap);
    serde_json::to_writer_pretty(&mut out, &value).ok()?;
    String::from_utf8(out.0).ok()
}

fn checkpoint_item(c: &Checkpoint, shown: Option<String>, now: DateTime<Utc>) -> Markup {
    let id = format!("checkpoint-{}", c.id);
    html! {
        article.checkpoint #(id) {
            p {
                strong { "#" (c.sequence) } " " (actor(&c.author)) " under lease v" (c.lease_version)
                " · " (when("", c.created_at, now))
            }
            p.text { (c.summary) }
            details open {
                summary { "State (JSON, sha-256 " code { (layout::clip(&c.state_hash, 12)) } ")" }
                @match shown {
                    Some(text) => pre.json tabindex="0" { code { (text) } },
                    None => p.meta {
                        "Not shown here: this page's states pass 256 KiB. Read it at "
                        a href={ "/api/v1/checkpoints/" (c.id) } { "/api/v1/checkpoints/" (c.id) } "."
                    },
                }
            }
        }
    }
}

fn handoff_item(h: &Handoff, now: DateTime<Utc>) -> Markup {
    html! {
        article.handoff {
            p {
                (badge(&h.status)) " from " (actor(&h.from_contributor)) " to "
                @match &h.to_contributor { Some(to) => (actor(to)), None => "any member" }
                " · from " a href={ "#checkpoint-" (h.checkpoint_id) } { "checkpoint " (h.checkpoint_id) }
                " · offered " (when("", h.created_at, now))
            }
            p.quote { (h.message) }
            p.meta {
                @match (&h.accepted_by, h.accepted_at) {
                    (Some(by), Some(at)) => { "Accepted by " (actor(by)) " " (when("", at, now)) }
                    _ => @if h.status == "PENDING" { (when("expires ", h.expires_at, now)) } @else { "Outcome: " (h.status.to_ascii_lowercase()) },
                }
            }
        }
    }
}
