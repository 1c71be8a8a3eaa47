//! Telemetry export against a real OTLP receiver (crates/agent/tests/otlp_receiver/receiver.py,
//! decoding with the official `opentelemetry-proto` definitions): an agent with a subagent, a
//! skill read and a failing tool sends spans with the GenAI names, parent links and attributes,
//! and no prompt text unless asked; a collector that accepts and never answers neither fails nor
//! holds up a run, and the spans it could not take are counted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tracing_subscriber::prelude::*;
use trellis_agent::deep_agent;
use trellis_agent::telemetry::{OtlpConfig, Telemetry};
use trellis_middleware::backend::{Backend, StateBackend, VirtualPath, WriteMode};
use trellis_middleware::runtime::message::{AiMessage, ContentBlock};
use trellis_middleware::runtime::model::Usage;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::skills::SkillSource;
use trellis_middleware::{ModelResponse, RunInput, ToolCall};

use crate::support::skip_unless_python;

/// The receiver, killed when dropped.
struct Receiver {
    child: Child,
    port: u16,
}

impl Receiver {
    fn start(python: &str, stall: bool) -> Self {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/otlp_receiver/receiver.py");
        let mut command = Command::new(python);
        command
            .arg(script)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if stall {
            command.arg("--stall");
        }
        let mut child = command.spawn().expect("start the OTLP receiver");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("PORT ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the receiver said {line:?}"));
        Self { child, port }
    }

    /// What the receiver kept (the exporters installed the TLS provider reqwest needs).
    async fn received(&self) -> Value {
        let bytes = reqwest::get(format!("{}/received", self.url()))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every span received, flattened: name → span JSON (with its attributes as a map).
    async fn spans(&self) -> Vec<Value> {
        let body = self.received().await;
        let mut spans = Vec::new();
        for request in body["traces"].as_array().unwrap() {
            for resource in request["resourceSpans"].as_array().into_iter().flatten() {
                for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                    for span in scope["spans"].as_array().into_iter().flatten() {
                        let mut span = span.clone();
                        span["attrs"] = attributes(&span);
                        spans.push(span);
                    }
                }
            }
        }
        spans
    }

    async fn metric_names(&self) -> Vec<String> {
        let body = self.received().await;
        let mut names = Vec::new();
        for request in body["metrics"].as_array().unwrap() {
            for resource in request["resourceMetrics"].as_array().into_iter().flatten() {
                for scope in resource["scopeMetrics"].as_array().into_iter().flatten() {
                    for metric in scope["metrics"].as_array().into_iter().flatten() {
                        names.push(metric["name"].as_str().unwrap_or_default().to_owned());
                    }
                }
            }
        }
        names
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// OTLP attributes (`[{key, value: {stringValue | intValue | …}}]`) as a JSON map.
fn attributes(span: &Value) -> Value {
    let mut map = serde_json::Map::new();
    for kv in span["attributes"].as_array().into_iter().flatten() {
        let value = &kv["value"];
        let v = value
            .get("stringValue")
            .cloned()
            .or_else(|| {
                value
                    .get("intValue")
                    .map(|i| json!(i.as_str().and_then(|s| s.parse::<i64>().ok())))
            })
            .or_else(|| value.get("boolValue").cloned())
            .unwrap_or_else(|| value.clone());
        map.insert(kv["key"].as_str().unwrap_or_default().to_owned(), v);
    }
    Value::Object(map)
}

fn reply(message: AiMessage, input: u64, cache_read: u64) -> ModelResponse {
    let mut response = ModelResponse::new(message);
    response.usage = Usage {
        input_tokens: input,
        output_tokens: 7,
        cache_read_tokens: cache_read,
        cache_write_tokens: 0,
    };
    response
}

/// An agent whose model reads a skill and a missing file, delegates to the general-purpose
/// subagent, then answers. Prompt text includes `SECRET-PROMPT`.
async fn run_agent() {
    let files = Arc::new(StateBackend::new());
    files
        .write(
            &VirtualPath::parse("/skills/notes/SKILL.md").unwrap(),
            bytes::Bytes::from_static(b"---\nname: notes\ndescription: Take notes.\n---\nWrite notes.\n"),
            WriteMode::CreateNew,
        )
        .await
        .unwrap();
    let model = Arc::new(
        ScriptedModel::new()
            .then(reply(
                AiMessage::tool_calls([
                    ToolCall::new("r1", "read_file", json!({"file_path": "/skills/notes/SKILL.md"})),
                    ToolCall::new("r2", "read_file", json!({"file_path": "/missing.md"})),
                ]),
                100,
                40,
            ))
            .then(reply(
                AiMessage::tool_calls([ToolCall::new(
                    "t1",
                    "task",
                    json!({"description": "Summarize.", "subagent_type": "general-purpose"}),
                )]),
                120,
                60,
            ))
            .then(reply(
                AiMessage {
                    content: vec![ContentBlock::Text {
                        text: "child answer".into(),
                    }],
                    meta: Default::default(),
                },
                30,
                0,
            ))
            .then(reply(
                AiMessage {
                    content: vec![ContentBlock::Text { text: "done".into() }],
                    meta: Default::default(),
                },
                150,
                90,
            )),
    );
    let files: Arc<dyn Backend> = files;
    let agent = deep_agent(model)
        .backend(files.clone())
        .skills_source(SkillSource::new(files, "/skills").unwrap())
        .without_summarization()
        .build()
        .unwrap();
    let out = agent
        .run(RunInput::human("SECRET-PROMPT: take notes"))
        .await
        .unwrap();
    assert_eq!(out.final_text().as_deref(), Some("done"));
}

/// Run the agent with export to `receiver`, then shut the exporters down.
async fn export_one_run(receiver: &Receiver, content: bool) -> trellis_agent::telemetry::ShutdownReport {
    trellis_middleware::runtime::telemetry::set_capture_content(content);
    let mut config = OtlpConfig::new(&receiver.url());
    config.timeout = Duration::from_secs(5);
    let (telemetry, layer) = Telemetry::install(&config).unwrap();
    let subscriber = tracing_subscriber::registry().with(layer);
    {
        // Everything of the run happens on this thread (tools and subagents run in its task).
        let _default = tracing::subscriber::set_default(subscriber);
        run_agent().await;
    }
    tokio::task::spawn_blocking(move || telemetry.shutdown(Duration::from_secs(10)))
        .await
        .unwrap()
}

fn by_name<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_and_metrics_of_a_run_reach_a_real_otlp_receiver() {
    let python = skip_unless_python!();
    let receiver = Receiver::start(&python, false);
    let report = export_one_run(&receiver, false).await;
    assert_eq!(report.dropped_spans, 0);
    assert!(report.flushed);
    let spans = receiver.spans().await;
    let ids: HashMap<&str, &Value> = spans.iter().map(|s| (s["spanId"].as_str().unwrap(), s)).collect();
    let parent = |s: &Value| ids.get(s["parentSpanId"].as_str().unwrap_or_default()).copied();

    let agents = by_name(&spans, "invoke_agent agent");
    assert_eq!(
        agents.len(),
        1,
        "{:?}",
        spans.iter().map(|s| &s["name"]).collect::<Vec<_>>()
    );
    let top = agents[0];
    assert!(parent(top).is_none(), "the run is the root");
    assert_eq!(top["attrs"]["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(top["attrs"]["trellis.outcome"], "finished");
    assert_eq!(top["attrs"]["trellis.model_calls"], 3);

    // Three model calls of the parent and one of the child, each a `chat` span with usage.
    let chats = by_name(&spans, "chat scripted");
    assert_eq!(chats.len(), 4);
    let first = chats
        .iter()
        .find(|c| c["attrs"]["gen_ai.usage.input_tokens"] == 140)
        .expect("the first call: 100 full-rate + 40 cached input tokens");
    assert_eq!(first["attrs"]["gen_ai.usage.cache_read.input_tokens"], 40);
    assert_eq!(first["attrs"]["gen_ai.usage.output_tokens"], 7);
    assert_eq!(first["attrs"]["gen_ai.request.model"], "scripted");
    assert!(
        first["attrs"].get("gen_ai.provider.name").is_none(),
        "the scripted model names none"
    );
    assert_eq!(first["attrs"]["gen_ai.response.finish_reasons"], "[\"tool_use\"]");
    assert_eq!(
        parent(first).map(|p| &p["name"]),
        Some(&json!("invoke_agent agent"))
    );

    // The skill read and the failing read are tool spans under the run; the failure is marked.
    let reads = by_name(&spans, "execute_tool read_file");
    assert_eq!(reads.len(), 2);
    let failed = reads
        .iter()
        .find(|r| r["attrs"]["gen_ai.tool.call.id"] == "r2")
        .unwrap();
    assert_eq!(failed["attrs"]["trellis.tool.outcome"], "error");
    assert_eq!(failed["status"]["code"], "STATUS_CODE_ERROR");
    let skill = reads
        .iter()
        .find(|r| r["attrs"]["gen_ai.tool.call.id"] == "r1")
        .unwrap();
    assert_eq!(skill["attrs"]["trellis.tool.outcome"], "ok");
    assert_eq!(
        parent(skill).map(|p| &p["name"]),
        Some(&json!("invoke_agent agent"))
    );
    // Middleware events are span events: the skill's activation among them, with its data.
    let events: Vec<(String, String)> = spans
        .iter()
        .flat_map(|s| s["events"].as_array().cloned().unwrap_or_default())
        .map(|e| {
            let data = attributes(&e)["data"].as_str().unwrap_or_default().to_owned();
            (e["name"].as_str().unwrap_or_default().to_owned(), data)
        })
        .collect();
    assert!(
        events
            .iter()
            .any(|(name, data)| name == "trellis.skills.activated" && data.contains("notes")),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|(name, _)| name == "trellis.subagents.task_started"),
        "{events:?}"
    );

    // The subagent's run is nested under the parent's task call.
    let task = by_name(&spans, "execute_tool task")[0];
    let child = by_name(&spans, "invoke_agent general-purpose");
    assert_eq!(child.len(), 1);
    assert_eq!(parent(child[0]).map(|p| &p["spanId"]), Some(&task["spanId"]));
    assert_eq!(parent(task).map(|p| &p["spanId"]), Some(&top["spanId"]));

    // No prompt text without opting in.
    let everything = serde_json::to_string(&spans).unwrap();
    assert!(!everything.contains("SECRET-PROMPT"), "prompt text was exported");
    assert!(!everything.contains("gen_ai.input.messages"));

    let metrics = receiver.metric_names().await;
    for name in [
        "trellis.tokens",
        "gen_ai.client.token.usage",
        "gen_ai.client.operation.duration",
        "trellis.tool.duration",
        "trellis.cache.hit_ratio",
    ] {
        assert!(metrics.iter().any(|m| m == name), "no {name} in {metrics:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_text_is_exported_only_when_asked() {
    let python = skip_unless_python!();
    let receiver = Receiver::start(&python, false);
    export_one_run(&receiver, true).await;
    trellis_middleware::runtime::telemetry::set_capture_content(false);
    let spans = receiver.spans().await;
    let chat = by_name(&spans, "chat scripted")[0];
    let input = chat["attrs"]["gen_ai.input.messages"]
        .as_str()
        .unwrap_or_default();
    assert!(input.contains("SECRET-PROMPT"), "{chat}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_never_answers_neither_fails_nor_holds_up_the_run() {
    let python = skip_unless_python!();
    let receiver = Receiver::start(&python, true);
    let mut config = OtlpConfig::new(&receiver.url());
    config.timeout = Duration::from_secs(2);
    config.queue_capacity = 4;
    config.metrics_endpoint = None;
    let (telemetry, layer) = Telemetry::install(&config).unwrap();
    let subscriber = tracing_subscriber::registry().with(layer);
    {
        let _default = tracing::subscriber::set_default(subscriber);
        // Two runs: about twenty spans against a queue of four and a collector that hangs.
        run_agent().await;
        run_agent().await;
    }
    assert!(telemetry.dropped_spans() > 0, "the full queue dropped spans");
    let report = tokio::task::spawn_blocking(move || telemetry.shutdown(Duration::from_secs(3)))
        .await
        .unwrap();
    assert!(report.dropped_spans > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trellis_run_with_otlp_exports_its_spans() {
    let python = skip_unless_python!();
    let receiver = Receiver::start(&python, false);
    let server = wiremock::MockServer::start().await;
    crate::cli::harness::messages()
        .respond_with(
            crate::cli::harness::reply(json!([{"type": "text", "text": "hello"}]), "end_turn")
                .insert_header("request-id", "req_0123abc"),
        )
        .mount(&server)
        .await;
    let state = tempfile::tempdir().unwrap();
    let out = crate::cli::harness::TrellisRun::new()
        .args(["--sandbox", "none"])
        .arg("--otlp")
        .arg(receiver.url())
        .state_dir(state.path())
        .arg("SECRET-PROMPT hi")
        .anthropic(&server)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .output()
        .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("dropped"), "{stderr}");
    // The process sent everything before it exited.
    let spans = receiver.spans().await;
    let names: Vec<&str> = spans.iter().filter_map(|s| s["name"].as_str()).collect();
    assert!(names.contains(&"invoke_agent agent"), "{names:?}");
    let chat = by_name(&spans, "chat claude-sonnet-4-5");
    assert_eq!(chat.len(), 1, "{names:?}");
    assert_eq!(chat[0]["attrs"]["gen_ai.usage.output_tokens"], 5);
    // The provider's request id leads from the trace to the provider's logs.
    assert_eq!(chat[0]["attrs"]["trellis.provider.request_id"], "req_0123abc");
    assert_eq!(chat[0]["attrs"]["gen_ai.provider.name"], "anthropic");
    assert!(!serde_json::to_string(&spans).unwrap().contains("SECRET-PROMPT"));
}
