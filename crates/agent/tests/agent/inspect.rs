//! `trellis inspect` on the bundled example agent: the exact first request, as a snapshot.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use trellis_agent::{inspect, workspace};

use crate::cli::example;

#[tokio::test]
async fn inspect_the_example_agent() {
    let ws = workspace::assemble(&[example("skills")], &[example("AGENTS.md")], None).unwrap();
    let report = inspect::inspect(
        "anthropic:claude-sonnet-4-5",
        &ws,
        "Prep me for my Acme call tomorrow",
    )
    .await
    .unwrap();
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    let sources: Vec<_> = report
        .request
        .system
        .iter()
        .map(|b| b.source.clone().unwrap_or_default())
        .collect();
    assert_eq!(sources, ["", "filesystem", "skills", "memory"]);
    let breakpoints: Vec<bool> = report
        .request
        .system
        .iter()
        .map(|b| b.cache_breakpoint.is_some())
        .collect();
    assert_eq!(
        breakpoints,
        [false, false, true, true],
        "stable prefix, breakpoint, then memory with its own"
    );
    let body = report.provider_body.as_ref().unwrap();
    let marked = body["system"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b.get("cache_control").is_some())
        .count();
    assert_eq!(marked, 2, "the Anthropic body carries both breakpoints");
    // Mount points hold absolute host paths; the snapshot shows only what the model sees.
    let mut text = inspect::render_text(&report);
    for (_, source) in &report.mounts {
        text = text.replace(source.as_str(), "<example>");
    }
    insta::assert_snapshot!("inspect_example", text);

    let openai = inspect::inspect("openai:gpt-4.1", &ws, "hi").await.unwrap();
    assert!(
        openai.request.system.iter().all(|b| b.cache_breakpoint.is_none()),
        "no breakpoints without caching"
    );
}
