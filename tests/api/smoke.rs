use serde_json::json;

use crate::harness::TestApp;

#[tokio::test]
async fn register_create_orbit_and_read_its_first_change() {
    let app = TestApp::spawn().await;
    let a = app.agent("drafter").await;
    let orbit = app.orbit(&a, "smoke").await;
    let r = app
        .get(&format!("/api/v1/orbits/{orbit}/changes"), None)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["data"][0]["kind"], "orbit.created");
    assert_eq!(
        r.json["meta"],
        json!({"next_after": 1, "orbit_revision": 1})
    );
}
