//! The differential test: the same five scripted conversations (a plain answer, a tool call, an
//! approval stop, a subagent, a model error) run on the reference server — `langgraph dev`
//! serving a Deep Agents 0.7.32 graph — and on `trellis serve`, both talking to one scripted
//! OpenAI-compatible model (`differential/scripted_openai.py`). One client script
//! (`differential/drive.py`, the official `langgraph-sdk`) records what a client sees on each;
//! this test compares the two records. Where they may differ is listed at [`normalized`] and in
//! docs/differences.md ("The served API next to `langgraph dev`"); everything else must agree.
//!
//! Needs `TRELLIS_REFERENCE_PYTHON` (the venv with `langgraph dev` and Deep Agents, installed by
//! `cargo xtask test`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::harness::{Served, http};
use crate::cli::harness::trellis;
use crate::support::require_env;

/// This folder's scripts.
fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/agent/server/differential")
        .join(name)
}

/// A child process in a process group of its own, killed with its group when dropped.
struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .status();
        let _ = self.0.wait();
    }
}

fn spawn_group(command: &mut Command) -> Group {
    use std::os::unix::process::CommandExt;
    Group(command.process_group(0).spawn().unwrap())
}

/// A port nobody listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Start the scripted model in `dir`; its URL (without `/v1`).
fn scripted_model(python: &str, dir: &Path) -> (Group, String) {
    let port_file = dir.join("scripted-port");
    let child = spawn_group(
        Command::new(python)
            .arg(script("scripted_openai.py"))
            .arg(&port_file)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let start = Instant::now();
    while !port_file.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the scripted model did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let port = std::fs::read_to_string(&port_file).unwrap();
    (child, format!("http://127.0.0.1:{}", port.trim()))
}

/// Start `langgraph dev` on the reference graph in `dir`; its URL once `/ok` answers.
async fn reference_server(python: &str, dir: &Path, model: &str) -> (Group, String) {
    std::fs::copy(script("reference_agent.py"), dir.join("reference_agent.py")).unwrap();
    std::fs::write(
        dir.join("langgraph.json"),
        json!({"dependencies": ["."], "graphs": {"agent": "./reference_agent.py:graph"}}).to_string(),
    )
    .unwrap();
    let langgraph = Path::new(python).with_file_name("langgraph");
    let port = free_port();
    let log = std::fs::File::create(dir.join("langgraph-dev.log")).unwrap();
    let child = spawn_group(
        Command::new(langgraph)
            .args(["dev", "--no-browser", "--no-reload", "--host", "127.0.0.1"])
            .args(["--port", &port.to_string(), "--config", "langgraph.json"])
            .current_dir(dir)
            .env("SCRIPTED_URL", model)
            .env("LANGGRAPH_CLI_NO_ANALYTICS", "1")
            .env("LANGSMITH_TRACING", "false")
            .env_remove("LANGSMITH_API_KEY")
            .env_remove("LANGCHAIN_API_KEY")
            .env_remove("OPENAI_API_KEY")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log),
    );
    let url = format!("http://127.0.0.1:{port}");
    let start = Instant::now();
    loop {
        if let Ok(response) = http().get(format!("{url}/ok")).send().await
            && response.status().is_success()
        {
            break;
        }
        if start.elapsed() > Duration::from_secs(120) {
            let mut log = String::new();
            let _ = std::fs::File::open(dir.join("langgraph-dev.log"))
                .and_then(|mut f| f.read_to_string(&mut log));
            panic!("langgraph dev did not answer /ok within 120 s:\n{log}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (child, url)
}

/// `drive.py` against `url`; its report.
async fn drive(python: &str, url: &str) -> Value {
    let mut command = Command::new(python);
    command
        .arg(script("drive.py"))
        .env("URL", url)
        .env_remove("LANGGRAPH_API_KEY")
        .env_remove("LANGSMITH_API_KEY")
        .env_remove("LANGCHAIN_API_KEY");
    let output = tokio::time::timeout(
        Duration::from_secs(300),
        tokio::task::spawn_blocking(move || command.output().unwrap()),
    )
    .await
    .expect("drive.py finished within 300 s")
    .unwrap();
    assert!(
        output.status.success(),
        "drive.py against {url} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn is_middleware_node(node: &str) -> bool {
    node.contains("Middleware.")
}

/// One conversation's record with the differences docs/differences.md lists taken out:
/// - Deep Agents runs its middleware hooks as graph nodes (`PatchToolCallsMiddleware.before_agent`,
///   `HumanInTheLoopMiddleware.after_model`, …), each with an `updates` event of its own; Trellis
///   runs middleware inside the `model` and `tools` steps. Updates naming only such nodes are
///   dropped.
/// - A run of `messages` events counts as one (the chunking of one reply is the model client's).
/// - Tool results are the tools' own words (`ls` on an empty folder says "No files found" there
///   and "/ is empty." here); only the `task` result (the subagent's answer) is compared, after
///   the `task_id: …` line Trellis puts first (the id that continues the subagent's thread).
/// - `next` names graph nodes, which differ (`HumanInTheLoopMiddleware.after_model` against
///   `tools` at an approval stop). Only whether an interrupted thread waits before a node is
///   compared: after a model error the reference names `model` (a new run retries it) and Trellis
///   names nothing (a new run starts from the last checkpoint, which is the same thing).
/// - The interrupt's `description` is each side's own text (only that it is a string is
///   compared), and the reference adds `response_schema: null` to each interrupt.
fn normalized(record: &Value) -> Value {
    let mut events: Vec<String> = Vec::new();
    for event in record["events"].as_array().unwrap() {
        let event = event.as_str().unwrap();
        let event = match event.strip_prefix("updates:") {
            Some(nodes) => {
                let kept: Vec<&str> = nodes.split(',').filter(|n| !is_middleware_node(n)).collect();
                if kept.is_empty() {
                    continue;
                }
                format!("updates:{}", kept.join(","))
            }
            None => event.to_owned(),
        };
        if event == "messages" && events.last().is_some_and(|last| last == "messages") {
            continue;
        }
        events.push(event);
    }
    let messages: Vec<Value> = record["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let mut m = m.clone();
            let is_task_result = m["type"] == "tool" && m["tool_call_id"] == "call_task";
            if m["type"] == "tool" && !is_task_result {
                m["text"] = Value::Null;
            }
            if is_task_result && let Some(text) = m["text"].as_str() {
                let answer = text
                    .strip_prefix("task_id: ")
                    .and_then(|rest| rest.split_once("\n\n"))
                    .map_or(text, |(_, answer)| answer);
                m["text"] = json!(answer);
            }
            m
        })
        .collect();
    let without_schema = |interrupts: &Value| {
        let mut interrupts = interrupts.clone();
        for interrupt in interrupts.as_array_mut().into_iter().flatten() {
            if let Some(object) = interrupt.as_object_mut() {
                object.remove("response_schema");
            }
        }
        interrupts
    };
    let mut interrupt_value = record["interrupt_value"].clone();
    for request in interrupt_value["action_requests"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        assert!(
            request["description"].is_string(),
            "an action request's description is text: {request}"
        );
        request["description"] = json!("<text>");
    }
    json!({
        "events": events,
        "messages": messages,
        "streamed_ids": record["streamed_ids"],
        "streamed_ids_in_state": record["streamed_ids_in_state"],
        "last_values_keys": record["last_values_keys"],
        "state_keys": record["state_keys"],
        "interrupt": without_schema(&record["interrupt"]),
        "interrupt_value": interrupt_value,
        "state_interrupts": without_schema(&record["state_interrupts"]),
        "waits_before_a_node": (record["status"] == "interrupted")
            .then(|| record["next"].as_array().is_some_and(|n| !n.is_empty())),
        "error": record["error"],
        "status": record["status"],
    })
}

/// The five conversations on both servers: what a client sees agrees, but for the differences
/// [`normalized`] lists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_api_matches_langgraph_dev_on_five_scripted_conversations() {
    let [reference_python, sdk_python] = require_env!("TRELLIS_REFERENCE_PYTHON", "TRELLIS_LANGGRAPH_PYTHON");
    let dir = tempfile::tempdir().unwrap();
    let (_model, model_url) = scripted_model(&reference_python, dir.path());
    let reference_dir = dir.path().join("reference");
    std::fs::create_dir(&reference_dir).unwrap();
    let (_reference, reference_url) = reference_server(&reference_python, &reference_dir, &model_url).await;

    let trellis_dir = dir.path().join("trellis");
    std::fs::create_dir(&trellis_dir).unwrap();
    std::fs::write(
        trellis_dir.join("trellis.toml"),
        format!(
            "model = \"openai-compatible:scripted@{model_url}/v1\"\n\
             [sandbox]\nkind = \"none\"\n[approvals]\nask = [\"write_file\"]\n"
        ),
    )
    .unwrap();
    let mut command = trellis();
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--agent"])
        .arg(trellis_dir.join("trellis.toml"))
        .arg("--state-dir")
        .arg(trellis_dir.join("state"))
        .env("OPENAI_API_KEY", "test-key");
    let served = Served::spawn_as_is(command, &trellis_dir);

    let reference = drive(&sdk_python, &reference_url).await;
    let ours = drive(&sdk_python, &served.url).await;
    let mut differences = Vec::new();
    for scenario in ["plain", "tools", "approval", "subagent", "error"] {
        let (theirs, mine) = (normalized(&reference[scenario]), normalized(&ours[scenario]));
        for (key, expected) in theirs.as_object().unwrap() {
            if &mine[key] != expected {
                differences.push(format!(
                    "{scenario}.{key}:\n  trellis serve: {}\n  langgraph dev: {expected}",
                    mine[key]
                ));
            }
        }
    }
    assert!(
        differences.is_empty(),
        "trellis serve and langgraph dev differ:\n{}",
        differences.join("\n")
    );
    // What the scenarios are for, seen on the reference: a guard against a script that no longer
    // makes either server do anything.
    assert_eq!(reference["approval"]["status"], "interrupted");
    assert_eq!(reference["error"]["status"], "error");
    assert_eq!(
        reference["subagent"]["messages"][2]["text"], "One, two, three.",
        "the subagent's answer came back as the task result"
    );
}
