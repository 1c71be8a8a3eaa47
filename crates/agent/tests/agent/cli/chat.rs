//! `trellis chat` end to end: the binary on a pseudo-terminal (its controlling terminal, so
//! Ctrl-C is a real SIGINT), against a scripted OpenAI-compatible Chat Completions server on
//! loopback that streams its answers. A pinned skill's body reaches the next request once and only
//! in its thread; `/reload` shows a new skill folder in the next request's catalog; an unknown
//! `/word` calls no model; Ctrl-C during a streamed answer cancels the step and the session and
//! the thread go on; the approval prompt takes `y`, `n` with a reason and `e`; and `trellis run
//! "/skill task"` pins too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::approvals::Pty;
use super::harness::trellis;

/// The chat's prompt as the line editor draws it (after clearing the line).
const PROMPT: &str = "\x1b[K> ";

/// One scripted answer.
#[derive(Debug, Clone)]
enum Reply {
    /// Stream this text (in two deltas) and stop.
    Text(&'static str),
    /// Call one tool: (call id, tool, arguments).
    Call(&'static str, &'static str, Value),
    /// Stream this text, then never finish (until the client goes away).
    Hang(&'static str),
}

/// A Chat Completions server on loopback answering each request with the next [`Reply`] (then
/// "ok N" for the N-th request), keeping every request body.
#[derive(Clone)]
struct Scripted {
    url: String,
    bodies: Arc<Mutex<Vec<Value>>>,
}

impl Scripted {
    async fn start(script: Vec<Reply>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(VecDeque::from(script)));
        let seen = bodies.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let (seen, script) = (seen.clone(), script.clone());
                tokio::spawn(async move { answer(socket, seen, script).await });
            }
        });
        Self { url, bodies }
    }

    fn bodies(&self) -> Vec<Value> {
        self.bodies.lock().unwrap().clone()
    }

    /// The model string of `trellis --model`.
    fn model(&self) -> String {
        format!("openai-compatible:test-model@{}", self.url)
    }
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    let event = json!({"id": "c1", "object": "chat.completion.chunk", "model": "test-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {event}\n\n")
}

async fn answer(mut socket: TcpStream, seen: Arc<Mutex<Vec<Value>>>, script: Arc<Mutex<VecDeque<Reply>>>) {
    // The request: headers, then content-length bytes of JSON.
    let mut data = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let body = loop {
        let Ok(n @ 1..) = socket.read(&mut buf).await else {
            return;
        };
        data.extend_from_slice(&buf[..n]);
        let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&data[..end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().unwrap());
        if data.len() >= end + 4 + length {
            break data[end + 4..end + 4 + length].to_vec();
        }
    };
    let n = {
        let mut bodies = seen.lock().unwrap();
        bodies.push(serde_json::from_slice(&body).unwrap());
        bodies.len()
    };
    let reply = script.lock().unwrap().pop_front();
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
    let _ = socket.write_all(head.as_bytes()).await;
    let send = |text: String| format!("{:x}\r\n{text}\r\n", text.len());
    let events = match reply {
        Some(Reply::Hang(text)) => {
            let _ = socket
                .write_all(send(chunk(json!({"role": "assistant", "content": text}), None)).as_bytes())
                .await;
            let _ = socket.flush().await;
            // Until the client hangs up.
            let _ = socket.read(&mut buf).await;
            return;
        }
        Some(Reply::Call(id, name, args)) => vec![chunk(
            json!({"role": "assistant", "tool_calls": [{"index": 0, "id": id, "type": "function",
                "function": {"name": name, "arguments": args.to_string()}}]}),
            Some("tool_calls"),
        )],
        Some(Reply::Text(text)) => {
            let (a, b) = text.split_at(text.len() / 2);
            vec![
                chunk(json!({"role": "assistant", "content": a}), None),
                chunk(json!({"content": b}), Some("stop")),
            ]
        }
        None => vec![chunk(
            json!({"role": "assistant", "content": format!("ok {n}")}),
            Some("stop"),
        )],
    };
    for event in events.into_iter().chain(["data: [DONE]\n\n".to_owned()]) {
        let _ = socket.write_all(send(event).as_bytes()).await;
    }
    let _ = socket.write_all(b"0\r\n\r\n").await;
    let _ = socket.flush().await;
}

fn write_skill(dir: &Path, name: &str, description: &str, body: &str) {
    let folder = dir.join(name);
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(
        folder.join("SKILL.md"),
        format!("---\nname: {name}\ndescription: {description}\n---\n\n{body}\n"),
    )
    .unwrap();
}

/// `trellis chat` on thread `thread`, as the session leader of its terminal (`setsid -c`), so the
/// terminal's Ctrl-C reaches it as SIGINT.
fn chat_command(server: &Scripted, state: &Path, skills: &Path, thread: &str) -> Command {
    let mut command = Command::new("setsid");
    command
        .arg("-c")
        .arg(env!("CARGO_BIN_EXE_trellis"))
        .args([
            "chat",
            "--model",
            &server.model(),
            "--sandbox",
            "none",
            "--thread",
            thread,
        ])
        .arg("--skills")
        .arg(skills)
        .arg("--state-dir")
        .arg(state)
        .env("OPENAI_API_KEY", "test-key")
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "error");
    command
}

/// Type `line` once the `n`-th prompt is on the screen (text typed before the line editor reads
/// may be lost).
fn say(pty: &mut Pty, n: usize, line: &str) {
    pty.wait_for(PROMPT, n);
    pty.type_line(line);
}

/// How often `needle` occurs in a request body's messages.
fn count_in(body: &Value, needle: &str) -> usize {
    body["messages"].to_string().matches(needle).count()
}

/// Wait until the server has `n` requests.
fn wait_requests(server: &Scripted, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.bodies().len() < n {
        assert!(Instant::now() < deadline, "never got {n} requests");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A temporary directory with `skills/meeting-prep` (its body marked PREP-BODY-7731), and the
/// `skills` and `state` paths in it.
fn with_meeting_prep() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (skills, state) = (dir.path().join("skills"), dir.path().join("state"));
    write_skill(
        &skills,
        "meeting-prep",
        "Prepare a customer meeting.",
        "PREP-BODY-7731: read the CRM first.",
    );
    (dir, skills, state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pins_reach_the_next_request_once_reload_shows_new_skills_and_unknown_words_call_no_model() {
    let server = Scripted::start(Vec::new()).await;
    let (_dir, skills, state) = with_meeting_prep();
    let command = chat_command(&server, &state, &skills, "t1");
    let probe = server.clone();
    let skills_dir = skills.clone();
    let screen = tokio::task::spawn_blocking(move || {
        let (mut pty, mut child) = Pty::spawn(command);
        say(&mut pty, 1, "/meeting-prep");
        pty.wait_for("pinned meeting-prep", 1);
        assert!(probe.bodies().is_empty(), "a pin alone calls no model");
        say(&mut pty, 2, "Acme tomorrow");
        pty.wait_for("ok 1", 1);
        say(&mut pty, 3, "and then?");
        pty.wait_for("ok 2", 1);

        // An unknown word is a message, not a model call.
        say(&mut pty, 4, "/meeting-pre Acme");
        pty.wait_for("is not a command or a skill", 1);
        assert!(
            pty.screen.contains("did you mean /meeting-prep (skill)"),
            "{}",
            pty.screen
        );

        write_skill(
            &skills_dir,
            "expense-report",
            "EXPENSE-DESC-5521 file expenses.",
            "Expense body.",
        );
        say(&mut pty, 5, "/reload");
        pty.wait_for("new: expense-report", 1);
        say(&mut pty, 6, "what can you do now?");
        pty.wait_for("ok 3", 1);
        say(&mut pty, 7, "/skills expenses");
        pty.wait_for("/expense-report  EXPENSE-DESC-5521", 1);
        say(&mut pty, 8, "/quit");
        let status = child.wait().unwrap();
        pty.wait_for("thread t1 kept: trellis chat --thread t1", 1);
        assert!(status.success(), "{}", pty.screen);
        pty.screen
    })
    .await
    .unwrap();
    assert!(!screen.contains("panicked"), "{screen}");

    let bodies = server.bodies();
    assert_eq!(
        bodies.len(),
        3,
        "the unknown word and the commands called no model"
    );
    assert_eq!(
        count_in(&bodies[0], "PREP-BODY-7731"),
        1,
        "pinned once: {}",
        bodies[0]
    );
    assert_eq!(
        count_in(&bodies[1], "PREP-BODY-7731"),
        1,
        "kept in history, not added again"
    );
    assert!(bodies[0]["messages"].to_string().contains("Acme tomorrow"));
    assert!(
        !bodies[1]["messages"].to_string().contains("EXPENSE-DESC-5521"),
        "not before /reload"
    );
    assert!(
        bodies[2]["messages"].to_string().contains("EXPENSE-DESC-5521"),
        "the catalog after /reload lists the new skill: {}",
        bodies[2]["messages"]
    );
    assert!(!bodies[2]["messages"].to_string().contains("/meeting-pre Acme"));

    // The pin was this thread's: another thread's request has no skill body.
    let out = tokio::task::spawn_blocking(move || {
        trellis()
            .args([
                "run",
                "--model",
                &server.model(),
                "--sandbox",
                "none",
                "--thread",
                "t2",
            ])
            .arg("--skills")
            .arg(&skills)
            .arg("--state-dir")
            .arg(&state)
            .arg("hello")
            .env("OPENAI_API_KEY", "test-key")
            .output()
            .unwrap();
        server.bodies()
    })
    .await
    .unwrap();
    assert_eq!(out.len(), 4);
    assert_eq!(count_in(&out[3], "PREP-BODY-7731"), 0, "{}", out[3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_during_a_streamed_answer_cancels_the_step_and_the_thread_goes_on() {
    let server = Scripted::start(vec![Reply::Hang("Once upon a ti"), Reply::Text("recovered fine")]).await;
    let dir = tempfile::tempdir().unwrap();
    let (skills, state) = (dir.path().join("skills"), dir.path().join("state"));
    std::fs::create_dir_all(&skills).unwrap();
    let first = chat_command(&server, &state, &skills, "t1");
    let again = chat_command(&server, &state, &skills, "t1");
    let probe = server.clone();
    let screens = tokio::task::spawn_blocking(move || {
        let (mut pty, mut child) = Pty::spawn(first);
        say(&mut pty, 1, "tell me a long story");
        pty.wait_for("Once upon a ti", 1);
        pty.type_raw(b"\x03");
        pty.wait_for("cancelled: the thread keeps its last saved step", 1);
        say(&mut pty, 2, "are you there?");
        pty.wait_for("recovered fine", 1);
        wait_requests(&probe, 2);
        // The turn is over when the prompt is back (the third one).
        pty.wait_for(PROMPT, 3);
        // Ctrl-C at the prompt clears the line and keeps the session.
        pty.type_raw(b"half a line\x03");
        pty.wait_for("the line is cleared", 1);
        pty.type_line("/quit");
        assert!(child.wait().unwrap().success(), "{}", pty.screen);
        let first_screen = pty.screen.clone();

        // Coming back shows the thread and continues it.
        let (mut pty, mut child) = Pty::spawn(again);
        // Each line is typed when the prompt is back.
        say(&mut pty, 1, "/memory");
        pty.wait_for("no memory files", 1);
        say(&mut pty, 2, "/thread");
        pty.wait_for("thread t1: 3 messages", 1);
        say(&mut pty, 3, "/fork");
        pty.wait_for("thread t1 stays as it was", 1);
        say(&mut pty, 4, "in the fork");
        pty.wait_for("ok 3", 1);
        say(&mut pty, 5, "/quit");
        assert!(child.wait().unwrap().success(), "{}", pty.screen);
        pty.wait_for(" kept: trellis chat --thread ", 2);
        (first_screen, pty.screen)
    })
    .await
    .unwrap();
    assert!(!screens.0.contains("panicked"), "{}", screens.0);
    let bodies = server.bodies();
    assert_eq!(bodies.len(), 3, "two turns, then one in the fork");
    let roles: Vec<(String, String)> = bodies[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| (m["role"].as_str().unwrap().to_owned(), m["content"].to_string()))
        .collect();
    assert_eq!(
        roles.len(),
        2,
        "the cancelled reply left nothing behind: {roles:?}"
    );
    assert!(
        roles[0].1.contains("tell me a long story") && roles[1].1.contains("are you there?"),
        "{roles:?}"
    );
    assert!(
        !bodies[1].to_string().contains("Once upon a ti"),
        "the partial reply is dropped"
    );
    // The fork went on with t1's history in a thread of its own; t1 did not change.
    let fork_text = bodies[2]["messages"].to_string();
    assert!(
        fork_text.contains("recovered fine") && fork_text.contains("in the fork"),
        "{fork_text}"
    );
    let forked = screens
        .1
        .split("now on thread ")
        .nth(1)
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .trim()
        .to_owned();
    assert_ne!(forked, "t1");
    assert!(
        screens.1.contains(&format!("thread {forked} kept")),
        "{}",
        screens.1
    );
    let shown = trellis()
        .args(["threads", "--state-dir"])
        .arg(&state)
        .args(["show", "t1"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&shown.stdout).starts_with("thread t1: 3 messages"));
    let resumed = &screens.1;
    assert!(resumed.contains("thread t1: 3 messages so far"), "{resumed}");
    assert!(resumed.contains("user: are you there?"), "{resumed}");
    assert!(resumed.contains("assistant: recovered fine"), "{resumed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approval_prompt_takes_yes_no_with_a_reason_and_edit() {
    let write = |path: &str| json!({"file_path": path, "content": "hello\n"});
    let server = Scripted::start(vec![
        Reply::Call("call_a", "write_file", write("/notes/a.md")),
        Reply::Text("wrote a"),
        Reply::Call("call_b", "write_file", write("/notes/b.md")),
        Reply::Text("skipped b"),
        Reply::Call("call_c", "write_file", write("/notes/c.md")),
        Reply::Text("wrote the edit"),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (skills, state) = (dir.path().join("skills"), dir.path().join("state"));
    std::fs::create_dir_all(&skills).unwrap();
    let command = chat_command(&server, &state, &skills, "t1");
    let question = "Run it? [y]es / [n]o / [e]dit / [r]espond: ";
    tokio::task::spawn_blocking(move || {
        let (mut pty, mut child) = Pty::spawn(command);
        say(&mut pty, 1, "write a");
        pty.wait_for(question, 1);
        pty.type_line("y");
        pty.wait_for("wrote a", 1);
        say(&mut pty, 2, "write b");
        pty.wait_for(question, 2);
        pty.type_line("n");
        pty.wait_for("Reason for the model (optional): ", 1);
        pty.type_line("not b, never b");
        pty.wait_for("skipped b", 1);
        say(&mut pty, 3, "write c");
        pty.wait_for(question, 3);
        pty.type_line("e");
        // The arguments are there to edit: Ctrl-U clears them, then the new ones.
        pty.wait_for(r#"/notes/c.md"}"#, 1);
        pty.type_raw(b"\x15");
        pty.type_line(r#"{"file_path": "/notes/d.md", "content": "edited\n"}"#);
        pty.wait_for("wrote the edit", 1);
        say(&mut pty, 4, "/quit");
        assert!(child.wait().unwrap().success(), "{}", pty.screen);
    })
    .await
    .unwrap();
    let bodies = server.bodies();
    assert_eq!(bodies.len(), 6);
    let last_tool = |body: &Value| {
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .find(|m| m["role"] == "tool")
            .cloned()
            .unwrap()
    };
    assert!(
        !last_tool(&bodies[1]).to_string().contains("reject"),
        "{}",
        last_tool(&bodies[1])
    );
    assert!(
        last_tool(&bodies[3]).to_string().contains("not b, never b"),
        "{}",
        last_tool(&bodies[3])
    );
    let state_dir = dir.path().join("state");
    let out = trellis()
        .args(["threads", "--state-dir"])
        .arg(&state_dir)
        .args(["show", "t1"])
        .output()
        .unwrap();
    let shown = String::from_utf8(out.stdout).unwrap();
    assert!(
        shown.contains("/notes/a.md") && shown.contains("/notes/d.md"),
        "{shown}"
    );
    assert!(
        !shown.contains("/notes/b.md") && !shown.contains("/notes/c.md"),
        "{shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_pins_a_leading_skill_and_refuses_an_unknown_one() {
    let server = Scripted::start(Vec::new()).await;
    let (_dir, skills, state) = with_meeting_prep();
    let run = |task: &str| {
        let mut command = trellis();
        command
            .args(["run", "--model", &server.model(), "--sandbox", "none", "--skills"])
            .arg(&skills)
            .arg("--state-dir")
            .arg(&state)
            .arg(task)
            .env("OPENAI_API_KEY", "test-key");
        command
    };
    let (pinned, unknown, escaped) = (
        run("/meeting-prep Acme tomorrow"),
        run("/meting-prep Acme"),
        run("//meeting-prep is a word"),
    );
    let outs =
        tokio::task::spawn_blocking(move || [pinned, unknown, escaped].map(|mut c| c.output().unwrap()))
            .await
            .unwrap();
    assert!(
        outs[0].status.success(),
        "{}",
        String::from_utf8_lossy(&outs[0].stderr)
    );
    let err = String::from_utf8_lossy(&outs[1].stderr);
    assert_eq!(outs[1].status.code(), Some(1), "{err}");
    assert!(
        err.contains("no skill named \"meting-prep\"; did you mean meeting-prep?"),
        "{err}"
    );
    assert!(outs[2].status.success());
    let bodies = server.bodies();
    assert_eq!(bodies.len(), 2, "the unknown skill called no model");
    assert_eq!(count_in(&bodies[0], "PREP-BODY-7731"), 1);
    let users = |body: &Value| -> Vec<String> {
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "user")
            .map(|m| m["content"].to_string())
            .collect()
    };
    assert!(
        users(&bodies[0])
            .iter()
            .any(|u| u.contains("Acme tomorrow") && !u.contains("/meeting-prep Acme"))
    );
    assert_eq!(count_in(&bodies[1], "PREP-BODY-7731"), 0);
    assert!(
        users(&bodies[1])
            .iter()
            .any(|u| u.contains("/meeting-prep is a word"))
    );
}
