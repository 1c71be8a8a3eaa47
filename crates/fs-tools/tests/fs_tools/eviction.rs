//! Large-result eviction.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use async_trait::async_trait;
use insta::assert_snapshot;
use serde_json::{Value, json};
use trellis_backend::{Backend, StateBackend};
use trellis_fs_tools::{
    EvictLargeOutput, FileAccess, Limits, LsTool, Tool, ToolContext, ToolError, ToolOutput,
    evict_large_output,
};

use crate::common::{self, content, fill, show};

/// A tool that returns `lines` numbered lines (an error when `fail` is set).
#[derive(Debug)]
struct Dump;

#[async_trait]
impl Tool for Dump {
    fn name(&self) -> &str {
        "dump"
    }
    fn description(&self) -> &str {
        "Returns many lines."
    }
    fn parameters(&self) -> &Value {
        static SCHEMA: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
        SCHEMA.get_or_init(|| json!({"type": "object"}))
    }
    async fn call(&self, args: Value, _cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let lines = args["lines"].as_u64().unwrap_or(0);
        let text: String = (1..=lines)
            .map(|i| format!("record {i:05} {}\n", "x".repeat(20)))
            .collect();
        if args["fail"].as_bool() == Some(true) {
            Ok(ToolOutput::error(text).with_structured(json!({"lines": lines})))
        } else {
            Ok(ToolOutput::text(text))
        }
    }
}

fn ctx(backend: Arc<dyn Backend>) -> FileAccess {
    let mut limits = Limits::default();
    limits.evict_over_chars = Some(1_000);
    FileAccess::new(backend).with_limits(limits)
}

#[tokio::test]
async fn large_results_are_saved_and_previewed() {
    let backend = Arc::new(StateBackend::new());
    let ctx = ctx(backend.clone());
    let tool = EvictLargeOutput::new(Arc::new(Dump), ctx.clone());
    assert_eq!(tool.name(), "dump");
    assert!(tool.bounds_own_output());
    let call = ToolContext::detached("toolu_01/abc.def");

    let small = tool.call(json!({"lines": 3}), &call).await.unwrap();
    assert_eq!(
        small.text_content(),
        Dump.call(json!({"lines": 3}), &call)
            .await
            .unwrap()
            .text_content()
    );
    assert!(backend.is_empty());

    let full = Dump
        .call(json!({"lines": 100}), &call)
        .await
        .unwrap()
        .text_content();
    let out = tool.call(json!({"lines": 100}), &call).await.unwrap();
    assert!(!out.is_error);
    assert_snapshot!("evicted", show(&out));
    assert_eq!(
        content(backend.as_ref(), "/large_tool_results/toolu_01_abc_def").await,
        Some(full)
    );

    // The saved file pages with read_file like any other.
    let read = common::call(
        &ctx,
        "read_file",
        json!({"file_path": "/large_tool_results/toolu_01_abc_def", "offset": 5, "limit": 2}),
    )
    .await;
    assert_eq!(
        read.text_content(),
        format!(
            "[lines 6-7 of 100; next offset: 7]\n6\trecord 00006 {x}\n7\trecord 00007 {x}",
            x = "x".repeat(20)
        )
    );
}

#[tokio::test]
async fn errors_keep_their_flag_and_structured_content() {
    let backend = Arc::new(StateBackend::new());
    let ctx = ctx(backend.clone());
    let out = Dump
        .call(
            json!({"lines": 100, "fail": true}),
            &ToolContext::detached("call_1"),
        )
        .await
        .unwrap();
    let out = evict_large_output(&Dump, out, &ctx, "").await;
    assert!(out.is_error);
    assert_eq!(out.structured.as_deref(), Some(&json!({"lines": 100})));
    assert!(
        out.text_content()
            .starts_with("Error: [This result has 3407 characters"),
        "{}",
        out.text_content()
    );
    assert!(
        out.text_content().contains("\n1\tError: record 00001"),
        "{}",
        out.text_content()
    );
    // Without a call id, a unique id is generated.
    let saved = backend
        .list_files(&"/large_tool_results".parse().unwrap(), 10)
        .await
        .unwrap();
    assert_eq!(saved.files.len(), 1);
    assert!(
        saved.files[0]
            .path
            .as_str()
            .starts_with("/large_tool_results/result-")
    );
}

#[tokio::test]
async fn tools_that_bound_their_output_and_disabled_eviction_pass_through() {
    let backend = Arc::new(StateBackend::new());
    let files: Vec<(String, Vec<u8>)> = (0..200)
        .map(|i| (format!("/d/file-with-a-long-name-{i:04}.txt"), vec![]))
        .collect();
    let files: Vec<(&str, Vec<u8>)> = files.iter().map(|(p, d)| (p.as_str(), d.clone())).collect();
    fill(backend.as_ref(), &files).await;
    let ctx = ctx(backend.clone());
    let ls = EvictLargeOutput::new(Arc::new(LsTool::new(ctx.clone())), ctx.clone());
    let out = ls
        .call(json!({"path": "/d"}), &ToolContext::detached("call_1"))
        .await
        .unwrap();
    assert!(out.text_content().chars().count() > 1_000);
    assert!(
        out.text_content()
            .starts_with("/d/file-with-a-long-name-0000.txt\n")
    );
    assert!(
        backend
            .list_files(&"/large_tool_results".parse().unwrap(), 10)
            .await
            .unwrap()
            .files
            .is_empty()
    );

    let mut limits = ctx.limits.clone();
    limits.evict_over_chars = None;
    let off = ctx.clone().with_limits(limits);
    let out = EvictLargeOutput::new(Arc::new(Dump), off)
        .call(json!({"lines": 100}), &ToolContext::detached("call_1"))
        .await
        .unwrap();
    assert_eq!(out.text_content().lines().count(), 100);
}

#[tokio::test]
async fn a_failed_save_still_returns_a_bounded_preview() {
    use trellis_fs_tools::{Access, PermissionRule, Permissions};
    // A file stands where the results directory should be, so the write fails.
    let backend = Arc::new(StateBackend::new());
    fill(
        backend.as_ref(),
        &[("/large_tool_results", b"not a directory".to_vec())],
    )
    .await;
    // Permission rules do not apply to the harness's own write.
    let rules = Permissions::new(vec![PermissionRule::deny("/**", &[Access::Write]).unwrap()]);
    let ctx = ctx(backend.clone()).with_permissions(rules);
    let out = EvictLargeOutput::new(Arc::new(Dump), ctx)
        .call(json!({"lines": 100}), &ToolContext::detached("c1"))
        .await
        .unwrap();
    assert_snapshot!("evicted_save_failed", show(&out));
    assert!(out.text_content().chars().count() < 1_000);
}
