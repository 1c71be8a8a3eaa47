//! The web page `trellis serve` serves at `/`, in a real browser: Debian's Chromium, headless,
//! driven by playwright-core from `ui_driver.mjs` beside this file (`TRELLIS_UI_NODE_MODULES`,
//! `TRELLIS_CHROMIUM`, both set by `cargo xtask test`, which installs them), against a real
//! `trellis serve` whose model is scripted by the first message of each conversation ([`Script`]).
//! Each test runs one scenario of the driver, which fails on what the page does not show, and
//! checks its report here. Screenshots of the panels are taken into a temporary folder, or into
//! `TRELLIS_UI_SCREENSHOTS` when set (docs/img/ is made that way). Without a browser: the page's
//! routes, headers and `--no-ui`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use wiremock::{MockServer, Request, ResponseTemplate};

use super::harness::{AGENT_FILE, Served, http, node_report};
use crate::cli::harness::{messages, reply, trellis};
use crate::cli::streaming::EVENTS as STREAMED;
use crate::support::env_or_skip;

/// The scripted model: the scenario is named in the conversation's first message (`S-…`), the
/// step by how many tool results the request carries.
struct Script;

fn tool_use(id: &str, name: &str, input: Value) -> Value {
    json!({"type": "tool_use", "id": id, "name": name, "input": input})
}

fn text(words: &str) -> ResponseTemplate {
    reply(json!([{"type": "text", "text": words}]), "end_turn")
}

fn calls(uses: Vec<Value>) -> ResponseTemplate {
    reply(Value::Array(uses), "tool_use")
}

impl wiremock::Respond for Script {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body = String::from_utf8_lossy(&request.body);
        let step = body.matches("\"tool_result\"").count();
        let todo = |status: &str| {
            let todos = json!({"todos": [{"content": "Write the report", "status": status}]});
            calls(vec![tool_use(
                &format!("toolu_todo_{status}"),
                "write_todos",
                todos,
            )])
        };
        if body.contains("S-APPROVE") {
            return match step {
                0 => calls(vec![
                    tool_use(
                        "toolu_write",
                        "write_file",
                        json!({"file_path": "/notes.txt", "content": "approved content\n"}),
                    ),
                    tool_use("toolu_ls", "ls", json!({"path": "/"})),
                ]),
                _ => text("Both calls handled."),
            };
        }
        // The parent's requests name the scenario; the subagent's carry only the task text.
        if body.contains("S-TASK") {
            let task = json!({"description": "S-SUB count the rows", "subagent_type": "general-purpose"});
            return match step {
                0 => calls(vec![tool_use("toolu_task", "task", task)]),
                _ => text("The subagent answered."),
            };
        }
        // The subagent lists the files first (its own call, nested under the task card).
        if body.contains("S-SUB") {
            return match step {
                0 => calls(vec![tool_use("toolu_sub_ls", "ls", json!({"path": "/"}))]),
                _ => text("There are 3 rows."),
            };
        }
        // The skill's script summarizes the upload under `execute` (a real sandbox).
        if body.contains("S-CSV") {
            let command = "python3 /skills/team/csv-summary/scripts/summarize.py /uploads/data.csv";
            return match step {
                0 => calls(vec![tool_use(
                    "toolu_csv",
                    "execute",
                    json!({"command": command}),
                )]),
                _ => text("Summary in /outputs/summary.txt."),
            };
        }
        if body.contains("S-PIN") {
            let pinned = body.contains(r#"<pinned_skill name=\"csv-summary\""#);
            return text(if pinned {
                "Pinned skill seen."
            } else {
                "No pinned skill."
            });
        }
        if body.contains("S-TODOS") {
            return match step {
                0 => todo("in_progress"),
                // Long enough for the page to show the todo in progress.
                1 => todo("completed").set_delay(Duration::from_millis(1500)),
                _ => text("All done."),
            };
        }
        if body.contains("S-FILES") {
            return match step {
                0 => calls(vec![tool_use(
                    "toolu_read",
                    "read_file",
                    json!({"file_path": "/uploads/data.csv"}),
                )]),
                1 => calls(vec![tool_use(
                    "toolu_summary",
                    "write_file",
                    json!({"file_path": "/summary.txt", "content": "rows: 3\ntotal sales: 60\n"}),
                )]),
                _ => text("Summary written to /summary.txt."),
            };
        }
        if body.contains("S-SLOW") {
            return match step {
                0 => reply(
                    json!([{"type": "text", "text": "Looking first."}, tool_use("toolu_ls", "ls", json!({"path": "/"}))]),
                    "tool_use",
                ),
                // The page is reloaded while the run waits for this reply.
                _ => text("Final answer after the wait.").set_delay(Duration::from_secs(8)),
            };
        }
        ResponseTemplate::new(200)
            .set_body_string(STREAMED)
            .insert_header("content-type", "text/event-stream")
    }
}

pub(super) async fn scripted_model() -> MockServer {
    let server = MockServer::start().await;
    messages().respond_with(Script).mount(&server).await;
    server
}

/// Where the screenshots go: `TRELLIS_UI_SCREENSHOTS`, else a folder of `dir`.
pub(super) fn shots(dir: &Path) -> PathBuf {
    let shots = std::env::var_os("TRELLIS_UI_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| dir.join("shots"));
    std::fs::create_dir_all(&shots).unwrap();
    shots
}

/// Run scenario `name` of `ui_driver.mjs` against `served`; its report. `keys` goes to the
/// driver as `KEYS`. `None` when the browser or playwright-core is not set up (the test then
/// skips, or fails under `cargo xtask test`: see [`env_or_skip`]).
pub(super) async fn drive(name: &str, served: &Served, shots: &Path, keys: Option<&str>) -> Option<Value> {
    let [modules, chromium] = env_or_skip(
        &format!("ui::{name}"),
        ["TRELLIS_UI_NODE_MODULES", "TRELLIS_CHROMIUM"],
    )?;
    assert!(Path::new(&chromium).is_file(), "no browser at {chromium}");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/agent/server/ui_driver.mjs");
    let mut command = Command::new("node");
    command
        .arg(script)
        .arg(name)
        .env("TRELLIS_UI_NODE_MODULES", modules)
        .env("TRELLIS_CHROMIUM", chromium)
        .env("URL", format!("{}/", served.url))
        .env("SHOTS", shots)
        .env("KEYS", keys.unwrap_or(""));
    Some(node_report(command, &format!("ui_driver.mjs {name}"), served).await)
}

/// Whether `file` is a PNG image.
pub(super) fn is_png(file: &Path) -> bool {
    std::fs::read(file).is_ok_and(|bytes| bytes.starts_with(b"\x89PNG\r\n\x1a\n"))
}

/// The agent file of [`AGENT_FILE`] asking before `write_file` and `ls`.
fn asks_before_write_and_ls() -> String {
    AGENT_FILE.replace("ask = [\"none\"]", "ask = [\"write_file\", \"ls\"]")
}

/// A message sent with the keyboard shows the answer streamed by the model, in one AI item
/// after the user's; the thread is listed; the run record shows success with its usage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_is_sent_and_its_answer_streams_in() {
    let model = scripted_model().await;
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &model, None);
    let shots = shots(dir.path());
    let Some(report) = drive("stream", &served, &shots, None).await else {
        return;
    };
    let messages = report["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{report:#}");
    assert!(
        messages[0]["role"].as_str().unwrap().contains("msg-human"),
        "{report:#}"
    );
    assert_eq!(messages[0]["text"], "S-STREAM hello");
    assert_eq!(messages[1]["text"], "Streamed answer.", "{report:#}");
    assert_eq!(report["threads"], 1, "{report:#}");
    assert!(
        report["usage"].as_str().unwrap().contains("1 run, 1 model calls"),
        "{report:#}"
    );
    assert_eq!(
        report["audit"],
        json!([]),
        "labels, names and contrast: {report:#}"
    );
    for name in ["conversation", "threads", "runs"] {
        assert!(is_png(&shots.join(format!("{name}.png"))), "{name}.png");
    }
}

/// Two calls of one step wait for approval; the page shows both, the first is approved and the
/// second rejected with a reason in one answer: the file is written, the rejection reaches the
/// model, and both cards show their results.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_call_is_approved_and_another_rejected_with_a_reason() {
    let model = scripted_model().await;
    let dir = tempfile::tempdir().unwrap();
    let served = Served::with_agent_file(dir.path(), &model, None, &asks_before_write_and_ls());
    let shots = shots(dir.path());
    let Some(report) = drive("approvals", &served, &shots, None).await else {
        return;
    };
    assert_eq!(report["waiting"], json!(["write_file", "ls"]), "{report:#}");
    assert_eq!(report["approvalsLeft"], 0, "{report:#}");
    assert_eq!(
        report["audit"],
        json!([]),
        "labels, names and contrast: {report:#}"
    );
    let messages = report["messages"].as_array().unwrap();
    let cards: Vec<&Value> = messages
        .iter()
        .flat_map(|m| m["cards"].as_array().unwrap())
        .collect();
    assert_eq!(cards.len(), 2, "{report:#}");
    assert_eq!(cards[0]["tool"], "write_file");
    assert_eq!(cards[0]["status"], "done", "{report:#}");
    assert!(cards[0]["args"].as_str().unwrap().contains("/notes.txt"));
    assert_eq!(cards[1]["tool"], "ls");
    assert_eq!(cards[1]["status"], "error", "{report:#}");
    assert!(
        cards[1]["result"].as_str().unwrap().contains("not this time"),
        "{report:#}"
    );
    assert_eq!(messages.last().unwrap()["text"], "Both calls handled.");
    // The model saw the reason in the rejected call's result.
    let last = model.received_requests().await.unwrap().pop().unwrap();
    assert!(String::from_utf8_lossy(&last.body).contains("not this time"));
    assert!(is_png(&shots.join("approvals.png")) && is_png(&shots.join("cards.png")));
}

/// A `task` call's card carries the subagent's run record: its type, status and usage; the
/// subagent's answer is the card's result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_card_shows_its_subagents_run() {
    let model = scripted_model().await;
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &model, None);
    let shots = shots(dir.path());
    let Some(report) = drive("subagent", &served, &shots, None).await else {
        return;
    };
    let subagent = report["subagent"].as_str().unwrap();
    assert!(subagent.contains("general-purpose"), "{report:#}");
    assert!(subagent.contains("success, "), "{report:#}");
    assert!(subagent.contains("2 model calls, 1 tool calls"), "{report:#}");
    let card = &report["messages"][1]["cards"][0];
    assert_eq!(card["tool"], "task", "{report:#}");
    assert!(
        card["result"].as_str().unwrap().contains("There are 3 rows."),
        "{report:#}"
    );
    // Its duration, and the subagent's own ls call nested in it, streamed, with its result.
    assert!(card["took"].as_str().unwrap().starts_with(" took "), "{report:#}");
    let nested = card["nested"].as_array().unwrap();
    assert_eq!(nested.len(), 1, "{report:#}");
    assert_eq!(nested[0]["tool"], "ls", "{report:#}");
    assert!(nested[0]["took"].as_str().unwrap().contains("ms"), "{report:#}");
    assert!(nested[0]["result"].is_string(), "{report:#}");
    // After a reload, from the run records: the call, its status and its time.
    let again = &report["reloaded"][1]["cards"][0]["nested"];
    assert_eq!(again[0]["tool"], "ls", "{report:#}");
    assert!(
        again[0]["took"].as_str().unwrap().contains("success, took "),
        "{report:#}"
    );
    assert_eq!(report["audit"], json!([]), "{report:#}");
    assert!(is_png(&shots.join("subagent.png")));
}

/// The other decisions: the first call's arguments edited (the file is written where the edit
/// says, and its card shows the edited arguments) and the second answered with a response (its
/// result, a success).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_call_is_edited_and_another_answered() {
    let model = scripted_model().await;
    let dir = tempfile::tempdir().unwrap();
    let served = Served::with_agent_file(dir.path(), &model, None, &asks_before_write_and_ls());
    let Some(report) = drive("edit", &served, &shots(dir.path()), None).await else {
        return;
    };
    let cards = &report["messages"][1]["cards"];
    assert_eq!(cards[0]["tool"], "write_file", "{report:#}");
    assert!(
        cards[0]["args"].as_str().unwrap().contains("/edited.txt"),
        "{report:#}"
    );
    assert!(
        cards[0]["result"].as_str().unwrap().contains("/edited.txt"),
        "{report:#}"
    );
    assert_eq!(cards[1]["tool"], "ls");
    assert_eq!(cards[1]["status"], "done", "{report:#}");
    assert_eq!(cards[1]["result"], "pretend listing", "{report:#}");
    assert_eq!(
        report["files"],
        json!(["/edited.txt"]),
        "nothing at /notes.txt: {report:#}"
    );
}

/// *Stop run* cancels the run while it waits for the model: its record is `interrupted`, the
/// answer it was waiting for is not shown, the page is ready for the next message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_run_cancels_it() {
    let model = scripted_model().await;
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &model, None);
    let Some(report) = drive("stop", &served, &shots(dir.path()), None).await else {
        return;
    };
    assert_eq!(report["stopHidden"], true, "{report:#}");
    let texts: Vec<&Value> = report["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["text"])
        .collect();
    assert_eq!(
        texts,
        [&json!("S-SLOW look then stop"), &json!("Looking first.")],
        "{report:#}"
    );
}

/// The thread list: a thread is found by the start of its id and by `key=value` metadata, and
/// deleted from the list (and from the server: it is gone after the search reloads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_are_searched_by_id_and_metadata_and_deleted() {
    let model = scripted_model().await;
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &model, None);
    let Some(report) = drive("threads", &served, &shots(dir.path()), None).await else {
        return;
    };
    assert_eq!(report["all"], 2, "{report:#}");
    assert_eq!(report["byId"], json!([report["first"]]), "{report:#}");
    assert_eq!(report["byMetadata"], 1, "{report:#}");
    assert_eq!(report["left"], 1, "{report:#}");
    let first = report["first"].as_str().unwrap();
    let gone = http()
        .get(format!("{}/threads/{first}", served.url))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status().as_u16(), 404);
}

/// The todos panel shows the agent's todo (an agent file with `todos = true`) in progress, then
/// completed, while the run goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_todo_moves_to_completed() {
    let model = scripted_model().await;
    let dir = tempfile::tempdir().unwrap();
    let agent_file = format!("todos = true\n{AGENT_FILE}");
    let served = Served::with_agent_file(dir.path(), &model, None, &agent_file);
    let shots = shots(dir.path());
    let Some(report) = drive("todos", &served, &shots, None).await else {
        return;
    };
    assert_eq!(report["seen"], json!(["in_progress", "completed"]), "{report:#}");
    assert!(report["text"].as_str().unwrap().contains("Write the report"));
    assert!(is_png(&shots.join("todos.png")));
}

/// A CSV uploaded from the page lands in /uploads, the agent reads it (the model gets its rows)
/// and writes a summary, which the page lists and downloads with its content.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uploaded_csv_is_read_and_the_agents_output_downloaded() {
    let model = scripted_model().await;
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &model, None);
    let shots = shots(dir.path());
    let Some(report) = drive("files", &served, &shots, None).await else {
        return;
    };
    assert!(
        report["viewed"].as_str().unwrap().contains("north,10"),
        "{report:#}"
    );
    assert_eq!(report["downloaded"], "rows: 3\ntotal sales: 60\n", "{report:#}");
    assert_eq!(report["name"], "summary.txt");
    let requests = model.received_requests().await.unwrap();
    assert!(
        requests
            .iter()
            .any(|r| String::from_utf8_lossy(&r.body).contains("south,20")),
        "the agent read the uploaded file"
    );
    assert!(is_png(&shots.join("files.png")));
}

/// A reload while the run waits for the model rejoins the run: afterwards every message is shown
/// exactly once (no render after the reload showed one twice) and none is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_mid_run_rejoins_without_missing_or_repeating_a_message() {
    let model = scripted_model().await;
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &model, None);
    let shots = shots(dir.path());
    let Some(report) = drive("reload", &served, &shots, None).await else {
        return;
    };
    // One field of every message shown before or after the reload.
    let field = |key: &str, name: &str| -> Vec<Value> {
        report[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m[name].clone())
            .collect()
    };
    assert_eq!(
        field("before", "text"),
        ["S-SLOW look then answer", "Looking first."],
        "{report:#}"
    );
    assert_eq!(
        field("after", "text"),
        [
            "S-SLOW look then answer",
            "Looking first.",
            "Final answer after the wait."
        ],
        "{report:#}"
    );
    let after = report["after"].as_array().unwrap();
    assert_eq!(after[1]["cards"].as_array().unwrap().len(), 1, "{report:#}");
    assert_eq!(after[1]["cards"][0]["status"], "done", "{report:#}");
    // The ids before the reload are the ids after it (the same messages, not copies).
    assert_eq!(field("before", "id")[..], field("after", "id")[..2], "{report:#}");
    assert!(report["url"].as_str().unwrap().contains("#thread="), "{report:#}");
    // The page rejoined the running run's stream from its start, once.
    assert_eq!(report["joins"], json!(["-1"]), "{report:#}");
}

/// The network drops while the run waits for the model: the page rejoins the run's stream from
/// the last event id it saw (not from the start) and shows every message once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_connection_is_rejoined_from_the_last_event() {
    let model = scripted_model().await;
    let dir = tempfile::tempdir().unwrap();
    let mut served = Served::start(dir.path(), &model, None);
    let proxy = super::cut_proxy::CutProxy::start(&served.url).await;
    served.url = proxy.url.clone();
    // Once the run waits for the model's second reply, every connection is dropped.
    let cutter = async {
        for _ in 0..600 {
            if model.received_requests().await.unwrap().len() >= 2 {
                tokio::time::sleep(Duration::from_millis(300)).await;
                proxy.cut();
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let shots = shots(dir.path());
    let (report, ()) = tokio::join!(drive("cut", &served, &shots, None), cutter);
    let Some(report) = report else {
        return;
    };
    let joins = report["joins"].as_array().unwrap();
    assert!(!joins.is_empty(), "the page rejoined: {report:#}");
    let id: u64 = joins[0].as_str().unwrap().parse().unwrap();
    assert!(id > 0, "from the last event seen: {report:#}");
    let texts: Vec<&Value> = report["after"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["text"])
        .collect();
    let want = [
        "S-SLOW look then answer",
        "Looking first.",
        "Final answer after the wait.",
    ];
    assert_eq!(
        texts,
        want.map(|t| json!(t)).iter().collect::<Vec<_>>(),
        "{report:#}"
    );
}

/// With `--api-keys` the page asks for a key; a second user's key sees none of the first user's
/// threads, not even by the first thread's address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_users_key_sees_none_of_the_first_users_threads() {
    let model = scripted_model().await;
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &model, Some("alice key-a\nbob key-b\n"));
    let shots = shots(dir.path());
    let Some(report) = drive("users", &served, &shots, Some("key-a key-b")).await else {
        return;
    };
    assert_eq!(report["firstThreads"], 1, "{report:#}");
    assert_eq!(report["secondThreads"], 0, "{report:#}");
    assert_eq!(report["shown"], json!([]), "{report:#}");
    assert!(is_png(&shots.join("key.png")));
}

/// The page and its modules are served with their media types and a self-only
/// Content-Security-Policy, without a key even when the API needs one; `--no-ui` makes them 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_served_with_a_strict_policy_and_no_ui_turns_it_off() {
    let model = scripted_model().await;
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &model, Some("alice key-a\n"));
    let c = http();
    let page = c.get(format!("{}/", served.url)).send().await.unwrap();
    assert_eq!(page.status().as_u16(), 200);
    let header = |r: &reqwest::Response, name: &str| r.headers()[name].to_str().unwrap().to_owned();
    assert_eq!(header(&page, "content-type"), "text/html; charset=utf-8");
    let csp = header(&page, "content-security-policy");
    assert!(csp.starts_with("default-src 'none'; script-src 'self';"), "{csp}");
    assert!(csp.contains("connect-src 'self'"), "{csp}");
    assert_eq!(header(&page, "x-content-type-options"), "nosniff");
    let html = page.text().await.unwrap();
    assert!(html.contains("<base href=\"/\">"), "{html}");
    let module = c.get(format!("{}/ui/app.js", served.url)).send().await.unwrap();
    assert_eq!(module.status().as_u16(), 200);
    assert_eq!(header(&module, "content-type"), "text/javascript; charset=utf-8");
    let css = c
        .get(format!("{}/ui/style.css", served.url))
        .send()
        .await
        .unwrap();
    assert_eq!(header(&css, "content-type"), "text/css; charset=utf-8");
    let missing = c.get(format!("{}/ui/nope.js", served.url)).send().await.unwrap();
    assert_eq!(missing.status().as_u16(), 404);
    // The API itself still wants the key.
    let api = c
        .post(format!("{}/threads/search", served.url))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(api.status().as_u16(), 401);
    drop(served);

    let mut command = trellis();
    std::fs::write(dir.path().join("trellis.toml"), AGENT_FILE).unwrap();
    command
        .args(["serve", "--no-ui", "--listen", "127.0.0.1:0", "--agent"])
        .arg(dir.path().join("trellis.toml"))
        .arg("--state-dir")
        .arg(dir.path().join("state"));
    let served = Served::spawn(command, dir.path(), &model);
    for path in ["/", "/ui/app.js", "/ui/style.css"] {
        let answer = c.get(format!("{}{path}", served.url)).send().await.unwrap();
        assert_eq!(answer.status().as_u16(), 404, "{path}");
    }
    let ok = c.get(format!("{}/ok", served.url)).send().await.unwrap();
    assert_eq!(ok.status().as_u16(), 200, "the API is still there");
}
