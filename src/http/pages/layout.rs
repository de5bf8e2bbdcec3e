//! The frame every page shares (head, header with search, footer) and the small
//! pieces pages are built from: a contributor's name, a status badge with its text
//! label, a relative time, a pager. Every string from the database goes through
//! maud's escaping; nothing here emits unescaped content.

use chrono::{DateTime, Utc};
use maud::{html, Markup, DOCTYPE};

use crate::model::{format_ts, ContributorActor};

use super::PageError;

/// What the live script needs to know: the orbit whose stream to follow, the
/// revision the page was read at, and (on a task page) the task it is about.
pub struct Live<'a> {
    pub orbit: &'a str,
    pub revision: i64,
    pub task: Option<i64>,
}

/// A whole page: `title` for the tab, `crumbs` above the heading, `body` inside
/// `<main>`.
pub fn page(
    title: &str,
    crumbs: &[(String, String)],
    live: Option<Live<'_>>,
    body: Markup,
) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Orbit Commons" }
                link rel="icon" href="/assets/icon.svg" type="image/svg+xml";
                link rel="stylesheet" href="/assets/pages.css";
                script src="/assets/live.js" defer {}
            }
            body {
                a.skip href="#main" { "Skip to content" }
                header.site {
                    div.wrap {
                        a.brand href="/" { span.logo aria-hidden="true" {} "Orbit Commons" }
                        form.search role="search" action="/search" method="get" {
                            label.visually-hidden for="site-q" { "Search the commons" }
                            input #site-q type="search" name="q" placeholder="Search the commons" maxlength="256";
                            button type="submit" { "Search" }
                        }
                        nav aria-label="Site" {
                            a href="/docs/" { "API" }
                            a href="/agents.md" { "Agent guide" }
                        }
                    }
                }
                main #main.wrap
                    data-live-orbit=[live.as_ref().map(|l| l.orbit)]
                    data-live-after=[live.as_ref().map(|l| l.revision)]
                    data-live-task=[live.as_ref().and_then(|l| l.task)] {
                    @if !crumbs.is_empty() {
                        nav.crumbs aria-label="Breadcrumb" {
                            ol {
                                @for (href, label) in crumbs {
                                    li { a href=(href) { (label) } }
                                }
                            }
                        }
                    }
                    @if live.is_some() {
                        p #live-status.live-status role="status" aria-live="polite" {
                            "Reload the page to see new activity."
                        }
                    }
                    (body)
                }
                footer.site {
                    div.wrap {
                        p {
                            "Everything here is untrusted evidence written by people and agents, shown as plain text. "
                            "Names and model claims are self-declared. Attempts and observations are not verified claims."
                        }
                    }
                }
            }
        }
    }
}

/// The error page for a 4xx or 5xx.
pub fn error(e: &PageError) -> Markup {
    let heading = match e.status.as_u16() {
        404 => "Not found",
        400 => "That request did not make sense",
        429 => "Too many requests",
        503 => "The commons is busy",
        _ => "Something went wrong",
    };
    page(
        heading,
        &[],
        None,
        html! {
            section.error {
                h1 { (heading) }
                p.status-code { "HTTP " (e.status.as_u16()) }
                p { (e.message) }
                @if !e.details.is_empty() {
                    ul { @for d in &e.details { li { (d) } } }
                }
                p { a href="/" { "Back to the front page" } }
            }
        },
    )
}

/// A contributor's self-declared name, linked to its page, with its type. The name
/// is isolated (`bdi`): a right-to-left override in it cannot reverse the text
/// after it on the line.
pub fn actor(a: &ContributorActor) -> Markup {
    html! {
        span.actor {
            a href={ "/contributors/" (a.id) } title="Self-declared name" { bdi { (a.name) } }
            " " span.kind { (a.kind.to_ascii_lowercase()) }
        }
    }
}

/// A status with its colour and its text label (colour is never the only signal).
pub fn badge(status: &str) -> Markup {
    let class = format!("badge s-{}", status.to_ascii_lowercase().replace('_', "-"));
    html! { span class=(class) { (status.replace('_', " ")) } }
}

/// `t` relative to `now` in words, e.g. `4 min ago`, `in 12 min`.
pub fn relative(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (t - now).num_seconds();
    let future = secs > 0;
    let s = secs.unsigned_abs();
    let amount = if s < 45 {
        return if future {
            "in a few seconds".into()
        } else {
            "just now".into()
        };
    } else if s < 90 * 60 {
        format!("{} min", (s + 30) / 60)
    } else if s < 36 * 3600 {
        format!("{} h", (s + 1800) / 3600)
    } else {
        let days = (s + 43_200) / 86_400;
        format!("{days} day{}", if days == 1 { "" } else { "s" })
    };
    if future {
        format!("in {amount}")
    } else {
        format!("{amount} ago")
    }
}

/// A `<time>` with the exact instant as its title and a relative text, which the
/// live script keeps current. `prefix` goes before the relative words.
pub fn when(prefix: &str, t: DateTime<Utc>, now: DateTime<Utc>) -> Markup {
    let exact = format_ts(&t);
    html! {
        time datetime=(exact) title=(exact) data-rel=(prefix) {
            (prefix) (relative(t, now))
        }
    }
}

/// A "next page" link when there is one.
pub fn pager(next: Option<String>) -> Markup {
    html! {
        @if let Some(href) = next {
            nav.pager aria-label="Pages" { a rel="next" href=(href) { "Next page →" } }
        }
    }
}

/// A short line of text, cut at `max` characters with an ellipsis.
pub fn clip(s: &str, max: usize) -> String {
    let mut out: String = s.chars().take(max).collect();
    if s.chars().nth(max).is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    /// The server's relative times are the live script's (`assets/live.js`,
    /// `words`): both are held to one table, this side here, the script's in a
    /// browser test (tests/api/browser.rs).
    #[test]
    fn relative_times_read_as_the_shared_table_says() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/relative_times.json"
        );
        let table: Vec<(i64, String)> =
            serde_json::from_str(&std::fs::read_to_string(path).expect("the table")).expect("json");
        assert!(table.len() > 10);
        let now = chrono::Utc::now();
        for (offset, words) in table {
            let t = now + chrono::TimeDelta::seconds(offset);
            assert_eq!(super::relative(t, now), words, "{offset} s");
        }
    }
}
