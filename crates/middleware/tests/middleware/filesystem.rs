//! The filesystem middleware: file tools through the loop, its system section, and eviction of large
//! results from other tools.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::json;
use trellis_middleware::backend::{Backend, BackendExt, StateBackend, VirtualPath};
use trellis_middleware::runtime::message::ContentBlock;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::*;

fn call(id: &str, name: &str, args: serde_json::Value) -> ToolCall {
    ToolCall::new(id, name, args)
}

fn tool_texts(out: &RunOutput) -> Vec<String> {
    out.state
        .messages
        .iter()
        .filter_map(|m| m.as_tool())
        .map(|t| t.content.iter().filter_map(ContentBlock::as_text).collect())
        .collect()
}

#[tokio::test]
async fn file_tools_run_through_the_loop_and_the_section_is_stable() {
    let backend = Arc::new(StateBackend::new());
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([call(
                "c1",
                "write_file",
                json!({"file_path": "/notes/plan.md", "content": "step one\nstep two\n"}),
            )])
            .then_tool_calls([
                call("c2", "read_file", json!({"file_path": "/notes/plan.md"})),
                call("c3", "ls", json!({"path": "/notes"})),
            ])
            .then_text("done"),
    );
    let agent = Agent::builder(model.clone())
        .system_prompt("You are a planner.")
        .middleware(FilesystemMiddleware::new(backend.clone()))
        .build()
        .unwrap();
    let out = agent.run(RunInput::human("write a plan")).await.unwrap();
    assert_eq!(out.final_text().as_deref(), Some("done"));
    let path = VirtualPath::parse("/notes/plan.md").unwrap();
    assert_eq!(
        backend.read_to_string(&path).await.unwrap(),
        "step one\nstep two\n"
    );
    let texts = tool_texts(&out);
    assert_eq!(texts.len(), 3);
    assert!(texts[1].contains("step two"), "{}", texts[1]);
    assert_eq!(texts[2], "/notes/plan.md");

    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    for r in &requests {
        assert_eq!(
            r.system, requests[0].system,
            "the section is byte-identical on every call"
        );
    }
    let names: Vec<&str> = requests[0].tools.iter().map(|t| t.name.as_str()).collect();
    for tool in [
        "ls",
        "read_file",
        "write_file",
        "edit_file",
        "delete",
        "glob",
        "grep",
    ] {
        assert!(names.contains(&tool), "{tool} offered: {names:?}");
    }
    let section = requests[0]
        .system
        .iter()
        .find(|b| b.source.as_deref() == Some("filesystem"))
        .unwrap();
    insta::assert_snapshot!("filesystem_section", section.text);
}

#[tokio::test]
async fn large_results_of_other_tools_are_saved_and_previewed() {
    let backend = Arc::new(StateBackend::new());
    let huge: String = (0..20_000).map(|i| format!("row {i}\n")).collect();
    let payload = huge.clone();
    let big = FnTool::new(
        "big_report",
        "Returns a huge report.",
        json!({"type": "object"}),
        move |_| {
            let payload = payload.clone();
            async move { Ok(ToolOutput::text(payload)) }
        },
    );
    backend
        .write(
            &VirtualPath::parse("/data/huge.txt").unwrap(),
            huge.clone().into(),
            trellis_middleware::backend::WriteMode::CreateNew,
        )
        .await
        .unwrap();
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([
                call("call/1", "big_report", json!({})),
                call(
                    "c2",
                    "read_file",
                    json!({"file_path": "/data/huge.txt", "limit": 5000}),
                ),
            ])
            .then_text("ok"),
    );
    let agent = Agent::builder(model)
        .tool(big)
        .middleware(FilesystemMiddleware::new(backend.clone()))
        .build()
        .unwrap();
    let out = agent.run(RunInput::human("report")).await.unwrap();
    let texts = tool_texts(&out);
    assert!(
        texts[0].contains("/large_tool_results/call_1"),
        "{}",
        &texts[0][..300.min(texts[0].len())]
    );
    assert!(
        texts[0].len() < 5_000,
        "the model sees a preview, not {} chars",
        texts[0].len()
    );
    assert!(
        texts[0].contains("row 0") && texts[0].contains("row 19999"),
        "head and tail are shown"
    );
    // Evicted results are the thread's own (call ids are unique only within a thread).
    let saved = agent
        .thread_files(&out.thread_id)
        .unwrap()
        .read_to_string(&VirtualPath::parse("/large_tool_results/call_1").unwrap())
        .await
        .unwrap();
    assert_eq!(saved, huge, "the whole result is kept");
    assert!(
        !texts[1].contains("/large_tool_results/"),
        "read_file pages its own output"
    );
    assert!(texts[1].contains("row 4999"));
}
