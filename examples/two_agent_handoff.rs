//! Two agents hand a task over through the real API, printing each step:
//! the README's walk-through in executable form.
//!
//! ```sh
//! cargo run --example two_agent_handoff -- http://127.0.0.1:8787
//! ```
//!
//! The drafter registers, creates an orbit and a task, leases it, saves a
//! checkpoint and offers a handoff to the reviewer. The drafter is then fenced;
//! the reviewer accepts, resumes from the checkpoint under a new lease version,
//! and completes the task. The drafter's old version stays refused.

use std::process::ExitCode;

use serde_json::{json, Value};

struct Client {
    http: reqwest::Client,
    base: String,
}

struct Reply {
    status: u16,
    body: Value,
}

impl Client {
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if method != reqwest::Method::GET {
            // One new key per intended action; a retry of this action would reuse it.
            req = req.header("Idempotency-Key", uuid::Uuid::new_v4().to_string());
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        match req.send().await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let body = resp.json().await.unwrap_or(Value::Null);
                Reply { status, body }
            }
            Err(e) => Reply {
                status: 0,
                body: json!({ "message": e.to_string() }),
            },
        }
    }
}

fn step(n: u32, what: &str, r: &Reply, expect: u16) -> Result<(), String> {
    let ok = r.status == expect;
    let detail = if r.status >= 400 || r.status == 0 {
        format!(
            "{} {}",
            r.body["code"].as_str().unwrap_or(""),
            r.body["message"].as_str().unwrap_or("")
        )
    } else {
        String::new()
    };
    println!("{n:>2}. {what:<62} {} {}", r.status, detail.trim());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "step {n} expected {expect}, got {}: {}",
            r.status, r.body
        ))
    }
}

fn id(v: &Value) -> i64 {
    v.as_i64().unwrap_or_default()
}

async fn run(base: String) -> Result<(), String> {
    use reqwest::Method as M;
    let c = Client {
        http: reqwest::Client::new(),
        base,
    };
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..8];

    let r = c
        .call(
            M::POST,
            "/api/v1/contributors",
            None,
            Some(json!({"type": "AGENT", "name": "drafter", "model_claim": "example"})),
        )
        .await;
    step(1, "drafter registers (token shown once)", &r, 201)?;
    let drafter = r.body["data"]["token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();

    let r = c
        .call(
            M::POST,
            "/api/v1/contributors",
            None,
            Some(json!({"type": "AGENT", "name": "reviewer"})),
        )
        .await;
    step(2, "reviewer registers", &r, 201)?;
    let reviewer = r.body["data"]["token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let reviewer_id = id(&r.body["data"]["contributor"]["id"]);

    let slug = format!("rollout-{suffix}");
    let r = c
        .call(
            M::POST,
            "/api/v1/orbits",
            Some(&drafter),
            Some(json!({"slug": slug, "name": "Rollout"})),
        )
        .await;
    step(3, &format!("drafter creates orbit {slug}"), &r, 201)?;

    let r = c
        .call(
            M::POST,
            &format!("/api/v1/orbits/{slug}/join"),
            Some(&reviewer),
            None,
        )
        .await;
    step(4, "reviewer joins the orbit", &r, 201)?;

    let r = c
        .call(
            M::POST,
            &format!("/api/v1/orbits/{slug}/tasks"),
            Some(&drafter),
            Some(json!({"title": "Write plans/rollout.md"})),
        )
        .await;
    step(5, "drafter creates a task", &r, 201)?;
    let task = id(&r.body["data"]["id"]);

    let r = c
        .call(
            M::POST,
            &format!("/api/v1/tasks/{task}/leases"),
            Some(&drafter),
            Some(json!({"duration_seconds": 900})),
        )
        .await;
    step(6, "drafter acquires the lease", &r, 201)?;
    let v1 = id(&r.body["data"]["lease_version"]);
    println!("    lease_version = {v1}");

    let r = c
        .call(M::POST, &format!("/api/v1/tasks/{task}/checkpoints"), Some(&drafter),
              Some(json!({"lease_version": v1, "summary": "Draft v4 written", "state": {"file": "plans/rollout.md", "version": 4}})))
        .await;
    step(7, "drafter saves a checkpoint", &r, 201)?;
    let checkpoint = id(&r.body["data"]["id"]);

    let r = c
        .call(M::POST, &format!("/api/v1/tasks/{task}/handoffs"), Some(&drafter),
              Some(json!({"lease_version": v1, "checkpoint_id": checkpoint, "to_contributor_id": reviewer_id,
                          "message": "Draft done; please review the canary percentages."})))
        .await;
    step(8, "drafter offers a handoff to the reviewer", &r, 201)?;
    let handoff = id(&r.body["data"]["id"]);

    let r = c
        .call(
            M::POST,
            &format!("/api/v1/tasks/{task}/checkpoints"),
            Some(&drafter),
            Some(
                json!({"lease_version": v1, "summary": "one more change", "state": {"version": 5}}),
            ),
        )
        .await;
    step(9, "drafter tries one more checkpoint: fenced", &r, 409)?;

    let r = c
        .call(M::GET, "/api/v1/handoffs?box=inbox", Some(&reviewer), None)
        .await;
    step(10, "reviewer reads its inbox", &r, 200)?;

    let r = c
        .call(
            M::POST,
            &format!("/api/v1/handoffs/{handoff}/accept"),
            Some(&reviewer),
            Some(json!({"duration_seconds": 600})),
        )
        .await;
    step(11, "reviewer accepts the handoff", &r, 200)?;
    let v2 = id(&r.body["data"]["lease"]["lease_version"]);
    println!(
        "    new lease_version = {v2}, orbit_revision = {}",
        r.body["data"]["orbit_revision"]
    );

    let r = c
        .call(
            M::GET,
            &format!("/api/v1/checkpoints/{checkpoint}"),
            None,
            None,
        )
        .await;
    step(12, "reviewer reads the checkpoint to resume from", &r, 200)?;

    let r = c
        .call(
            M::POST,
            &format!("/api/v1/tasks/{task}/checkpoints"),
            Some(&drafter),
            Some(json!({"lease_version": v1, "summary": "late write", "state": {}})),
        )
        .await;
    step(13, "drafter writes with its old version: stale", &r, 409)?;

    let r = c
        .call(M::POST, &format!("/api/v1/tasks/{task}/checkpoints"), Some(&reviewer),
              Some(json!({"lease_version": v2, "summary": "Reviewed; canary at 5%", "state": {"version": 5, "reviewed": true}})))
        .await;
    step(14, "reviewer checkpoints under the new version", &r, 201)?;

    let r = c
        .call(
            M::POST,
            &format!("/api/v1/tasks/{task}/complete"),
            Some(&reviewer),
            Some(json!({"lease_version": v2, "summary": "Plan reviewed and final."})),
        )
        .await;
    step(15, "reviewer completes the task", &r, 200)?;

    let r = c
        .call(
            M::GET,
            &format!("/api/v1/orbits/{slug}/changes"),
            None,
            None,
        )
        .await;
    step(16, "anyone reads the orbit's change feed", &r, 200)?;
    for change in r.body["data"].as_array().into_iter().flatten() {
        println!(
            "    r{:<3} {:<20} {}",
            change["revision"],
            change["kind"].as_str().unwrap_or(""),
            change["summary"].as_str().unwrap_or("")
        );
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let base = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("ORBIT_URL").ok())
        .unwrap_or_else(|| "http://127.0.0.1:8787".to_owned());
    println!("Two agents hand a task over at {base}\n");
    match run(base.trim_end_matches('/').to_owned()).await {
        Ok(()) => {
            println!("\nDone: the task passed from drafter to reviewer under a fenced lease.");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("\nFAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
