//! A skill's script, run by the agent: the fixture skill `csv-summary`
//! (`tests/fixtures/skills/data/csv-summary`) says to run `scripts/summarize.py` on an uploaded
//! CSV. The scripted model reads SKILL.md, calls `execute` with the script's virtual path, and
//! reads the report back; the script really runs under bubblewrap and writes
//! `/outputs/summary.md` into the thread's own files. Once with the skill source and the thread's
//! files on local disk, once with both on S3 (moto).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::json;
use trellis_agent::deep_agent;
use trellis_backend::{
    Backend, BackendExt, CompositeBackend, FilesystemBackend, ObjectStoreBackend, StateBackend, StoreOptions,
    VirtualPath, WriteMode,
};
use trellis_middleware::attachments::{AttachmentStore, Upload};
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::skills::SkillSource;
use trellis_middleware::tools::{Access, FileLayout, PermissionRule, Permissions};
use trellis_middleware::*;
use trellis_tests::emulator::{s3_target, unique};
use trellis_tests::sandbox::bubblewrap;

const CSV: &str = "region,units,revenue\nnorth,10,1500.5\nsouth,4,320\neast,7,910\n";
const COMMAND: &str =
    "python3 /skills/data/csv-summary/scripts/summarize.py /uploads/sales.csv /outputs/summary.md";

fn p(s: &str) -> VirtualPath {
    VirtualPath::parse(s).unwrap()
}

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/skills/data")
}

/// The text of the tool result for call `id` in the last request.
fn result_of(requests: &[ModelRequest], id: &str) -> String {
    requests
        .last()
        .unwrap()
        .messages
        .iter()
        .find_map(|m| match m {
            Message::Tool(r) if r.call_id == id => Some(m.text()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for {id}"))
}

/// The whole run over `skills` (a store holding `csv-summary/…`) and `checkpoints`.
async fn run_the_skill(skills: Arc<dyn Backend>, checkpoints: Arc<dyn Backend>) {
    let Some(sandbox) = bubblewrap("execute a skill's script") else {
        return;
    };
    let files: Arc<dyn Backend> = Arc::new(
        CompositeBackend::new(Arc::new(StateBackend::new()))
            .mount("/skills/data", skills)
            .unwrap(),
    );
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([ToolCall::new(
                "c1",
                "read_file",
                json!({"file_path": "/skills/data/csv-summary/SKILL.md"}),
            )])
            .then_tool_calls([ToolCall::new("c2", "execute", json!({"command": COMMAND}))])
            .then_tool_calls([ToolCall::new(
                "c3",
                "read_file",
                json!({"file_path": "/outputs/summary.md"}),
            )])
            .then_text("Three regions, 21 units, 2730.5 in revenue.")
            // A second thread of the same agent, looking for the first one's report.
            .then_tool_calls([ToolCall::new(
                "d1",
                "execute",
                json!({"command": "cat /outputs/summary.md; ls /uploads"}),
            )])
            .then_text("nothing there"),
    );
    let checkpointer = Arc::new(BackendCheckpointer::new(checkpoints, p("/threads")).unwrap());
    let agent = deep_agent(model.clone())
        .backend(files.clone())
        .file_layout(FileLayout::per_thread([p("/skills/data")]))
        .permissions(Permissions::new(vec![
            PermissionRule::deny("/skills/**", &[Access::Write]).unwrap(),
        ]))
        .skills_source(SkillSource::new(files, "/skills/data").unwrap())
        .checkpointer(checkpointer)
        .sandbox(sandbox)
        .build()
        .unwrap();
    let thread = ThreadId::new("csv-1").unwrap();
    let uploads = AttachmentStore::for_thread(&agent, &thread)
        .unwrap()
        .with_root(p("/uploads"));
    let input = uploads
        .attach(
            RunInput::human("What is in my sales CSV?").thread(thread.clone()),
            [Upload::new("sales.csv", CSV)],
        )
        .await
        .unwrap();
    let out = agent.run(input).await.unwrap();
    assert_eq!(
        out.final_text().as_deref(),
        Some("Three regions, 21 units, 2730.5 in revenue.")
    );

    let requests = model.requests();
    let tools: Vec<String> = requests[0].tools.iter().map(|t| t.name.clone()).collect();
    assert!(tools.contains(&"execute".to_owned()), "{tools:?}");
    assert!(result_of(&requests, "c1").contains("summarize.py"));
    let executed = result_of(&requests, "c2");
    assert!(
        executed.contains("wrote /outputs/summary.md: 3 rows, 2 numeric columns"),
        "{executed}"
    );
    assert!(executed.contains("exit code 0"), "{executed}");
    assert!(
        executed.contains("saved: /outputs/summary.md (created)"),
        "{executed}"
    );
    let read = result_of(&requests, "c3");
    assert!(read.contains("| revenue | 2730.5 | 320 | 1500.5 |"), "{read}");

    // The report is the thread's own file, where the checkpointer keeps it.
    let own = agent.thread_files(&thread).unwrap();
    let report = own.read_to_string(&p("/outputs/summary.md")).await.unwrap();
    assert!(
        report.starts_with("# Summary of sales.csv\n\nRows: 3\n"),
        "{report}"
    );
    // The skill source is untouched, and nothing of the run landed there.
    assert!(!own.exists(&p("/skills/data/csv-summary/SKILL.md")).await.unwrap());

    // Another thread's commands see none of this thread's files.
    let other = ThreadId::new("csv-2").unwrap();
    agent
        .run(RunInput::human("Anything here?").thread(other.clone()))
        .await
        .unwrap();
    let seen = result_of(&model.requests(), "d1");
    assert!(
        seen.contains("No such file") && !seen.contains("Rows: 3") && !seen.contains("sales.csv"),
        "{seen}"
    );
    assert!(
        seen.contains("exit code 2") || seen.contains("exit code 1"),
        "{seen}"
    );
    let theirs = agent.thread_files(&other).unwrap();
    assert!(!theirs.exists(&p("/outputs/summary.md")).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skill_script_runs_on_local_disk() {
    let skills: Arc<dyn Backend> = Arc::new(FilesystemBackend::new(fixture_dir()).unwrap());
    let state = tempfile::tempdir().unwrap();
    let checkpoints: Arc<dyn Backend> = Arc::new(FilesystemBackend::new(state.path()).unwrap());
    run_the_skill(skills, checkpoints).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skill_script_runs_with_skills_and_thread_files_on_s3() {
    let Some(target) = s3_target("execute a skill's script on S3") else {
        return;
    };
    let options = StoreOptions::s3_compatible(&target.endpoint, "test", "test");
    let store = |prefix: &str| -> Arc<dyn Backend> {
        Arc::new(ObjectStoreBackend::from_url(&format!("s3://{}/{prefix}", target.bucket), &options).unwrap())
    };
    let skills = store(&unique("exec-skills"));
    for rel in ["csv-summary/SKILL.md", "csv-summary/scripts/summarize.py"] {
        let bytes = std::fs::read(fixture_dir().join(rel)).unwrap();
        skills
            .write(&p(&format!("/{rel}")), bytes.into(), WriteMode::Overwrite)
            .await
            .unwrap();
    }
    run_the_skill(skills, store(&unique("exec-threads"))).await;
}
