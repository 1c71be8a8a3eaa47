//! The page's message model (`crates/agent/src/server/ui/conversation.js`) run under Node without
//! a browser: what it keeps while a run streams and when a stream is replayed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};

use crate::support::env_or_skip;

/// The page's message model (`conversation.js`, run under Node without a browser): a reply's
/// tool call whose chunk index counts a text block before it is kept in a dense list (a hole
/// there broke every render in the middle of such a reply), and pieces of a message the values
/// already hold are ignored, so a replayed stream never doubles a message's text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conversation_model_keeps_calls_dense_and_ignores_replayed_pieces() {
    let Some([_]) = env_or_skip(
        "the_conversation_model_keeps_calls_dense_and_ignores_replayed_pieces",
        ["TRELLIS_UI_NODE_MODULES"],
    ) else {
        return;
    };
    let module = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/server/ui/conversation.js");
    let script = format!(
        r#"
import {{ Conversation }} from {module:?};
const c = new Conversation();
const chunk = (content, calls = []) => ({{ type: "AIMessageChunk", id: "a", content, tool_call_chunks: calls }});
c.addLocal({{ id: "h", type: "human", content: "hi" }});
c.chunk(chunk("Look"));
c.chunk(chunk("", [{{ index: 1, id: "t1", name: "ls", args: "" }}]));
c.chunk(chunk("", [{{ index: 1, id: null, name: null, args: '{{"path":' }}]));
c.chunk(chunk("", [{{ index: 1, id: null, name: null, args: '"/"}}' }}]));
const during = structuredClone(c.messages().map(({{ calls, ...m }}) => m));
c.chunk({{ type: "tool", id: "r", tool_call_id: "t1", content: "x" }});
c.setValues({{ messages: [{{ id: "h", type: "human", content: "hi" }},
  {{ id: "a", type: "ai", content: "Look", tool_calls: [{{ id: "t1", name: "ls", args: {{ path: "/" }} }}] }}] }});
c.chunk(chunk("Look"));
console.log(JSON.stringify({{ during, after: c.messages() }}));
"#,
        module = format!("file://{}", module.display())
    );
    let output = Command::new("node")
        .args(["--input-type=module", "-e", &script])
        .output()
        .expect("node runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let during = &report["during"];
    assert_eq!(during[1]["content"], "Look", "{report:#}");
    assert_eq!(
        during[1]["tool_calls"],
        json!([{"id": "t1", "name": "ls", "argsText": "{\"path\":\"/\"}", "args": {"path": "/"}}]),
        "{report:#}"
    );
    let after: Vec<(&Value, &Value)> = report["after"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (&m["id"], &m["content"]))
        .collect();
    assert_eq!(
        after,
        [
            (&json!("h"), &json!("hi")),
            (&json!("a"), &json!("Look")),
            (&json!("r"), &json!("x"))
        ],
        "{report:#}"
    );
}
