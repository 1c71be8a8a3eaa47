//! What every CLI test shares: the `trellis` binary ([`trellis`]), [`TrellisRun`] (one `trellis
//! run` against a mock model, output collected off the runtime's threads), a mock Anthropic
//! Messages endpoint ([`messages`], [`reply`], [`anthropic_tool_then_text`]), the bundled example
//! agent ([`example`]) and the text of a tool result ([`result_text`]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockBuilder, MockServer, ResponseTemplate};

/// The model every CLI run uses (served by the mock endpoint).
pub(crate) const MODEL: &str = "anthropic:claude-sonnet-4-5";

/// The `trellis` binary built for these tests, with a user config directory of its own that does
/// not exist (so no folder is trusted, whatever the developer's own `~/.config/trellis` says);
/// tests of trust point `TRELLIS_CONFIG_HOME` elsewhere.
pub(crate) fn trellis() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_trellis"));
    command.env(
        "TRELLIS_CONFIG_HOME",
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("no-user-config"),
    );
    command
}

/// One `trellis run --model MODEL …`: add the mock endpoint, flags and the task, then run it
/// with [`TrellisRun::output`] (or take the [`Command`] for a pseudo-terminal).
#[derive(Debug)]
pub(crate) struct TrellisRun {
    command: Command,
}

impl TrellisRun {
    /// `trellis run --model MODEL`.
    pub(crate) fn new() -> Self {
        let mut command = trellis();
        command.args(["run", "--model", MODEL]);
        Self { command }
    }

    /// Talk to the mock Anthropic endpoint `server` with a test key.
    pub(crate) fn anthropic(mut self, server: &MockServer) -> Self {
        self.command
            .env("ANTHROPIC_API_KEY", "test-key")
            .env("ANTHROPIC_BASE_URL", server.uri());
        self
    }

    /// `trellis run` without `--model` (the agent file names it).
    pub(crate) fn without_model() -> Self {
        let mut command = trellis();
        command.arg("run");
        Self { command }
    }

    /// Run in `dir` (where `trellis.toml` is looked for).
    pub(crate) fn current_dir(mut self, dir: impl AsRef<std::path::Path>) -> Self {
        self.command.current_dir(dir);
        self
    }

    /// The user's config directory (`TRELLIS_CONFIG_HOME`, holding `config.toml`).
    pub(crate) fn config_home(self, dir: impl AsRef<OsStr>) -> Self {
        self.env("TRELLIS_CONFIG_HOME", dir)
    }

    /// `--state-dir DIR`.
    pub(crate) fn state_dir(self, dir: impl AsRef<OsStr>) -> Self {
        self.arg("--state-dir").arg(dir)
    }

    /// `--skills SRC`.
    pub(crate) fn skills(self, source: impl AsRef<OsStr>) -> Self {
        self.arg("--skills").arg(source)
    }

    /// `--approve all`.
    pub(crate) fn approve_all(self) -> Self {
        self.args(["--approve", "all"])
    }

    /// One more argument (the task is an argument too: give it last).
    pub(crate) fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.command.arg(arg);
        self
    }

    /// More arguments.
    pub(crate) fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.command.args(args);
        self
    }

    /// An environment variable of the process.
    pub(crate) fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Self {
        self.command.env(key, value);
        self
    }

    /// An environment variable the process does not inherit.
    pub(crate) fn env_remove(mut self, key: &str) -> Self {
        self.command.env_remove(key);
        self
    }

    /// The command, to run some other way.
    pub(crate) fn command(self) -> Command {
        self.command
    }

    /// Run it to the end (on a blocking thread, so the mock server keeps answering).
    pub(crate) async fn output(self) -> Output {
        let mut command = self.command;
        tokio::task::spawn_blocking(move || command.output().unwrap())
            .await
            .unwrap()
    }

    /// Run it to the end and assert that it succeeded (showing its stderr when not).
    pub(crate) async fn success(self) -> Output {
        let output = self.output().await;
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        output
    }
}

/// A file of the bundled example agent (examples/sales-assistant).
pub(crate) fn example(rel: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/sales-assistant")
        .join(rel)
        .display()
        .to_string()
}

/// A mock of the Anthropic Messages endpoint.
pub(crate) fn messages() -> MockBuilder {
    Mock::given(method("POST")).and(path("/v1/messages"))
}

/// An Anthropic Messages response with these content blocks.
pub(crate) fn reply(content: Value, stop_reason: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": content, "stop_reason": stop_reason, "stop_sequence": null,
        "usage": {"input_tokens": 10, "output_tokens": 5}
    }))
}

/// A mock Anthropic endpoint whose model makes the `tool_use` blocks `uses` in its first reply (one
/// step), then answers "done" to every later request.
pub(crate) async fn calls_then_done(uses: Vec<Value>) -> MockServer {
    let server = MockServer::start().await;
    messages()
        .respond_with(reply(Value::Array(uses), "tool_use"))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    messages()
        .respond_with(reply(json!([{"type": "text", "text": "done"}]), "end_turn"))
        .mount(&server)
        .await;
    server
}

/// A tool result's text: its content is a string or a list of blocks.
pub(crate) fn result_text(result: &Value) -> String {
    match &result["content"] {
        Value::String(text) => text.clone(),
        blocks => blocks
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

/// A mock Anthropic endpoint whose model first calls `tool` with `input`, then answers `answer`
/// to every later request.
pub(crate) async fn anthropic_tool_then_text(
    input: serde_json::Value,
    tool: &str,
    answer: &str,
) -> wiremock::MockServer {
    use wiremock::matchers::{method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    let server = MockServer::start().await;
    let call = serde_json::json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": tool, "input": input}],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 10, "output_tokens": 5}
    });
    let done = serde_json::json!({
        "id": "msg_2", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": answer}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 10, "output_tokens": 1}
    });
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(ResponseTemplate::new(200).set_body_json(call))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(ResponseTemplate::new(200).set_body_json(done))
        .mount(&server)
        .await;
    server
}
