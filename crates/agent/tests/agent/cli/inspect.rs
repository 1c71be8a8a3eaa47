//! `trellis inspect` on the bundled example agent: the exact first request, as a snapshot.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use trellis_agent::cli::inspect;
use trellis_agent::cli::mounts::Mounts;
use trellis_agent::cli::sandbox::{SandboxChoice, Selected, select};

use super::harness::example;

#[tokio::test]
async fn inspect_the_example_agent() {
    let ws = Mounts::from_sources(&[example("skills")], &[example("AGENTS.md")], None).unwrap();
    let report = inspect::inspect(
        "anthropic:claude-sonnet-4-5",
        &ws,
        &Selected::none("--sandbox none"),
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

    let openai = inspect::inspect("openai:gpt-4.1", &ws, &Selected::none("--sandbox none"), "hi")
        .await
        .unwrap();
    assert!(
        openai.request.system.iter().all(|b| b.cache_breakpoint.is_none()),
        "no breakpoints without caching"
    );
}

/// Claude on Bedrock and Vertex AI: inspect needs no AWS or Google credentials, and renders the
/// platform's body (the Anthropic one without `model`, with the platform's `anthropic_version`)
/// with the same cache breakpoints.
#[tokio::test]
async fn inspect_renders_the_bedrock_and_vertex_bodies() {
    let ws = Mounts::from_sources(&[example("skills")], &[example("AGENTS.md")], None).unwrap();
    let none = Selected::none("--sandbox none");
    let anthropic = inspect::inspect("anthropic:claude-sonnet-4-5", &ws, &none, "hi")
        .await
        .unwrap();
    let anthropic = anthropic.provider_body.unwrap();
    for (model, version) in [
        (
            "bedrock:anthropic.claude-sonnet-4-5-20250929-v1:0",
            "bedrock-2023-05-31",
        ),
        ("vertex:claude-sonnet-4-5@20250929", "vertex-2023-10-16"),
    ] {
        let report = inspect::inspect(model, &ws, &none, "hi").await.unwrap();
        assert!(report.capabilities.prompt_caching, "{model}");
        let body = report.provider_body.expect("a body is rendered");
        assert_eq!(body["anthropic_version"], version);
        assert!(body.get("model").is_none(), "{model}");
        assert_eq!(
            body["system"], anthropic["system"],
            "{model}: the same system blocks and breakpoints"
        );
        assert_eq!(body["messages"], anthropic["messages"], "{model}");
    }
}

/// With bubblewrap (required under `cargo xtask test`), `execute` is offered: the filesystem
/// section says so, the tool describes the isolated sandbox and the example's skill source, and the
/// report lists every limit as enforced.
#[tokio::test]
async fn inspect_offers_execute_in_bubblewrap() {
    let selected = match select(Some(SandboxChoice::Bwrap)) {
        Ok(s) => s,
        Err(e) if std::env::var("TRELLIS_SANDBOX").as_deref() == Ok("required") => {
            panic!("bubblewrap unavailable but TRELLIS_SANDBOX=required: {e}")
        }
        Err(e) => return eprintln!("skipped: inspect with bubblewrap ({e})"),
    };
    let ws = Mounts::from_sources(&[example("skills")], &[example("AGENTS.md")], None).unwrap();
    let report = inspect::inspect("anthropic:claude-sonnet-4-5", &ws, &selected, "Fill in the form")
        .await
        .unwrap();
    let execute = report
        .request
        .tools
        .iter()
        .find(|t| t.name == "execute")
        .expect("execute offered");
    let filesystem = report
        .request
        .system
        .iter()
        .find(|b| b.source.as_deref() == Some("filesystem"))
        .unwrap();
    insta::assert_snapshot!(
        "inspect_execute",
        format!("{}\n\n## execute\n{}", filesystem.text, execute.description)
    );
    let text = inspect::render_text(&report);
    assert!(text.contains("execute: offered, in bubblewrap"), "{text}");
    assert!(
        report.sandbox.limits.iter().all(|l| l.enforced),
        "{:?}",
        report.sandbox.limits
    );
}

#[test]
fn an_unavailable_default_sandbox_means_no_execute_and_says_why() {
    // `none` is never an error and never offers the tool.
    let none = select(Some(SandboxChoice::None)).unwrap();
    assert!(none.sandbox.is_none() && !none.status.offered);
    // `unsandboxed` is offered, with the warning that nothing is isolated.
    let host = select(Some(SandboxChoice::Unsandboxed)).unwrap();
    assert!(host.status.offered);
    assert!(
        host.status
            .note
            .as_deref()
            .unwrap_or("")
            .contains("nothing is isolated")
    );
    assert!(host.status.limits.iter().any(|l| !l.enforced));
}
