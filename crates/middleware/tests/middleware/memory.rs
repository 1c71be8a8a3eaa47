//! MemoryMiddleware: loading, rendering, the cache-prefix invariant, refresh after edits, failures,
//! and concurrent edits on the S3 emulator.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::json;
use trellis_middleware::backend::{
    Backend, BackendExt, FilesystemBackend, ObjectStoreBackend, StateBackend, StoreOptions, VirtualPath,
    WriteMode,
};
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::*;

use crate::common;

async fn put(backend: &dyn Backend, path: &str, text: &str) {
    backend
        .write(
            &VirtualPath::parse(path).unwrap(),
            text.to_owned().into(),
            WriteMode::Overwrite,
        )
        .await
        .unwrap();
}

fn memory_block(req: &ModelRequest) -> Option<&SystemBlock> {
    req.system.iter().find(|b| b.source.as_deref() == Some("memory"))
}

async fn first_request(backend: Arc<dyn Backend>, sources: &[&str], budget: Option<usize>) -> ModelRequest {
    let model = Arc::new(
        ScriptedModel::new()
            .with_capabilities(common::caps(false))
            .then_text("ok"),
    );
    let mut memory = MemoryMiddleware::new(backend, sources.iter().copied()).unwrap();
    if let Some(b) = budget {
        memory = memory.with_budget_chars(b);
    }
    let agent = Agent::builder(model.clone())
        .system_prompt("Base prompt.")
        .middleware(PromptCachingMiddleware::new())
        .middleware(memory)
        .build()
        .unwrap();
    agent.run(RunInput::human("hi")).await.unwrap();
    model.requests().remove(0)
}

#[tokio::test]
async fn sections_render_as_snapshots() {
    let backend = Arc::new(StateBackend::new());
    put(
        backend.as_ref(),
        "/AGENTS.md",
        "# Project\n- Use tabs.\n<!-- maintainer note: hidden -->\n- Run `make check`.\n",
    )
    .await;
    put(
        backend.as_ref(),
        "/user/AGENTS.md",
        "# About the user\nPrefers short answers.",
    )
    .await;
    put(
        backend.as_ref(),
        "/code.md",
        "Keep `<!-- inline code -->` as is.\n\n```html\n<!-- a sample comment -->\n<p>hi</p>\n```\n<!--\nmulti-line\nhidden\n-->\nVisible end.",
    )
    .await;
    put(
        backend.as_ref(),
        "/only-comment.md",
        "<!-- nothing for the model -->\n",
    )
    .await;

    let one = first_request(backend.clone(), &["/AGENTS.md"], None).await;
    insta::assert_snapshot!("memory_one_source", memory_block(&one).unwrap().text);
    let two = first_request(
        backend.clone(),
        &["/AGENTS.md", "/missing.md", "/only-comment.md", "/user/AGENTS.md"],
        None,
    )
    .await;
    insta::assert_snapshot!("memory_two_sources", memory_block(&two).unwrap().text);
    let code = first_request(backend.clone(), &["/code.md"], None).await;
    insta::assert_snapshot!("memory_comments_and_code", memory_block(&code).unwrap().text);
    let over = first_request(backend.clone(), &["/AGENTS.md", "/user/AGENTS.md"], Some(40)).await;
    insta::assert_snapshot!("memory_over_budget", memory_block(&over).unwrap().text);
    let none = first_request(backend.clone(), &["/missing.md"], None).await;
    assert!(
        memory_block(&none)
            .unwrap()
            .text
            .contains("(No memory files yet.)")
    );
}

/// Memory edits change only what follows the stable prefix's breakpoint, and show up on the next call.
#[tokio::test]
async fn editing_memory_keeps_the_cached_prefix_and_refreshes() {
    let backend = Arc::new(StateBackend::new());
    put(backend.as_ref(), "/AGENTS.md", "# Notes\n- Prefers tabs.\n").await;
    let model = Arc::new(
        ScriptedModel::new()
            .with_capabilities(common::caps(false))
            .then_tool_calls([ToolCall::new(
                "e1",
                "edit_file",
                json!({"file_path": "/AGENTS.md", "old_string": "- Prefers tabs.", "new_string": "- Prefers spaces (corrected)."}),
            )])
            .then_text("noted"),
    );
    let agent = Agent::builder(model.clone())
        .system_prompt("You are a coding assistant.")
        .middleware(FilesystemMiddleware::new(backend.clone()))
        .middleware(PromptCachingMiddleware::new())
        .middleware(MemoryMiddleware::new(backend.clone(), ["/AGENTS.md"]).unwrap())
        .build()
        .unwrap();
    agent
        .run(RunInput::human("I prefer spaces, remember that"))
        .await
        .unwrap();
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    let (before, after) = (&requests[0], &requests[1]);
    let first_bp = before
        .system
        .iter()
        .position(|b| b.cache_breakpoint.is_some())
        .unwrap();
    assert_eq!(
        before.system[..=first_bp],
        after.system[..=first_bp],
        "every byte up to the first breakpoint is unchanged"
    );
    assert!(
        first_bp < before.system.len() - 1,
        "memory comes after the stable prefix's breakpoint"
    );
    let (old, new) = (memory_block(before).unwrap(), memory_block(after).unwrap());
    assert!(old.text.contains("Prefers tabs") && !new.text.contains("Prefers tabs"));
    assert!(
        new.text.contains("Prefers spaces (corrected)"),
        "the next call shows the edit"
    );
    assert!(
        old.cache_breakpoint.is_some() && new.cache_breakpoint.is_some(),
        "memory has its own breakpoint"
    );
    assert!(before.cache_breakpoints() <= 4 && after.cache_breakpoints() <= 4);
    insta::assert_snapshot!("memory_after_edit", new.text);
}

#[tokio::test]
async fn breakpoint_without_text_and_none_without_caching() {
    let backend = Arc::new(StateBackend::new());
    put(backend.as_ref(), "/AGENTS.md", "remember me").await;
    let model = Arc::new(
        ScriptedModel::new()
            .with_capabilities(common::caps(false))
            .then_text("ok"),
    );
    let agent = Agent::builder(model.clone())
        .system_prompt("Base.")
        .middleware(
            MemoryMiddleware::new(backend.clone(), ["/AGENTS.md"])
                .unwrap()
                .without_section(),
        )
        .build()
        .unwrap();
    agent.run(RunInput::human("hi")).await.unwrap();
    let req = model.last_request().unwrap();
    assert!(memory_block(&req).is_none());
    assert!(
        req.system.last().unwrap().cache_breakpoint.is_some(),
        "breakpoint placed even without text"
    );

    let plain = Arc::new(ScriptedModel::new().then_text("ok"));
    let agent = Agent::builder(plain.clone())
        .system_prompt("Base.")
        .middleware(MemoryMiddleware::new(backend.clone(), ["/AGENTS.md"]).unwrap())
        .build()
        .unwrap();
    agent.run(RunInput::human("hi")).await.unwrap();
    assert_eq!(
        plain.last_request().unwrap().cache_breakpoints(),
        0,
        "no breakpoints for models without caching"
    );
}

#[tokio::test]
async fn unreadable_sources_stop_the_run_and_missing_ones_do_not() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("AGENTS.md")).unwrap();
    std::fs::write(dir.path().join("binary.md"), [0xff, 0xfe, 0x00]).unwrap();
    let backend: Arc<dyn Backend> = Arc::new(FilesystemBackend::new(dir.path()).unwrap());
    for (source, cause) in [("/AGENTS.md", "is a directory"), ("/binary.md", "not UTF-8")] {
        let model = Arc::new(ScriptedModel::new().then_text("never"));
        let agent = Agent::builder(model.clone())
            .middleware(MemoryMiddleware::new(backend.clone(), [source]).unwrap())
            .build()
            .unwrap();
        let err = agent.run(RunInput::human("hi")).await.unwrap_err().to_string();
        assert!(err.contains(source) && err.contains(cause), "{err}");
        assert_eq!(model.calls(), 0, "the model is never called with memory missing");
    }
    let model = Arc::new(ScriptedModel::new().then_text("fine"));
    let agent = Agent::builder(model.clone())
        .middleware(MemoryMiddleware::new(backend.clone(), ["/not-there.md"]).unwrap())
        .build()
        .unwrap();
    assert_eq!(
        agent
            .run(RunInput::human("hi"))
            .await
            .unwrap()
            .final_text()
            .as_deref(),
        Some("fine")
    );
    assert!(MemoryMiddleware::new(backend, ["/../etc/passwd"]).is_err());
}

/// Two threads append to one memory file at once; every edit that reported success is in the file.
async fn concurrent_edits(backend: Arc<dyn Backend>) {
    put(backend.as_ref(), "/AGENTS.md", "# Log\n").await;
    let run = |who: &'static str| {
        let backend = backend.clone();
        async move {
            let mut model = ScriptedModel::new();
            for i in 0..5 {
                model = model.then_tool_calls([ToolCall::new(
                    format!("{who}{i}"),
                    "edit_file",
                    json!({"file_path": "/AGENTS.md", "old_string": "# Log\n", "new_string": format!("# Log\n- {who} {i}\n")}),
                )]);
            }
            let agent = Agent::builder(Arc::new(model.then_text("done")))
                .middleware(FilesystemMiddleware::new(backend.clone()))
                .middleware(MemoryMiddleware::new(backend, ["/AGENTS.md"]).unwrap())
                .build()
                .unwrap();
            let out = agent.run(RunInput::human("log")).await.unwrap();
            out.state
                .messages
                .iter()
                .filter_map(|m| m.as_tool())
                .filter(|t| !t.is_error)
                .map(|t| t.call_id.clone())
                .collect::<Vec<_>>()
        }
    };
    let (a, b) = tokio::join!(tokio::spawn(run("alice")), tokio::spawn(run("bob")));
    let succeeded: Vec<String> = a.unwrap().into_iter().chain(b.unwrap()).collect();
    let text = backend
        .read_to_string(&VirtualPath::parse("/AGENTS.md").unwrap())
        .await
        .unwrap();
    assert!(!succeeded.is_empty());
    for id in &succeeded {
        let (who, i) = id.split_at(id.len() - 1);
        assert!(
            text.contains(&format!("- {who} {i}\n")),
            "{id} reported success but is missing:\n{text}"
        );
    }
    let lines = text.lines().filter(|l| l.starts_with("- ")).count();
    assert_eq!(
        lines,
        succeeded.len(),
        "no edit landed that reported failure:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_memory_edits_on_local_state() {
    concurrent_edits(Arc::new(StateBackend::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_memory_edits_on_s3() {
    let Some((endpoint, bucket)) = crate::common::s3_emulator("memory S3 suite") else {
        return;
    };
    let options = StoreOptions::s3_compatible(endpoint, "test", "test");
    let prefix = format!(
        "memory-concurrency-{}-{}",
        std::process::id(),
        chrono_free_nanos()
    );
    let backend = ObjectStoreBackend::from_url(&format!("s3://{bucket}/{prefix}"), &options).unwrap();
    concurrent_edits(Arc::new(backend)).await;
}

fn chrono_free_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}
