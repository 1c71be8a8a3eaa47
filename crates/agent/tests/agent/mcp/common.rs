//! Shared by the MCP tests: the real MCP server under `tests/mcp_server/` (official Python SDK, pinned
//! in xtask/src/install.rs), started over stdio or streamable HTTP, and process checks.
//!
//! The Python interpreter comes from `TRELLIS_MCP_PYTHON` (set by `cargo xtask test`), read by
//! [`skip_unless_python!`](crate::support::skip_unless_python): without it the tests print
//! `skipped: …` and return, unless `TRELLIS_EMULATORS=required`, when they fail.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use trellis_agent::mcp::McpServerConfig;
use trellis_agent::{DeepAgentBuilder, deep_agent};
use trellis_middleware::backend::{Backend, StateBackend, VirtualPath, WriteMode};
use trellis_middleware::runtime::model::ModelCapabilities;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::skills::SkillSource;
use trellis_middleware::{ChatModel, RunOutput};

/// The test server's script.
pub fn script() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp_server/server.py")
        .display()
        .to_string()
}

/// A stdio server named `name`; when `started` is given, the server appends its pid to that file
/// whenever a process starts.
pub fn stdio(python: &str, name: &str, started: Option<&Path>) -> McpServerConfig {
    let mut args = vec![script(), "--name".to_owned(), name.to_owned()];
    if let Some(file) = started {
        args.push("--started-file".to_owned());
        args.push(file.display().to_string());
    }
    McpServerConfig::stdio(name, python, args).unwrap()
}

/// Pids written to a `--started-file` (empty when no process started).
pub fn started(file: &Path) -> Vec<u32> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect()
}

/// True while `pid` is a live (not zombie) process.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

/// Wait (bounded: 30 s) for `pid` to exit; true when it did.
pub async fn gone(pid: u32) -> bool {
    for _ in 0..300 {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// A streamable-HTTP server process, killed when dropped.
#[derive(Debug)]
pub struct HttpServer {
    child: Child,
    /// Its MCP endpoint.
    pub url: String,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start the test server over streamable HTTP on a free local port and wait (bounded) until it listens.
pub async fn http_server(python: &str, name: &str) -> HttpServer {
    http_server_with(python, name, &[]).await
}

/// [`http_server`] with extra arguments for server.py (e.g. `--identity`).
pub async fn http_server_with(python: &str, name: &str, extra: &[&str]) -> HttpServer {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(python)
        .args([
            &script(),
            "--name",
            name,
            "--transport",
            "http",
            "--port",
            &port.to_string(),
        ])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = HttpServer {
        child,
        url: format!("http://127.0.0.1:{port}/mcp"),
    };
    for _ in 0..300 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return server;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the HTTP MCP server did not listen on port {port}");
}

/// A skills library on a state backend: `call-transcripts` binds `include`; `meeting-prep` binds
/// nothing.
pub async fn library(include: &str) -> Arc<StateBackend> {
    let backend = Arc::new(StateBackend::new());
    for (path, text) in [
        (
            "/skills/call-transcripts/SKILL.md",
            format!(
                "---\nname: call-transcripts\ndescription: Search recorded sales calls and read transcripts.\n\
                 metadata:\n  include_tools: {include}\n---\n# Calls\nUse the CRM tools.\n"
            ),
        ),
        (
            "/skills/meeting-prep/SKILL.md",
            "---\nname: meeting-prep\ndescription: Prepare a brief for a customer meeting.\n---\n# Prep\n"
                .to_owned(),
        ),
    ] {
        backend
            .write(
                &VirtualPath::parse(path).unwrap(),
                text.into(),
                WriteMode::Overwrite,
            )
            .await
            .unwrap();
    }
    backend
}

/// Capabilities of a model that takes disclosed tools at the end of the tool list.
/// The default stack on `backend`, with its `/skills` as the one skill source; add the MCP servers.
pub fn agent_on(model: Arc<dyn ChatModel>, backend: &Arc<StateBackend>) -> DeepAgentBuilder {
    deep_agent(model)
        .backend(backend.clone())
        .skills_source(SkillSource::new(backend.clone(), "/skills").unwrap())
}

/// A scripted model that declares [`caps`]: the model of every agent scenario here.
pub fn scripted() -> ScriptedModel {
    ScriptedModel::new().with_capabilities(caps())
}

pub fn caps() -> ModelCapabilities {
    ModelCapabilities {
        prompt_caching: true,
        max_cache_breakpoints: 4,
        tools_mid_conversation: false,
        structured_output: false,
        images: false,
        context_window: Some(200_000),
    }
}

/// (text, is_error) of every tool result of a run, in order.
pub fn tool_results(out: &RunOutput) -> Vec<(String, bool)> {
    out.state
        .messages
        .iter()
        .filter_map(|m| m.as_tool())
        .map(|t| {
            (
                t.content
                    .iter()
                    .filter_map(trellis_middleware::runtime::message::ContentBlock::as_text)
                    .collect(),
                t.is_error,
            )
        })
        .collect()
}

/// The skill `call-transcripts`, which binds the server `crm`, in `<root>/team/skills` (mounted at
/// `/skills/team`); the skills directory.
pub fn call_transcripts_skill(root: &Path) -> PathBuf {
    let skills = root.join("team/skills");
    std::fs::create_dir_all(skills.join("call-transcripts")).unwrap();
    std::fs::write(
        skills.join("call-transcripts/SKILL.md"),
        "---\nname: call-transcripts\ndescription: Search recorded sales calls.\nmetadata:\n  include_tools: mcp:crm\n---\n# Calls\n",
    )
    .unwrap();
    skills
}

/// The request bodies a mock model endpoint received, as text.
pub fn bodies(requests: &[wiremock::Request]) -> Vec<String> {
    requests
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect()
}

/// The bodies of a run that read `call-transcripts` (first request), called `crm__search_calls`
/// for Acme with limit 2 (second): hidden, then offered, then its answer reached the model.
pub fn assert_bound_then_called(bodies: &[String]) {
    assert!(
        !bodies[0].contains("crm__search_calls"),
        "hidden before the skill is read"
    );
    assert!(bodies[1].contains("\"crm__search_calls\""), "offered after");
    assert!(
        bodies[2].contains("[crm] call-1: Acme call 1; call-2: Acme call 2"),
        "the server's answer reached the model"
    );
}
