//! A user's own memory and skills through `deep_agent` and the whole stack, on local disk and on
//! the S3 emulator, in one process and across processes.
//!
//! The agent has its own memory (`/AGENTS.md`) and an organisation skill library (`/skills`); each
//! user's workspace is `/users/<id>` of the same store, holding `agents/{AGENTS,USER,MEMORY}.md` and
//! `agents/skills/<slug>/SKILL.md`. The model is the driver of `thread_files` (it calls the tool a
//! `call {…}` message names, then answers with the result), recording every request.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::{Value, json};
use trellis_agent::deep_agent;
use trellis_backend::{
    Backend, BackendExt, FilesystemBackend, ObjectStoreBackend, StoreOptions, VirtualPath, WriteMode,
};
use trellis_middleware::runtime::message::AiMessage;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::skills::SkillSource;
use trellis_middleware::tools::FileLayout;
use trellis_middleware::*;
use trellis_tests::emulator::{s3_target, unique};

use crate::agent_faults::system_text;
use crate::thread_files::{call_text, driver, rerun_as};

fn p(path: &str) -> VirtualPath {
    VirtualPath::parse(path).unwrap()
}

async fn put(store: &dyn Backend, path: &str, text: &str) {
    store
        .write(&p(path), text.to_owned().into(), WriteMode::Overwrite)
        .await
        .unwrap();
}

fn skill_md(name: &str, description: &str) -> String {
    format!("---\nname: {name}\ndescription: {description}\n---\n# {name}\n")
}

/// The agent's memory and skills, and ada's and bob's workspaces.
async fn seed(store: &dyn Backend) {
    put(store, "/AGENTS.md", "Team rule: cite sources.\n").await;
    put(
        store,
        "/skills/report/SKILL.md",
        &skill_md("report", "Write the org's weekly report."),
    )
    .await;
    put(
        store,
        "/skills/search/SKILL.md",
        &skill_md("search", "Search the org wiki."),
    )
    .await;
    put(store, "/users/ada/agents/USER.md", "Ada: ada-pref-1187\n").await;
    put(store, "/users/ada/agents/MEMORY.md", "# Memory\n").await;
    put(
        store,
        "/users/ada/agents/skills/ada-digest/SKILL.md",
        &skill_md("ada-digest", "Ada's morning digest ada-skill-5521."),
    )
    .await;
    put(
        store,
        "/users/ada/agents/skills/report/SKILL.md",
        &skill_md("report", "Ada's own report format ada-report-3390."),
    )
    .await;
    put(store, "/users/bob/agents/USER.md", "Bob: bob-pref-6604\n").await;
    put(
        store,
        "/users/bob/agents/skills/bob-crm/SKILL.md",
        &skill_md("bob-crm", "Bob's CRM export bob-skill-7712."),
    )
    .await;
}

struct Users {
    agent: Agent,
    model: Arc<ScriptedModel>,
}

impl Users {
    /// `deep_agent` over `store`: agent memory and skills from it, user workspaces below `/users`.
    fn new(store: Arc<dyn Backend>) -> Self {
        let model = Arc::new(driver());
        let agent = deep_agent(model.clone())
            .backend(store.clone())
            .file_layout(FileLayout::per_thread([p("/skills")]))
            .user_workspaces(store.clone(), p("/users"))
            .skills_source(SkillSource::labeled(store, "/skills", "Org").unwrap())
            .memory_source("/AGENTS.md")
            .user_memory(["agents/AGENTS.md", "agents/USER.md", "agents/MEMORY.md"])
            .personal_skills("agents/skills")
            .build()
            .unwrap();
        Self { agent, model }
    }

    /// Run `tool` with `args` as `user` in `thread`; every request the model got in that run.
    async fn call(&self, user: &str, thread: &str, tool: &str, args: Value) -> Vec<ModelRequest> {
        let before = self.model.calls();
        let input = RunInput::human(call_text(tool, args))
            .thread(ThreadId::new(thread).unwrap())
            .extension(tools::UserIdentity::new(user));
        self.agent.run(input).await.unwrap();
        self.model.requests().split_off(before)
    }

    /// The system text of `user`'s first request in a new thread.
    async fn first_prompt(&self, user: &str, thread: &str) -> String {
        let requests = self.call(user, thread, "ls", json!({"path": "/"})).await;
        system_text(&requests[0])
    }
}

const ADA_MARKS: [&str; 3] = ["ada-pref-1187", "ada-skill-5521", "ada-report-3390"];
const BOB_MARKS: [&str; 2] = ["bob-pref-6604", "bob-skill-7712"];

fn assert_sees(prompt: &str, own: &[&str], others: &[&str], who: &str) {
    assert!(
        prompt.contains("Team rule: cite sources."),
        "{who}: the agent's memory"
    );
    assert!(prompt.contains("Search the org wiki."), "{who}: the org's skills");
    for mark in own {
        assert!(prompt.contains(mark), "{who} misses their own {mark}:\n{prompt}");
    }
    for mark in others {
        assert!(
            !prompt.contains(mark),
            "{who} sees another user's {mark}:\n{prompt}"
        );
    }
}

/// Each user sees only their own layer; an edit of ada's MEMORY.md lands in her file, reaches her
/// other (already running) thread on its next call and her new threads, and never bob's.
async fn users_are_isolated_and_edits_reach_only_their_user(store: Arc<dyn Backend>) {
    seed(store.as_ref()).await;
    let users = Users::new(store.clone());
    let ada = users.first_prompt("ada", "ada-1").await;
    assert_sees(&ada, &ADA_MARKS, &BOB_MARKS, "ada");
    assert!(
        ada.contains("Ada's own report format") && !ada.contains("Write the org's weekly report."),
        "ada's report shadows the org's for her"
    );
    let bob = users.first_prompt("bob", "bob-1").await;
    assert_sees(&bob, &BOB_MARKS, &ADA_MARKS, "bob");
    assert!(
        bob.contains("Write the org's weekly report."),
        "bob keeps the org's report"
    );

    let fact = "- ada-fact-9052: prefers Friday reviews\n";
    let edit = users
        .call(
            "ada",
            "ada-2",
            "edit_file",
            json!({"file_path": "/workspace/agents/MEMORY.md", "old_string": "# Memory\n", "new_string": format!("# Memory\n{fact}")}),
        )
        .await;
    assert!(
        edit.len() == 2 && system_text(&edit[1]).contains("ada-fact-9052"),
        "the edit shows on the next call of the editing thread"
    );
    let stored = store
        .read_to_string(&p("/users/ada/agents/MEMORY.md"))
        .await
        .unwrap();
    assert!(stored.contains(fact), "the edit is in ada's own file: {stored}");

    let other_thread = users.call("ada", "ada-1", "ls", json!({"path": "/"})).await;
    assert!(
        system_text(&other_thread[0]).contains("ada-fact-9052"),
        "ada's other thread sees it on its next call"
    );
    assert!(users.first_prompt("ada", "ada-3").await.contains("ada-fact-9052"));
    let bob_again = users.call("bob", "bob-1", "ls", json!({"path": "/"})).await;
    assert!(!system_text(&bob_again[0]).contains("ada-fact-9052"));
    assert!(!users.first_prompt("bob", "bob-2").await.contains("ada-fact-9052"));

    // A second agent over the same store (another worker) sees the same, user by user.
    let other = Users::new(store);
    assert!(
        other
            .first_prompt("ada", "w2-ada")
            .await
            .contains("ada-fact-9052")
    );
    assert_sees(
        &other.first_prompt("bob", "w2-bob").await,
        &BOB_MARKS,
        &ADA_MARKS,
        "bob on worker 2",
    );
}

#[tokio::test]
async fn local_disk_users_are_isolated_and_edits_reach_only_their_user() {
    let dir = tempfile::tempdir().unwrap();
    users_are_isolated_and_edits_reach_only_their_user(Arc::new(FilesystemBackend::new(dir.path()).unwrap()))
        .await;
}

fn s3_store(prefix: &str) -> Option<Arc<dyn Backend>> {
    let target = s3_target("user_layer")?;
    let options = StoreOptions::s3_compatible(&target.endpoint, "test", "test");
    let url = format!("s3://{}/{prefix}", target.bucket);
    Some(Arc::new(ObjectStoreBackend::from_url(&url, &options).unwrap()))
}

#[tokio::test]
async fn s3_users_are_isolated_and_edits_reach_only_their_user() {
    let Some(store) = s3_store(&unique("user-layer")) else {
        return;
    };
    users_are_isolated_and_edits_reach_only_their_user(store).await;
}

/// Two threads of ada append to her MEMORY.md at once, five edits each; every edit that reported
/// success is in the file (version-checked writes), and her next run shows them all.
async fn concurrent_edits_of_one_user_keep_both(store: Arc<dyn Backend>) {
    seed(store.as_ref()).await;
    let model = Arc::new(ScriptedModel::from_fn(|request| {
        let who = request.messages.iter().find_map(|m| match m {
            Message::Human(_) => Some(m.text()),
            _ => None,
        });
        let who = who.unwrap_or_default();
        let done = request.messages.iter().filter(|m| m.as_tool().is_some()).count();
        let message = if done < 5 {
            AiMessage::tool_calls([ToolCall::new(
                format!("{who}{done}"),
                "edit_file",
                json!({"file_path": "/workspace/agents/MEMORY.md", "old_string": "# Memory\n", "new_string": format!("# Memory\n- {who} {done}\n")}),
            )])
        } else {
            AiMessage::text("done")
        };
        Ok(ModelResponse::new(message))
    }));
    let agent = Arc::new(
        deep_agent(model.clone())
            .user_workspaces(store.clone(), p("/users"))
            .user_memory(["agents/MEMORY.md"])
            .without_summarization()
            .build()
            .unwrap(),
    );
    let run = |who: &'static str| {
        let agent = agent.clone();
        async move {
            let input = RunInput::human(who)
                .thread(ThreadId::new(format!("log-{who}")).unwrap())
                .extension(tools::UserIdentity::new("ada"));
            let out = agent.run(input).await.unwrap();
            out.state
                .messages
                .iter()
                .filter_map(|m| m.as_tool())
                .filter(|t| !t.is_error)
                .map(|t| t.call_id.clone())
                .collect::<Vec<_>>()
        }
    };
    let (a, b) = tokio::join!(tokio::spawn(run("left")), tokio::spawn(run("right")));
    let succeeded: Vec<String> = a.unwrap().into_iter().chain(b.unwrap()).collect();
    let text = store
        .read_to_string(&p("/users/ada/agents/MEMORY.md"))
        .await
        .unwrap();
    assert!(succeeded.iter().any(|id| id.starts_with("left")));
    assert!(succeeded.iter().any(|id| id.starts_with("right")));
    for id in &succeeded {
        let (who, i) = id.split_at(id.len() - 1);
        assert!(
            text.contains(&format!("- {who} {i}\n")),
            "{id} reported success but is missing:\n{text}"
        );
    }
    assert_eq!(
        text.lines().filter(|l| l.starts_with("- ")).count(),
        succeeded.len(),
        "{text}"
    );

    let before = model.calls();
    let input = RunInput::human("quiet")
        .thread(ThreadId::new("log-after").unwrap())
        .extension(tools::UserIdentity::new("ada"));
    agent.run(input).await.unwrap();
    let prompt = system_text(&model.requests()[before]);
    for id in &succeeded {
        let (who, i) = id.split_at(id.len() - 1);
        assert!(
            prompt.contains(&format!("- {who} {i}")),
            "ada's next run shows {id}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_disk_concurrent_edits_of_one_user_keep_both() {
    let dir = tempfile::tempdir().unwrap();
    concurrent_edits_of_one_user_keep_both(Arc::new(FilesystemBackend::new(dir.path()).unwrap())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_concurrent_edits_of_one_user_keep_both() {
    let Some(store) = s3_store(&unique("user-layer-edits")) else {
        return;
    };
    concurrent_edits_of_one_user_keep_both(store).await;
}

/// This test's path in the test binary, for `--exact`.
const PROCESS_TEST: &str = "user_layer::two_users_stay_apart_across_processes";
const ROLE: &str = "TRELLIS_USER_LAYER_ROLE";
const STORE_DIR: &str = "TRELLIS_USER_LAYER_DIR";

/// One process of the cross-process test, on the store at `STORE_DIR`.
fn process_role(role: &str) {
    let dir = std::env::var(STORE_DIR).expect("store dir");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let store: Arc<dyn Backend> = Arc::new(FilesystemBackend::new(&dir).unwrap());
        let users = Users::new(store);
        match role {
            "ada-writes" => {
                let wrote = users
                    .call(
                        "ada",
                        "ada-p1",
                        "write_file",
                        json!({"file_path": "/workspace/agents/skills/ada-late/SKILL.md", "content": skill_md("ada-late", "ada-late-4471")}),
                    )
                    .await;
                assert_eq!(wrote.len(), 2);
                users
                    .call(
                        "ada",
                        "ada-p1",
                        "edit_file",
                        json!({"file_path": "/workspace/agents/MEMORY.md", "old_string": "# Memory\n", "new_string": "# Memory\n- ada-proc-2218\n"}),
                    )
                    .await;
            }
            "bob-reads" => {
                let bob = users.first_prompt("bob", "bob-p2").await;
                assert_sees(&bob, &BOB_MARKS, &ADA_MARKS, "bob");
                assert!(!bob.contains("ada-proc-2218") && !bob.contains("ada-late-4471"), "{bob}");
            }
            "ada-reads" => {
                let ada = users.first_prompt("ada", "ada-p3").await;
                assert_sees(&ada, &ADA_MARKS, &BOB_MARKS, "ada");
                assert!(ada.contains("ada-proc-2218") && ada.contains("ada-late-4471"), "{ada}");
            }
            other => panic!("unknown role {other}"),
        }
    });
}

#[test]
fn two_users_stay_apart_across_processes() {
    if let Ok(role) = std::env::var(ROLE) {
        process_role(&role);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    runtime.block_on(seed(&FilesystemBackend::new(dir.path()).unwrap()));
    let store = dir.path().display().to_string();
    for role in ["ada-writes", "bob-reads", "ada-reads"] {
        rerun_as(PROCESS_TEST, &[(ROLE, role), (STORE_DIR, &store)]);
    }
}
