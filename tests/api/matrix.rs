//! The authorization matrix (issue 7): every write route inside an orbit, taken
//! from the OpenAPI document so new routes are covered automatically, refuses a
//! missing token (401), a revoked token (401) and a valid non-member (403); and
//! where its body carries ids, an id of another orbit is 422 naming that field.

use std::collections::HashMap;

use reqwest::Method;
use serde_json::{json, Map, Value};

use crate::harness::{Agent, TestApp};
use crate::work::{checkpoint, crew, lease, task};

/// Routes open to non-members by nature (registration, orbit creation, joining,
/// the caller's own tokens and webhooks).
const EXCLUDED: &[&str] = &[
    "/api/v1/contributors",
    "/api/v1/agents",
    "/api/v1/orbits",
    "/api/v1/orbits/{orbit}/join",
    "/api/v1/me/tokens",
    "/api/v1/me/tokens/{token_id}",
    "/api/v1/me/webhooks",
    "/api/v1/me/webhooks/{id}",
    "/api/v1/me/webhooks/{id}/enable",
];

/// The objects of one orbit that path parameters and body ids can name.
struct World {
    ids: HashMap<&'static str, i64>,
    outsider_member: Agent,
}

async fn world(app: &TestApp, slug: &str) -> (World, Agent) {
    let c = crew(app, slug, 1).await;
    let m = &c.members[0];
    let t = task(app, m, c.orbit, "t").await;
    let (lease_id, v) = lease(app, m, t, 900).await;
    let ck = checkpoint(app, m, t, v, json!({})).await.json["data"]["id"]
        .as_i64()
        .unwrap();
    let h = app
        .post_keyed(&format!("/api/v1/tasks/{t}/handoffs"), &m.token, json!({"lease_version": v, "checkpoint_id": ck, "to_contributor_id": c.owner.id, "message": "m"}))
        .await;
    assert_eq!(h.status, 201, "{}", h.text);
    let mut ids: HashMap<&'static str, i64> = HashMap::from([
        ("orbit", c.orbit),
        ("task", t),
        ("lease", lease_id),
        ("checkpoint", ck),
        ("handoff", h.json["data"]["id"].as_i64().unwrap()),
        ("contributor", m.id),
        ("n", 1),
    ]);
    let doc = orbit_commons::http::routes::openapi();
    let has = |p: &str| doc.paths.paths.contains_key(p);
    if has("/api/v1/orbits/{orbit}/problems") {
        let r = app
            .post_keyed(
                &format!("/api/v1/orbits/{}/problems", c.orbit),
                &m.token,
                json!({"title": "p", "statement": "s"}),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        ids.insert("problem", r.json["data"]["id"].as_i64().unwrap());
    }
    if has("/api/v1/orbits/{orbit}/contributions") {
        let r = app
            .post_keyed(
                &format!("/api/v1/orbits/{}/contributions", c.orbit),
                &m.token,
                json!({"kind": "NOTE", "title": "c", "body": "b"}),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        ids.insert("contribution", r.json["data"]["id"].as_i64().unwrap());
    }
    if has("/api/v1/orbits/{orbit}/artifacts") {
        let r = app
            .post_keyed(
                &format!("/api/v1/orbits/{}/artifacts", c.orbit),
                &m.token,
                json!({"name": "a", "media_type": "text/plain", "content_base64": "aGk="}),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        ids.insert("artifact", r.json["data"]["id"].as_i64().unwrap());
    }
    let outsider_member = app.agent(&format!("{slug}-only")).await;
    app.join(&outsider_member, c.orbit).await;
    (
        World {
            ids,
            outsider_member,
        },
        m.clone(),
    )
}

fn resolve<'a>(doc: &'a Value, node: &'a Value) -> &'a Value {
    match node.get("$ref").and_then(Value::as_str) {
        Some(r) => resolve(
            doc,
            &doc["components"]["schemas"][r.rsplit('/').next().unwrap()],
        ),
        None => node,
    }
}

/// A plausible value for a schema: valid enough to pass field validation.
fn sample(doc: &Value, schema: &Value, name: &str) -> Value {
    let s = resolve(doc, schema);
    if let Some(first) = s
        .get("enum")
        .and_then(|e| e.as_array())
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    if let Some(inner) = s
        .get("oneOf")
        .or_else(|| s.get("anyOf"))
        .and_then(|l| l.as_array())
    {
        if let Some(t) = inner.iter().find(|t| t.get("type") != Some(&json!("null"))) {
            return sample(doc, t, name);
        }
    }
    let ty = match s.get("type") {
        Some(Value::Array(a)) => a
            .iter()
            .find(|t| *t != "null")
            .cloned()
            .unwrap_or(Value::Null),
        Some(t) => t.clone(),
        None => json!("object"),
    };
    match (ty.as_str().unwrap_or("object"), name) {
        (_, "content_base64") => json!("aGVsbG8="),
        (_, "media_type") => json!("text/plain"),
        ("integer", _) => json!(s.get("minimum").and_then(Value::as_i64).unwrap_or(1).max(1)),
        ("number", _) => json!(1),
        ("boolean", _) => json!(true),
        ("string", _) => {
            json!("x".repeat(s.get("minLength").and_then(Value::as_u64).unwrap_or(1) as usize))
        }
        ("array", _) => json!([]),
        _ => {
            let mut o = Map::new();
            for req in s
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let key = req.as_str().unwrap();
                o.insert(key.to_owned(), sample(doc, &s["properties"][key], key));
            }
            Value::Object(o)
        }
    }
}

/// Which fixture an id field names.
fn kind_of(field: &str) -> Option<&'static str> {
    Some(match field {
        "checkpoint_id" => "checkpoint",
        "problem_id" => "problem",
        "task_id" => "task",
        "artifact_ids" => "artifact",
        "result_contribution_id" | "evidence_contribution_ids" | "contribution_id" => {
            "contribution"
        }
        "to_contributor_id" => "contributor",
        _ => return None,
    })
}

fn fill(path: &str, ids: &HashMap<&'static str, i64>) -> String {
    let mut out = String::new();
    let mut rest = path;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let end = rest[start..].find('}').unwrap() + start;
        let name = &rest[start + 1..end];
        let id = ids.get(name).unwrap_or_else(|| {
            panic!("the matrix has no fixture for path parameter {{{name}}} of {path}: add one in world()")
        });
        out.push_str(&id.to_string());
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

#[tokio::test]
async fn every_write_inside_an_orbit_refuses_strangers_and_foreign_ids() {
    let app = TestApp::spawn().await;
    let (here, member) = world(&app, "here").await;
    let (there, _) = world(&app, "there").await;
    let stranger = app.agent("stranger").await;
    let revoked = app.agent("revoked").await;
    let r = app
        .send(
            Method::GET,
            "/api/v1/me/tokens",
            Some(&revoked.token),
            None,
            None,
        )
        .await;
    let token_id = r.json["data"][0]["id"].as_i64().unwrap();
    app.send(
        Method::DELETE,
        &format!("/api/v1/me/tokens/{token_id}"),
        Some(&revoked.token),
        None,
        None,
    )
    .await;

    let doc = serde_json::to_value(orbit_commons::http::routes::openapi()).unwrap();
    let mut checked = 0;
    let mut id_checks = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        if !path.starts_with("/api/v1/") || EXCLUDED.contains(&path.as_str()) {
            continue;
        }
        for (method, op) in item.as_object().unwrap() {
            let m = match method.as_str() {
                "post" => Method::POST,
                "put" => Method::PUT,
                "delete" => Method::DELETE,
                _ => continue,
            };
            let url = fill(path, &here.ids);
            let schema = op["requestBody"]["content"]["application/json"]["schema"].clone();
            let body = if schema.is_null() {
                json!({})
            } else {
                sample(&doc, &schema, "")
            };
            let what = format!("{method} {path}");
            for (who, token) in [
                ("no token", None),
                ("revoked token", Some(revoked.token.as_str())),
            ] {
                let r = app
                    .send(m.clone(), &url, token, Some("matrix"), Some(body.clone()))
                    .await;
                assert_eq!(r.status, 401, "{what} with {who}: {}", r.text);
                assert!(
                    r.header("www-authenticate")
                        .is_some_and(|h| h.starts_with("Bearer")),
                    "{what}"
                );
            }
            let r = app
                .send(
                    m.clone(),
                    &url,
                    Some(&stranger.token),
                    Some("matrix"),
                    Some(body.clone()),
                )
                .await;
            assert_eq!(r.status, 403, "{what} by a non-member: {}", r.text);
            checked += 1;

            // Ids of another orbit inside the body.
            let props = resolve(&doc, &schema)
                .get("properties")
                .cloned()
                .unwrap_or(Value::Null);
            for field in props.as_object().into_iter().flat_map(|o| o.keys()) {
                let Some(kind) = kind_of(field) else { continue };
                let Some(foreign) = (if kind == "contributor" {
                    Some(there.outsider_member.id)
                } else {
                    there.ids.get(kind).copied()
                }) else {
                    continue;
                };
                let mut b = body.clone();
                let v = if field.ends_with("_ids") {
                    json!([foreign])
                } else {
                    json!(foreign)
                };
                b.as_object_mut().unwrap().insert(field.clone(), v);
                let key = uuid::Uuid::new_v4().to_string();
                let r = app
                    .send(m.clone(), &url, Some(&member.token), Some(&key), Some(b))
                    .await;
                assert_eq!(
                    r.status, 422,
                    "{what} with {field} of another orbit: {}",
                    r.text
                );
                assert!(
                    r.json["errors"][field.as_str()].is_array(),
                    "{what}: 422 must name {field}: {}",
                    r.text
                );
                id_checks += 1;
            }
        }
    }
    assert!(checked >= 15, "only {checked} write routes found");
    assert!(id_checks >= 4, "only {id_checks} id fields checked");
    let _ = here.outsider_member;
}
