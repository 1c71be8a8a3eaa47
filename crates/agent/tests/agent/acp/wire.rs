//! `trellis acp` on the raw wire, without a client library: what a broken or hostile client
//! sends gets JSON-RPC errors, never a panic or a closed connection, and an over-long line is
//! dropped without being held in memory whole.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::cli::harness::{MODEL, trellis};

#[test]
fn malformed_messages_get_json_rpc_errors_and_the_connection_goes_on() {
    let state = tempfile::tempdir().unwrap();
    let mut child: std::process::Child = {
        let mut command: Command = trellis();
        command
            .args(["acp", "--model", MODEL, "--sandbox", "none", "--state-dir"])
            .arg(state.path())
            .env("ANTHROPIC_API_KEY", "test-key")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command.spawn().unwrap()
    };
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut next = || {
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        serde_json::from_str::<Value>(&line)
            .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line:?}"))
    };
    let mut send = move |line: &str| {
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    };

    send(
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}"#,
    );
    assert_eq!(next()["result"]["protocolVersion"], 1);

    let cases: [(&str, i64); 6] = [
        ("this is not json", -32700),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"no/such/method","params":{}}"#,
            -32601,
        ),
        (
            r#"{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":7}}"#,
            -32602,
        ),
        (
            r#"{"jsonrpc":"2.0","id":3,"method":"session/new","params":{"cwd":"relative/dir","mcpServers":[]}}"#,
            -32602,
        ),
        (
            r#"{"jsonrpc":"2.0","id":4,"method":"session/prompt","params":{"sessionId":"nope","prompt":[]}}"#,
            -32002,
        ),
        ("[1,2,3]", -32600),
    ];
    for (line, code) in cases {
        send(line);
        let answer = next();
        assert_eq!(answer["error"]["code"], code, "{line} → {answer}");
    }

    // A line over the 16 MiB bound: dropped and answered as unparseable, not buffered whole.
    let mut long = String::from(r#"{"jsonrpc":"2.0","id":5,"method":"initialize","params":{"x":""#);
    long.push_str(&"a".repeat(17 << 20));
    long.push_str(r#""}}"#);
    send(&long);
    let answer = next();
    assert_eq!(answer["error"]["code"], -32700, "{answer}");
    assert_eq!(answer["id"], json!(null));

    // Still serving.
    send(r#"{"jsonrpc":"2.0","id":6,"method":"session/cancel","params":{"sessionId":"nope"}}"#);
    send(
        r#"{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{}}}"#,
    );
    let mut answer = next();
    if answer["id"] == 6 {
        answer = next();
    }
    assert_eq!(answer["id"], 7, "{answer}");

    drop(send);
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
