//! The OpenAPI document (contract section 12): the committed file matches the
//! generated one, the app serves it, the docs page works, and every documented
//! route exists.

use reqwest::Method;
use serde_json::{json, Value};

use crate::harness::TestApp;

const REGENERATE: &str = "cargo run -q -- openapi > openapi/openapi.json";

fn generated() -> String {
    orbit_commons::http::routes::openapi()
        .to_pretty_json()
        .expect("render the OpenAPI document")
}

#[test]
fn committed_openapi_document_matches_the_generated_one() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi/openapi.json");
    let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}. Generate it with `{REGENERATE}`.",
            path.display()
        )
    });
    let generated = generated();
    if committed.trim_end() != generated.trim_end() {
        let line = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
        panic!(
            "openapi/openapi.json is out of date with the code (first difference at line {}).\n\
             Regenerate it with `{REGENERATE}` and commit the result.",
            line + 1
        );
    }
}

#[tokio::test]
async fn the_app_serves_the_generated_document() {
    let app = TestApp::spawn().await;
    let r = app.get("/openapi.json", None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r
        .header("content-type")
        .is_some_and(|c| c.starts_with("application/json")));
    let expected: Value = serde_json::from_str(&generated()).unwrap();
    assert_eq!(r.json, expected);
}

#[tokio::test]
async fn docs_are_served_as_html_from_the_binary() {
    let app = TestApp::spawn().await;
    for path in ["/docs/", "/docs"] {
        let r = app.get(path, None).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text);
        assert!(
            r.header("content-type")
                .is_some_and(|c| c.starts_with("text/html")),
            "{path}: {:?}",
            r.header("content-type")
        );
        assert!(r.text.to_ascii_lowercase().contains("<html"), "{path}");
    }
    // The page's script and style come from the binary, not a CDN.
    let index = app.get("/docs/", None).await;
    assert!(!index.text.contains("unpkg.com") && !index.text.contains("cdn."));
    for asset in ["/docs/swagger-ui.css", "/docs/swagger-ui-bundle.js"] {
        let r = app.get(asset, None).await;
        assert_eq!(r.status, 200, "{asset}");
        assert!(r.bytes.len() > 1000, "{asset} is empty");
    }
    let init = app.get("/docs/swagger-initializer.js", None).await;
    assert_eq!(init.status, 200);
    assert!(init.text.contains("/openapi.json"), "{}", init.text);
}

#[test]
fn both_security_schemes_are_bearer_schemes() {
    let doc: Value = serde_json::from_str(&generated()).unwrap();
    for name in ["ContributorToken", "AgentToken"] {
        let scheme = &doc["components"]["securitySchemes"][name];
        assert_eq!(scheme["type"], "http", "{name}: {scheme}");
        assert_eq!(
            scheme["scheme"]
                .as_str()
                .map(str::to_ascii_lowercase)
                .as_deref(),
            Some("bearer"),
            "{name}"
        );
    }
    // Writes accept either scheme.
    let post = &doc["paths"]["/api/v1/orbits"]["post"];
    let names: Vec<String> = post["security"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s.as_object().unwrap().keys().cloned())
        .collect();
    assert!(names.contains(&"ContributorToken".to_owned()), "{names:?}");
    assert!(names.contains(&"AgentToken".to_owned()), "{names:?}");
}

#[test]
fn orbit_creation_documents_its_optional_idempotency_key() {
    let doc: Value = serde_json::from_str(&generated()).unwrap();
    let params = doc["paths"]["/api/v1/orbits"]["post"]["parameters"]
        .as_array()
        .expect("parameters");
    let key = params
        .iter()
        .find(|p| p["name"] == "Idempotency-Key")
        .expect("Idempotency-Key parameter");
    assert_eq!(key["in"], "header");
    assert_ne!(key["required"], true);
}

#[test]
fn every_operation_documents_the_error_envelope() {
    let doc: Value = serde_json::from_str(&generated()).unwrap();
    let error = &doc["components"]["schemas"]["Error"];
    let required: Vec<&str> = error["required"]
        .as_array()
        .expect("Error.required")
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(required.contains(&"message") && required.contains(&"code"));
    for (path, item) in doc["paths"].as_object().unwrap() {
        if !path.starts_with("/api/") {
            continue;
        }
        for (method, op) in item.as_object().unwrap() {
            let responses = op["responses"].as_object().unwrap();
            assert!(
                responses.keys().any(|s| s.starts_with('4')),
                "{method} {path} documents no error response"
            );
        }
    }
}

/// Every documented path and method is routed (no fallback 404/405), so the spec
/// cannot list a route the app does not serve.
#[tokio::test]
async fn every_documented_operation_is_routed() {
    let app = TestApp::spawn().await;
    let doc: Value = serde_json::from_str(&generated()).unwrap();
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        let concrete: String = path
            .split('/')
            .map(|seg| if seg.starts_with('{') { "1" } else { seg })
            .collect::<Vec<_>>()
            .join("/");
        for method in item.as_object().unwrap().keys() {
            let m = Method::from_bytes(method.to_ascii_uppercase().as_bytes()).unwrap();
            let r = app.send(m, &concrete, None, None, None).await;
            let unrouted = r.status == 405
                || (r.status == 404 && r.json["message"] == "No route matches this path.");
            assert!(
                !unrouted,
                "{method} {path} is documented but not routed: {}",
                r.text
            );
            checked += 1;
        }
    }
    assert!(checked >= 17, "only {checked} operations documented");
}

#[tokio::test]
async fn the_agents_guide_is_served_from_the_binary_as_markdown() {
    let app = TestApp::spawn().await;
    let r = app.get("/agents.md", None).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("text/markdown; charset=utf-8")
    );
    assert_eq!(r.text, include_str!("../../agents.md"));
    for must in [
        "stale_lease_version",
        "Idempotency-Key",
        "handed_off",
        "/mcp",
    ] {
        assert!(r.text.contains(must), "agents.md must explain {must}");
    }
}

/// A query parameter's limits are written twice too: in its `#[param(...)]` and in
/// its `Validate`. This holds every numeric and length limit the document states on
/// a query parameter to what a request meets: at the bound the parameter is no
/// problem, one past it is a 422 that names it. Path ids are made up (`1`): a bad
/// query is refused before the path's object is looked up. (Not here: the event
/// stream's `after`, judged after its orbit's 404, and whose bound opens a stream;
/// `tests/api/events.rs` holds it.)
#[tokio::test]
async fn every_documented_query_limit_is_the_one_validation_enforces() {
    let app = TestApp::spawn().await;
    let a = app.agent("query-limits").await;
    let doc: Value = serde_json::from_str(&generated()).unwrap();
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        let Some(op) = item.get("get") else { continue };
        if path.ends_with("/events") {
            continue;
        }
        let concrete: String = path
            .split('/')
            .map(|seg| if seg.starts_with('{') { "1" } else { seg })
            .collect::<Vec<_>>()
            .join("/");
        let params = op["parameters"].as_array().cloned().unwrap_or_default();
        let query: Vec<&Value> = params.iter().filter(|p| p["in"] == "query").collect();
        // The other required parameters, with a value that passes.
        let required = |except: &str| -> String {
            query
                .iter()
                .filter(|p| p["required"] == true && p["name"] != except)
                .map(|p| format!("&{}=x", p["name"].as_str().unwrap()))
                .collect()
        };
        for p in &query {
            let name = p["name"].as_str().unwrap();
            let schema = &p["schema"];
            let number = |key: &str| schema.get(key).and_then(Value::as_i64);
            let mut cases: Vec<(String, String)> = Vec::new();
            if let Some(max) = number("maximum") {
                cases.push((max.to_string(), (max + 1).to_string()));
            }
            if let Some(min) = number("minimum") {
                cases.push((min.to_string(), (min - 1).to_string()));
            }
            if let Some(max) = number("maxLength") {
                cases.push(("x".repeat(max as usize), "x".repeat(max as usize + 1)));
            }
            if number("minLength") == Some(1) && p["required"] != true {
                cases.push(("x".into(), String::new()));
            }
            for (at, past) in cases {
                let url = |value: &str| format!("{concrete}?{name}={value}{}", required(name));
                let r = app.get(&url(&at), Some(&a.token)).await;
                // Within its bounds a value may still name nothing (search's
                // `orbit`): refused for what the database holds, not for its form.
                let form = r.json["errors"]
                    .get(name)
                    .is_some_and(|e| *e != json!(["no such orbit"]));
                assert!(
                    !(r.status == 422 && form),
                    "GET {path}: {name}={at} is within the documented bounds: {}",
                    r.text
                );
                let r = app.get(&url(&past), Some(&a.token)).await;
                assert_eq!(r.status, 422, "GET {path}: {name}={past:.20}: {}", r.text);
                assert!(
                    r.json["errors"][name].is_array(),
                    "GET {path}: {name}={past:.20} must be named: {}",
                    r.text
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 50, "only {checked} limits checked");
}

/// A default a body's schema states (utoipa takes only literals there) is the one
/// the code applies when the field is absent; the MCP tools' descriptions are
/// held to these schemas in turn (`every_limit_a_description_states_is_its_arguments`).
#[test]
fn every_documented_default_is_the_one_the_code_applies() {
    use orbit_commons::domain::{handoffs, leases};
    let doc: Value = serde_json::from_str(&generated()).unwrap();
    let schemas = &doc["components"]["schemas"];
    let mut stated = 0;
    for (name, schema) in schemas.as_object().unwrap() {
        for (field, property) in schema["properties"].as_object().into_iter().flatten() {
            let Some(default) = property.get("default") else {
                continue;
            };
            let applied = match field.as_str() {
                "duration_seconds" => leases::DEFAULT_DURATION,
                "expires_in_seconds" => handoffs::DEFAULT_EXPIRY,
                other => panic!("{name}.{other}: a default this test does not know"),
            };
            assert_eq!(*default, json!(applied), "{name}.{field}");
            stated += 1;
        }
    }
    assert_eq!(
        stated, 4,
        "AcquireLease, RenewLease, AcceptHandoff, OfferHandoff"
    );
}

/// A request body's string limits are written twice: in its `#[schema(min_length,
/// max_length)]` (utoipa takes only literals there) and in its `Validate`. This
/// holds every length limit the document states on a property of a component
/// schema to what validation enforces: a value at the bound is no problem of that
/// field, one character past it is. A schema whose limits it cannot build a body
/// for, or cannot reach, fails it. (Not covered here: limits of query parameters
/// and headers, and limits that validation has and the document does not state.)
#[test]
fn every_documented_body_limit_is_the_one_validation_enforces() {
    use orbit_commons::domain as d;
    use orbit_commons::error::FieldErrors;
    use orbit_commons::model::Validate;
    use serde_json::json;

    fn check<T: serde::de::DeserializeOwned + Validate>(body: Value) -> FieldErrors {
        let value: T = serde_json::from_value(body.clone())
            .unwrap_or_else(|e| panic!("{body} does not deserialize: {e}"));
        let mut errors = FieldErrors::default();
        value.validate(&mut errors);
        errors
    }
    type Check = fn(Value) -> FieldErrors;
    // Each body that has documented limits, in a form that validates.
    let bodies: Vec<(&str, Value, Check)> = vec![
        ("CancelTask", json!({}), check::<d::tasks::CancelTask>),
        (
            "CompleteTask",
            json!({"lease_version": 1}),
            check::<d::tasks::CompleteTask>,
        ),
        (
            "CreateArtifact",
            json!({"name": "n", "media_type": "text/plain", "content_base64": "aGk="}),
            check::<d::artifacts::CreateArtifact>,
        ),
        (
            "CreateAssessment",
            json!({"verdict": "SUPPORTS", "rationale": "r"}),
            check::<d::assessments::CreateAssessment>,
        ),
        (
            "CreateCheckpoint",
            json!({"lease_version": 1, "summary": "s", "state": {}}),
            check::<d::checkpoints::CreateCheckpoint>,
        ),
        (
            "CreateContribution",
            json!({"kind": "NOTE", "title": "t", "body": ""}),
            check::<d::contributions::CreateContribution>,
        ),
        (
            "CreateMemoryRecord",
            json!({"content": "c"}),
            check::<d::memory::CreateMemoryRecord>,
        ),
        (
            "CreateOrbit",
            json!({"slug": "sl", "name": "n"}),
            check::<d::orbits::CreateOrbit>,
        ),
        (
            "CreateProblem",
            json!({"title": "t", "statement": ""}),
            check::<d::problems::CreateProblem>,
        ),
        (
            "CreateTask",
            json!({"title": "t"}),
            check::<d::tasks::CreateTask>,
        ),
        (
            "CreateWebhook",
            json!({"orbit": 1, "url": "https://example.com/hook"}),
            check::<d::webhooks::CreateWebhook>,
        ),
        (
            "DeclineHandoff",
            json!({}),
            check::<d::handoffs::DeclineHandoff>,
        ),
        (
            "OfferHandoff",
            json!({"lease_version": 1, "checkpoint_id": 1, "message": "m"}),
            check::<d::handoffs::OfferHandoff>,
        ),
        (
            "RegisterAgent",
            json!({"name": "n"}),
            check::<d::contributors::RegisterAgent>,
        ),
        (
            "RegisterContributor",
            json!({"type": "AGENT", "name": "n"}),
            check::<d::contributors::RegisterContributor>,
        ),
        (
            "ReviseContribution",
            json!({"base_revision": 1}),
            check::<d::contributions::ReviseContribution>,
        ),
    ];
    // A value of `n` characters that is otherwise valid for `field`.
    fn filler(field: &str, n: usize) -> String {
        match field {
            // A subtype is at most 127 characters (RFC 6838): the rest a parameter.
            "media_type" if n >= 8 => format!("a/b; p={}", "v".repeat(n - 7)),
            "media_type" if n >= 3 => format!("a/{}", "b".repeat(n - 2)),
            "url" if n >= 20 => format!("https://example.com/{}", "a".repeat(n - 20)),
            // Two bytes a character: a limit counted in bytes would show.
            _ => "é".repeat(n),
        }
    }
    let document: Value = serde_json::from_str(&generated()).expect("the document is JSON");
    let schemas = document["components"]["schemas"]
        .as_object()
        .expect("component schemas");
    let (mut limited, mut unchecked) = (Vec::new(), Vec::new());
    // A value at `bound` is no problem of `key`, one character past it is: the
    // value put in `field` of `base` by `place` (the string, or an array of it).
    let probe = |name: &str,
                 (base, check): (&Value, &Check),
                 (field, key): (&str, &str),
                 place: &dyn Fn(String) -> Value,
                 (bound, which): (u64, &str)| {
        let bound = bound as usize;
        let mut at = base.clone();
        at[field] = place(filler(field, bound));
        assert!(
            !check(at).has(key),
            "{name}.{key}: {bound} characters ({which}) is refused"
        );
        let outside = match which {
            "maxLength" => bound + 1,
            _ => match bound.checked_sub(1) {
                Some(below) => below,
                None => return, // minLength 0 bounds nothing
            },
        };
        let mut past = base.clone();
        past[field] = place(filler(field, outside));
        assert!(
            check(past).has(key),
            "{name}.{key}: {outside} characters is accepted, past its {which} {bound}"
        );
    };
    let bounds = |s: &Value| {
        [
            s["minLength"].as_u64().map(|m| (m, "minLength")),
            s["maxLength"].as_u64().map(|m| (m, "maxLength")),
        ]
    };
    for (name, schema) in schemas {
        let properties = schema["properties"].as_object();
        if properties.is_none() && bounds(schema).iter().any(Option::is_some) {
            // An item's schema (`MemoryTag`): checked through the body whose array
            // property names it, on the array's first element.
            let target = json!(format!("#/components/schemas/{name}"));
            let user = schemas.iter().find_map(|(body, s)| {
                let (field, _) = s["properties"]
                    .as_object()?
                    .iter()
                    .find(|(_, p)| p["items"]["$ref"] == target)?;
                let (_, base, check) = bodies.iter().find(|(n, ..)| n == body)?;
                Some((body, field, base, check))
            });
            let Some((body, field, base, check)) = user else {
                unchecked.push(format!("{name} (an item schema no body in the table uses)"));
                continue;
            };
            for bound in bounds(schema).into_iter().flatten() {
                let key = format!("{field}[0]");
                probe(body, (base, check), (field, &key), &|s| json!([s]), bound);
                limited.push(format!("{body}.{key}"));
            }
            continue;
        }
        // A limit this test does not reach (nested in a `$ref`'s target is checked
        // there; one inside `oneOf`, `allOf`, `items` or an inline object is not).
        let reached: usize = properties.map_or(0, |p| {
            p.values()
                .map(|v| {
                    usize::from(v.get("minLength").is_some())
                        + usize::from(v.get("maxLength").is_some())
                })
                .sum()
        });
        let stated = schema.to_string().matches("Length\":").count();
        if stated != reached {
            unchecked.push(format!("{name} (a limit below its top-level properties)"));
        }
        let Some(properties) = properties else {
            continue;
        };
        for (field, property) in properties {
            for bound in bounds(property).into_iter().flatten() {
                let Some((_, base, check)) = bodies.iter().find(|(n, ..)| n == name) else {
                    unchecked.push(format!("{name}.{field}"));
                    continue;
                };
                limited.push(format!("{name}.{field}"));
                probe(name, (base, check), (field, field), &|s| json!(s), bound);
            }
        }
    }
    assert!(
        unchecked.is_empty(),
        "limits of bodies not in this test's table (add each with a valid body): {unchecked:?}"
    );
    // Every body in the table had its limits checked.
    for (name, ..) in &bodies {
        assert!(
            limited.iter().any(|l| l.starts_with(&format!("{name}."))),
            "{name}: no documented limit found"
        );
    }
}
