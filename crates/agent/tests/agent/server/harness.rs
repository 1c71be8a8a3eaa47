//! What the server tests share: [`Served`], one `trellis serve` process on a free port of
//! 127.0.0.1 talking to a mock Anthropic endpoint, and [`python`], a script run with the
//! `langgraph-sdk` interpreter against it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use wiremock::{MockServer, ResponseTemplate};

use crate::cli::harness::{messages, reply, trellis};
use crate::cli::streaming::EVENTS as STREAMED;

/// The agent file every served graph uses: the mock's model, no sandbox, no approvals.
pub(crate) const AGENT_FILE: &str = "model = \"anthropic:claude-sonnet-4-5\"\n\
[sandbox]\nkind = \"none\"\n\
[approvals]\nask = [\"none\"]\n";

/// A mock model that first calls `ls` on `/` (one step), then streams `Streamed answer.` to
/// every later request.
pub(crate) async fn ls_then_streamed_answer() -> MockServer {
    ls_then_streamed_answer_after(Duration::ZERO, Duration::ZERO).await
}

/// [`ls_then_streamed_answer`] whose `ls` reply comes after `ls_delay` and each answer after
/// `answer_delay`: time for followers to join a run under way.
pub(crate) async fn ls_then_streamed_answer_after(ls_delay: Duration, answer_delay: Duration) -> MockServer {
    let ls = json!([{"type": "tool_use", "id": "toolu_ls", "name": "ls", "input": {"path": "/"}}]);
    let answer = ResponseTemplate::new(200)
        .set_body_string(STREAMED)
        .insert_header("content-type", "text/event-stream")
        .set_delay(answer_delay);
    first_then(reply(ls, "tool_use").set_delay(ls_delay), answer).await
}

/// A mock model answering `first` to the first request and `then` to every later one.
pub(crate) async fn first_then(first: ResponseTemplate, then: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    messages()
        .respond_with(first)
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    messages().respond_with(then).mount(&server).await;
    server
}

/// A mock model answering `late` to every request after `delay`: runs stay running that long.
pub(crate) async fn answering_after(delay: Duration) -> MockServer {
    let server = MockServer::start().await;
    messages()
        .respond_with(reply(json!([{"type": "text", "text": "late"}]), "end_turn").set_delay(delay))
        .mount(&server)
        .await;
    server
}

/// A mock model answering `done` to every request.
pub(crate) async fn always_done() -> MockServer {
    let server = MockServer::start().await;
    messages()
        .respond_with(reply(json!([{"type": "text", "text": "done"}]), "end_turn"))
        .mount(&server)
        .await;
    server
}

/// A running `trellis serve`; killed when dropped.
#[derive(Debug)]
pub(crate) struct Served {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub(crate) url: String,
    stderr: Arc<Mutex<String>>,
}

impl Served {
    /// `trellis serve --listen 127.0.0.1:0 --agent DIR/trellis.toml --state-dir DIR/state` (and
    /// `--api-keys DIR/keys` when `keys` is given, one `USER KEY` a line) against `model`.
    pub(crate) fn start(dir: &Path, model: &MockServer, keys: Option<&str>) -> Self {
        Self::with_agent_file(dir, model, keys, AGENT_FILE)
    }

    /// [`Served::start`] with this agent file.
    pub(crate) fn with_agent_file(
        dir: &Path,
        model: &MockServer,
        keys: Option<&str>,
        agent_file: &str,
    ) -> Self {
        Self::spawn(Self::command(dir, keys, agent_file), dir, model)
    }

    /// The command [`Served::with_agent_file`] starts, for a test that changes it first (its
    /// environment, say) and starts it with [`Served::spawn`].
    pub(crate) fn command(dir: &Path, keys: Option<&str>, agent_file: &str) -> Command {
        std::fs::write(dir.join("trellis.toml"), agent_file).unwrap();
        let mut command = trellis();
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--agent"])
            .arg(dir.join("trellis.toml"))
            .arg("--state-dir")
            .arg(dir.join("state"));
        if let Some(keys) = keys {
            std::fs::write(dir.join("keys"), keys).unwrap();
            command.arg("--api-keys").arg(dir.join("keys"));
        }
        command
    }

    /// Start `command` (a `trellis serve`) against the mock Anthropic `model` and wait for its
    /// address.
    pub(crate) fn spawn(mut command: Command, dir: &Path, model: &MockServer) -> Self {
        command
            .env("ANTHROPIC_API_KEY", "test-key")
            .env("ANTHROPIC_BASE_URL", model.uri());
        Self::spawn_as_is(command, dir)
    }

    /// Start `command` (a `trellis serve` whose model the caller set up) in `dir` and wait for its
    /// address.
    pub(crate) fn spawn_as_is(mut command: Command, dir: &Path) -> Self {
        // The tests' own database is for the tests that ask for it (`--database`).
        command.env_remove("TRELLIS_DATABASE_URL");
        let mut child = command
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let pipe = child.stderr.take().unwrap();
        let log = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("trellis serve: listening on ") {
                    let _ = tx.send(url.to_owned());
                }
                log.lock().unwrap().push_str(&(line + "\n"));
            }
        });
        let Ok(url) = rx.recv_timeout(Duration::from_secs(60)) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("trellis serve did not start:\n{}", stderr.lock().unwrap());
        };
        Self { child, url, stderr }
    }

    /// What the server wrote to stderr so far.
    pub(crate) fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kill the process (SIGKILL) and wait for it.
    pub(crate) fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run `script` with `python` (the interpreter with `langgraph-sdk`) and `URL` set to the server;
/// assert it exits 0, showing its output and the server's log
/// when not. Returns its stdout.
pub(crate) async fn python(python: &str, served: &Served, script: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file: PathBuf = dir.path().join("script.py");
    std::fs::write(&file, script).unwrap();
    let mut command = Command::new(python);
    command
        .arg(&file)
        .env("URL", &served.url)
        .env_remove("LANGGRAPH_API_KEY")
        .env_remove("LANGSMITH_API_KEY")
        .env_remove("LANGCHAIN_API_KEY");
    let output = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::task::spawn_blocking(move || command.output().unwrap()),
    )
    .await
    .expect("the script finished within 120 s")
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "script failed\n--- stdout\n{stdout}\n--- stderr\n{}\n--- server\n{}",
        String::from_utf8_lossy(&output.stderr),
        served.stderr()
    );
    stdout
}

/// A plain HTTP client for the tests (reqwest is built without a crypto provider: ring is
/// installed first, as the crate's own clients do).
pub(crate) fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// The JSON body of the answer to `request`.
pub(crate) async fn json_of(request: reqwest::RequestBuilder) -> serde_json::Value {
    request.send().await.unwrap().json().await.unwrap()
}

/// Run `command` (a Node script printing one JSON report on stdout) for up to 180 s; assert it
/// exits 0, showing its stderr and `served`'s log when not; its report. `what` names it in
/// failures.
pub(crate) async fn node_report(mut command: Command, what: &str, served: &Served) -> serde_json::Value {
    let output = tokio::time::timeout(
        Duration::from_secs(180),
        tokio::task::spawn_blocking(move || command.output().expect("node runs")),
    )
    .await
    .unwrap_or_else(|_| panic!("{what} finished within 180 s"))
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{what} failed: {stderr}\n--- server\n{}",
        served.stderr()
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{what} printed no report ({e}): {stderr}"))
}
