//! What the page costs a run: the extra stream parts it asks for (`tasks`, a subagent's
//! `…|tools:<id>` parts) are made only for the runs the page starts; a run started by any other
//! client, with no page open, makes none of them — not even for a page that joins it later — so
//! it does the same work whether the page exists or not.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;

use super::harness::{Served, http, json_of};
use super::ui::scripted_model;

/// The event names of an SSE body.
fn event_names(body: &str) -> Vec<String> {
    body.lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .map(str::to_owned)
        .collect()
}

async fn new_thread(url: &str) -> String {
    let thread = json_of(http().post(format!("{url}/threads")).json(&json!({}))).await;
    thread["thread_id"].as_str().unwrap().to_owned()
}

/// The body of `request`'s answer, as text.
async fn text_of(request: reqwest::RequestBuilder) -> String {
    request.send().await.unwrap().text().await.unwrap()
}

/// The same run (a `task` call whose subagent calls `ls`) started twice: by a plain client with
/// no page open, and as the page starts it. The plain run's whole stream, replayed for a
/// client asking for every mode the page uses, holds no `tasks` part and no subagent part; the
/// page's run holds both. The part counts are printed for docs/server.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_without_the_page_makes_none_of_the_pages_parts() {
    let model = scripted_model().await;
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &model, None);
    let u = &served.url;
    let input = json!({"messages": [{"role": "user", "content": "S-TASK delegate the count"}]});

    let plain = new_thread(u).await;
    let waited = text_of(
        http()
            .post(format!("{u}/threads/{plain}/runs/wait"))
            .json(&json!({"assistant_id": "agent", "input": input})),
    )
    .await;
    assert!(waited.contains("The subagent answered."), "{waited}");
    let runs = json_of(http().get(format!("{u}/threads/{plain}/runs"))).await;
    let run = runs[0]["run_id"].as_str().unwrap();
    let modes = "stream_mode=values&stream_mode=messages-tuple&stream_mode=tasks&stream_mode=updates";
    let replay = text_of(
        http()
            .get(format!("{u}/threads/{plain}/runs/{run}/stream?{modes}"))
            .header("last-event-id", "-1"),
    )
    .await;
    let plain_events = event_names(&replay);
    assert!(plain_events.iter().any(|e| e == "values"), "{plain_events:?}");
    assert!(
        !plain_events.iter().any(|e| e == "tasks" || e.contains('|')),
        "a run no page started made the page's parts: {plain_events:?}"
    );

    // The page's own request (runner.js).
    let paged = new_thread(u).await;
    let body = json!({
        "assistant_id": "agent", "input": input,
        "stream_mode": ["values", "messages-tuple", "tasks"],
        "stream_resumable": true, "stream_subgraphs": true,
    });
    let stream = text_of(
        http()
            .post(format!("{u}/threads/{paged}/runs/stream"))
            .json(&body),
    )
    .await;
    let page_events = event_names(&stream);
    assert!(page_events.iter().any(|e| e == "tasks"), "{page_events:?}");
    assert!(
        page_events.iter().any(|e| e.starts_with("messages|tools:")),
        "{page_events:?}"
    );
    eprintln!(
        "parts: plain run {} (replayed with the page's modes), page's run {}",
        plain_events.len(),
        page_events.len()
    );
}
