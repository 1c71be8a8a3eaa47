//! The `execute` tool: when it is offered, what the model reads (description, schema and results,
//! as snapshots), the permission rules and the command policy. Results come from the unsandboxed
//! shell, which is deterministic and needs nothing installed; the sandbox itself is tested in
//! `sandbox`, and through the agent in the integration tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use insta::assert_snapshot;
use serde_json::json;
use trellis_backend::sandbox::{SandboxLimits, SandboxedBackend};
use trellis_backend::{Backend, StateBackend, VirtualPath};
use trellis_fs_tools::sandbox::UnsandboxedShell;
use trellis_fs_tools::{
    Access, CommandPolicy, Effect, ExecuteTool, FileAccess, PermissionRule, Permissions, Tool, ToolContext,
    file_tools,
};

use crate::common::{content, fill, show};

fn p(s: &str) -> VirtualPath {
    VirtualPath::parse(s).unwrap()
}

fn shell_backend() -> (Arc<StateBackend>, Arc<dyn Backend>) {
    let state = Arc::new(StateBackend::new());
    let sandboxed: Arc<dyn Backend> = Arc::new(SandboxedBackend::new(
        state.clone(),
        Arc::new(UnsandboxedShell::default()),
    ));
    (state, sandboxed)
}

fn spec(tool: &dyn Tool) -> String {
    format!(
        "## {}\n{}\n{}",
        tool.name(),
        tool.description(),
        serde_json::to_string_pretty(tool.parameters()).unwrap()
    )
}

async fn run(tool: &ExecuteTool, args: serde_json::Value) -> trellis_fs_tools::ToolOutput {
    tool.call(args, &ToolContext::detached("call_7")).await.unwrap()
}

#[test]
fn offered_only_when_the_backend_can_run_commands() {
    let plain = file_tools(FileAccess::new(Arc::new(StateBackend::new())));
    assert!(plain.iter().all(|t| t.name() != "execute"));
    let (_, sandboxed) = shell_backend();
    let tools = file_tools(FileAccess::new(sandboxed.clone()));
    assert_eq!(
        tools.last().map(|t| t.name().to_owned()).as_deref(),
        Some("execute")
    );
    assert!(
        !ExecuteTool::new(FileAccess::new(sandboxed))
            .commands(CommandPolicy::deny_all())
            .is_offered()
    );
}

#[test]
fn execute_specs() {
    let (_, b) = shell_backend();
    let plain = ExecuteTool::new(FileAccess::new(b.clone()));
    // Without a sandbox known at build time the tool describes the isolating kind it will find.
    let isolated = ExecuteTool::new(FileAccess::new(Arc::new(StateBackend::new())));
    let skills = ExecuteTool::new(FileAccess::new(b.clone()))
        .skill_sources([p("/skills/team"), p("/skills/personal")]);
    let limited = ExecuteTool::new(FileAccess::new(b))
        .skill_sources([p("/skills")])
        .commands(CommandPolicy::allow_only(["python3 /skills/", "ls"]));
    assert_snapshot!(
        "execute_specs",
        [spec(&isolated), spec(&plain), spec(&skills), spec(&limited)].join("\n\n")
    );
}

#[tokio::test]
async fn results_read_as_output_then_facts() {
    let (state, b) = shell_backend();
    fill(
        state.as_ref(),
        &[("/uploads/data.csv", b"a,b\n1,2\n3,4\n".to_vec())],
    )
    .await;
    let tool = ExecuteTool::new(FileAccess::new(b.clone()));
    let out = run(&tool, json!({"command": "wc -l < data.csv && mkdir -p ../outputs && echo done > ../outputs/r.txt", "cwd": "/uploads"})).await;
    assert_snapshot!("execute_saved", show(&out));
    assert_eq!(
        content(state.as_ref(), "/outputs/r.txt").await.as_deref(),
        Some("done\n")
    );
    let structured = *out.structured.clone().unwrap();
    assert_eq!(structured["exit_code"], 0);
    assert_eq!(structured["changes"][0]["path"], "/outputs/r.txt");

    assert_snapshot!(
        "execute_failed",
        show(&run(&tool, json!({"command": "echo oops >&2; exit 4"})).await)
    );
    assert_snapshot!(
        "execute_no_output",
        show(&run(&tool, json!({"command": "true"})).await)
    );
    assert_snapshot!(
        "execute_timeout",
        show(&run(&tool, json!({"command": "sleep 20", "timeout": 1})).await)
    );
    let mut small = SandboxLimits::default();
    small.output_bytes = 120;
    let cutting =
        ExecuteTool::new(FileAccess::new(b.clone())).with_sandbox(Arc::new(UnsandboxedShell::new(small)));
    assert_snapshot!(
        "execute_cut",
        show(&run(&cutting, json!({"command": "seq 1 100000"})).await)
    );
    let saved = content(state.as_ref(), "/large_tool_results/execute-call_7.txt")
        .await
        .unwrap();
    assert_eq!(saved.lines().count(), 100_000);
    assert_snapshot!("execute_bad_args", show(&run(&tool, json!({"cmd": "ls"})).await));
    assert_snapshot!(
        "execute_bad_cwd",
        show(&run(&tool, json!({"command": "ls", "cwd": "/a/../../x"})).await)
    );
}

#[tokio::test]
async fn permission_rules_apply_to_every_file_the_command_touches() {
    let (state, b) = shell_backend();
    fill(
        state.as_ref(),
        &[
            ("/secrets/key", b"TOP-SECRET".to_vec()),
            ("/memories/AGENTS.md", b"memo".to_vec()),
        ],
    )
    .await;
    let rules = Permissions::new(vec![
        PermissionRule::deny("/secrets/**", &[Access::Read, Access::Write]).unwrap(),
        PermissionRule::deny("/memories/**", &[Access::Write]).unwrap(),
    ]);
    let tool = ExecuteTool::new(FileAccess::new(b).with_permissions(rules));
    let out = run(
        &tool,
        json!({"command": "cat secrets/key; cat memories/AGENTS.md; echo new > memories/AGENTS.md; echo x > secrets/planted"}),
    )
    .await;
    let text = out.text_content();
    assert!(!text.contains("TOP-SECRET"), "{text}");
    assert!(text.contains("memo"), "{text}");
    assert_snapshot!("execute_denied_writes", show(&out));
    assert_eq!(
        content(state.as_ref(), "/memories/AGENTS.md").await.as_deref(),
        Some("memo")
    );
    assert_eq!(content(state.as_ref(), "/secrets/planted").await, None);
    assert_eq!(
        content(state.as_ref(), "/secrets/key").await.as_deref(),
        Some("TOP-SECRET")
    );
}

#[tokio::test]
async fn the_command_policy_refuses_before_anything_runs() {
    let (state, b) = shell_backend();
    let tool =
        ExecuteTool::new(FileAccess::new(b.clone())).commands(CommandPolicy::allow_only(["ls", "echo"]));
    assert_snapshot!(
        "execute_refused_chain",
        show(&run(&tool, json!({"command": "echo hi > planted.txt"})).await)
    );
    assert_eq!(content(state.as_ref(), "/planted.txt").await, None);
    assert_snapshot!(
        "execute_refused_prefix",
        show(&run(&tool, json!({"command": "rm -rf /"})).await)
    );
    assert!(!run(&tool, json!({"command": "echo fine"})).await.is_error);
    let guarded =
        ExecuteTool::new(FileAccess::new(b)).commands(CommandPolicy::allow_all().rule("rm", Effect::Deny));
    let out = run(&guarded, json!({"command": "ls; rm -rf /uploads"})).await;
    assert!(
        out.is_error && out.text_content().contains("`rm -rf /uploads` is not allowed"),
        "{}",
        out.text_content()
    );
}

#[tokio::test]
async fn the_calls_idempotency_key_reaches_the_command() {
    let (_, b) = shell_backend();
    let tool = ExecuteTool::new(FileAccess::new(b));
    let run = trellis_fs_tools::DetachedRun::new().with_thread_id("t-1");
    let out = tool
        .call(
            json!({"command": format!("echo key=${}", trellis_fs_tools::IDEMPOTENCY_KEY_VAR)}),
            &run.context("toolu/7"),
        )
        .await
        .unwrap();
    assert!(
        out.text_content().contains("key=t-1:toolu%2F7"),
        "{}",
        out.text_content()
    );
}

#[test]
fn built_in_tools_declare_their_side_effects() {
    use trellis_fs_tools::SideEffects::{External, Idempotent, ReadOnly};
    let (_, b) = shell_backend();
    let classes: Vec<(String, trellis_fs_tools::SideEffects)> = file_tools(FileAccess::new(b))
        .iter()
        .map(|t| (t.name().to_owned(), t.side_effects()))
        .collect();
    let expected = [
        ("ls", ReadOnly),
        ("read_file", ReadOnly),
        ("write_file", Idempotent),
        ("edit_file", External),
        ("delete", Idempotent),
        ("glob", ReadOnly),
        ("grep", ReadOnly),
        ("execute", External),
    ]
    .map(|(n, c)| (n.to_owned(), c));
    assert_eq!(classes, expected);
}
