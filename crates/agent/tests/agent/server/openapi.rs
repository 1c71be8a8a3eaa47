//! `/openapi.json`: the document describes what the server serves, and schemathesis (PyPI,
//! `TRELLIS_SCHEMATHESIS_PYTHON`, installed by `cargo xtask test`) generating thousands of
//! requests from it — valid, invalid and chained through the document's links — gets no 5xx and
//! no answer outside the document.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::harness::{Served, always_done, http};
use crate::support::require_env;

/// The document of a server with API keys: every served operation, each with its request
/// schema from the handler's type; every `$ref` resolves; the extensions are marked; `/ok` alone
/// needs no key, and the document itself needs one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_describes_every_route() {
    let model = always_done().await;
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &model, Some("alice key-a\n"));
    let http = http();
    let url = format!("{}/openapi.json", served.url);
    assert_eq!(http.get(&url).send().await.unwrap().status(), 401);
    let response = http.get(&url).header("x-api-key", "key-a").send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    let doc: Value = response.json().await.unwrap();
    assert_eq!(doc["openapi"], "3.1.0");

    let paths = doc["paths"].as_object().unwrap();
    let operations: Vec<String> = paths
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .unwrap()
                .keys()
                .map(move |method| format!("{} {path}", method.to_uppercase()))
        })
        .collect();
    assert_eq!(operations.len(), 34, "{operations:#?}");
    // Each documented operation is routed: its method on its path is never the router's 404 or 405.
    let client_key = |r: reqwest::RequestBuilder| r.header("x-api-key", "key-a");
    for (path, item) in paths {
        let concrete = path
            .replace("{assistant_id}", "agent")
            .replace("{thread_id}", "00000000-0000-4000-8000-000000000001")
            .replace("{run_id}", "00000000-0000-4000-8000-000000000002")
            .replace("{checkpoint_id}", "00000000-0000-4000-8000-000000000003");
        for method in item.as_object().unwrap().keys() {
            let method: reqwest::Method = method.to_uppercase().parse().unwrap();
            let response = client_key(http.request(method.clone(), format!("{}{concrete}", served.url)))
                .header("content-type", "application/json")
                .body("{}")
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let body = response.text().await.unwrap_or_default();
            assert_ne!(status, 405, "{method} {path}: {body}");
            assert!(
                !body.contains("route not found"),
                "{method} {path} is documented, not routed: {status} {body}"
            );
        }
    }

    let schemas = doc["components"]["schemas"].as_object().unwrap();
    let text = doc.to_string();
    for reference in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
        let name = reference.split('"').next().unwrap();
        assert!(schemas.contains_key(name), "unresolved $ref {name}");
    }
    let run_create = &schemas["RunCreate"];
    assert_eq!(
        run_create["additionalProperties"], false,
        "unknown fields are refused"
    );
    assert_eq!(run_create["required"], serde_json::json!(["assistant_id"]));
    assert!(
        paths["/threads/{thread_id}/runs/stream"]["post"]["responses"]["200"]["content"]
            .get("text/event-stream")
            .is_some()
    );
    assert_eq!(
        paths["/threads/{thread_id}/files"]["post"]["x-trellis-extension"],
        true
    );
    assert_eq!(
        paths["/threads/{thread_id}/skills"]["get"]["x-trellis-extension"],
        true
    );
    assert!(paths["/threads"]["post"].get("x-trellis-extension").is_none());
    assert_eq!(paths["/ok"]["get"]["security"], serde_json::json!([]));
    assert!(doc["components"]["securitySchemes"]["apiKey"].is_object());
    // Following a link from a created thread reaches its state.
    let links = &paths["/threads"]["post"]["responses"]["200"]["links"];
    assert_eq!(
        links["get_threads_thread_id_state"]["parameters"]["thread_id"],
        "$response.body#/thread_id"
    );
}

/// schemathesis, from a fixed seed, in every phase (the document's examples, its coverage of
/// boundaries, random valid and invalid requests, and stateful chains through the links: create a
/// thread, run on it, read, cancel, delete), for at most 60 s: no 5xx, every status and
/// content type documented, every JSON answer valid against its schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_server_error_and_no_answer_outside_the_document() {
    let [python] = require_env!("TRELLIS_SCHEMATHESIS_PYTHON");
    let model = always_done().await;
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &model, Some("alice key-a\n"));
    // A fixed seed, so a failure is reproducible; TRELLIS_SCHEMATHESIS_SEED explores others.
    let seed = std::env::var("TRELLIS_SCHEMATHESIS_SEED").unwrap_or_else(|_| "20261206".to_owned());
    let mut command = Command::new(&python);
    command
        .args(["-m", "schemathesis.cli", "run"])
        .arg(format!("{}/openapi.json", served.url))
        .args([
            "--header",
            "x-api-key: key-a",
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
            "--phases",
            "examples,coverage,fuzzing,stateful",
            "--max-examples",
            "25",
            "--max-time",
            "60",
            "--seed",
            &seed,
            // One worker: with two, hypothesis describing its lambdas parses source in two threads
            // at once, which Python 3.11's parser does not survive ("AST constructor recursion
            // depth mismatch", a runtime error of schemathesis, not a finding).
            "--workers",
            "1",
            "--request-timeout",
            "30",
            "--no-shrink",
            "--output-truncate",
            "false",
        ])
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .env("SCHEMATHESIS_HOOKS", "");
    let output = tokio::time::timeout(
        Duration::from_secs(300),
        tokio::task::spawn_blocking(move || command.output().unwrap()),
    )
    .await
    .expect("schemathesis finished within 300 s")
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "schemathesis failed:\n{stdout}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&output.stderr),
        served.stderr()
    );
    // It really ran: thousands of cases, every operation tested.
    let generated: u64 = stdout
        .lines()
        .find_map(|l| {
            l.trim()
                .split_once(" generated, ")
                .and_then(|(n, _)| n.parse().ok())
        })
        .unwrap_or(0);
    assert!(generated >= 1000, "only {generated} cases:\n{stdout}");
    let count = |label: &str| {
        stdout
            .lines()
            .find_map(|l| l.trim().strip_prefix(label))
            .map(|n| n.trim().split('/').next().unwrap_or("").to_owned())
    };
    assert!(count("Selected:").is_some(), "{stdout}");
    assert_eq!(
        count("Tested:"),
        count("Selected:"),
        "every operation was tested:\n{stdout}"
    );
}
