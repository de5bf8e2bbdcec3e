//! The pages for people (contract section 16) over plain HTTP: every page's status
//! and content, escaping of untrusted content, the HTML 404 and 400 pages, paging,
//! the CSP header, the assets. `tests/api/browser.rs` drives the same pages in a
//! real browser.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::harness::{Agent, Resp, TestApp};

/// A title that would run if it were ever rendered as HTML.
pub const XSS_TITLE: &str = "<script>window.__xss=1</script><b>bold</b> & \"quoted\"";

/// An orbit with something in every section of every page.
pub struct Seeded {
    pub owner: Agent,
    pub holder: Agent,
    pub slug: String,
    pub orbit: i64,
    pub open_task: i64,
    pub leased_task: i64,
    pub completed_task: i64,
    pub cancelled_task: i64,
    pub xss_task: i64,
    pub handoff_task: i64,
    pub problem: i64,
    pub contribution: i64,
}

pub async fn seed(app: &TestApp, slug: &str) -> Seeded {
    let owner = app.agent("Ada the owner").await;
    let holder = app.agent("Lease Holder Bot").await;
    let orbit = app.orbit(&owner, slug).await;
    app.join(&holder, orbit).await;
    let o = format!("/api/v1/orbits/{orbit}");
    let created = |r: Resp| -> Value {
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        r.json["data"].clone()
    };
    let problem = created(
        app.post_keyed(
            &format!("{o}/problems"),
            &owner.token,
            json!({"title": "Make the build reproducible", "statement": "Two builds of one commit differ."}),
        )
        .await,
    )["id"]
        .as_i64()
        .unwrap();
    let task = |title: &'static str, problem_id: Option<i64>| {
        let token = owner.token.clone();
        let path = format!("{o}/tasks");
        async move {
            let r = app
                .post_keyed(
                    &path,
                    &token,
                    json!({"title": title, "problem_id": problem_id}),
                )
                .await;
            assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
            r.json["data"]["id"].as_i64().unwrap()
        }
    };
    let open_task = task("Write the release notes", None).await;
    let leased_task = task("Pin the compiler version", Some(problem)).await;
    let completed_task = task("Remove timestamps from archives", Some(problem)).await;
    let cancelled_task = task("Rewrite everything in COBOL", None).await;
    let xss_task = task(XSS_TITLE, None).await;
    let handoff_task = task("Bisect the flaky test", Some(problem)).await;

    let lease = |task: i64, who: &Agent| {
        let token = who.token.clone();
        async move {
            let r = app
                .post_keyed(
                    &format!("/api/v1/tasks/{task}/leases"),
                    &token,
                    json!({"duration_seconds": 600}),
                )
                .await;
            assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
            r.json["data"]["lease_version"].as_i64().unwrap()
        }
    };
    lease(leased_task, &holder).await;
    let v = lease(completed_task, &owner).await;
    let r = app
        .post_keyed(
            &format!("/api/v1/tasks/{completed_task}/complete"),
            &owner.token,
            json!({"lease_version": v, "summary": "Archives are byte-identical now."}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = app
        .post_keyed(
            &format!("/api/v1/tasks/{cancelled_task}/cancel"),
            &owner.token,
            json!({"reason": "Not this year."}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);

    let v = lease(handoff_task, &owner).await;
    let checkpoint = created(
        app.post_keyed(
            &format!("/api/v1/tasks/{handoff_task}/checkpoints"),
            &owner.token,
            json!({"lease_version": v, "summary": "Narrowed it to 12 commits.",
                   "state": {"good": "a1b2c3", "bad": "d4e5f6", "remaining": 12}}),
        )
        .await,
    )["id"]
        .as_i64()
        .unwrap();
    created(
        app.post_keyed(
            &format!("/api/v1/tasks/{handoff_task}/handoffs"),
            &owner.token,
            json!({"lease_version": v, "checkpoint_id": checkpoint,
                   "message": "Continue from the checkpoint, please."}),
        )
        .await,
    );

    let contribution = created(
        app.post_keyed(
            &format!("{o}/contributions"),
            &holder.token,
            json!({"kind": "OBSERVATION", "title": "The tarball embeds mtimes",
                   "body": "line one\nthe mtime is embedded\nline three", "problem_id": problem}),
        )
        .await,
    )["id"]
        .as_i64()
        .unwrap();
    let assess = |rev: i64, verdict: &'static str, rationale: &'static str| {
        let token = owner.token.clone();
        async move {
            let r = app
                .post_keyed(
                    &format!("/api/v1/contributions/{contribution}/revisions/{rev}/assessments"),
                    &token,
                    json!({"verdict": verdict, "rationale": rationale}),
                )
                .await;
            assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
        }
    };
    assess(1, "NEEDS_WORK", "Which tarball? Say which one.").await;
    let r = app
        .post_keyed(
            &format!("/api/v1/contributions/{contribution}/revisions"),
            &holder.token,
            json!({"base_revision": 1, "body": "line one\nthe release tarball embeds mtimes\nline three"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assess(2, "SUPPORTS", "Reproduced it with two builds.").await;

    Seeded {
        owner,
        holder,
        slug: slug.to_owned(),
        orbit,
        open_task,
        leased_task,
        completed_task,
        cancelled_task,
        xss_task,
        handoff_task,
        problem,
        contribution,
    }
}

/// Asserts a page answer: status, HTML, the CSP without `unsafe-inline`.
#[track_caller]
pub fn assert_page(r: &Resp, status: u16) {
    assert_eq!(r.status.as_u16(), status, "{}", r.text);
    assert_eq!(
        r.header("content-type"),
        Some("text/html; charset=utf-8"),
        "{}",
        r.text
    );
    let csp = r.header("content-security-policy").expect("a CSP header");
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert!(!csp.contains("http"), "another origin in {csp}");
    assert!(r.text.starts_with("<!DOCTYPE html>"), "{}", r.text);
    // No inline script or style anywhere (the CSP would block it).
    assert!(!r.text.contains("<style"), "inline style in {}", r.text);
    assert!(!r.text.contains(" style="), "style attribute in {}", r.text);
    for script in r.text.split("<script").skip(1) {
        assert!(
            script.starts_with(" src=\"/assets/live.js\""),
            "inline or foreign script: <script{}",
            &script[..script.len().min(80)]
        );
    }
}

/// The page's text with tags removed, whitespace collapsed (what a person reads).
pub fn visible(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for ch in html.chars() {
        match ch {
            '<' => in_tag = true,
            '>' if in_tag => {
                in_tag = false;
                out.push(' ');
            }
            _ if !in_tag => out.push(ch),
            _ => {}
        }
    }
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[tokio::test]
async fn every_page_renders_its_content_with_the_csp() {
    let app = TestApp::spawn().await;
    let s = seed(&app, "repro-builds").await;
    let page = |path: String| {
        let app = &app;
        async move {
            let r = app.get(&path, None).await;
            assert_page(&r, 200);
            visible(&r.text)
        }
    };

    let home = page("/".into()).await;
    assert!(home.contains("Orbit Commons"), "{home}");
    assert!(home.contains("repro-builds"), "{home}");
    // Members 2, open 2 (open task, xss task), leased 2 (leased, handoff task).
    assert!(home.contains("Members 2 Open 2 Leased 2"), "{home}");

    let orbit = page(format!("/o/{}", s.slug)).await;
    for text in [
        "OPEN Waiting for someone to lease them. Write the release notes",
        "Pin the compiler version",
        "held by Lease Holder Bot agent",
        "expires in 10 min",
        "COMPLETED Done. Remove timestamps from archives",
        "CANCELLED Called off. Rewrite everything in COBOL",
        "Pending handoffs PENDING task #",
        "Continue from the checkpoint, please.",
        "Make the build reproducible",
        "The tarball embeds mtimes",
        "Ada the owner agent owner",
        "task.created",
        "handoff.offered",
    ] {
        assert!(orbit.contains(text), "orbit page lacks {text:?}: {orbit}");
    }

    let task = page(format!("/o/{}/tasks/{}", s.slug, s.handoff_task)).await;
    for text in [
        "Bisect the flaky test",
        "LEASED held by Ada the owner",
        "Lease history v1 Ada the owner",
        "Narrowed it to 12 commits.",
        "Continue from the checkpoint, please.",
        "Make the build reproducible",
    ] {
        assert!(task.contains(text), "task page lacks {text:?}: {task}");
    }
    // The checkpoint's state as indented JSON text.
    let raw = app
        .get(&format!("/o/{}/tasks/{}", s.slug, s.handoff_task), None)
        .await
        .text;
    assert!(
        raw.contains("{\n  &quot;bad&quot;: &quot;d4e5f6&quot;,\n  &quot;good&quot;"),
        "{raw}"
    );
    let done = page(format!("/o/{}/tasks/{}", s.slug, s.completed_task)).await;
    assert!(done.contains("COMPLETED"), "{done}");
    assert!(done.contains("Archives are byte-identical now."), "{done}");
    assert!(done.contains("COMPLETED ended"), "{done}");

    let problem = page(format!("/o/{}/problems/{}", s.slug, s.problem)).await;
    for text in [
        "Make the build reproducible",
        "Two builds of one commit differ.",
        "OPEN 0 LEASED 2 COMPLETED 1 CANCELLED 0",
        "Observations 1",
        "SUPPORTS 1 DISPUTES 0 INCONCLUSIVE 0 NEEDS WORK 0",
        "The tarball embeds mtimes",
    ] {
        assert!(
            problem.contains(text),
            "problem page lacks {text:?}: {problem}"
        );
    }

    let c = page(format!("/o/{}/contributions/{}", s.slug, s.contribution)).await;
    for text in [
        "Revision 2 CURRENT",
        "the release tarball embeds mtimes",
        "What changed since revision 1",
        "- the mtime is embedded",
        "+ the release tarball embeds mtimes",
        "Assessments of revision 2 SUPPORTS by Ada the owner",
        "Reproduced it with two builds.",
        "Revision 1",
        "Assessments of revision 1 NEEDS WORK by Ada the owner",
        "Which tarball? Say which one.",
    ] {
        assert!(c.contains(text), "contribution page lacks {text:?}: {c}");
    }
    // Each revision's assessments stay with it: revision 2's section does not list
    // revision 1's assessment.
    let rev2 = c.split("Revision 1").next().unwrap();
    assert!(!rev2.contains("Which tarball?"), "{rev2}");

    let found = page("/search?q=tarball".into()).await;
    assert!(found.contains("The tarball embeds mtimes"), "{found}");
    let raw = app.get("/search?q=tarball", None).await.text;
    assert!(raw.contains("<mark>tarball</mark>"), "{raw}");
    assert!(page("/search".into()).await.contains("Search"));
    // Pages are anonymous: an Authorization header a browser sends (a site's HTTP
    // Basic login, a stale token) changes nothing, on the search page as on others.
    for auth in ["Bearer occ_not_a_token", "Basic dXNlcjpwdw==", "Bearer"] {
        for path in ["/search?q=tarball", "/search", "/"] {
            let r = app
                .send_raw(Method::GET, path, None, &[("authorization", auth)], None)
                .await;
            assert_page(&r, 200);
            assert!(
                path != "/search?q=tarball" || r.text.contains("<mark>tarball</mark>"),
                "{path} with {auth}: {}",
                r.text
            );
        }
    }

    let who = page(format!("/contributors/{}", s.holder.id)).await;
    for text in [
        "Lease Holder Bot",
        "Type AGENT",
        "Model claim test-model",
        "self-declared",
        "repro-builds contributor",
        "lease.acquired",
        "contribution.revised",
    ] {
        assert!(who.contains(text), "contributor page lacks {text:?}: {who}");
    }

    for list in [
        format!("/o/{}/tasks?state=LEASED", s.slug),
        format!("/o/{}/activity", s.slug),
        format!("/o/{}/members", s.slug),
        format!("/o/{}/problems", s.slug),
        format!("/o/{}/contributions", s.slug),
    ] {
        page(list).await;
    }
    let leased = page(format!("/o/{}/tasks?state=LEASED", s.slug)).await;
    assert!(leased.contains("Pin the compiler version"), "{leased}");
    assert!(!leased.contains("Write the release notes"), "{leased}");
    let _ = (
        s.open_task,
        s.leased_task,
        s.cancelled_task,
        s.orbit,
        &s.owner,
    );
}

#[tokio::test]
async fn untrusted_content_is_shown_as_text() {
    let app = TestApp::spawn().await;
    let s = seed(&app, "escaping").await;
    for path in [
        format!("/o/{}", s.slug),
        format!("/o/{}/tasks/{}", s.slug, s.xss_task),
        format!("/o/{}/tasks?state=OPEN", s.slug),
    ] {
        let r = app.get(&path, None).await;
        assert_page(&r, 200);
        assert!(!r.text.contains("<script>window"), "{path}: {}", r.text);
        assert!(!r.text.contains("<b>bold"), "{path}: {}", r.text);
        assert!(
            r.text
                .contains("&lt;script&gt;window.__xss=1&lt;/script&gt;&lt;b&gt;bold&lt;/b&gt; &amp; &quot;quoted&quot;"),
            "{path}: {}",
            r.text
        );
    }
    // A search query is echoed as text too.
    let r = app
        .get("/search?q=%3Cscript%3Ealert(1)%3C/script%3E", None)
        .await;
    assert!(r.status.as_u16() < 500, "{}", r.text);
    assert!(!r.text.contains("<script>alert"), "{}", r.text);
}

/// A right-to-left override in a name or a summary cannot reverse the rest of its
/// line: every name is in a `bdi` of its own, and so is an activity summary.
#[tokio::test]
async fn names_and_summaries_are_isolated_from_the_text_around_them() {
    let app = TestApp::spawn().await;
    let flipper = app.agent("\u{202e}evil").await;
    let orbit = app.orbit(&flipper, "bidi").await;
    let r = app
        .post_keyed(
            &format!("/api/v1/orbits/{orbit}/tasks"),
            &flipper.token,
            json!({"title": "plain title"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let task = r.json["data"]["id"].as_i64().unwrap();
    for path in [
        "/o/bidi".to_owned(),
        "/o/bidi/members".to_owned(),
        format!("/contributors/{}", flipper.id),
    ] {
        let r = app.get(&path, None).await;
        assert_page(&r, 200);
        let bare = r.text.matches("\u{202e}evil").count();
        let isolated = r.text.matches("<bdi>\u{202e}evil</bdi>").count();
        assert!(bare > 0, "{path}: the name is not on the page: {}", r.text);
        // The contributor page's heading is a block of its own.
        let headings = r.text.matches("<h1>\u{202e}evil</h1>").count()
            + r.text.matches("<title>\u{202e}evil").count();
        assert_eq!(
            bare,
            isolated + headings,
            "{path}: a name outside a bdi: {}",
            r.text
        );
    }
    let r = app.get("/o/bidi", None).await;
    assert!(
        r.text
            .contains(&format!(" — <bdi>task {task} created</bdi>")),
        "the activity summary is not isolated: {}",
        r.text
    );
}

/// Control characters a title holds (stored verbatim) are not sent raw: HTML
/// forbids them in its input (a parse error in every browser). They become U+FFFD
/// on the page, through the orbit page's cache too; the API keeps them.
#[tokio::test]
async fn control_characters_are_not_sent_raw_on_the_pages() {
    let app = TestApp::spawn().await;
    let a = app.agent("controls").await;
    let orbit = app.orbit(&a, "controls").await;
    let title = "bell\u{7} esc\u{1b}[31m del\u{7f} c1\u{85} tab\tend";
    let r = app
        .post_keyed(
            &format!("/api/v1/orbits/{orbit}/tasks"),
            &a.token,
            json!({"title": title}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(r.json["data"]["title"], title);
    let task = r.json["data"]["id"].as_i64().unwrap();
    for path in [
        "/o/controls".to_owned(),
        format!("/o/controls/tasks/{task}"),
    ] {
        let r = app.get(&path, None).await;
        assert_page(&r, 200);
        let raw: Vec<char> = r
            .text
            .chars()
            .filter(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
            .collect();
        assert!(raw.is_empty(), "{path}: {raw:?}");
        assert!(
            r.text
                .contains("bell\u{FFFD} esc\u{FFFD}[31m del\u{FFFD} c1\u{FFFD} tab\tend"),
            "{path}: {}",
            r.text
        );
    }
}

#[tokio::test]
async fn unknown_slugs_and_ids_are_an_html_404() {
    let app = TestApp::spawn().await;
    let s = seed(&app, "known").await;
    let other = app.agent("Other").await;
    let elsewhere = app.orbit(&other, "elsewhere").await;
    let r = app
        .post_keyed(
            &format!("/api/v1/orbits/{elsewhere}/tasks"),
            &other.token,
            json!({"title": "not in known"}),
        )
        .await;
    let foreign_task = r.json["data"]["id"].as_i64().unwrap();
    for path in [
        "/o/no-such-orbit".to_owned(),
        "/o/no-such-orbit/tasks/1".to_owned(),
        format!("/o/{}/tasks/999999", s.slug),
        format!("/o/{}/tasks/abc", s.slug),
        format!("/o/{}/tasks/0", s.slug),
        // One page for one task: an id is written in plain digits.
        format!("/o/{}/tasks/0{}", s.slug, s.open_task),
        format!("/o/{}/tasks/%2B{}", s.slug, s.open_task),
        format!("/o/{}/tasks/{foreign_task}", s.slug),
        format!("/o/{}/problems/999999", s.slug),
        format!("/o/{}/contributions/999999", s.slug),
        format!("/o/{}/contributions/-1", s.slug),
        format!("/o/{}/nothing-here", s.slug),
        format!("/o/{}/tasks/1/deeper", s.slug),
        "/contributors/999999".to_owned(),
        "/contributors/someone".to_owned(),
        "/assets/nope.js".to_owned(),
    ] {
        let r = app.get(&path, None).await;
        assert_page(&r, 404);
        let text = visible(&r.text);
        assert!(text.contains("Not found"), "{path}: {text}");
        assert!(text.contains("HTTP 404"), "{path}: {text}");
    }
    // Any other unknown path a browser asks for is the same HTML page; the API's
    // unknown paths, and any path asked for without `text/html`, stay JSON.
    for (path, accept, html) in [
        (
            "/nonexistent",
            "text/html,application/xhtml+xml,*/*;q=0.8",
            true,
        ),
        ("/o", "text/html", true),
        ("/nonexistent", "application/json", false),
        ("/nonexistent", "*/*", false),
        ("/api/v1/nonexistent", "text/html", false),
    ] {
        let r = app
            .client
            .get(app.url(path))
            .header("accept", accept)
            .send()
            .await
            .expect("GET");
        assert_eq!(r.status(), 404, "{path} ({accept})");
        let content_type = r.headers()["content-type"].to_str().unwrap().to_owned();
        assert_eq!(
            content_type.starts_with("text/html"),
            html,
            "{path} ({accept}): {content_type}"
        );
    }
    // A slug PostgreSQL's text cannot hold names no orbit either.
    for path in ["/o/%00", "/o/%00/tasks/1", "/o/a%00b/activity"] {
        assert_page(&app.get(path, None).await, 404);
    }
    app.get("/api/v1/orbits/a%00b", None)
        .await
        .assert_error(404, "not_found");
    // Another method than GET on a page: the HTML 405, with Allow.
    for path in [
        "/",
        "/search",
        "/o/no-such-orbit",
        "/o/x/tasks/1",
        "/contributors/1",
    ] {
        let r = app
            .send(Method::POST, path, None, None, Some(json!({})))
            .await;
        assert_page(&r, 405);
        assert_eq!(r.header("allow"), Some("GET, HEAD"), "{path}");
    }
    // The API keeps its JSON 404s.
    app.get("/api/v1/orbits/no-such-orbit", None)
        .await
        .assert_error(404, "not_found");
    app.get("/no-such-route", None).await.assert_envelope(404);
}

#[tokio::test]
async fn bad_query_parameters_are_an_html_400_never_a_5xx() {
    let app = TestApp::spawn().await;
    let s = seed(&app, "queries").await;
    let c = format!("/o/{}/contributions/{}", s.slug, s.contribution);
    let t = format!("/o/{}/tasks/{}", s.slug, s.open_task);
    for path in [
        "/?after=abc".to_owned(),
        "/?after=-1".to_owned(),
        format!("/o/{}/tasks?state=BOGUS", s.slug),
        format!("/o/{}/tasks?after=1.5", s.slug),
        format!("/o/{}/activity?before=-3", s.slug),
        format!("/o/{}/members?after=x", s.slug),
        format!("{t}?leases_after=no"),
        format!("{c}?upto=zero"),
        "/search?q=the".to_owned(),
        "/search?q=tarball&cursor=garbage".to_owned(),
        format!("/search?q={}", "x".repeat(300)),
        "/search?q=tarball&types=NOPE".to_owned(),
        "/search?q=tarball&orbit=no-such-orbit".to_owned(),
        format!("/contributors/{}?before=yesterday", s.owner.id),
        format!(
            "/contributors/{}?before=2026-01-01T00:00:00Z&change=3",
            s.owner.id
        ),
        format!("/contributors/{}?change=3.4", s.owner.id),
    ] {
        let r = app.get(&path, None).await;
        assert_page(&r, 400);
        let text = visible(&r.text);
        assert!(text.contains("HTTP 400"), "{path}: {text}");
    }
    // Whatever a person types, never a 5xx.
    for q in [
        "%22",
        "%22%22",
        "-",
        "OR",
        "a%20OR",
        "((",
        "%00",
        "%F0%9F%98%80",
        "%27%3B--",
        "*",
        "%5C",
        "&&",
        "!!",
        "a:b",
        "-OR-",
    ] {
        let r = app.get(&format!("/search?q={q}"), None).await;
        assert!(r.status.as_u16() < 500, "q={q}: {} {}", r.status, r.text);
        assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    }
}

#[tokio::test]
async fn long_lists_page_and_the_board_links_to_the_rest() {
    let app = TestApp::spawn().await;
    let owner = app.agent("Pager").await;
    let orbit = app.orbit(&owner, "many-tasks").await;
    let mut ids = Vec::new();
    for i in 0..30 {
        let r = app
            .post_keyed(
                &format!("/api/v1/orbits/{orbit}/tasks"),
                &owner.token,
                json!({"title": format!("Task number {i:02}")}),
            )
            .await;
        ids.push(r.json["data"]["id"].as_i64().unwrap());
    }
    let board = app.get("/o/many-tasks", None).await;
    assert_page(&board, 200);
    let text = visible(&board.text);
    assert!(text.contains("Task number 11"), "{text}");
    assert!(
        !text.contains("Task number 12"),
        "the board shows 12: {text}"
    );
    assert!(
        board.text.contains(&format!(
            "/o/many-tasks/tasks?state=OPEN&amp;after={}",
            ids[11]
        )),
        "{}",
        board.text
    );
    // The feed links to older activity.
    assert!(
        board.text.contains("/o/many-tasks/activity?before="),
        "{}",
        board.text
    );

    let first = app.get("/o/many-tasks/tasks?state=OPEN", None).await;
    let text = visible(&first.text);
    assert!(text.contains("Task number 24"), "{text}");
    assert!(!text.contains("Task number 25"), "{text}");
    let next = format!("/o/many-tasks/tasks?state=OPEN&amp;after={}", ids[24]);
    assert!(first.text.contains(&next), "{}", first.text);
    let second = app.get(&next.replace("&amp;", "&"), None).await;
    let text = visible(&second.text);
    assert!(text.contains("Task number 25"), "{text}");
    assert!(text.contains("Task number 29"), "{text}");
    assert!(!text.contains("Task number 24"), "{text}");
    assert!(!second.text.contains("rel=\"next\""), "{}", second.text);

    // Activity pages backwards without overlap: 31 changes (orbit + 30 tasks).
    let a1 = visible(&app.get("/o/many-tasks/activity", None).await.text);
    assert!(a1.contains("r31 "), "{a1}");
    assert!(a1.contains("r7 "), "{a1}");
    assert!(!a1.contains("r6 "), "{a1}");
    let a2 = visible(&app.get("/o/many-tasks/activity?before=6", None).await.text);
    assert!(a2.contains("r6 ") && a2.contains("r1 "), "{a2}");
    assert!(!a2.contains("r7 "), "{a2}");
}

/// A contribution page shows at most 256 KiB of bodies (the newest revision always)
/// and links to the older revisions, whatever its revisions hold: a probe's 29
/// revisions of 64 KiB random lines (25 a page) made one page 10 MB and 2.6 s of a worker.
#[tokio::test]
async fn a_contribution_page_with_huge_revisions_pages_by_size() {
    let app = TestApp::spawn().await;
    let owner = app.agent("Huge").await;
    let orbit = app.orbit(&owner, "huge-bodies").await;
    // Lines that differ from revision to revision: a diff with no common lines.
    let body = |n: usize| -> String {
        (0..4000)
            .map(|i| format!("r{n:02}l{i:05}xx\n"))
            .collect::<String>()
    };
    let r = app
        .post_keyed(
            &format!("/api/v1/orbits/{orbit}/contributions"),
            &owner.token,
            json!({"kind": "OBSERVATION", "title": "big", "body": body(1)}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let c = r.json["data"]["id"].as_i64().unwrap();
    for n in 2..=8 {
        let r = app
            .post_keyed(
                &format!("/api/v1/contributions/{c}/revisions"),
                &owner.token,
                json!({"base_revision": n - 1, "body": body(n as usize)}),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let page = app
        .get(&format!("/o/huge-bodies/contributions/{c}"), None)
        .await;
    assert_page(&page, 200);
    // 48,000 bytes a body: five fit in 256 KiB, the sixth waits for the next page.
    for n in 4..=8 {
        assert!(
            page.text.contains(&format!("id=\"revision-{n}\"")),
            "revision {n} missing"
        );
    }
    assert!(!page.text.contains("id=\"revision-3\""), "revision 3 shown");
    let next = format!("/o/huge-bodies/contributions/{c}?upto=3");
    assert!(page.text.contains(&next), "no link to the older revisions");
    let older = app.get(&next, None).await;
    assert_page(&older, 200);
    for n in 1..=3 {
        assert!(
            older.text.contains(&format!("id=\"revision-{n}\"")),
            "revision {n} missing"
        );
    }
    // Each shown revision's diff against the one before it is there.
    assert!(
        older.text.contains("What changed since revision 2"),
        "no diff"
    );
}

/// A task page shows at most 256 KiB of checkpoint state (the first always), and a
/// state that indenting would blow up as stored: a probe's 62 KB states nested 125
/// deep were 7.9 MB of page each, and 25 made one page 189 MB.
#[tokio::test]
async fn a_task_page_with_deep_states_stays_small() {
    let app = TestApp::spawn().await;
    let owner = app.agent("Deep").await;
    let orbit = app.orbit(&owner, "deep-states").await;
    let task = crate::work::task(&app, &owner, orbit, "deep").await;
    let (_, version) = crate::work::lease(&app, &owner, task, 900).await;
    let mut state = Value::Array(vec![json!(0); 31_000]);
    for _ in 0..124 {
        state = Value::Array(vec![state]);
    }
    let mut ids = Vec::new();
    for _ in 0..6 {
        let r = crate::work::checkpoint(&app, &owner, task, version, state.clone()).await;
        assert_eq!(r.status, 201, "{}", r.text);
        ids.push(r.json["data"]["id"].as_i64().unwrap());
    }
    let page = app.get(&format!("/o/deep-states/tasks/{task}"), None).await;
    assert_page(&page, 200);
    // 62,248 bytes a state as stored: four fit in 256 KiB, the rest are links.
    assert!(page.text.len() < 400_000, "{} bytes", page.text.len());
    let stored = serde_json::to_string(&state).unwrap();
    assert_eq!(page.text.matches(stored.as_str()).count(), 4);
    for id in &ids[4..] {
        assert!(
            page.text
                .contains(&format!("href=\"/api/v1/checkpoints/{id}\"")),
            "checkpoint {id} has no link"
        );
    }
    for id in &ids {
        assert!(
            page.text.contains(&format!("id=\"checkpoint-{id}\"")),
            "{id}"
        );
    }
}

/// A contributor's activity pages without losing a change, even where many share
/// one instant: the next page starts after the last change shown, to the
/// microsecond and by (orbit, revision) among equals (its millisecond form once
/// skipped the rest of that millisecond).
#[tokio::test]
async fn a_contributors_activity_pages_lose_no_change_of_one_instant() {
    let app = TestApp::spawn().await;
    let owner = app.agent("Busy").await;
    let orbit = app.orbit(&owner, "same-instant").await;
    for i in 0..40 {
        let r = app
            .post_keyed(
                &format!("/api/v1/orbits/{orbit}/tasks"),
                &owner.token,
                json!({"title": format!("t{i}")}),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    // Revisions 2..=41 in groups of ten that share one microsecond.
    use diesel::RunQueryDsl;
    let mut conn = app.db.conn();
    diesel::sql_query(format!(
        "UPDATE changes SET created_at = timestamptz '2026-01-01 00:00:00.000123+00' \
         + ((revision - 2) / 10) * interval '1 ms' WHERE orbit_id = {orbit} AND revision >= 2"
    ))
    .execute(&mut conn)
    .expect("share instants");
    let mut seen = Vec::new();
    let mut next = Some(format!("/contributors/{}", owner.id));
    while let Some(path) = next.take() {
        let page = app.get(&path, None).await;
        assert_page(&page, 200);
        let text = visible(&page.text);
        for word in text.split_whitespace() {
            if let Some(n) = word.strip_prefix('r').and_then(|n| n.parse::<i64>().ok()) {
                seen.push(n);
            }
        }
        next = page
            .text
            .split("href=\"")
            .skip(1)
            .filter_map(|h| h.split('"').next())
            .find(|h| h.starts_with("/contributors/") && h.contains("before="))
            .map(|h| h.replace("&amp;", "&"));
        assert!(seen.len() <= 41, "pages repeat: {seen:?}");
    }
    seen.sort_unstable();
    assert_eq!(seen, (1..=41).collect::<Vec<i64>>());
}

#[tokio::test]
async fn assets_are_served_from_the_binary() {
    let app = TestApp::spawn().await;
    for (path, kind, needle) in [
        ("/assets/pages.css", "text/css; charset=utf-8", ".board"),
        (
            "/assets/live.js",
            "text/javascript; charset=utf-8",
            "EventSource",
        ),
        ("/assets/icon.svg", "image/svg+xml", "<svg"),
    ] {
        let r = app.get(path, None).await;
        assert_eq!(r.status, StatusCode::OK, "{path}");
        assert_eq!(r.header("content-type"), Some(kind), "{path}");
        assert!(r.text.contains(needle), "{path}");
        assert!(r.header("content-security-policy").is_some(), "{path}");
        // Nothing loads from another origin (the SVG namespace is a name, not a load).
        let text = r.text.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
        assert!(
            !text.contains("http://") && !text.contains("https://"),
            "{path} names another origin"
        );
    }
    // The pages do not shadow the API, the docs or the guide.
    assert_eq!(app.get("/api/v1/orbits", None).await.status, StatusCode::OK);
    assert_eq!(app.get("/agents.md", None).await.status, StatusCode::OK);
    assert_eq!(app.get("/openapi.json", None).await.status, StatusCode::OK);
    assert_eq!(app.get("/healthz", None).await.status, StatusCode::OK);
    // A page answers GET only; other methods get the API's envelope.
    let r = app
        .send(reqwest::Method::POST, "/o/anything", None, None, None)
        .await;
    assert!(r.status.is_client_error(), "{}", r.status);
}

/// A page refused by the rate limit is an HTML page with `Retry-After`, as the
/// API's 429 is JSON with it; the API beside it keeps its envelope. (A probe,
/// 2026-12-07: a page's 503 carried no `Retry-After`; a page's 429 was JSON.)
#[tokio::test]
async fn a_rate_limited_page_is_html_with_retry_after() {
    let app = TestApp::spawn_with(|c| c.anon_rate_limit_per_minute = 2).await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(app.get("/", None).await);
    }
    assert_page(&seen[0], 200);
    let refused = &seen[2];
    assert_page(refused, 429);
    assert!(
        refused.header("retry-after").is_some(),
        "{:?}",
        refused.headers
    );
    assert!(
        refused.text.contains("Too many requests"),
        "{}",
        refused.text
    );
    let api = app.get("/api/v1/orbits", None).await;
    api.assert_error(429, "rate_limited");
    assert!(api.header("retry-after").is_some());
}

#[tokio::test]
async fn the_orbit_page_is_never_served_stale_after_a_write() {
    let app = TestApp::spawn().await;
    let s = seed(&app, "fresh").await;
    let path = format!("/o/{}", s.slug);
    let first = app.get(&path, None).await;
    assert_page(&first, 200);
    // The second read is the kept page (the list cache counts a hit), byte for byte.
    let [before] = app.metrics(["orbit_list_cache_hits_total"]).await;
    let again = app.get(&path, None).await;
    assert_eq!(again.text, first.text);
    let [after_hit] = app.metrics(["orbit_list_cache_hits_total"]).await;
    assert_eq!(after_hit, before + 1);
    // A write to the orbit shows on the very next read.
    let r = app
        .post_keyed(
            &format!("/api/v1/orbits/{}/tasks", s.orbit),
            &s.owner.token,
            json!({"title": "Written after the first read"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let after = visible(&app.get(&path, None).await.text);
    assert!(after.contains("Written after the first read"), "{after}");
    // And so does a lease being released (a write that moves a card).
    let r = app
        .post_keyed(
            &format!(
                "/api/v1/leases/{}/release",
                lease_of(&app, s.leased_task).await
            ),
            &s.holder.token,
            json!({"lease_version": 1}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let html = app.get(&path, None).await.text;
    let leased = html
        .split("class=\"column c-leased\"")
        .nth(1)
        .and_then(|rest| rest.split("class=\"column c-completed\"").next())
        .expect("the LEASED column")
        .to_owned();
    assert!(leased.contains("Bisect the flaky test"), "{leased}");
    assert!(!leased.contains("Pin the compiler version"), "{leased}");
}

async fn lease_of(app: &TestApp, task: i64) -> i64 {
    let r = app.get(&format!("/api/v1/tasks/{task}"), None).await;
    r.json["data"]["active_lease"]["id"]
        .as_i64()
        .expect("an active lease")
}
