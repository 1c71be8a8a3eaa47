//! `trellis run --sandbox …` end to end through the binary, against a mock Anthropic endpoint:
//! `bwrap` runs a skill's script under bubblewrap and saves what it wrote in the thread's files,
//! `none` offers no `execute`, `unsandboxed` says loudly that nothing is isolated, and
//! `--allow-command` refuses what it does not list.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};

use super::harness::{TrellisRun, calls_then_done, result_text, trellis};

/// What one `trellis run` did: its output, the tools the first request offered, and the result the
/// model got for its one call.
struct Ran {
    output: Output,
    tools: Vec<String>,
    result: Value,
}

/// A skills directory with one skill, `hello`, whose script writes a greeting file.
fn skills_dir(root: &Path) -> std::path::PathBuf {
    let skill = root.join("team/hello");
    std::fs::create_dir_all(skill.join("scripts")).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: hello\ndescription: Greets. Use to test scripts.\n---\nRun `python3 /skills/team/hello/scripts/hi.py NAME`.\n",
    )
    .unwrap();
    std::fs::write(
        skill.join("scripts/hi.py"),
        "import os, sys\nos.makedirs('/outputs', exist_ok=True)\nopen('/outputs/hi.txt', 'w').write('hi ' + sys.argv[1] + '\\n')\nprint('greeted', sys.argv[1])\n",
    )
    .unwrap();
    root.join("team")
}

async fn run_with(args: &[&str], call: Value, state: &Path) -> Ran {
    run_with_env(args, &[], call, state).await
}

async fn run_with_env(args: &[&str], env: &[(&str, &str)], call: Value, state: &Path) -> Ran {
    let server = calls_then_done(vec![
        json!({"type": "tool_use", "id": "toolu_x1", "name": "execute", "input": call}),
    ])
    .await;
    let mut run = TrellisRun::new()
        .approve_all()
        .args(["--thread", "t1"])
        .state_dir(state)
        .args(args)
        .arg("Greet Ada")
        .anthropic(&server);
    for (key, value) in env {
        run = run.env(key, value);
    }
    let output = run.success().await;
    let requests = server.received_requests().await.unwrap();
    let first: Value = serde_json::from_slice(&requests[0].body).unwrap();
    let tools = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap_or("").to_owned())
        .collect();
    let result = requests
        .get(1)
        .map(|r| {
            let body: Value = serde_json::from_slice(&r.body).unwrap();
            let last = body["messages"].as_array().unwrap().last().unwrap().clone();
            last["content"]
                .as_array()
                .unwrap()
                .iter()
                .find(|b| b["type"] == "tool_result")
                .cloned()
                .unwrap()
        })
        .unwrap_or(Value::Null);
    Ran {
        output,
        tools,
        result,
    }
}

pub(crate) fn bwrap_or_skip(test: &str) -> bool {
    match trellis_agent::cli::sandbox::select(Some(trellis_agent::cli::sandbox::SandboxChoice::Bwrap)) {
        Ok(_) => true,
        Err(e) if std::env::var("TRELLIS_SANDBOX").as_deref() == Ok("required") => {
            panic!("{test}: bubblewrap unavailable but TRELLIS_SANDBOX=required: {e}")
        }
        Err(e) => {
            eprintln!("skipped: {test} ({e})");
            false
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bwrap_runs_a_skill_script_and_keeps_its_output_with_the_thread() {
    if !bwrap_or_skip("trellis run --sandbox bwrap") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let skills = skills_dir(dir.path());
    let state = dir.path().join("state");
    let ran = run_with(
        &["--sandbox", "bwrap", "--skills", skills.to_str().unwrap()],
        json!({"command": "python3 /skills/team/hello/scripts/hi.py Ada"}),
        &state,
    )
    .await;
    assert!(ran.tools.contains(&"execute".to_owned()), "{:?}", ran.tools);
    let text = result_text(&ran.result);
    assert!(
        text.contains("greeted Ada") && text.contains("exit code 0"),
        "{text}"
    );
    assert!(text.contains("saved: /outputs/hi.txt (created)"), "{text}");
    // Kept with the thread in the state directory, where `trellis threads show` finds it.
    let show = trellis()
        .args(["threads", "--state-dir"])
        .arg(&state)
        .args(["show", "t1"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&show.stdout);
    assert!(shown.contains("/outputs/hi.txt"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn none_offers_no_execute_and_unsandboxed_warns() {
    let dir = tempfile::tempdir().unwrap();
    let none = run_with(
        &["--sandbox", "none"],
        json!({"command": "true"}),
        &dir.path().join("a"),
    )
    .await;
    assert!(!none.tools.contains(&"execute".to_owned()), "{:?}", none.tools);
    // The model asked for a tool it was not offered: the answer says so.
    assert_eq!(none.result["is_error"], true, "{}", none.result);

    let host = run_with(
        &["--sandbox", "unsandboxed"],
        json!({"command": "echo on-host"}),
        &dir.path().join("b"),
    )
    .await;
    assert!(host.tools.contains(&"execute".to_owned()));
    assert!(result_text(&host.result).contains("on-host"));
    let stderr = String::from_utf8_lossy(&host.output.stderr);
    assert!(stderr.contains("nothing is isolated"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_command_refuses_what_it_does_not_list() {
    let dir = tempfile::tempdir().unwrap();
    let ran = run_with(
        &["--sandbox", "unsandboxed", "--allow-command", "ls"],
        json!({"command": "echo planted > planted.txt"}),
        &dir.path().join("s"),
    )
    .await;
    assert_eq!(ran.result["is_error"], true, "{}", ran.result);
    assert!(
        result_text(&ran.result).contains("command refused"),
        "{}",
        ran.result
    );
    let first_tools = ran.tools;
    assert!(first_tools.contains(&"execute".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_bubblewrap_there_is_no_execute_and_never_a_silent_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let missing = [("TRELLIS_BWRAP", "/nonexistent/bwrap")];
    // No --sandbox: the run goes on without `execute`, and says why.
    let ran = run_with_env(
        &[],
        &missing,
        json!({"command": "echo ran"}),
        &dir.path().join("a"),
    )
    .await;
    assert!(!ran.tools.contains(&"execute".to_owned()), "{:?}", ran.tools);
    assert_eq!(ran.result["is_error"], true, "{}", ran.result);
    let stderr = String::from_utf8_lossy(&ran.output.stderr);
    assert!(
        stderr.contains("bubblewrap is unavailable") && stderr.contains("apt-get install bubblewrap"),
        "{stderr}"
    );
    // --sandbox bwrap: the run fails before any model call.
    let out = trellis()
        .args([
            "run",
            "--model",
            "anthropic:claude-sonnet-4-5",
            "--sandbox",
            "bwrap",
            "--state-dir",
        ])
        .arg(dir.path().join("b"))
        .arg("task")
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .env("TRELLIS_BWRAP", "/nonexistent/bwrap")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--sandbox bwrap") && stderr.contains("/nonexistent/bwrap"),
        "{stderr}"
    );
}

/// `--allow-domain` end to end: the `trellis` program is its own bridge inside the sandbox, the
/// command reaches an allowed name on the host's loopback through the proxy and is refused for
/// another, and the refusal names the domain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_domain_reaches_only_the_listed_domain() {
    if !bwrap_or_skip("trellis run --allow-domain") {
        return;
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\nConnection: close\r\n\r\nallowed reply")
                .await;
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let ran = run_with(
        &[
            "--sandbox",
            "bwrap",
            "--allow-domain",
            "localhost",
            "--allow-domain",
            "127.0.0.1",
        ],
        json!({"command": format!(
            "curl -sS http://localhost:{port}/; echo; curl -sS http://other.invalid/"
        )}),
        &dir.path().join("s"),
    )
    .await;
    let text = result_text(&ran.result);
    assert!(text.contains("allowed reply"), "{text}");
    assert!(
        text.contains("other.invalid is not an allowed domain (allowed: localhost, 127.0.0.1)"),
        "{text}"
    );
    // The host's network and --allow-domain together: an error before any model call, under
    // the flag's name and under its former one.
    for (flag, state) in [("--unsafe-host-network", "t"), ("--sandbox-network", "u")] {
        let out = trellis()
            .args([
                "run",
                "--model",
                "anthropic:claude-sonnet-4-5",
                "--sandbox",
                "bwrap",
                flag,
            ])
            .args(["--allow-domain", "example.com", "--state-dir"])
            .arg(dir.path().join(state))
            .arg("hi")
            .env("ANTHROPIC_API_KEY", "test-key")
            .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{flag}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(
                "--unsafe-host-network shares the host's whole network, so --allow-domain would limit nothing"
            ),
            "{flag}: {stderr}"
        );
    }
}
