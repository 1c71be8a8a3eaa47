//! `execute` through `trellis acp`: a command in the bubblewrap sandbox, cancelled from the
//! editor while it runs.

use std::time::Duration;

use serde_json::json;

use super::{client_with, node_modules, reply, scripted, updates};
use crate::cli::sandbox::bwrap_or_skip;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_a_sandboxed_command_stops_it_and_answers_cancelled() {
    let Some(modules) = node_modules("cancel_during_a_sandboxed_command_stops_it_and_answers_cancelled")
    else {
        return;
    };
    if !bwrap_or_skip("trellis acp cancel during execute") {
        return;
    }
    // Processes whose command lines carry the marker: the shell, a background loop, a child in a
    // session of its own, and the foreground sleep.
    let marker = "2.7182818";
    let command = format!(
        "(while :; do sleep {marker}; done) & setsid sh -c 'sleep {marker}' & sleep {marker}; sleep 120"
    );
    let server = scripted(vec![reply(
        json!([{"type": "tool_use", "id": "toolu_x", "name": "execute", "input": {"command": command}}]),
        "tool_use",
    )])
    .await;
    let cwd = tempfile::tempdir().unwrap();
    let report = client_with(
        &modules,
        "cancel_exec",
        &server,
        cwd.path(),
        // bwrap, the shell, the loop's shell and its sleep, the setsid shell and its sleep, the sleep.
        &[("ACP_MARKER", marker), ("ACP_MIN_MARKED", "4")],
        &["--sandbox", "bwrap", "--ask", "none"],
    )
    .await;
    assert_eq!(report["stops"], json!(["cancelled"]), "{report}");
    assert!(
        report["markedBeforeCancel"].as_array().unwrap().len() >= 4,
        "the command ran before the cancel: {}",
        report["markedBeforeCancel"]
    );
    let call = updates(&report, "tool_call");
    assert!(
        call.iter()
            .any(|c| c["toolCallId"] == "toolu_x" && c["kind"] == "execute")
    );
    assert!(
        report["replyAfterMs"].as_u64().unwrap() < 10_000,
        "the cancelled reply came {}ms after the cancel",
        report["replyAfterMs"]
    );
    // While `trellis acp` still runs (the client checks before it closes the connection), every
    // process of the command is gone.
    assert_eq!(
        report["markedAfter"],
        json!([]),
        "processes outlived the cancelled command (gone after {}ms)",
        report["goneAfterMs"]
    );
    assert!(
        Duration::from_millis(report["goneAfterMs"].as_u64().unwrap()) < Duration::from_secs(5),
        "{report}"
    );
}
