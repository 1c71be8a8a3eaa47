//! Approvals through the `trellis` binary: without a terminal a run stops before `write_file`
//! with exit status 3 and prints a `trellis resume` command that works from another process; on a
//! pseudo-terminal it asks, and the answers (approve, reject with a reason) reach the model.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
use serde_json::{Value, json};
use wiremock::MockServer;

use super::harness::{TrellisRun, calls_then_done, result_text, trellis};

/// A model that writes files with `calls` (one step), then answers "done".
async fn model_writing(calls: &[(&str, &str)]) -> MockServer {
    let uses: Vec<Value> = calls
        .iter()
        .map(|(id, path)| {
            json!({"type": "tool_use", "id": id, "name": "write_file",
                   "input": {"file_path": path, "content": "hello\n"}})
        })
        .collect();
    calls_then_done(uses).await
}

fn run_command(state: &Path, server: &MockServer) -> Command {
    TrellisRun::new()
        .args(["--sandbox", "none", "--thread", "t1"])
        .state_dir(state)
        .arg("Write the notes")
        .anthropic(server)
        .command()
}

async fn output_of(mut command: Command) -> Output {
    command.stdin(Stdio::null());
    tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap()
}

/// The `tool_result` blocks of the model's last request.
pub(crate) async fn last_results(server: &MockServer) -> Vec<Value> {
    let requests = server.received_requests().await.unwrap();
    let body: Value = serde_json::from_slice(&requests.last().unwrap().body).unwrap();
    let last = body["messages"].as_array().unwrap().last().unwrap().clone();
    last["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "tool_result")
        .cloned()
        .collect()
}

/// `trellis threads show t1`'s stdout.
fn show(state: &Path) -> String {
    let out = trellis()
        .args(["threads", "--state-dir"])
        .arg(state)
        .args(["show", "t1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_terminal_the_run_stops_with_status_3_and_the_printed_resume_works() {
    let server = model_writing(&[("toolu_a", "/notes/a.md")]).await;
    let state = tempfile::tempdir().unwrap();
    let out = output_of(run_command(state.path(), &server)).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("Approval needed (1 of 1): write_file (call toolu_a)"),
        "{stderr}"
    );
    assert!(stderr.contains("\"file_path\": \"/notes/a.md\""), "{stderr}");
    assert_eq!(server.received_requests().await.unwrap().len(), 1);
    assert!(
        show(state.path()).contains("files: 0"),
        "nothing written while waiting"
    );

    // The printed command, run as printed (with the binary's path for `trellis`).
    let printed = stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("trellis resume "))
        .expect("a resume command");
    let args = shlex::split(printed).unwrap();
    assert_eq!(args[0], "t1");

    // Still no decision without a terminal: it stops again, changing nothing.
    let mut again = trellis();
    again
        .arg("resume")
        .args(&args)
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("ANTHROPIC_BASE_URL", server.uri());
    let out = output_of(again).await;
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(server.received_requests().await.unwrap().len(), 1);

    let mut resume = trellis();
    resume
        .arg("resume")
        .args(&args)
        .args(["--approve", "write_file"])
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("ANTHROPIC_BASE_URL", server.uri());
    let out = output_of(resume).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "done");
    let results = last_results(&server).await;
    assert_eq!(results.len(), 1);
    assert_ne!(results[0]["is_error"], true, "{}", results[0]);
    assert!(
        show(state.path()).contains("/notes/a.md"),
        "written after approval"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_from_a_file_reject_and_nothing_is_written() {
    let server = model_writing(&[("toolu_a", "/notes/a.md")]).await;
    let state = tempfile::tempdir().unwrap();
    let out = output_of(run_command(state.path(), &server)).await;
    assert_eq!(out.status.code(), Some(3));
    let file = state.path().join("decisions.json");
    std::fs::write(
        &file,
        json!({"toolu_a": {"decision": "reject", "message": "wrong folder"}}).to_string(),
    )
    .unwrap();
    let mut resume = trellis();
    resume
        .args(["resume", "t1", "--state-dir"])
        .arg(state.path())
        .arg("--decisions")
        .arg(&file)
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("ANTHROPIC_BASE_URL", server.uri());
    let out = output_of(resume).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let results = last_results(&server).await;
    assert_eq!(results[0]["is_error"], true);
    assert!(
        result_text(&results[0]).contains("wrong folder"),
        "{}",
        results[0]
    );
    assert!(show(state.path()).contains("files: 0"));

    // The thread waits for nothing now: resume says so.
    let mut resume = trellis();
    resume
        .args(["resume", "t1", "--state-dir"])
        .arg(state.path())
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("ANTHROPIC_BASE_URL", server.uri());
    let out = output_of(resume).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("waits for no decisions"));
}

/// A pseudo-terminal session: everything the process writes, and a way to type.
pub(crate) struct Pty {
    master: std::fs::File,
    seen: mpsc::Receiver<Vec<u8>>,
    pub(crate) screen: String,
}

impl Pty {
    /// Start `command` with stdin, stdout and stderr on a new pseudo-terminal.
    pub(crate) fn spawn(mut command: Command) -> (Self, std::process::Child) {
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).unwrap();
        grantpt(&master).unwrap();
        unlockpt(&master).unwrap();
        let name = ptsname(&master, Vec::new()).unwrap();
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(name.to_str().unwrap())
            .unwrap();
        command
            .stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave);
        let child = command.spawn().unwrap();
        drop(command);
        let master = std::fs::File::from(master);
        let mut reader = master.try_clone().unwrap();
        let (tx, seen) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // Ends with EIO once the child closed the terminal.
            while let Ok(n @ 1..) = reader.read(&mut buf) {
                if tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        (
            Self {
                master,
                seen,
                screen: String::new(),
            },
            child,
        )
    }

    /// Wait until the screen shows `text` `count` times in all.
    pub(crate) fn wait_for(&mut self, text: &str, count: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.screen.matches(text).count() < count {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.seen.recv_timeout(left) {
                Ok(bytes) => self.screen.push_str(&String::from_utf8_lossy(&bytes)),
                Err(_) => panic!("never saw {text:?} ×{count}; the screen:\n{}", self.screen),
            }
        }
    }

    pub(crate) fn type_line(&mut self, line: &str) {
        self.type_raw(format!("{line}\n").as_bytes());
    }

    /// Type bytes as they are (control keys such as Ctrl-C, `\x03`, included).
    pub(crate) fn type_raw(&mut self, bytes: &[u8]) {
        self.master.write_all(bytes).unwrap();
        self.master.flush().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_terminal_each_call_is_asked_about_and_the_answers_reach_the_model() {
    let server = model_writing(&[("toolu_a", "/notes/a.md"), ("toolu_b", "/notes/b.md")]).await;
    let state = tempfile::tempdir().unwrap();
    let command = run_command(state.path(), &server);
    let screen = tokio::task::spawn_blocking(move || {
        let (mut pty, mut child) = Pty::spawn(command);
        pty.wait_for("Run it? [y]es / [n]o / [e]dit / [r]espond: ", 1);
        assert!(
            pty.screen.contains("Approval needed (1 of 2): write_file"),
            "{}",
            pty.screen
        );
        pty.type_line("y");
        pty.wait_for("Run it? [y]es / [n]o / [e]dit / [r]espond: ", 2);
        assert!(pty.screen.contains("Approval needed (2 of 2)"), "{}", pty.screen);
        pty.type_line("n");
        pty.wait_for("Reason for the model (optional): ", 1);
        pty.type_line("not b, only a");
        let status = child.wait().unwrap();
        pty.wait_for("done", 1);
        assert!(status.success(), "{}", pty.screen);
        pty.screen
    })
    .await
    .unwrap();
    assert!(
        !screen.contains("trellis resume"),
        "it was decided on the terminal: {screen}"
    );
    let results = last_results(&server).await;
    assert_eq!(results.len(), 2);
    assert_ne!(results[0]["is_error"], true, "{}", results[0]);
    assert_eq!(results[1]["is_error"], true);
    assert!(
        result_text(&results[1]).contains("not b, only a"),
        "{}",
        results[1]
    );
    let files = show(state.path());
    assert!(
        files.contains("/notes/a.md") && !files.contains("/notes/b.md"),
        "{files}"
    );
}

/// A run whose first call waits for approval and is approved in the same process counts its model
/// calls across the resume: `step 1`, then `step 2`, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_call_run_counts_its_steps() {
    let server = model_writing(&[("toolu_1", "/notes.md")]).await;
    let state = tempfile::tempdir().unwrap();
    let mut command = run_command(state.path(), &server);
    command.args(["--approve", "all"]);
    let out = output_of(command).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        server.received_requests().await.unwrap().len(),
        2,
        "two model calls"
    );
    assert_eq!(stderr.matches("step 1:").count(), 1, "{stderr}");
    assert_eq!(stderr.matches("step 2:").count(), 1, "{stderr}");
}
