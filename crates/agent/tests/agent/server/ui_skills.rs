//! The page's skills panel, `/NAME` pinning and a skill script run under `execute` from the page,
//! in the real browser of [`super::ui`] (its scripted model and driver).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;

use super::harness::Served;
use super::skills::{agent_file_with_skills, skills_folder};
use super::ui::{drive, is_png, scripted_model, shots};

/// The panel lists the thread's skills and searches them; `/csv-sumary …` (a typo) is refused
/// naming the closest skill and reaches no model; *Pin* then a message sends the message with the
/// skill pinned (the model's request carries its instructions), and the pin is used up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_are_listed_searched_and_pinned_from_the_page() {
    let model = scripted_model().await;
    let dir = tempfile::tempdir().unwrap();
    let folder = skills_folder(dir.path());
    let served = Served::with_agent_file(dir.path(), &model, None, &agent_file_with_skills(&folder));
    let shots = shots(dir.path());
    let Some(report) = drive("skills", &served, &shots, None).await else {
        return;
    };
    assert_eq!(
        report["listed"],
        json!(["csv-summary", "meeting-notes"]),
        "{report:#}"
    );
    assert_eq!(report["found"], json!(["meeting-notes"]), "{report:#}");
    let refused = report["refused"].as_str().unwrap();
    assert!(refused.contains("did you mean csv-summary"), "{report:#}");
    let texts: Vec<&str> = report["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .filter(|t| !t.is_empty())
        .collect();
    assert_eq!(texts.first(), Some(&"S-PIN summarize it"), "{report:#}");
    assert_eq!(texts.last(), Some(&"Pinned skill seen."), "{report:#}");
    assert_eq!(report["pinsLeft"], 0, "{report:#}");
    assert_eq!(report["pinsShown"], false, "no empty pin line: {report:#}");
    assert_eq!(report["audit"], json!([]), "{report:#}");
    let requests = model.received_requests().await.unwrap();
    assert_eq!(requests.len(), 1, "the refused message reached no model");
    assert!(is_png(&shots.join("skills.png")));
}

/// A CSV uploaded from the page is summarized by the skill's script under `execute` in
/// bubblewrap; the script's output is listed with the thread's files and downloaded with the
/// right content; the `execute` card shows its result and its duration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uploaded_csv_is_summarized_by_a_skill_script_and_its_output_downloaded() {
    if !crate::cli::sandbox::bwrap_or_skip("ui::csv") {
        return;
    }
    let model = scripted_model().await;
    let dir = tempfile::tempdir().unwrap();
    let folder = skills_folder(dir.path());
    let agent_file = agent_file_with_skills(&folder).replace("kind = \"none\"", "kind = \"bwrap\"");
    let served = Served::with_agent_file(dir.path(), &model, None, &agent_file);
    let shots = shots(dir.path());
    let Some(report) = drive("csv", &served, &shots, None).await else {
        return;
    };
    assert_eq!(report["downloaded"], "rows: 3\ntotal sales: 60\n", "{report:#}");
    assert_eq!(report["name"], "summary.txt");
    let card = report["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["cards"].as_array().unwrap())
        .find(|c| c["tool"] == "execute")
        .unwrap();
    assert_eq!(card["status"], "done", "{report:#}");
    let result = card["result"].as_str().unwrap();
    assert!(result.contains("summarized 3 rows"), "{report:#}");
    assert!(result.contains("exit code 0"), "{report:#}");
    assert!(card["took"].as_str().unwrap().starts_with(" took "), "{report:#}");
    assert!(is_png(&shots.join("execute.png")));
}
