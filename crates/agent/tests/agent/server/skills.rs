//! `GET /threads/{id}/skills` and a run's `input.pin_skills` (Trellis extensions), against a real
//! `trellis serve` with an agent file naming a skills folder.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::harness::{AGENT_FILE, Served, always_done, http};

/// A skills folder with two skills, `csv-summary` (with a script) and `meeting-notes`.
pub(crate) fn skills_folder(root: &Path) -> PathBuf {
    let folder = root.join("team");
    let skill = |name: &str, description: &str, body: &str| {
        let dir = folder.join(name);
        std::fs::create_dir_all(dir.join("scripts")).unwrap();
        std::fs::write(
            dir.join("SKILL.md"),
            format!("---\nname: {name}\ndescription: {description}\n---\n{body}\n"),
        )
        .unwrap();
    };
    skill(
        "csv-summary",
        "Summarize a CSV file of sales, its rows and total.",
        "Run `python3 /skills/team/csv-summary/scripts/summarize.py FILE`; it writes /outputs/summary.txt.",
    );
    skill(
        "meeting-notes",
        "Turn a meeting transcript into notes.",
        "Write the decisions first.",
    );
    std::fs::write(
        folder.join("csv-summary/scripts/summarize.py"),
        "import csv, os, sys\n\
         rows = list(csv.DictReader(open(sys.argv[1])))\n\
         total = sum(int(r['sales']) for r in rows)\n\
         os.makedirs('/outputs', exist_ok=True)\n\
         open('/outputs/summary.txt', 'w').write(f'rows: {len(rows)}\\ntotal sales: {total}\\n')\n\
         print('summarized', len(rows), 'rows')\n",
    )
    .unwrap();
    folder
}

/// [`AGENT_FILE`] with `folder` as its skill source.
pub(crate) fn agent_file_with_skills(folder: &Path) -> String {
    format!("skills = [{:?}]\n{AGENT_FILE}", folder.display().to_string())
}

async fn get(url: String, key: &str) -> (u16, Value) {
    let answer = http().get(url).header("x-api-key", key).send().await.unwrap();
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap_or(Value::Null))
}

/// The listing holds the agent file's skills with their descriptions and source, a search puts
/// the match first, `limit` cuts it, and another user's thread is a 404 (as a missing one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_threads_skills_are_listed_searched_and_scoped_to_its_owner() {
    let model = always_done().await;
    let dir = tempfile::tempdir().unwrap();
    let folder = skills_folder(dir.path());
    let served = Served::with_agent_file(
        dir.path(),
        &model,
        Some("alice ka\nbob kb\n"),
        &agent_file_with_skills(&folder),
    );
    let u = &served.url;
    let thread: Value = http()
        .post(format!("{u}/threads"))
        .header("x-api-key", "ka")
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let tid = thread["thread_id"].as_str().unwrap();
    let (status, all) = get(format!("{u}/threads/{tid}/skills"), "ka").await;
    assert_eq!(status, 200, "{all}");
    let names: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["csv-summary", "meeting-notes"], "{all:#}");
    assert_eq!(
        all[0]["description"],
        "Summarize a CSV file of sales, its rows and total."
    );
    assert_eq!(all[0]["source"], "Team", "{all:#}");
    assert_eq!(all[0]["path"], "/skills/team/csv-summary/SKILL.md", "{all:#}");
    let (_, found) = get(format!("{u}/threads/{tid}/skills?q=transcript"), "ka").await;
    assert_eq!(found.as_array().unwrap().len(), 1, "{found:#}");
    assert_eq!(found[0]["name"], "meeting-notes", "{found:#}");
    let (_, one) = get(format!("{u}/threads/{tid}/skills?limit=1"), "ka").await;
    assert_eq!(one.as_array().unwrap().len(), 1, "{one:#}");
    let (status, theirs) = get(format!("{u}/threads/{tid}/skills"), "kb").await;
    assert_eq!(status, 404, "bob does not see alice's thread: {theirs}");
    let (status, _) = get(format!("{u}/threads/{tid}/skills?assistant_id=nope"), "ka").await;
    assert_eq!(status, 404, "an unknown graph");
}

/// `input.pin_skills` puts the skill's instructions in the run's first model request (as
/// `/NAME` in `trellis chat`); a malformed value is a 422 and starts no run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_skill_reaches_the_model_and_a_bad_pin_is_refused() {
    let model = always_done().await;
    let dir = tempfile::tempdir().unwrap();
    let folder = skills_folder(dir.path());
    let served = Served::with_agent_file(dir.path(), &model, None, &agent_file_with_skills(&folder));
    let u = &served.url;
    let run = |input: Value| {
        http()
            .post(format!("{u}/runs/wait"))
            .json(&json!({"assistant_id": "agent", "input": input}))
            .send()
    };
    let message = json!([{"role": "user", "content": "summarize my file"}]);
    let bad = run(json!({"messages": message, "pin_skills": "csv-summary"}))
        .await
        .unwrap();
    assert_eq!(bad.status().as_u16(), 422);
    assert!(model.received_requests().await.unwrap().is_empty());
    let ok = run(json!({"messages": message, "pin_skills": ["csv-summary"]}))
        .await
        .unwrap();
    assert_eq!(ok.status().as_u16(), 200);
    let answer = ok.text().await.unwrap();
    let requests = model.received_requests().await.unwrap();
    assert_eq!(requests.len(), 1, "{answer}");
    let body = String::from_utf8_lossy(&requests[0].body);
    assert!(
        body.contains("<pinned_skill name=\\\"csv-summary\\\""),
        "the skill's body went with the first request: {body}"
    );
    assert!(body.contains("summarize.py FILE"), "{body}");
}
