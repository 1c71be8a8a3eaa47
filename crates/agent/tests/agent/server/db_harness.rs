//! What the tests of `trellis serve --database` workers share: [`worker`], and server-sent
//! events as they read them ([`parse_sse`], [`assert_numbered_from`]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use wiremock::MockServer;

use super::harness::Served;
use crate::cli::harness::trellis;

/// `trellis serve --database URL` in `dir` (its `trellis.toml` and state dir shared by every
/// worker of the test) against `model`, with `args` added.
pub(crate) fn worker(dir: &Path, model: &MockServer, url: &str, args: &[&str]) -> Served {
    let mut command = trellis();
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--agent"])
        .arg(dir.join("trellis.toml"))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(["--database", url])
        .args(args);
    // Which worker runs which run: the tests read it from the workers' log.
    command.env("RUST_LOG", "warn,trellis_agent::server::workers=info");
    Served::spawn(command, dir, model)
}

/// One server-sent event: id, event name, data.
pub(crate) type Sse = (Option<String>, String, String);

/// The events of an SSE body, in order.
pub(crate) fn parse_sse(body: &str) -> Vec<Sse> {
    body.split("\n\n")
        .filter_map(|block| {
            let (mut id, mut event, mut data) = (None, None, String::new());
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    id = Some(v.trim().to_owned());
                } else if let Some(v) = line.strip_prefix("event:") {
                    event = Some(v.trim().to_owned());
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim_start());
                }
            }
            event.map(|e| (id, e, data))
        })
        .collect()
}

/// The ids of `events` are `first`, `first + 1`, … with no gap and no duplicate.
pub(crate) fn assert_numbered_from(events: &[Sse], first: usize) {
    let ids: Vec<usize> = events
        .iter()
        .map(|(id, ..)| id.as_deref().expect("an event id").parse().unwrap())
        .collect();
    assert_eq!(
        ids,
        (first..first + ids.len()).collect::<Vec<_>>(),
        "ids with no gap or duplicate"
    );
}
