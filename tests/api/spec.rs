//! The accept operation matches the published contract
//! (`tests/fixtures/handoffs-accept.openapi.yaml`, a copy of
//! `shared/spec/handoffs-accept.openapi.yaml`): our document may be a superset, but
//! every parameter, bound, response code and required field there must be here.

use serde_json::Value;

fn load_contract() -> Value {
    let text = include_str!("../fixtures/handoffs-accept.openapi.yaml");
    let yaml: serde_yaml::Value = serde_yaml::from_str(text).expect("contract yaml");
    serde_json::to_value(yaml).expect("yaml as json")
}

fn resolve<'a>(doc: &'a Value, node: &'a Value) -> &'a Value {
    match node.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let name = r.rsplit('/').next().unwrap();
            resolve(doc, &doc["components"]["schemas"][name])
        }
        None => node,
    }
}

/// `anyOf`/`oneOf` of one schema and `null` means "nullable X".
fn nullable_inner(node: &Value) -> Option<&Value> {
    let list = node
        .get("anyOf")
        .or_else(|| node.get("oneOf"))?
        .as_array()?;
    if list.len() != 2 {
        return None;
    }
    let is_null = |v: &Value| v.get("type").and_then(Value::as_str) == Some("null");
    match (is_null(&list[0]), is_null(&list[1])) {
        (true, false) => Some(&list[1]),
        (false, true) => Some(&list[0]),
        _ => None,
    }
}

fn types(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => {
            let mut t: Vec<String> = a
                .iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect();
            t.sort();
            t
        }
        _ => vec![],
    }
}

/// Asserts that everything `want` (the contract) says is also said by `have`.
fn covers(cdoc: &Value, odoc: &Value, want: &Value, have: &Value, at: &str) {
    let want = resolve(cdoc, want);
    let have = resolve(odoc, have);
    if let Some(inner) = nullable_inner(want) {
        let have_inner =
            nullable_inner(have).unwrap_or_else(|| panic!("{at}: must be nullable: {have}"));
        return covers(cdoc, odoc, inner, have_inner, at);
    }
    let Value::Object(w) = want else {
        assert_eq!(want, have, "{at}");
        return;
    };
    for (k, wv) in w {
        let path = format!("{at}.{k}");
        if matches!(k.as_str(), "description" | "summary" | "tags") {
            continue;
        }
        // `required: []` says the same as no `required` at all.
        if k == "required" && wv.as_array().is_some_and(|a| a.is_empty()) {
            continue;
        }
        let hv = have
            .get(k)
            .unwrap_or_else(|| panic!("{path}: missing in our document: {have}"));
        match k.as_str() {
            "required" if wv.is_array() => {
                for r in wv.as_array().unwrap() {
                    assert!(
                        hv.as_array().unwrap().contains(r),
                        "{path}: {r} must be required"
                    );
                }
            }
            "enum" => {
                for e in wv.as_array().unwrap() {
                    assert!(
                        hv.as_array().unwrap().contains(e),
                        "{path}: enum value {e} missing"
                    );
                }
            }
            "type" => assert_eq!(types(wv), types(hv), "{path}"),
            "properties" | "responses" | "content" | "schemas" => {
                for (name, sub) in wv.as_object().unwrap() {
                    let h = hv
                        .get(name)
                        .unwrap_or_else(|| panic!("{path}.{name}: missing"));
                    covers(cdoc, odoc, sub, h, &format!("{path}.{name}"));
                }
            }
            "parameters" => {
                for p in wv.as_array().unwrap() {
                    let h = hv
                        .as_array()
                        .unwrap()
                        .iter()
                        .find(|h| h["name"] == p["name"] && h["in"] == p["in"])
                        .unwrap_or_else(|| panic!("{path}: parameter {} missing", p["name"]));
                    covers(cdoc, odoc, p, h, &format!("{path}.{}", p["name"]));
                }
            }
            "security" => {
                for s in wv.as_array().unwrap() {
                    assert!(hv.as_array().unwrap().contains(s), "{path}: {s} missing");
                }
            }
            _ => covers(cdoc, odoc, wv, hv, &path),
        }
    }
}

#[test]
fn accept_operation_matches_the_published_contract() {
    let contract = load_contract();
    let ours = serde_json::to_value(orbit_commons::http::routes::openapi()).unwrap();
    let path = "/api/v1/handoffs/{handoff}/accept";
    covers(
        &contract,
        &ours,
        &contract["paths"][path]["post"],
        &ours["paths"][path]["post"],
        "accept",
    );
    for name in [
        "AcceptedHandoff",
        "Lease",
        "Handoff",
        "ContributorActor",
        "Error",
    ] {
        covers(
            &contract,
            &ours,
            &contract["components"]["schemas"][name],
            &ours["components"]["schemas"][name],
            name,
        );
    }
    for scheme in ["ContributorToken", "AgentToken"] {
        covers(
            &contract,
            &ours,
            &contract["components"]["securitySchemes"][scheme],
            &ours["components"]["securitySchemes"][scheme],
            scheme,
        );
    }
}

#[test]
fn the_fixture_is_the_shared_contract_when_it_is_beside_us() {
    let shared = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/spec/handoffs-accept.openapi.yaml");
    if let Ok(text) = std::fs::read_to_string(&shared) {
        assert_eq!(
            text,
            include_str!("../fixtures/handoffs-accept.openapi.yaml"),
            "tests/fixtures/handoffs-accept.openapi.yaml differs from shared/spec: copy it again"
        );
    }
}
