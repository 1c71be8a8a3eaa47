//! A run's stream followed from other workers: joined mid-run from the start and after an
//! event id, the same events in the same order.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use serde_json::json;

use super::super::harness::{Served, http, ls_then_streamed_answer_after};
use super::support::{assert_numbered, new_thread, parse_sse, post, say, setup, worker};
use crate::queue::postgres::test_database as database;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_created_on_one_worker_streams_on_two_others_in_order() {
    let Some((_db, url)) = database().await else {
        return;
    };
    // One `ls` step, then an answer that takes 1.5 s: the joins below come while it runs.
    let model = ls_then_streamed_answer_after(Duration::ZERO, Duration::from_millis(1500)).await;
    let dir = setup(None);
    let a = worker(dir.path(), &model, &url, false, 5.0);
    let b = worker(dir.path(), &model, &url, false, 5.0);
    let c = worker(dir.path(), &model, &url, false, 5.0);
    let client = http();
    let thread = new_thread(&client, &a, None).await;

    let body = json!({
        "assistant_id": "agent", "input": say("hi"), "stream_resumable": true,
        "stream_mode": ["values", "updates", "messages-tuple"],
    });
    let response = post(
        &client,
        format!("{}/threads/{thread}/runs/stream", a.url),
        None,
        body,
    )
    .await;
    assert_eq!(response.status(), 200);
    let location = response.headers()["content-location"]
        .to_str()
        .unwrap()
        .to_owned();
    let run = location.rsplit('/').next().unwrap().to_owned();
    let on_a = tokio::spawn(async move { response.text().await.unwrap() });

    tokio::time::sleep(Duration::from_millis(300)).await;
    let join = |on: &Served, last: &'static str| {
        let (client, url) = (
            client.clone(),
            format!("{}/threads/{thread}/runs/{run}/stream", on.url),
        );
        async move {
            let response = client
                .get(url)
                .header("last-event-id", last)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
            response.text().await.unwrap()
        }
    };
    let (whole, after_two) = tokio::join!(join(&b, "-1"), join(&c, "2"));
    let on_a = parse_sse(&on_a.await.unwrap());
    let (whole, after_two) = (parse_sse(&whole), parse_sse(&after_two));

    assert_numbered(&on_a);
    assert!(on_a.len() > 5, "a step, deltas and values: {on_a:?}");
    assert_eq!(
        whole, on_a,
        "joined on B from the start: the same events as A's stream"
    );
    assert_eq!(
        after_two,
        on_a[3..],
        "joined on C after event 2: exactly the rest"
    );
    let last_values = on_a.iter().rev().find(|(_, e, _)| e == "values").unwrap();
    assert!(last_values.2.contains("Streamed answer."), "{last_values:?}");
}
