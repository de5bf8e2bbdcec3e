//! Contributors and tokens (contract section 3): registration, the legacy agent
//! route, token listing, rotation, revocation, and what a bad token gets.

use reqwest::Method;
use serde_json::{json, Value};

use crate::harness::{Resp, TestApp};

/// Asserts a 401 in the envelope with a `WWW-Authenticate: Bearer ...` challenge.
#[track_caller]
fn assert_unauthorized(r: &Resp) {
    r.assert_envelope(401);
    let challenge = r
        .header("www-authenticate")
        .unwrap_or_else(|| panic!("401 without WWW-Authenticate: {}", r.text));
    assert!(
        challenge.starts_with("Bearer"),
        "WWW-Authenticate is {challenge:?}"
    );
}

/// The secret part of `occ_<16 hex>_<secret>` (the secret itself may contain `_`).
fn secret_of(token: &str) -> &str {
    &token[21..]
}

/// A well-formed token with the same lookup as `token` but another secret.
fn wrong_secret(token: &str) -> String {
    let mut t = token.to_owned();
    let last = t.pop().expect("non-empty token");
    t.push(if last == 'A' { 'B' } else { 'A' });
    t
}

#[tokio::test]
async fn registration_shows_the_token_once_and_the_list_never_shows_a_secret() {
    let app = TestApp::spawn().await;
    let r = app
        .register(json!({"type": "HUMAN", "name": "Ada", "model_claim": null}))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let data = &r.json["data"];
    let token = data["token"].as_str().expect("token").to_owned();
    let token_id = data["token_id"].as_i64().expect("token_id");
    assert!(token.starts_with("occ_"), "{token}");
    assert_eq!(data["contributor"]["type"], "HUMAN");
    assert_eq!(data["contributor"]["name"], "Ada");
    assert_eq!(data["contributor"]["model_claim"], Value::Null);
    assert!(data["contributor"]["id"].as_i64().unwrap() > 0);

    let list = app.get("/api/v1/me/tokens", Some(&token)).await;
    assert_eq!(list.status, 200, "{}", list.text);
    let tokens = list.json["data"].as_array().expect("array");
    assert_eq!(tokens.len(), 1);
    let keys: Vec<&str> = tokens[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["id", "created_at", "last_used_at", "revoked_at"]);
    assert_eq!(tokens[0]["id"], token_id);
    assert_eq!(tokens[0]["revoked_at"], Value::Null);
    assert_eq!(list.json["meta"]["next_after"], Value::Null);
    let secret = secret_of(&token);
    assert!(!list.text.contains(secret), "the list leaks the secret");

    let me = app.get("/api/v1/me", Some(&token)).await;
    assert_eq!(me.status, 200, "{}", me.text);
    assert!(!me.text.contains(secret), "/me leaks the secret");
    assert_eq!(me.json["data"]["contributor"], data["contributor"]);
    assert_eq!(me.json["data"]["memberships"], json!([]));

    // Only a hash is stored.
    let mut conn = app.db.conn();
    let stored = crate::harness::sql_i64(
        &mut conn,
        &format!(
            "SELECT count(*) AS n FROM tokens WHERE secret_hash LIKE '$argon2id$%' \
             AND position('{secret}' in secret_hash) = 0 AND id = {token_id}"
        ),
    );
    assert_eq!(stored, 1, "the token is not stored as an argon2id hash");
}

#[tokio::test]
async fn every_registrable_type_is_accepted_and_system_is_refused() {
    let app = TestApp::spawn().await;
    for kind in ["AGENT", "HUMAN", "ORGANIZATION"] {
        let r = app.register(json!({"type": kind, "name": kind})).await;
        assert_eq!(r.status, 201, "{kind}: {}", r.text);
        assert_eq!(r.json["data"]["contributor"]["type"], kind);
    }
    // A type outside the three is refused with the three named, SYSTEM too (the
    // answer never names a type that would be refused in turn).
    for kind in ["SYSTEM", "ROBOT"] {
        let r = app.register(json!({"type": kind, "name": "root"})).await;
        r.assert_envelope(422);
        assert_eq!(
            r.json["errors"]["type"],
            json!(["must be one of AGENT, HUMAN, ORGANIZATION"]),
            "{}",
            r.text
        );
    }

    let r = app.register(json!({"type": "AGENT", "name": ""})).await;
    r.assert_envelope(422);
    assert!(r.json["errors"]["name"].is_array(), "{}", r.text);

    let r = app
        .register(json!({"type": "AGENT", "name": "n".repeat(121)}))
        .await;
    r.assert_envelope(422);
    assert!(r.json["errors"]["name"].is_array(), "{}", r.text);

    let r = app
        .register(json!({"type": "AGENT", "name": "n", "model_claim": "m".repeat(201)}))
        .await;
    r.assert_envelope(422);
    assert!(r.json["errors"]["model_claim"].is_array(), "{}", r.text);

    let mut conn = app.db.conn();
    let n = crate::harness::sql_i64(&mut conn, "SELECT count(*) AS n FROM contributors");
    assert_eq!(n, 3, "a refused registration created a contributor");
}

#[tokio::test]
async fn legacy_agent_registration_token_works_everywhere() {
    let app = TestApp::spawn().await;
    let r = app
        .register_legacy(json!({"name": "legacy", "model_claim": "gpt-x"}))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let token = r.json["data"]["token"].as_str().unwrap().to_owned();
    let id = r.json["data"]["contributor"]["id"].as_i64().unwrap();
    assert!(token.starts_with("oca_"), "{token}");
    assert_eq!(r.json["data"]["contributor"]["type"], "AGENT");
    assert_eq!(r.json["data"]["contributor"]["model_claim"], "gpt-x");
    assert!(r.json["data"]["token_id"].as_i64().is_some());

    // The legacy route has no `type` field.
    let bad = app
        .register_legacy(json!({"name": "x", "type": "HUMAN"}))
        .await;
    bad.assert_envelope(422);

    let me = app.get("/api/v1/me", Some(&token)).await;
    assert_eq!(me.status, 200, "{}", me.text);
    assert_eq!(me.json["data"]["contributor"]["id"], id);

    // Writes: create an orbit, and join another one.
    let created = app
        .post(
            "/api/v1/orbits",
            &token,
            json!({"slug": "legacy-orbit", "name": "L"}),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text);
    assert_eq!(created.json["data"]["created_by"]["id"], id);
    let other = app.agent("other").await;
    let orbit = app.orbit(&other, "other-orbit").await;
    let joined = app
        .post(&format!("/api/v1/orbits/{orbit}/join"), &token, json!({}))
        .await;
    assert_eq!(joined.status, 201, "{}", joined.text);
    let members = app
        .get(&format!("/api/v1/orbits/{orbit}/members"), Some(&token))
        .await;
    assert_eq!(members.status, 200, "{}", members.text);

    // Token management, and a rotated legacy token stays a legacy token.
    let list = app.get("/api/v1/me/tokens", Some(&token)).await;
    assert_eq!(list.status, 200, "{}", list.text);
    let rotated = app.post_empty("/api/v1/me/tokens", &token).await;
    assert_eq!(rotated.status, 201, "{}", rotated.text);
    let new_token = rotated.json["data"]["token"].as_str().unwrap();
    assert!(new_token.starts_with("oca_"), "{new_token}");
    let me = app.get("/api/v1/me", Some(new_token)).await;
    assert_eq!(me.json["data"]["contributor"]["id"], id);
    let me = app.get("/api/v1/me", Some(&token)).await;
    assert_eq!(me.status, 200);
    let memberships = me.json["data"]["memberships"].as_array().unwrap();
    assert_eq!(memberships.len(), 2);
    // Ascending by orbit, each with its slug, name, role and join time.
    assert!(memberships[0]["orbit_id"].as_i64() < memberships[1]["orbit_id"].as_i64());
    assert_eq!(memberships[0]["orbit_slug"], "legacy-orbit");
    assert_eq!(memberships[0]["role"], "OWNER");
    assert_eq!(memberships[1]["orbit_id"], orbit);
    assert_eq!(memberships[1]["role"], "CONTRIBUTOR");
    for m in memberships {
        for field in ["orbit_slug", "orbit_name", "role", "joined_at"] {
            assert!(m[field].is_string(), "{field} in {m}");
        }
    }
}

#[tokio::test]
async fn missing_malformed_unknown_and_wrong_secret_tokens_are_401_with_a_bearer_challenge() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;

    // Missing token on routes that need one.
    assert_unauthorized(&app.get("/api/v1/me", None).await);
    assert_unauthorized(&app.get("/api/v1/me/tokens", None).await);
    assert_unauthorized(
        &app.send(
            Method::POST,
            "/api/v1/orbits",
            None,
            None,
            Some(json!({"slug": "nope", "name": "n"})),
        )
        .await,
    );

    let unknown_lookup = format!("occ_{}_{}", "0".repeat(16), "A".repeat(43));
    for bad in [
        "garbage".to_owned(),
        format!("{}x", a.token),
        a.token[..a.token.len() - 1].to_owned(),
        unknown_lookup,
        wrong_secret(&a.token),
    ] {
        let r = app.get("/api/v1/me", Some(&bad)).await;
        assert_unauthorized(&r);
    }

    // Another scheme, or a bare token.
    for header in [format!("Basic {}", a.token), a.token.clone()] {
        let r = app
            .send_raw(
                Method::GET,
                "/api/v1/me",
                None,
                &[("authorization", &header)],
                None,
            )
            .await;
        assert_unauthorized(&r);
    }

    // The wrong secret is refused even after the right one was verified and cached.
    assert_eq!(app.get("/api/v1/me", Some(&a.token)).await.status, 200);
    assert_unauthorized(&app.get("/api/v1/me", Some(&wrong_secret(&a.token))).await);
    assert_eq!(app.get("/api/v1/me", Some(&a.token)).await.status, 200);
}

#[tokio::test]
async fn an_invalid_token_on_a_public_get_is_401() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    let orbit = app.orbit(&a, "public").await;
    for path in [
        "/api/v1/orbits".to_owned(),
        format!("/api/v1/orbits/{orbit}"),
        format!("/api/v1/orbits/{orbit}/members"),
        format!("/api/v1/orbits/{orbit}/changes"),
    ] {
        let anonymous = app.get(&path, None).await;
        assert_eq!(anonymous.status, 200, "{path}: {}", anonymous.text);
        let valid = app.get(&path, Some(&a.token)).await;
        assert_eq!(valid.status, 200, "{path}: {}", valid.text);
        assert_unauthorized(&app.get(&path, Some("not-a-token")).await);
        assert_unauthorized(&app.get(&path, Some(&wrong_secret(&a.token))).await);
    }
}

#[tokio::test]
async fn revoked_token_is_refused_on_the_next_request() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    let (second_token, _) = app.another_token(&a.token).await;
    let list = app.get("/api/v1/me/tokens", Some(&a.token)).await;
    let first_id = list.json["data"][0]["id"].as_i64().unwrap();

    // Warm the verification cache for the first token, then revoke it with the second.
    assert_eq!(app.get("/api/v1/me", Some(&a.token)).await.status, 200);
    let revoked = app
        .delete(&format!("/api/v1/me/tokens/{first_id}"), &second_token)
        .await;
    assert_eq!(revoked.status, 200, "{}", revoked.text);
    assert_eq!(revoked.json["data"]["id"], first_id);
    let revoked_at = revoked.json["data"]["revoked_at"].clone();
    assert!(revoked_at.is_string(), "{}", revoked.text);

    let r = app.get("/api/v1/me", Some(&a.token)).await;
    assert_unauthorized(&r);
    // On a public route too, and on a write.
    assert_unauthorized(&app.get("/api/v1/orbits", Some(&a.token)).await);
    assert_unauthorized(
        &app.post(
            "/api/v1/orbits",
            &a.token,
            json!({"slug": "after-revoke", "name": "x"}),
        )
        .await,
    );

    // The other token keeps working; revoking again keeps the first time.
    let again = app
        .delete(&format!("/api/v1/me/tokens/{first_id}"), &second_token)
        .await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(again.json["data"]["revoked_at"], revoked_at);
    let list = app.get("/api/v1/me/tokens", Some(&second_token)).await;
    assert_eq!(list.json["data"][0]["revoked_at"], revoked_at);
    assert_eq!(list.json["data"][1]["revoked_at"], Value::Null);
}

#[tokio::test]
async fn a_token_may_revoke_itself_and_is_refused_right_after() {
    let app = TestApp::spawn().await;
    let r = app.register(json!({"type": "AGENT", "name": "self"})).await;
    let token = r.json["data"]["token"].as_str().unwrap().to_owned();
    let token_id = r.json["data"]["token_id"].as_i64().unwrap();
    assert_eq!(app.get("/api/v1/me", Some(&token)).await.status, 200);
    let revoked = app
        .delete(&format!("/api/v1/me/tokens/{token_id}"), &token)
        .await;
    assert_eq!(revoked.status, 200, "{}", revoked.text);
    assert_unauthorized(&app.get("/api/v1/me", Some(&token)).await);
}

#[tokio::test]
async fn revocation_on_one_instance_is_effective_on_another_at_once() {
    let app = TestApp::spawn().await;
    let other = app.another_instance();
    assert_ne!(app.addr, other.addr, "two servers");
    let r = app.register(json!({"type": "AGENT", "name": "a"})).await;
    let token = r.json["data"]["token"].as_str().unwrap().to_owned();
    let token_id = r.json["data"]["token_id"].as_i64().unwrap();
    // Both instances have verified (and cached) the token.
    assert_eq!(app.get("/api/v1/me", Some(&token)).await.status, 200);
    assert_eq!(other.get("/api/v1/me", Some(&token)).await.status, 200);
    let revoked = app
        .delete(&format!("/api/v1/me/tokens/{token_id}"), &token)
        .await;
    assert_eq!(revoked.status, 200, "{}", revoked.text);
    assert_unauthorized(&other.get("/api/v1/me", Some(&token)).await);
}

#[tokio::test]
async fn rotating_keeps_the_current_token_valid() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    let (new_token, new_id) = app.another_token(&a.token).await;
    assert!(new_token.starts_with("occ_"));
    assert_ne!(new_token, a.token);

    for t in [&a.token, &new_token] {
        let me = app.get("/api/v1/me", Some(t)).await;
        assert_eq!(me.status, 200, "{}", me.text);
        assert_eq!(me.json["data"]["contributor"]["id"], a.id);
    }
    let list = app.get("/api/v1/me/tokens", Some(&new_token)).await;
    let items = list.json["data"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(items[1]["id"], new_id);
    assert!(items.iter().all(|t| t["revoked_at"].is_null()));
    assert!(!list.text.contains(secret_of(&new_token)));

    // An empty JSON object is the same as no body.
    let again = app.post("/api/v1/me/tokens", &a.token, json!({})).await;
    assert_eq!(again.status, 201, "{}", again.text);
}

#[tokio::test]
async fn a_token_of_another_contributor_cannot_be_revoked() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    let b = app.register(json!({"type": "AGENT", "name": "b"})).await;
    let b_token = b.json["data"]["token"].as_str().unwrap().to_owned();
    let b_token_id = b.json["data"]["token_id"].as_i64().unwrap();

    let r = app
        .delete(&format!("/api/v1/me/tokens/{b_token_id}"), &a.token)
        .await;
    r.assert_error(404, "not_found");
    let r = app
        .delete(
            &format!("/api/v1/me/tokens/{}", b_token_id + 1000),
            &a.token,
        )
        .await;
    r.assert_error(404, "not_found");

    assert_eq!(app.get("/api/v1/me", Some(&b_token)).await.status, 200);
    let list = app.get("/api/v1/me/tokens", Some(&b_token)).await;
    assert_eq!(list.json["data"][0]["revoked_at"], Value::Null);
    // Nor are another contributor's tokens listed.
    let list = app.get("/api/v1/me/tokens", Some(&a.token)).await;
    assert_eq!(list.json["data"].as_array().unwrap().len(), 1);
    assert_ne!(list.json["data"][0]["id"], b_token_id);
}

#[tokio::test]
async fn last_used_at_is_recorded_coarsely() {
    let app = TestApp::spawn().await;
    let a = app.agent("a").await;
    for _ in 0..3 {
        assert_eq!(app.get("/api/v1/me", Some(&a.token)).await.status, 200);
    }
    let list = app.get("/api/v1/me/tokens", Some(&a.token)).await;
    let first = list.json["data"][0]["last_used_at"].clone();
    assert!(first.is_string(), "{}", list.text);
    // Within the same minute, further use does not rewrite it.
    let list = app.get("/api/v1/me/tokens", Some(&a.token)).await;
    assert_eq!(list.json["data"][0]["last_used_at"], first);
}
