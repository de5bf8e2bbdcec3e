//! Search (issue 20, contract section 13): ranking, filters, paging, revisions,
//! snippet offsets, hostile queries and the MCP tool, over real HTTP.

use std::collections::HashSet;

use serde_json::{json, Value};

use crate::harness::{Agent, Resp, TestApp};
use crate::work::{crew, task};

/// `GET /api/v1/search` with `params` percent-encoded.
async fn search(app: &TestApp, params: &[(&str, &str)]) -> Resp {
    let url =
        reqwest::Url::parse_with_params(&app.url("/api/v1/search"), params).expect("search url");
    Resp::from(app.client.get(url).send().await.expect("request sent")).await
}

/// A 200 search: its hits.
#[track_caller]
fn hits(r: &Resp) -> Vec<Value> {
    assert_eq!(r.status, 200, "{}", r.text);
    r.json["data"].as_array().expect("data").clone()
}

fn ids_of(hits: &[Value]) -> Vec<(String, i64)> {
    hits.iter()
        .map(|h| {
            (
                h["type"].as_str().unwrap().to_owned(),
                h["id"].as_i64().unwrap(),
            )
        })
        .collect()
}

async fn contribution(app: &TestApp, who: &Agent, orbit: i64, title: &str, body: &str) -> i64 {
    let r = app
        .post_keyed(
            &format!("/api/v1/orbits/{orbit}/contributions"),
            &who.token,
            json!({"kind": "NOTE", "title": title, "body": body}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.json["data"]["id"].as_i64().unwrap()
}

async fn problem(app: &TestApp, who: &Agent, orbit: i64, title: &str, statement: &str) -> i64 {
    let r = app
        .post_keyed(
            &format!("/api/v1/orbits/{orbit}/problems"),
            &who.token,
            json!({"title": title, "statement": statement}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.json["data"]["id"].as_i64().unwrap()
}

async fn memory(app: &TestApp, who: &Agent, orbit: i64, content: &str, tags: &[&str]) -> i64 {
    let r = app
        .post(
            &format!("/api/v1/orbits/{orbit}/memory"),
            &who.token,
            json!({"content": content, "tags": tags}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.json["data"]["id"].as_i64().unwrap()
}

/// The words of `snippet` that `matches` points at.
fn matched_words(hit: &Value) -> Vec<String> {
    let chars: Vec<char> = hit["snippet"].as_str().unwrap().chars().collect();
    hit["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let (s, e) = (
                m[0].as_u64().unwrap() as usize,
                m[1].as_u64().unwrap() as usize,
            );
            assert!(s < e && e <= chars.len(), "{m} in {hit}");
            chars[s..e].iter().collect()
        })
        .collect()
}

#[tokio::test]
async fn search_ranks_title_matches_first_and_matches_english_inflections() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "rank", 0).await;
    let o = c.orbit;
    let body_only = contribution(
        &app,
        &c.owner,
        o,
        "Notes from Tuesday",
        "We looked at the build cache and then at one migration that was slow.",
    )
    .await;
    let title = contribution(&app, &c.owner, o, "Flaky migrations", "Seen twice.").await;
    let both = contribution(
        &app,
        &c.owner,
        o,
        "Migration runner",
        "The migration runner migrates every migration in order.",
    )
    .await;
    let _unrelated = contribution(&app, &c.owner, o, "Lunch", "Soup again.").await;

    let twice = contribution(
        &app,
        &c.owner,
        o,
        "Notes from Monday",
        "We looked at the migration cache and then at one migration that was slow.",
    )
    .await;

    // A title match outranks body matches; at equal length, two matches outrank
    // one (ts_rank, divided by 1 + log(length): a long text that mentions a word
    // once ranks below a short one about it).
    let found = hits(&search(&app, &[("q", "migrating")]).await);
    let order: Vec<i64> = found.iter().map(|h| h["id"].as_i64().unwrap()).collect();
    assert_eq!(order.len(), 4, "{found:?}");
    assert!(order.contains(&both));
    let pos = |id: i64| order.iter().position(|x| *x == id).unwrap();
    assert!(
        pos(title) < pos(twice) && pos(twice) < pos(body_only),
        "{found:?}"
    );
    let ranks: Vec<f64> = found.iter().map(|h| h["rank"].as_f64().unwrap()).collect();
    assert!(
        ranks.windows(2).all(|w| w[0] > w[1]),
        "strictly best first: {ranks:?}"
    );

    // English inflections both ways; case never matters.
    let runner = contribution(&app, &c.owner, o, "Tests", "The suite RUNS nightly.").await;
    let found = hits(&search(&app, &[("q", "Running")]).await);
    assert!(ids_of(&found).contains(&("CONTRIBUTION".into(), runner)));
    // Words that are not English match exactly, whatever their case.
    let german = contribution(&app, &c.owner, o, "Straße", "Die Häuser an der Straße.").await;
    let found = hits(&search(&app, &[("q", "STRASSE straße")]).await);
    assert!(
        found.is_empty(),
        "no stemming or folding to ASCII: {found:?}"
    );
    let found = hits(&search(&app, &[("q", "STRAßE")]).await);
    assert_eq!(ids_of(&found), [("CONTRIBUTION".into(), german)]);
    let found = hits(&search(&app, &[("q", "häuser")]).await);
    assert_eq!(ids_of(&found), [("CONTRIBUTION".into(), german)]);
    let found = hits(&search(&app, &[("q", "häus")]).await);
    assert!(found.is_empty(), "an exact word, not a stem: {found:?}");

    // Phrases, OR and exclusion.
    let found = hits(&search(&app, &[("q", "\"migration runner\"")]).await);
    assert_eq!(ids_of(&found), [("CONTRIBUTION".into(), both)]);
    let found = hits(&search(&app, &[("q", "migration -runner")]).await);
    let got: HashSet<(String, i64)> = ids_of(&found).into_iter().collect();
    let want: HashSet<(String, i64)> = [title, twice, body_only]
        .map(|id| ("CONTRIBUTION".to_owned(), id))
        .into();
    assert_eq!(got, want);
    assert_eq!(found[0]["id"], title);
    let found = hits(&search(&app, &[("q", "soup OR nightly")]).await);
    assert_eq!(found.len(), 2, "{found:?}");
    // OR joins only its neighbours: the plain words around it must all match (a
    // probe found `(flaky & test) | spec` taken in "spec for the parser").
    let flaky_test = contribution(&app, &c.owner, o, "Flaky test in CI", "x").await;
    let flaky_spec = contribution(&app, &c.owner, o, "Flaky spec in CI", "x").await;
    let spec_only = contribution(&app, &c.owner, o, "Spec for the parser", "x").await;
    let want: HashSet<(String, i64)> = [flaky_test, flaky_spec]
        .map(|id| ("CONTRIBUTION".to_owned(), id))
        .into();
    for q in [
        "flaky test OR spec",
        "flaky (test OR spec)",
        "test OR spec flaky",
        "flaky test or spec",
        "flaky test OR spec -nothingsuch",
        // A term with nothing searchable is left out with the OR that joined it.
        "flaky OR -the test OR spec",
        "flaky test OR the OR spec",
    ] {
        let found = hits(&search(&app, &[("q", q)]).await);
        let got: HashSet<(String, i64)> = ids_of(&found).into_iter().collect();
        assert_eq!(got, want, "{q}");
    }
    // OR between a phrase and an excluded term, and groups after one another.
    let found = hits(&search(&app, &[("q", "\"flaky spec\" OR -ci parser")]).await);
    assert_eq!(ids_of(&found), [("CONTRIBUTION".into(), spec_only)]);
    let found = hits(&search(&app, &[("q", "test OR parser ci OR runner")]).await);
    assert_eq!(ids_of(&found), [("CONTRIBUTION".into(), flaky_test)]);
}

#[tokio::test]
async fn search_filters_by_orbit_and_type_and_shapes_each_kind() {
    let app = TestApp::spawn().await;
    let a = crew(&app, "filter-a", 0).await;
    let b = crew(&app, "filter-b", 0).await;
    let word = "zephyr";
    let c_a = contribution(&app, &a.owner, a.orbit, "Zephyr wind", "calm").await;
    let p_a = problem(
        &app,
        &a.owner,
        a.orbit,
        "Zephyr gusts",
        "We need zephyr data.",
    )
    .await;
    let t_a = task(&app, &a.owner, a.orbit, "Measure the zephyr").await;
    let m_a = memory(
        &app,
        &a.owner,
        a.orbit,
        "Note: zephyr seen at dawn",
        &["wind"],
    )
    .await;
    let c_b = contribution(&app, &b.owner, b.orbit, "Other zephyr", "elsewhere").await;

    let all = hits(&search(&app, &[("q", word)]).await);
    let got: HashSet<(String, i64)> = ids_of(&all).into_iter().collect();
    let want: HashSet<(String, i64)> = [
        ("CONTRIBUTION".to_owned(), c_a),
        ("PROBLEM".to_owned(), p_a),
        ("TASK".to_owned(), t_a),
        ("MEMORY".to_owned(), m_a),
        ("CONTRIBUTION".to_owned(), c_b),
    ]
    .into();
    assert_eq!(got, want);

    // By orbit, named by slug or by id alike.
    for orbit in ["filter-a".to_owned(), a.orbit.to_string()] {
        let only_a = hits(&search(&app, &[("q", word), ("orbit", &orbit)]).await);
        assert_eq!(only_a.len(), 4, "{only_a:?}");
        assert!(only_a
            .iter()
            .all(|h| h["orbit"] == json!({"id": a.orbit, "slug": "filter-a"})));
    }
    // By type, one or several.
    let tasks = hits(&search(&app, &[("q", word), ("types", "TASK")]).await);
    assert_eq!(ids_of(&tasks), [("TASK".into(), t_a)]);
    let some = hits(
        &search(
            &app,
            &[
                ("q", word),
                ("types", "MEMORY,PROBLEM"),
                ("orbit", "filter-a"),
            ],
        )
        .await,
    );
    let got: HashSet<(String, i64)> = ids_of(&some).into_iter().collect();
    assert_eq!(
        got,
        [("MEMORY".to_owned(), m_a), ("PROBLEM".to_owned(), p_a)].into()
    );

    // Each kind's fields.
    let by = |t: &str| {
        all.iter()
            .find(|h| h["type"] == t && h["orbit"]["id"] == a.orbit)
            .unwrap()
    };
    let c = by("CONTRIBUTION");
    assert_eq!(c["revision"], 1);
    assert_eq!(c["kind"], "NOTE");
    assert_eq!(c["title"], "Zephyr wind");
    assert!(c.get("status").is_none(), "{c}");
    assert_eq!(by("PROBLEM")["status"], "OPEN");
    assert_eq!(by("TASK")["status"], "OPEN");
    let m = by("MEMORY");
    assert_eq!(m["title"], "Note: zephyr seen at dawn");
    assert_eq!(m["created_at"], m["updated_at"]);
    assert!(
        m.get("revision").is_none() && m.get("kind").is_none(),
        "{m}"
    );
    for h in &all {
        for field in ["title", "snippet", "created_at", "updated_at"] {
            assert!(h[field].is_string(), "{field} of {h}");
        }
        assert!(h["rank"].as_f64().unwrap() > 0.0, "{h}");
    }
    // A record's title is its first line that is not blank, trimmed: a CRLF's `\r`
    // is not kept, and content that opens with blank lines still has one.
    let long = format!("kumquat three {} tail", "x".repeat(65));
    let cut = format!("kumquat three {}", "x".repeat(65));
    for (content, title) in [
        ("kumquat one\r\nsecond line", "kumquat one"),
        ("\n\n   \r\n\t kumquat two \t\nmore", "kumquat two"),
        // Unicode's spaces are spaces, and the cut at 80 is trimmed too.
        (
            "\u{a0} \u{3000}\nkumquat\u{a0}four\u{3000}\r\nmore",
            "kumquat\u{a0}four",
        ),
        (long.as_str(), cut.as_str()),
    ] {
        let id = memory(&app, &a.owner, a.orbit, content, &[]).await;
        let found = hits(&search(&app, &[("q", content), ("types", "MEMORY")]).await);
        let hit = found
            .iter()
            .find(|h| h["id"] == id)
            .unwrap_or_else(|| panic!("{content:?}: {found:?}"));
        assert_eq!(hit["title"], title, "{hit}");
    }
    // Memory tags are searched too.
    let tagged = hits(&search(&app, &[("q", "wind"), ("types", "MEMORY")]).await);
    assert_eq!(ids_of(&tagged), [("MEMORY".into(), m_a)]);
    assert_eq!(matched_words(&tagged[0]), ["wind"]);

    // Filters that name nothing, or nothing valid.
    let r = search(&app, &[("q", word), ("orbit", "no-such-orbit")]).await;
    r.assert_error(422, "validation_failed");
    assert!(r.json["errors"]["orbit"].is_array(), "{}", r.text);
    let r = search(&app, &[("q", word), ("types", "TASK,ARTIFACT")]).await;
    r.assert_error(422, "validation_failed");
    assert!(r.json["errors"]["types"].is_array(), "{}", r.text);
}

#[tokio::test]
async fn search_pages_follow_the_rank_order_without_overlap_while_others_write() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "pages", 0).await;
    let mut made = HashSet::new();
    for i in 0..23 {
        // Several rank levels, and ties within each.
        let body = "quokka ".repeat(i % 4 + 1) + "padding words here";
        let id = contribution(&app, &c.owner, c.orbit, &format!("entry {i}"), &body).await;
        made.insert(("CONTRIBUTION".to_owned(), id));
    }
    for i in 0..4 {
        let id = task(&app, &c.owner, c.orbit, &format!("quokka task {i}")).await;
        made.insert(("TASK".to_owned(), id));
    }
    let whole = hits(&search(&app, &[("q", "quokka"), ("limit", "50")]).await);
    assert_eq!(whole.len(), made.len());

    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut params = vec![("q", "quokka"), ("limit", "5")];
        if let Some(c) = &cursor {
            params.push(("cursor", c));
        }
        let r = search(&app, &params).await;
        let page = hits(&r);
        assert!(page.len() <= 5);
        seen.extend(page.iter().cloned());
        pages += 1;
        if pages == 1 {
            // A match written after the first page never enters the later ones.
            contribution(
                &app,
                &c.owner,
                c.orbit,
                "late quokka",
                "quokka quokka quokka",
            )
            .await;
        }
        match r.json["meta"]["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
        assert!(pages < 20, "paging must end");
    }
    assert_eq!(pages, 6);
    let keys = ids_of(&seen);
    let unique: HashSet<(String, i64)> = keys.iter().cloned().collect();
    assert_eq!(unique.len(), keys.len(), "no hit on two pages");
    assert_eq!(unique, made, "every hit once");
    // The pages together are the single page's order: best first, ties by type
    // then id.
    assert_eq!(keys, ids_of(&whole));
    for w in seen.windows(2) {
        let (r0, r1) = (
            w[0]["rank"].as_f64().unwrap(),
            w[1]["rank"].as_f64().unwrap(),
        );
        let k0 = (w[0]["type"].as_str().unwrap(), w[0]["id"].as_i64().unwrap());
        let k1 = (w[1]["type"].as_str().unwrap(), w[1]["id"].as_i64().unwrap());
        assert!(
            r0 > r1 || (r0 == r1 && k0 < k1),
            "{k0:?} {r0} before {k1:?} {r1}"
        );
    }
    let levels: HashSet<String> = seen.iter().map(|h| h["rank"].to_string()).collect();
    assert!(levels.len() >= 4, "several rank levels: {levels:?}");
    // A new search sees the late one.
    let again = hits(&search(&app, &[("q", "quokka"), ("limit", "50")]).await);
    assert_eq!(again.len(), made.len() + 1);

    // A cursor belongs to its search.
    let r = search(&app, &[("q", "quokka"), ("limit", "5")]).await;
    let next = r.json["meta"]["next_cursor"].as_str().unwrap().to_owned();
    for other in [
        vec![("q", "quokka task"), ("cursor", next.as_str())],
        vec![
            ("q", "quokka"),
            ("types", "TASK"),
            ("cursor", next.as_str()),
        ],
        vec![
            ("q", "quokka"),
            ("orbit", "pages"),
            ("cursor", next.as_str()),
        ],
        vec![("q", "quokka"), ("cursor", "bm90LWEtY3Vyc29y")],
        vec![("q", "quokka"), ("cursor", "%%%")],
    ] {
        let r = search(&app, &other).await;
        r.assert_error(422, "validation_failed");
        assert!(r.json["errors"]["cursor"].is_array(), "{}", r.text);
    }
    // The same search with the query worded differently is the same search.
    let r = search(&app, &[("q", "QUOKKAS"), ("limit", "5"), ("cursor", &next)]).await;
    assert_eq!(hits(&r).len(), 5);
}

#[tokio::test]
async fn a_revised_contribution_is_found_by_its_current_text_only() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "revs", 0).await;
    let id = contribution(&app, &c.owner, c.orbit, "Wombat census", "Counted wombats.").await;
    // Found by the very next search after the write's response.
    let found = hits(&search(&app, &[("q", "wombat")]).await);
    assert_eq!(ids_of(&found), [("CONTRIBUTION".into(), id)]);
    assert_eq!(found[0]["revision"], 1);

    let r = app
        .post_keyed(
            &format!("/api/v1/contributions/{id}/revisions"),
            &c.owner.token,
            json!({"base_revision": 1, "title": "Numbat census", "body": "Counted numbats."}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert!(hits(&search(&app, &[("q", "wombat")]).await).is_empty());
    let found = hits(&search(&app, &[("q", "numbat")]).await);
    assert_eq!(ids_of(&found), [("CONTRIBUTION".into(), id)]);
    assert_eq!(found[0]["revision"], 2);
    assert_eq!(found[0]["title"], "Numbat census");
    // A revision that changes only the body keeps the title's words.
    let r = app
        .post_keyed(
            &format!("/api/v1/contributions/{id}/revisions"),
            &c.owner.token,
            json!({"base_revision": 2, "body": "Nothing counted."}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let found = hits(&search(&app, &[("q", "numbat")]).await);
    assert_eq!(found[0]["revision"], 3);
    assert_eq!(matched_words(&found[0]), ["Numbat"], "{}", found[0]);
    // The old revisions are still readable, never searched.
    let r = app
        .get(&format!("/api/v1/contributions/{id}/revisions/1"), None)
        .await;
    assert_eq!(r.json["data"]["title"], "Wombat census");
}

#[tokio::test]
async fn snippet_offsets_point_at_the_matched_words() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "offsets", 0).await;
    let o = c.orbit;
    // Multi-byte letters and a marker-like private-use character before the words.
    let body = "Ünïcödé \u{E000}prefix 🚀 then we tried Running the café tests; \
                the runner RUNS them, and Straße was fine. Running again.";
    let id = contribution(&app, &c.owner, o, "Plain title", body).await;
    let found = hits(&search(&app, &[("q", "run café straße")]).await);
    assert_eq!(ids_of(&found), [("CONTRIBUTION".into(), id)]);
    let hit = &found[0];
    let snippet = hit["snippet"].as_str().unwrap();
    assert!(
        !snippet.contains('\u{E000}') && !snippet.contains('<'),
        "{snippet}"
    );
    assert!(
        body.replace('\u{E000}', "\u{FFFD}").contains(snippet),
        "cut from the body as stored: {snippet:?}"
    );
    let words = matched_words(hit);
    assert!(!words.is_empty());
    for w in &words {
        assert!(
            ["Running", "café", "RUNS", "Straße"].contains(&w.as_str()),
            "{w:?} in {snippet:?}"
        );
    }
    for w in ["Running", "café", "RUNS", "Straße"] {
        assert!(
            words.iter().any(|x| x == w),
            "{w} highlighted in {snippet:?}: {words:?}"
        );
    }
    // Offsets ascend and never overlap.
    let m: Vec<(u64, u64)> = hit["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m[0].as_u64().unwrap(), m[1].as_u64().unwrap()))
        .collect();
    assert!(m.windows(2).all(|w| w[0].1 <= w[1].0), "{m:?}");

    // Only the title matched: the snippet is the title.
    let id = contribution(&app, &c.owner, o, "Galápagos tortoise log", "Nothing here.").await;
    let found = hits(&search(&app, &[("q", "tortoises")]).await);
    assert_eq!(ids_of(&found), [("CONTRIBUTION".into(), id)]);
    assert_eq!(found[0]["snippet"], "Galápagos tortoise log");
    assert_eq!(found[0]["matches"], json!([[10, 18]]));
    assert_eq!(matched_words(&found[0]), ["tortoise"]);

    // Only excluded words: nothing to point at, and the snippet is the text's start.
    let found = hits(&search(&app, &[("q", "-zzzz"), ("orbit", "offsets")]).await);
    assert_eq!(found.len(), 2);
    assert!(found.iter().all(|h| h["matches"] == json!([])), "{found:?}");
}

/// Text between `<` and `>` is searched and shown: PostgreSQL's parser read it as
/// an HTML tag and dropped it, from the search and from the snippet.
#[tokio::test]
async fn text_between_angle_brackets_is_searched_and_shown() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "brackets", 0).await;
    let body = "Handle the case where a<b and c>d, and return Result<Vec<u8>, io::Error> \
                from numbat_read; include <stdio.h> and take a Vec<String>.";
    let id = contribution(&app, &c.owner, c.orbit, "Parser notes", body).await;
    let found = hits(&search(&app, &[("q", "numbat")]).await);
    assert_eq!(ids_of(&found), [("CONTRIBUTION".into(), id)]);
    let snippet = found[0]["snippet"].as_str().unwrap();
    assert!(
        body.contains(snippet),
        "cut from the body as stored: {snippet:?}"
    );
    for kept in ["Result<Vec<u8>, io::Error>", "<stdio.h>", "Vec<String>"] {
        assert!(snippet.contains(kept), "{kept} in {snippet:?}");
    }
    for q in ["stdio.h", "Vec<String>", "u8"] {
        let found = hits(&search(&app, &[("q", q)]).await);
        assert_eq!(ids_of(&found), [("CONTRIBUTION".into(), id)], "{q}");
    }
    // A text's own U+E002 (what `<` is searched as) is never shown as `<`.
    let odd = contribution(&app, &c.owner, c.orbit, "Odd", "zebra \u{E002} quagga").await;
    let found = hits(&search(&app, &[("q", "quagga")]).await);
    assert_eq!(ids_of(&found), [("CONTRIBUTION".into(), odd)]);
    let snippet = found[0]["snippet"].as_str().unwrap();
    assert!(
        !snippet.contains('<') && !snippet.contains('\u{E002}'),
        "{snippet:?}"
    );
}

/// The words of a URL, a path, a host name and an e-mail address are searched, a
/// URL typed as stored finds it unquoted too, and the snippet shows each as stored.
/// PostgreSQL's parser read each as one token (until 2026-12-06: `glorpfile`,
/// `wibblebot` and `Frobnitz` found nothing, nor did the URL unless quoted).
#[tokio::test]
async fn words_inside_urls_paths_and_addresses_are_searched_and_shown() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "urls", 0).await;
    let body = "See https://example.com/snarfpath?x=1 and /usr/lib/glorpfile.so, mail \
                wibblebot@example.org, close </Frobnitz> at 10:45.";
    let id = contribution(&app, &c.owner, c.orbit, "Link notes", body).await;
    for q in [
        "snarfpath",
        "https://example.com/snarfpath?x=1",
        "\"https://example.com/snarfpath?x=1\"",
        "example.com/snarfpath",
        "glorpfile",
        "glorpfile.so",
        "/usr/lib/glorpfile.so",
        "wibblebot",
        "wibblebot@example.org",
        "Frobnitz",
    ] {
        let found = hits(&search(&app, &[("q", q), ("orbit", "urls")]).await);
        assert_eq!(ids_of(&found), [("CONTRIBUTION".into(), id)], "{q}");
        let snippet = found[0]["snippet"].as_str().unwrap();
        assert!(
            body.contains(snippet),
            "{q}: cut from the body as stored: {snippet:?}"
        );
    }
    let found = hits(&search(&app, &[("q", "glorpfile")]).await);
    assert_eq!(matched_words(&found[0]), ["glorpfile"], "{found:?}");
    // A text's own stand-ins are never shown as what they stand for.
    let odd = contribution(
        &app,
        &c.owner,
        c.orbit,
        "Odd",
        "okapi \u{E003}\u{E005} tapir",
    )
    .await;
    let found = hits(&search(&app, &[("q", "okapi")]).await);
    assert_eq!(ids_of(&found), [("CONTRIBUTION".into(), odd)]);
    let snippet = found[0]["snippet"].as_str().unwrap();
    assert_eq!(snippet, "okapi \u{FFFD}\u{FFFD} tapir");
}

/// A hyphenated word is its parts, adjacent: `rate-limit` finds "rate limit" and
/// "rate/limit" as they find it (until 2026-12-06 the compound was a lexeme of its
/// own that only a text holding it matched), and its parts are words.
#[tokio::test]
async fn a_hyphenated_word_is_searched_by_its_parts() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "hyphens", 0).await;
    let mut made = HashSet::new();
    for body in [
        "the rate-limit was hit",
        "a rate limit was hit",
        "see the rate/limit path",
    ] {
        let id = contribution(&app, &c.owner, c.orbit, "Limits", body).await;
        made.insert(("CONTRIBUTION".to_owned(), id));
    }
    let apart = contribution(&app, &c.owner, c.orbit, "Other", "limit the rate").await;
    for q in [
        "rate-limit",
        "\"rate-limit\"",
        "rate/limit",
        "\"rate limit\"",
    ] {
        let found = hits(&search(&app, &[("q", q), ("orbit", "hyphens")]).await);
        let got: HashSet<(String, i64)> = ids_of(&found).into_iter().collect();
        assert_eq!(got, made, "{q}");
    }
    let found = hits(&search(&app, &[("q", "rate limit"), ("orbit", "hyphens")]).await);
    assert_eq!(found.len(), 4, "all words, in any order: {found:?}");
    assert!(ids_of(&found).contains(&("CONTRIBUTION".into(), apart)));
    // Excluding a hyphenated word excludes its phrase only.
    let found = hits(&search(&app, &[("q", "rate -rate-limit"), ("orbit", "hyphens")]).await);
    assert_eq!(ids_of(&found), [("CONTRIBUTION".into(), apart)]);
    // A hyphen before a digit joins words too (the parser read `ISO-8601` as a word
    // and the number -8601), and the snippet shows the text as stored.
    let body = "Dates in ISO-8601, text in utf-8, builds for x86-64; down by -12 today.";
    let dated = contribution(&app, &c.owner, c.orbit, "Formats", body).await;
    for q in [
        "8601", "iso 8601", "ISO-8601", "iso/8601", "utf-8", "x86-64", "64",
    ] {
        let found = hits(&search(&app, &[("q", q), ("orbit", "hyphens")]).await);
        assert_eq!(ids_of(&found), [("CONTRIBUTION".into(), dated)], "{q}");
        let snippet = found[0]["snippet"].as_str().unwrap();
        assert!(body.contains(snippet), "{q}: {snippet:?}");
    }
    // A number's own sign stays: `"-12"` (quoted; unquoted it excludes 12) finds it.
    let found = hits(&search(&app, &[("q", "\"-12\""), ("orbit", "hyphens")]).await);
    assert_eq!(ids_of(&found), [("CONTRIBUTION".into(), dated)]);
}

#[tokio::test]
async fn hostile_queries_are_answered_never_5xx() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "hostile", 0).await;
    for i in 0..30 {
        contribution(
            &app,
            &c.owner,
            c.orbit,
            &format!("common {i}"),
            "shared words in all",
        )
        .await;
    }
    let long_word = "x".repeat(256);
    let long_unicode = "é\u{301}".repeat(128);
    let many_or = "a OR ".repeat(51);
    let many_words = "common ".repeat(36);
    let emoji = "🦀".repeat(256);
    // Over 32 operators in a row overflow PostgreSQL's web-search parser ("tsquery
    // stack too small"): a review found them answered 500 until 2026-12-05.
    let dashes = "-".repeat(40);
    let word_then_dashes = format!("common {}", "-".repeat(32));
    let spaced_nots = format!("common {} words", "- ".repeat(40));
    let queries: Vec<&str> = vec![
        &dashes,
        &word_then_dashes,
        &spaced_nots,
        "\"",
        "\"unclosed phrase",
        "\"\"\"\"",
        "OR",
        "OR OR OR common",
        "-",
        "--common",
        "- - -",
        "!!!",
        "(((common",
        "common)))",
        "a & b | c",
        "common:*",
        ":*",
        "common <-> words",
        "'",
        "\\",
        "\\' OR 1=1; --",
        "common:A",
        "ד\u{200F}עברית\u{202E}common",
        "zero\u{200B}width\u{200D}joiner",
        "\u{FEFF}common",
        "\u{E000}common\u{E001}",
        "\u{FFFD}",
        &long_word,
        &long_unicode,
        &many_or,
        &many_words,
        &emoji,
        "-common",
        "-nothingmatchesthis",
        "common OR -common",
        "\0common",
        "%00%",
    ];
    for q in queries {
        let r = search(&app, &[("q", q), ("limit", "50")]).await;
        assert!(
            r.status == 200 || (r.status == 422 && r.json["code"] == "empty_query"),
            "{q:?}: {} {}",
            r.status,
            r.text
        );
        if r.status == 200 {
            let data = r.json["data"].as_array().unwrap();
            assert!(data.len() <= 50);
        }
    }
    // Such a query still searches its words, as plain words.
    let r = search(&app, &[("q", &word_then_dashes), ("limit", "50")]).await;
    assert_eq!(hits(&r).len(), 30, "{}", r.text);
    search(&app, &[("q", &dashes)])
        .await
        .assert_error(422, "empty_query");
    // Matching everything is still one bounded page.
    let r = search(&app, &[("q", "-nothingmatchesthis"), ("limit", "50")]).await;
    assert_eq!(hits(&r).len(), 30);
    let r = search(&app, &[("q", "common"), ("limit", "10")]).await;
    assert_eq!(hits(&r).len(), 10);
    assert!(r.json["meta"]["next_cursor"].is_string());
    // Over 256 characters is a field error.
    let r = search(&app, &[("q", &"y".repeat(257))]).await;
    r.assert_error(422, "validation_failed");
    assert!(r.json["errors"]["q"].is_array(), "{}", r.text);
}

#[tokio::test]
async fn a_query_with_nothing_searchable_is_422_empty_query() {
    let app = TestApp::spawn().await;
    for q in [
        "the",
        "the of and a",
        "...",
        "   ",
        "\"\"",
        "-",
        "OR",
        "&|!():*",
        "",
        "—",
    ] {
        let r = search(&app, &[("q", q)]).await;
        r.assert_error(422, "empty_query");
        assert!(r.json["errors"]["q"].is_array(), "{q:?}: {}", r.text);
    }
    // Missing q and bad parameters: every invalid field at once.
    let r = search(&app, &[]).await;
    r.assert_error(422, "validation_failed");
    assert!(r.json["errors"]["q"].is_array(), "{}", r.text);
    let r = search(
        &app,
        &[
            ("q", "x"),
            ("limit", "51"),
            ("types", "nope"),
            ("cursor", "?"),
        ],
    )
    .await;
    r.assert_error(422, "validation_failed");
    for field in ["limit", "types", "cursor"] {
        assert!(r.json["errors"][field].is_array(), "{field}: {}", r.text);
    }
    let r = search(&app, &[("q", "x"), ("limit", "0")]).await;
    r.assert_error(422, "validation_failed");
    let r = search(&app, &[("q", "x"), ("sort", "rank")]).await;
    r.assert_error(422, "validation_failed");
    // An orbit reference longer than any slug (63 characters) names none, as for
    // a webhook's orbit; one of 63 is looked up.
    let r = search(&app, &[("q", "x"), ("orbit", &"o".repeat(64))]).await;
    r.assert_error(422, "validation_failed");
    assert_eq!(
        r.json["errors"]["orbit"],
        json!(["must be an orbit id or slug"])
    );
    let r = search(&app, &[("q", "x"), ("orbit", &"o".repeat(63))]).await;
    r.assert_error(422, "validation_failed");
    assert_eq!(r.json["errors"]["orbit"], json!(["no such orbit"]));
    // A bad token is 401 before anything else, as on every public read.
    let r = Resp::from(
        app.client
            .get(app.url("/api/v1/search?q=the"))
            .bearer_auth("occ_nope")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 401, "{}", r.text);
}

#[tokio::test]
async fn the_search_tool_answers_as_the_rest_route() {
    let app = TestApp::spawn().await;
    let c = crew(&app, "mcp-search", 0).await;
    let id = contribution(&app, &c.owner, c.orbit, "Capybara notes", "capybara habits").await;
    let t = task(&app, &c.owner, c.orbit, "Feed the capybara").await;
    let client = crate::mcp::connect(&app, &c.owner).await;

    let r = crate::mcp::call(
        &client,
        "search",
        json!({"q": "capybaras", "orbit": c.orbit, "types": "CONTRIBUTION,TASK", "limit": 1}),
    )
    .await;
    let first = crate::mcp::ok(&r);
    let rest = search(
        &app,
        &[
            ("q", "capybaras"),
            ("orbit", "mcp-search"),
            ("types", "CONTRIBUTION,TASK"),
            ("limit", "1"),
        ],
    )
    .await;
    assert_eq!(first, rest.json);
    let one = ids_of(first["data"].as_array().unwrap());
    assert_eq!(one.len(), 1);
    // The tool's cursor is the route's.
    let next = first["meta"]["next_cursor"].as_str().unwrap();
    let r = crate::mcp::call(
        &client,
        "search",
        json!({"q": "capybaras", "orbit": "mcp-search", "types": "TASK,CONTRIBUTION",
               "limit": 1, "cursor": next}),
    )
    .await;
    let second = crate::mcp::ok(&r);
    let two = ids_of(second["data"].as_array().unwrap());
    let both: HashSet<(String, i64)> = one.into_iter().chain(two).collect();
    assert_eq!(
        both,
        [("CONTRIBUTION".to_owned(), id), ("TASK".to_owned(), t)].into()
    );
    assert!(second["meta"]["next_cursor"].is_null());

    let r = crate::mcp::call(&client, "search", json!({"q": "the of"})).await;
    let refusal = crate::mcp::refused(&r, 422, "empty_query", "fix_input");
    assert!(refusal["errors"]["q"].is_array(), "{refusal}");
    let r = crate::mcp::call(&client, "search", json!({"query": "capybara"})).await;
    crate::mcp::refused(&r, 422, "validation_failed", "fix_input");
}

#[tokio::test]
async fn a_word_matching_more_than_the_window_ranks_its_newest_matches_only() {
    use diesel::RunQueryDsl;
    let app = TestApp::spawn().await;
    let c = crew(&app, "window", 0).await;
    // An old match with the word in its title, then 1,500 newer ones in bodies.
    let old = contribution(&app, &c.owner, c.orbit, "Kiwi", "kiwi kiwi").await;
    let phrase = contribution(&app, &c.owner, c.orbit, "Tasting", "kiwi fruit, ripe").await;
    let mut conn = app.db.conn();
    diesel::sql_query(format!(
        "INSERT INTO contributions (orbit_id, kind, author_id, title, body, created_at, \
                                    updated_at) \
         SELECT {}, 'NOTE', {}, 'bulk ' || g, 'a kiwi was seen', now(), now() \
         FROM generate_series(1, 1500) g",
        c.orbit, c.owner.id
    ))
    .execute(&mut conn)
    .expect("bulk insert");
    let newest = crate::harness::sql_i64(&mut conn, "SELECT max(id) AS n FROM contributions");

    let mut seen = HashSet::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut params = vec![("q", "kiwi"), ("limit", "50")];
        if let Some(c) = &cursor {
            params.push(("cursor", c));
        }
        let r = search(&app, &params).await;
        for (_, id) in ids_of(&hits(&r)) {
            assert!(seen.insert(id), "{id} twice");
        }
        match r.json["meta"]["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    // Exactly the newest 200 are ranked and reachable; the old title match is
    // outside the window (docs/DECISIONS.md, "Search").
    assert_eq!(seen.len(), 200);
    assert!(seen.iter().all(|id| *id > newest - 200), "the newest only");
    assert!(!seen.contains(&old));
    // Narrowing the query brings it back.
    let found = hits(&search(&app, &[("q", "kiwi -seen -fruit")]).await);
    assert_eq!(ids_of(&found), [("CONTRIBUTION".into(), old)]);

    // A phrase is looked for among the newest 500 rows holding all its words.
    let found = hits(&search(&app, &[("q", "\"kiwi fruit\"")]).await);
    assert_eq!(ids_of(&found), [("CONTRIBUTION".into(), phrase)]);
    diesel::sql_query(format!(
        "INSERT INTO contributions (orbit_id, kind, author_id, title, body, created_at, \
                                    updated_at) \
         SELECT {}, 'NOTE', {}, 'bulk ' || g, 'kiwi, meanwhile fruit', now(), now() \
         FROM generate_series(1, 2000) g",
        c.orbit, c.owner.id
    ))
    .execute(&mut conn)
    .expect("bulk insert");
    assert!(hits(&search(&app, &[("q", "\"kiwi fruit\"")]).await).is_empty());
    let found = hits(&search(&app, &[("q", "\"kiwi fruit\" -meanwhile")]).await);
    assert_eq!(ids_of(&found), [("CONTRIBUTION".into(), phrase)]);
}

#[tokio::test]
async fn every_access_finds_the_same_newest_matches_and_the_statistics_pick_by_frequency() {
    use diesel::connection::SimpleConnection;
    use diesel::RunQueryDsl;
    use orbit_commons::store::search::{self as store, Access, After, Kind};
    use orbit_commons::store::search_access::statistics;

    let app = TestApp::spawn().await;
    let a = crew(&app, "access-a", 0).await;
    let b = crew(&app, "access-b", 0).await;
    let mut conn = app.db.conn();
    // 1,600 rows in orbit a and 400 in orbit b, interleaved: `plenty` in all,
    // `middling` in one in 40, `scarce` in two in 400; a memory record and a problem
    // too, so that every kind's branch runs.
    diesel::sql_query(format!(
        "INSERT INTO contributions (orbit_id, kind, author_id, title, body, created_at, \
                                    updated_at) \
         SELECT CASE WHEN g % 5 = 0 THEN {} ELSE {} END, 'NOTE', {}, 'row ' || g, \
                'plenty of words' \
                || CASE WHEN g % 40 = 0 THEN ' middling' ELSE '' END \
                || CASE WHEN g % 400 IN (5, 7) THEN ' scarce' ELSE '' END, now(), now() \
         FROM generate_series(1, 2000) g",
        b.orbit, a.orbit, a.owner.id
    ))
    .execute(&mut conn)
    .expect("bulk insert");
    memory(
        &app,
        &a.owner,
        a.orbit,
        "plenty of middling memories",
        &["scarce"],
    )
    .await;
    problem(
        &app,
        &a.owner,
        a.orbit,
        "Plenty",
        "a middling problem of words",
    )
    .await;
    conn.batch_execute(
        "ANALYZE contributions, memory_records, problems, tasks; SET enable_seqscan = off",
    )
    .expect("analyze");

    let stats = statistics(&mut conn).expect("statistics");
    let s = stats.kinds[Kind::Contribution.index()]
        .as_ref()
        .expect("contributions are analysed");
    assert!(s.rows >= 2000.0, "{}", s.rows);
    assert!(s.lexemes["plenti"] > 0.99, "{:?}", s.lexemes.get("plenti"));
    assert!(s.orbits[&a.orbit] > 0.7, "{:?}", s.orbits);
    let pick = |q: &str, orbit| stats.access(Kind::Contribution, q, orbit, store::WINDOW);
    assert_eq!(pick("'plenti'", None), Access::Walk);
    assert_eq!(pick("'scarc'", None), Access::Bitmap);
    assert_eq!(pick("'scarc'", Some(a.orbit)), Access::Bitmap);

    let bounds = store::max_ids(&mut conn).expect("bounds");
    // `Recent` over a span too short for the window (the older matches are
    // fetched after it) and over every row.
    let all = [
        Access::Planner,
        Access::Bitmap,
        Access::Walk,
        Access::Both,
        Access::Recent { span: 40 },
        Access::Recent { span: 1_000_000 },
    ];
    for q in [
        "plenty",
        "middling",
        "scarce",
        "plenty middling",
        "\"plenty of words\"",
        "-scarce",
    ] {
        let tsquery = store::parse(&mut conn, q)
            .expect("parse")
            .expect("searchable");
        for orbit in [None, Some(a.orbit), Some(b.orbit)] {
            let first = store::ranked(
                &mut conn,
                &tsquery,
                &Kind::ALL,
                orbit,
                &bounds,
                None,
                30,
                &|_| Access::Planner,
            )
            .expect("ranked");
            assert!(!first.is_empty(), "{q} in {orbit:?}");
            let after = first.get(9).map(|r| After {
                rank: r.rank,
                kind: r.kind,
                id: r.id,
            });
            for start in [None, after] {
                let mut by = |access: Access| {
                    store::ranked(
                        &mut conn,
                        &tsquery,
                        &Kind::ALL,
                        orbit,
                        &bounds,
                        start,
                        30,
                        &|_| access,
                    )
                    .expect("ranked")
                };
                let expected = by(Access::Planner);
                for access in all {
                    assert_eq!(
                        by(access),
                        expected,
                        "{q} in {orbit:?} after {start:?} by {access:?}"
                    );
                }
            }
            // The route answers the same first page, with the statistics' choice.
            let mut params = vec![("q", q), ("limit", "30")];
            let slug = match orbit {
                Some(o) if o == a.orbit => Some("access-a"),
                Some(_) => Some("access-b"),
                None => None,
            };
            if let Some(s) = slug {
                params.push(("orbit", s));
            }
            let got: Vec<(String, i64)> = ids_of(&hits(&search(&app, &params).await));
            let want: Vec<(String, i64)> = first
                .iter()
                .map(|r| (r.kind.as_str().to_owned(), r.id))
                .collect();
            assert_eq!(got, want, "{q} in {orbit:?} over HTTP");
        }
    }
    // `Bitmap` everywhere ran under a forced generic plan; the setting ended with
    // its statement's transaction, so the connection plans as before.
    #[derive(diesel::QueryableByName)]
    struct Mode {
        #[diesel(sql_type = diesel::sql_types::Text)]
        mode: String,
    }
    let m: Mode = diesel::sql_query("SELECT current_setting('plan_cache_mode') AS mode")
        .get_result(&mut conn)
        .expect("plan_cache_mode");
    assert_eq!(m.mode, "auto");
}
