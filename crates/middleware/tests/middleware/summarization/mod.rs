//! SummarizationMiddleware: the trigger counts the whole request, stage 1 alone, both stages, offload
//! files and previews, the overflow retry, and snapshots of summarized requests. Tool calls never
//! separated from their results: `summarization/cut_points.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;
use trellis_middleware::backend::{Backend, BackendExt, StateBackend, VirtualPath, WriteMode};
use trellis_middleware::runtime::events::{EventSink, RunEvent};
use trellis_middleware::runtime::message::{AiMessage, ToolMessage};
use trellis_middleware::runtime::model::ModelError;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::skills::SkillSource;
use trellis_middleware::summarization::{BytesEstimator, SUMMARIZATION, SUMMARY_SOURCE, TokenEstimator};
use trellis_middleware::summarization::{SummarizationConfig, Threshold};
use trellis_middleware::*;

use crate::common::*;

fn config(threshold: u64) -> SummarizationConfig {
    SummarizationConfig {
        threshold: Threshold::Tokens(threshold),
        ..SummarizationConfig::default()
    }
}

/// The `summarization` events received so far, as (kind, data).
fn events(rx: &mut UnboundedReceiver<RunEvent>) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    while let Ok(event) = rx.try_recv() {
        if let RunEvent::Middleware {
            middleware,
            kind,
            data,
        } = event
            && middleware == "summarization"
        {
            out.push((kind, data));
        }
    }
    out
}

fn kinds(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(k, _)| k.as_str()).collect()
}

fn lines(n: usize, tag: &str) -> String {
    (0..n)
        .map(|i| format!("{tag} line {i:04}: the quick brown fox jumps over the lazy dog\n"))
        .collect()
}

fn text_tool(name: &'static str, text: String) -> FnTool {
    FnTool::new(name, "Test tool.", object_schema(), move |_| {
        let text = text.clone();
        async move { Ok(ToolOutput::text(text)) }
    })
}

// ---------------------------------------------------------------- trigger arithmetic

async fn skills_library(n: usize) -> Arc<StateBackend> {
    let backend = Arc::new(StateBackend::new());
    for i in 0..n {
        let text = format!(
            "---\nname: skill-{i:03}\ndescription: {}\n---\n# Skill {i}\n",
            "Handles one kind of customer request in detail, with the steps the team agreed on. ".repeat(4)
        );
        backend
            .write(
                &VirtualPath::parse(&format!("/skills/skill-{i:03}/SKILL.md")).unwrap(),
                text.into(),
                WriteMode::Overwrite,
            )
            .await
            .unwrap();
    }
    backend
}

async fn run_with_skills(threshold: u64, skills: bool) -> (ModelRequest, Vec<(String, Value)>) {
    let backend = skills_library(40).await;
    let model = Arc::new(ScriptedModel::new().then_text("ok"));
    let mut builder = Agent::builder(model.clone()).system_prompt("You help the sales team.");
    if skills {
        let source = SkillSource::new(backend.clone(), "/skills").unwrap();
        builder = builder.middleware(SkillsMiddleware::new(vec![source]));
    }
    let agent = builder
        .middleware(SummarizationMiddleware::new(backend).with_config(config(threshold)))
        .build()
        .unwrap();
    let (sink, mut rx) = EventSink::channel();
    agent.run(RunInput::human("hi").events(sink)).await.unwrap();
    (model.requests().remove(0), events(&mut rx))
}

#[tokio::test]
async fn the_trigger_counts_a_big_skills_catalog() {
    // Measure the request the model gets with the skills catalog (no trigger).
    let (request, quiet) = run_with_skills(u64::MAX, true).await;
    assert!(quiet.is_empty());
    let estimate = BytesEstimator.request(&request);
    let skills_block = request
        .system
        .iter()
        .find(|b| b.source.as_deref() == Some("skills"))
        .expect("the skills section");
    let skills_tokens = BytesEstimator.text(&skills_block.text);
    assert!(skills_tokens > 3_000, "a big catalog: {skills_tokens} tokens");
    assert!(estimate.messages < 50, "the conversation itself is tiny");

    // Exactly at the estimate: stage 1 runs and reports the same number; one token above: nothing.
    let (_, at) = run_with_skills(estimate.total, true).await;
    assert_eq!(kinds(&at), ["stage1", "stage2_skipped"]);
    assert_eq!(at[0].1["tokens_before"], estimate.total);
    assert_eq!(at[0].1["system_tokens"], estimate.system);
    assert!(estimate.system >= skills_tokens);
    let (_, above) = run_with_skills(estimate.total + 1, true).await;
    assert!(above.is_empty(), "{above:?}");

    // Without the catalog, the same threshold is far away.
    let (_, without) = run_with_skills(estimate.total, false).await;
    assert!(without.is_empty());
}

// ---------------------------------------------------------------- stage 1 alone

#[tokio::test]
async fn stage_one_offloads_old_results_once_and_trims_old_arguments() {
    let backend = Arc::new(StateBackend::new());
    let fetched = lines(150, "fetched");
    let written = "N".repeat(5_000);
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([call(
                "c0",
                "write_file",
                json!({"file_path": "/notes.md", "content": written}),
            )])
            .then_tool_calls([call("c1", "fetch", json!({"url": "https://example.com/report"}))])
            .then_tool_calls([call("c2", "echo", json!({"text": "checking"}))])
            .then_tool_calls([call("c3", "echo", json!({"text": "again"}))])
            .then_text("done"),
    );
    let cfg = SummarizationConfig {
        keep_messages: 2,
        tool_result_token_limit: 100,
        l2_trigger_ratio: 1.0,
        ..config(3_000)
    };
    let agent = Agent::builder(model.clone())
        .tool(text_tool("write_file", "Wrote /notes.md".into()))
        .tool(text_tool("fetch", fetched.clone()))
        .tool(echo_tool())
        .middleware(SummarizationMiddleware::new(backend.clone()).with_config(cfg))
        .build()
        .unwrap();
    let (sink, mut rx) = EventSink::channel();
    let thread = ThreadId::new("s1").unwrap();
    let out = agent
        .run(
            RunInput::human("Fetch the report and save notes.")
                .thread(thread)
                .events(sink),
        )
        .await
        .unwrap();
    let events = events(&mut rx);
    assert_eq!(kinds(&events), ["stage1", "stage1", "stage1"], "{events:#?}");
    let data: Vec<&Value> = events.iter().map(|(_, d)| d).collect();
    // Request 3: the fetch result is new (not seen by the model yet), so it stays whole.
    assert_eq!(
        (
            data[0]["results_offloaded"].as_u64(),
            data[0]["args_trimmed"].as_u64()
        ),
        (Some(0), Some(1))
    );
    // Request 4: now it is old, so it is written to a file and replaced.
    assert_eq!(data[1]["results_offloaded"], 1);
    assert_eq!(data[1]["files_written"], 1);
    // Request 5: the same file is reused, not written again.
    assert_eq!(data[2]["results_offloaded"], 1);
    assert_eq!(data[2]["files_written"], 0);
    for d in &data {
        assert!(d["tokens_after"].as_u64() < d["tokens_before"].as_u64(), "{d}");
        assert!(d["tokens_before"].as_u64().unwrap() >= 3_000);
    }

    // The full text is in the file; the request carries the notice and a preview within the limit.
    let path = "/conversation_history/s1/tool_results/c1.txt";
    let saved = backend
        .read_to_string(&VirtualPath::parse(path).unwrap())
        .await
        .unwrap();
    assert_eq!(saved, fetched);
    let requests = model.requests();
    let notice = Message::Tool(tool_result(&requests[3].messages, "c1").clone()).text();
    assert!(notice.starts_with("[Tool result stored outside the conversation]\nTool: fetch\n"));
    assert!(notice.contains(&format!("Full text: {path}")));
    let preview = notice.split("Preview:\n").nth(1).unwrap();
    let preview = preview.split("\n[... ").next().unwrap();
    assert!(preview.len() <= 400 && fetched.starts_with(preview), "{preview}");
    let whole = Message::Tool(tool_result(&requests[2].messages, "c1").clone()).text();
    assert_eq!(whole, fetched, "the newest result reaches the model whole");

    // Stored messages are untouched.
    assert_eq!(
        Message::Tool(tool_result(&out.state.messages, "c1").clone()).text(),
        fetched
    );
    let stored_call = out.state.messages[1]
        .as_ai()
        .unwrap()
        .calls()
        .next()
        .unwrap()
        .clone();
    assert_eq!(stored_call.args["content"].as_str().unwrap().len(), 5_000);
    insta::assert_yaml_snapshot!("stage1_request_messages", requests[3].messages);
}

// ---------------------------------------------------------------- both stages

fn vendor_history() -> Vec<Message> {
    let mut history = vec![Message::human("Please research the three vendors in /vendors.")];
    for (i, v) in ["a", "b", "c"].into_iter().enumerate() {
        if i > 0 {
            history.push(Message::human(format!("Now vendor {}.", v.to_uppercase())));
        }
        let id = format!("r{}", i + 1);
        history.push(Message::Ai(AiMessage::tool_calls([call(
            &id,
            "read_file",
            json!({"file_path": format!("/vendors/{v}.md")}),
        )])));
        history.push(Message::Tool(ToolMessage::text(
            &id,
            "read_file",
            lines(60, &format!("vendor-{v}")),
        )));
        history.push(Message::ai(format!("Vendor {} is reviewed.", v.to_uppercase())));
    }
    history
}

#[tokio::test]
async fn both_stages_summarize_once_and_the_summary_is_reused() {
    let backend = Arc::new(StateBackend::new());
    let checkpointer = Arc::new(InMemoryCheckpointer::new());
    let thread = ThreadId::new("s2").unwrap();
    seed_thread(&checkpointer, &thread, vendor_history()).await;
    let summarizer = Arc::new(ScriptedModel::new().with_id("summarizer").then_text(
        "The user wants vendors A, B and C compared. A and B were read from /vendors/a.md and /vendors/b.md.",
    ));
    let model = Arc::new(
        ScriptedModel::new()
            .then_text("Here is the comparison.")
            .then_text("You're welcome."),
    );
    let cfg = SummarizationConfig {
        keep_messages: 3,
        tool_result_token_limit: 100,
        l2_trigger_ratio: 0.2,
        ..config(2_000)
    };
    let agent = Agent::builder(model.clone())
        .system_prompt("You compare vendors.")
        .checkpointer(checkpointer.clone())
        .middleware(
            SummarizationMiddleware::new(backend.clone())
                .with_config(cfg)
                .with_summary_model(summarizer.clone()),
        )
        .build()
        .unwrap();
    let (sink, mut rx) = EventSink::channel();
    let out = agent
        .run(
            RunInput::human("Compare them.")
                .thread(thread.clone())
                .events(sink),
        )
        .await
        .unwrap();
    let evs = events(&mut rx);
    assert_eq!(kinds(&evs), ["stage1", "stage2"], "{evs:#?}");
    let (s1, s2) = (&evs[0].1, &evs[1].1);
    assert_eq!(s1["results_offloaded"], 3);
    assert_eq!(s2["tokens_before"], s1["tokens_after"]);
    // The kept messages go out whole now that the request is under the threshold: smaller than the
    // original request, though larger than its stage-1 view.
    assert!(s2["tokens_after"].as_u64() < s1["tokens_before"].as_u64(), "{s2}");
    assert!(s2["tokens_after"].as_u64() < Some(2_000), "{s2}");
    assert!(s2["tokens_before"].as_u64() > s2["trigger_tokens"].as_u64());
    assert_eq!(s2["trigger_tokens"], 400);
    // 13 stored messages, keep 3 → target 10, a tool result; the cut moves back to its call (9).
    assert_eq!(
        (s2["cutoff"].as_u64(), s2["kept_messages"].as_u64()),
        (Some(9), Some(4))
    );
    assert_eq!(s2["summarized_messages"], 9);

    // The summarizer saw the stage-1 view (notices, not raw results) and none of the kept messages.
    let sreq = summarizer.last_request().unwrap();
    let input = sreq.messages[0].text();
    assert!(input.contains("[Tool result stored outside the conversation]"));
    assert!(
        !input.contains("vendor-a line 0039"),
        "raw output is not summarized"
    );
    assert!(!input.contains("Compare them."));
    insta::assert_yaml_snapshot!("stage2_summarizer_request", sreq);

    // The model got the summary, then the kept messages with the call and its result together.
    let main = model.requests().remove(0);
    assert_eq!(main.messages[0].source(), Some(SUMMARY_SOURCE));
    assert_eq!(
        shape(&main.messages)[1..],
        [
            "ai:calls[r3]",
            "tool:r3",
            "ai:Vendor C is reviewed.",
            "human:Compare them."
        ]
    );
    insta::assert_yaml_snapshot!("stage2_main_request_messages", main.messages);

    // Stored: every message kept; the summary in private state; the transcript on the backend.
    assert_eq!(out.state.messages.len(), 14);
    assert!(!out.state.slots.contains_key("_summarization"));
    let stored = checkpointer.load(&thread).await.unwrap().unwrap();
    let st = stored
        .checkpoint
        .state
        .get(&SUMMARIZATION)
        .unwrap()
        .unwrap()
        .clone();
    let summary = st.summary.clone().unwrap();
    assert_eq!((summary.cutoff, summary.count), (9, 1));
    let transcript_path = summary.transcript.clone().unwrap();
    assert_eq!(transcript_path, "/conversation_history/s2/transcript.md");
    let transcript = backend
        .read_to_string(&VirtualPath::parse(&transcript_path).unwrap())
        .await
        .unwrap();
    assert!(transcript.contains("Please research the three vendors"));
    assert!(transcript.contains("The full result is saved at /conversation_history/s2/tool_results/r1.txt"));
    assert_eq!(st.offloaded.len(), 3);

    // Next run: the summary is reused (no summarizer call), byte-identical.
    let (sink, mut rx) = EventSink::channel();
    agent
        .run(RunInput::human("Thanks!").thread(thread).events(sink))
        .await
        .unwrap();
    assert_eq!(summarizer.calls(), 1);
    assert!(events(&mut rx).is_empty());
    let next = model.last_request().unwrap();
    assert_eq!(next.messages[0], main.messages[0]);
    assert_eq!(
        next.messages.len(),
        1 + 5 + 1,
        "summary, stored 9..14, the new message"
    );
}

// ---------------------------------------------------------------- overflow

fn chat_history() -> Vec<Message> {
    (0..3)
        .flat_map(|i| {
            [
                Message::human(format!("question {i}")),
                Message::ai(format!("answer {i}")),
            ]
        })
        .collect()
}

fn too_long() -> ModelError {
    ModelError::ContextTooLong {
        message: "prompt is too long: 250000 tokens > 200000 maximum".into(),
        http: None,
    }
}

#[tokio::test]
async fn context_too_long_forces_a_summary_and_one_retry() {
    let checkpointer = Arc::new(InMemoryCheckpointer::new());
    let thread = ThreadId::new("s3").unwrap();
    seed_thread(&checkpointer, &thread, chat_history()).await;
    // The agent's own model summarizes (no summary model configured).
    let model = Arc::new(
        ScriptedModel::new()
            .then_error(too_long())
            .then_text("Three questions were asked and answered.")
            .then_text("final answer"),
    );
    let agent = Agent::builder(model.clone())
        .checkpointer(checkpointer.clone())
        .middleware(
            SummarizationMiddleware::new(Arc::new(StateBackend::new())).with_config(SummarizationConfig {
                keep_messages: 2,
                ..config(1_000_000)
            }),
        )
        .middleware(ModelRetryMiddleware::default())
        .build()
        .unwrap();
    let (sink, mut rx) = EventSink::channel();
    let out = agent
        .run(RunInput::human("question 3").thread(thread.clone()).events(sink))
        .await
        .unwrap();
    assert_eq!(out.final_text().as_deref(), Some("final answer"));
    let evs = events(&mut rx);
    assert_eq!(kinds(&evs), ["context_overflow", "stage1", "stage2"]);
    assert_eq!(evs[1].1["forced"], true);
    assert_eq!(evs[2].1["forced"], true);
    let requests = model.requests();
    assert_eq!(requests.len(), 3, "the call, the summarizer, one retry");
    assert_eq!(requests[1].system[0].source.as_deref(), Some(SUMMARY_SOURCE));
    assert_eq!(
        shape(&requests[2].messages)[1..],
        ["ai:answer 2", "human:question 3"]
    );
    assert_eq!(requests[2].messages[0].source(), Some(SUMMARY_SOURCE));

    // A second refusal is not retried again.
    let model = Arc::new(
        ScriptedModel::new()
            .then_error(too_long())
            .then_text("summary")
            .then_error(too_long())
            .then_text("never reached"),
    );
    let agent = Agent::builder(model.clone())
        .middleware(
            SummarizationMiddleware::new(Arc::new(StateBackend::new())).with_config(SummarizationConfig {
                keep_messages: 0,
                ..config(1_000_000)
            }),
        )
        .build()
        .unwrap();
    let err = agent
        .run(
            RunInput::new()
                .message(Message::human("a"))
                .message(Message::human("b")),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, AgentError::Model(ModelError::ContextTooLong { .. })),
        "{err}"
    );
    assert_eq!(model.calls(), 3);
}

mod cut_points;
