//! Shared test fixtures.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::Value;
use trellis_backend::{Backend, BackendExt, StateBackend, VirtualPath, WriteMode};
use trellis_fs_tools::{FileAccess, Tool, ToolContext, ToolOutput, file_tools};

/// A 150-line guide for paging.
pub fn guide() -> String {
    (1..=150).map(|i| format!("guide line {i}\n")).collect()
}

/// The fixture tree used by the snapshot tests.
pub fn fixture_files() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("/README.md", b"# Demo project\n\nA small tree for the file tools.\n".to_vec()),
        (
            "/src/main.rs",
            b"fn main() {\n    println!(\"hello\");\n    helper();\n}\n\nfn helper() {\n    // TODO: more\n}\n".to_vec(),
        ),
        ("/src/lib.rs", b"pub mod util;\n// TODO: docs\n".to_vec()),
        ("/src/util.rs", b"pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n".to_vec()),
        ("/docs/guide.md", guide().into_bytes()),
        ("/notes/no_newline.txt", b"first line\nlast line without newline".to_vec()),
        ("/notes/crlf.txt", b"alpha\r\nbeta\r\ngamma\r\n".to_vec()),
        ("/notes/repeated.txt", b"item = 1\nitem = 2\nitem = 1\nitem = 1\n".to_vec()),
        ("/empty.txt", Vec::new()),
        ("/data/blob.bin", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR TODO".to_vec()),
        ("/.hidden/config", b"secret = 1\n".to_vec()),
    ]
}

pub async fn fill(backend: &dyn Backend, files: &[(&str, Vec<u8>)]) {
    for (path, data) in files {
        let path = VirtualPath::parse(path).unwrap();
        backend
            .write(&path, data.clone().into(), WriteMode::Overwrite)
            .await
            .unwrap();
    }
}

pub async fn fixture() -> (Arc<StateBackend>, FileAccess) {
    let backend = Arc::new(StateBackend::new());
    fill(backend.as_ref(), &fixture_files()).await;
    let files = FileAccess::new(backend.clone());
    (backend, files)
}

/// The file tool `name` over `files`.
pub fn tool(files: &FileAccess, name: &str) -> Arc<dyn Tool> {
    file_tools(files.clone())
        .into_iter()
        .find(|t| t.name() == name)
        .unwrap()
}

/// Call file tool `name` over `files` outside an agent.
pub async fn call(files: &FileAccess, name: &str, args: Value) -> ToolOutput {
    tool(files, name)
        .call(args, &ToolContext::detached("call_1"))
        .await
        .unwrap()
}

/// The output as the snapshots show it: the error flag, then the text.
pub fn show(out: &ToolOutput) -> String {
    format!("is_error: {}\n{}", out.is_error, out.text_content())
}

pub async fn content(backend: &dyn Backend, path: &str) -> Option<String> {
    backend
        .read_to_string(&VirtualPath::parse(path).unwrap())
        .await
        .ok()
}
