//! Snapshots of what the model sees from every tool, on a fixture tree in a StateBackend.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use insta::assert_snapshot;
use serde_json::json;
use trellis_backend::StateBackend;
use trellis_fs_tools::{FileAccess, Limits, file_tools};

use crate::common::{call, content, fill, fixture, show};

macro_rules! snap {
    ($name:literal, $ctx:expr, $tool:literal, $args:tt) => {
        assert_snapshot!($name, show(&call(&$ctx, $tool, json!($args)).await))
    };
}

#[test]
fn tool_specs() {
    let specs: Vec<String> = file_tools(FileAccess::new(Arc::new(StateBackend::new())))
        .iter()
        .map(|t| {
            format!(
                "## {}\n{}\n{}",
                t.name(),
                t.description(),
                serde_json::to_string_pretty(t.parameters()).unwrap()
            )
        })
        .collect();
    assert_snapshot!("tool_specs", specs.join("\n\n"));
}

#[tokio::test]
async fn ls() {
    let (_, ctx) = fixture().await;
    snap!("ls_root", ctx, "ls", {});
    snap!("ls_src", ctx, "ls", {"path": "/src"});
    snap!("ls_relative_path", ctx, "ls", {"path": "notes/"});
    snap!("ls_file", ctx, "ls", {"path": "/src/main.rs"});
    snap!("ls_missing", ctx, "ls", {"path": "/nope"});
    snap!("ls_traversal", ctx, "ls", {"path": "/src/../.."});
    snap!("ls_bad_type", ctx, "ls", {"path": 7});

    let backend = Arc::new(StateBackend::new());
    let files: Vec<(String, Vec<u8>)> = (0..8).map(|i| (format!("/many/f{i}.txt"), vec![b'x'])).collect();
    let files: Vec<(&str, Vec<u8>)> = files.iter().map(|(p, d)| (p.as_str(), d.clone())).collect();
    fill(backend.as_ref(), &files).await;
    let mut limits = Limits::default();
    limits.max_list_entries = 3;
    let small = FileAccess::new(backend).with_limits(limits);
    snap!("ls_capped", small, "ls", {"path": "/many"});
}

#[tokio::test]
async fn read_file() {
    let (_, ctx) = fixture().await;
    snap!("read_whole", ctx, "read_file", {"file_path": "/src/main.rs"});
    snap!("read_first_page", ctx, "read_file", {"file_path": "/docs/guide.md"});
    snap!("read_next_page", ctx, "read_file", {"file_path": "/docs/guide.md", "offset": 100});
    snap!("read_window", ctx, "read_file", {"file_path": "/docs/guide.md", "offset": "140", "limit": "3"});
    snap!("read_single_line", ctx, "read_file", {"file_path": "/docs/guide.md", "offset": 9, "limit": 1});
    snap!("read_past_end", ctx, "read_file", {"file_path": "/docs/guide.md", "offset": 150});
    snap!("read_limit_zero", ctx, "read_file", {"file_path": "/docs/guide.md", "limit": 0});
    snap!("read_negative_offset", ctx, "read_file", {"file_path": "/docs/guide.md", "offset": -5});
    snap!("read_empty", ctx, "read_file", {"file_path": "/empty.txt"});
    snap!("read_no_final_newline", ctx, "read_file", {"file_path": "/notes/no_newline.txt"});
    snap!("read_crlf", ctx, "read_file", {"file_path": "/notes/crlf.txt"});
    snap!("read_binary", ctx, "read_file", {"file_path": "/data/blob.bin"});
    snap!("read_directory", ctx, "read_file", {"file_path": "/src"});
    snap!("read_missing", ctx, "read_file", {"file_path": "/src/nope.rs"});
    snap!("read_invalid_path", ctx, "read_file", {"file_path": "C:\\Windows\\win.ini"});
    snap!("read_missing_arg", ctx, "read_file", {"offset": 3});
    snap!("read_unknown_arg", ctx, "read_file", {"file_path": "/README.md", "lines": 3});
    snap!("read_path_alias", ctx, "read_file", {"path": "/README.md"});
    snap!("read_not_an_object", ctx, "read_file", ["/README.md"]);

    // Long lines, a small budget, and a file larger than the readable prefix.
    let backend = Arc::new(StateBackend::new());
    let wide = format!(
        "short\n{}\n{}\nend\n",
        "abcdefghij".repeat(5),
        "0123456789".repeat(30)
    );
    let many_wide: String = (0..10)
        .map(|i| format!("{}\n", i.to_string().repeat(300)))
        .collect();
    let huge = format!("{}\nnext line\n", "h".repeat(3_000));
    let big: String = (1..=400).map(|i| format!("row {i:03}\n")).collect();
    fill(
        backend.as_ref(),
        &[
            ("/wide.txt", wide.into_bytes()),
            ("/many_wide.txt", many_wide.into_bytes()),
            ("/huge_line.txt", huge.into_bytes()),
            ("/big.log", big.into_bytes()),
        ],
    )
    .await;
    let mut limits = Limits::default();
    limits.line_chunk_chars = 20;
    limits.output_chars = 2_000;
    let small = FileAccess::new(backend.clone()).with_limits(limits.clone());
    snap!("read_continuation_pieces", small, "read_file", {"file_path": "/wide.txt", "limit": 3});
    snap!("read_budget_cut", small, "read_file", {"file_path": "/many_wide.txt", "offset": 2});
    snap!("read_line_longer_than_budget", small, "read_file", {"file_path": "/huge_line.txt"});
    limits.max_file_bytes = 1_024;
    let prefix = FileAccess::new(backend).with_limits(limits);
    snap!("read_prefix_of_large_file", prefix, "read_file", {"file_path": "/big.log", "offset": 120, "limit": 5});
    snap!("read_end_of_readable_prefix", prefix, "read_file", {"file_path": "/big.log", "offset": 126});
    snap!("read_beyond_readable_prefix", prefix, "read_file", {"file_path": "/big.log", "offset": 300});
}

#[tokio::test]
async fn write_file() {
    let (backend, ctx) = fixture().await;
    snap!("write_new", ctx, "write_file", {"file_path": "/out/report.md", "content": "# Report\nall good\n"});
    assert_eq!(
        content(backend.as_ref(), "/out/report.md").await.as_deref(),
        Some("# Report\nall good\n")
    );
    snap!("write_existing", ctx, "write_file", {"file_path": "/README.md", "content": "gone"});
    assert!(
        content(backend.as_ref(), "/README.md")
            .await
            .unwrap()
            .starts_with("# Demo project")
    );
    snap!("write_overwrite", ctx, "write_file", {"file_path": "/README.md", "content": "new", "overwrite": true});
    assert_eq!(
        content(backend.as_ref(), "/README.md").await.as_deref(),
        Some("new")
    );
    snap!("write_directory", ctx, "write_file", {"file_path": "/src", "content": "x"});
    snap!("write_below_file", ctx, "write_file", {"file_path": "/README.md/child.txt", "content": "x"});
    snap!("write_missing_content", ctx, "write_file", {"file_path": "/x.txt"});
    snap!("write_bad_overwrite", ctx, "write_file", {"file_path": "/x.txt", "content": "", "overwrite": "yes"});
}

#[tokio::test]
async fn edit_file() {
    let (backend, ctx) = fixture().await;
    snap!("edit_unique", ctx, "edit_file", {"file_path": "/src/util.rs", "old_string": "a + b", "new_string": "a.wrapping_add(b)"});
    assert!(
        content(backend.as_ref(), "/src/util.rs")
            .await
            .unwrap()
            .contains("a.wrapping_add(b)")
    );
    snap!("edit_ambiguous", ctx, "edit_file", {"file_path": "/notes/repeated.txt", "old_string": "item = 1", "new_string": "item = 9"});
    snap!("edit_replace_all", ctx, "edit_file", {"file_path": "/notes/repeated.txt", "old_string": "item = 1", "new_string": "item = 9", "replace_all": true});
    assert_eq!(
        content(backend.as_ref(), "/notes/repeated.txt").await.as_deref(),
        Some("item = 9\nitem = 2\nitem = 9\nitem = 9\n")
    );
    snap!("edit_not_found", ctx, "edit_file", {"file_path": "/src/main.rs", "old_string": "goodbye", "new_string": "x"});
    snap!("edit_trailing_newline", ctx, "edit_file", {"file_path": "/notes/no_newline.txt", "old_string": "last line without newline\n", "new_string": "last line\n"});
    snap!("edit_line_numbers_pasted", ctx, "edit_file", {"file_path": "/src/main.rs", "old_string": "2\t    println!(\"hello\");\n3\t    helper();", "new_string": "x"});
    snap!("edit_whitespace_differs", ctx, "edit_file", {"file_path": "/src/main.rs", "old_string": "println!(\"hello\");  ", "new_string": "x"});
    snap!("edit_later_lines_differ", ctx, "edit_file", {"file_path": "/src/main.rs", "old_string": "fn helper() {\n    // FIXME", "new_string": "x"});
    snap!("edit_crlf_file", ctx, "edit_file", {"file_path": "/notes/crlf.txt", "old_string": "alpha\nbeta", "new_string": "one\ntwo"});
    assert_eq!(
        content(backend.as_ref(), "/notes/crlf.txt").await.as_deref(),
        Some("one\r\ntwo\r\ngamma\r\n")
    );
    snap!("edit_empty_old", ctx, "edit_file", {"file_path": "/src/main.rs", "old_string": "", "new_string": "x"});
    snap!("edit_identical", ctx, "edit_file", {"file_path": "/src/main.rs", "old_string": "main", "new_string": "main"});
    snap!("edit_missing_file", ctx, "edit_file", {"file_path": "/src/nope.rs", "old_string": "a", "new_string": "b"});
    snap!("edit_binary", ctx, "edit_file", {"file_path": "/data/blob.bin", "old_string": "TODO", "new_string": "DONE"});
    snap!("edit_directory", ctx, "edit_file", {"file_path": "/src", "old_string": "a", "new_string": "b"});
    snap!("edit_missing_args", ctx, "edit_file", {"file_path": "/src/main.rs", "old": "a", "new": "b"});
}

#[tokio::test]
async fn delete() {
    let (backend, ctx) = fixture().await;
    snap!("delete_file", ctx, "delete", {"file_path": "/notes/crlf.txt"});
    assert_eq!(content(backend.as_ref(), "/notes/crlf.txt").await, None);
    snap!("delete_missing", ctx, "delete", {"file_path": "/notes/crlf.txt"});
    snap!("delete_directory", ctx, "delete", {"file_path": "/src"});
    snap!("delete_root", ctx, "delete", {"file_path": "/"});
}

#[tokio::test]
async fn glob() {
    let (_, ctx) = fixture().await;
    snap!("glob_basename", ctx, "glob", {"pattern": "*.rs"});
    snap!("glob_anchored", ctx, "glob", {"pattern": "/*.md"});
    snap!("glob_recursive_braces", ctx, "glob", {"pattern": "**/*.{md,txt}"});
    snap!("glob_with_path", ctx, "glob", {"pattern": "*", "path": "/notes"});
    snap!("glob_no_match", ctx, "glob", {"pattern": "*.py"});
    snap!("glob_missing_dir", ctx, "glob", {"pattern": "*.py", "path": "/nope"});
    snap!("glob_invalid", ctx, "glob", {"pattern": "../*.rs"});
    snap!("glob_missing_pattern", ctx, "glob", {"path": "/src"});

    let mut limits = Limits::default();
    limits.max_list_entries = 2;
    let small = ctx.clone().with_limits(limits);
    snap!("glob_capped", small, "glob", {"pattern": "*"});
}

#[tokio::test]
async fn grep() {
    let (_, ctx) = fixture().await;
    snap!("grep_files", ctx, "grep", {"pattern": "TODO"});
    snap!("grep_content", ctx, "grep", {"pattern": "TODO", "output_mode": "content"});
    snap!("grep_count", ctx, "grep", {"pattern": "item", "output_mode": "count"});
    snap!("grep_glob", ctx, "grep", {"pattern": "fn", "glob": "*.rs", "output_mode": "content"});
    snap!("grep_file_path", ctx, "grep", {"pattern": "guide line 1", "path": "/docs/guide.md", "output_mode": "count"});
    snap!("grep_no_match", ctx, "grep", {"pattern": "nothing like this"});
    snap!("grep_regex_hint", ctx, "grep", {"pattern": "fn (main|helper)"});
    snap!("grep_missing_path", ctx, "grep", {"pattern": "x", "path": "/nope"});
    snap!("grep_empty_pattern", ctx, "grep", {"pattern": ""});
    snap!("grep_bad_mode", ctx, "grep", {"pattern": "x", "output_mode": "lines"});
    snap!("grep_invalid_glob", ctx, "grep", {"pattern": "x", "glob": "../*"});

    let backend = Arc::new(StateBackend::new());
    let long = format!("needle {}\n", "n".repeat(100));
    let big = format!("needle\n{}", "padding line\n".repeat(200));
    fill(
        backend.as_ref(),
        &[
            ("/a.txt", b"needle one\nneedle two\nneedle three\n".to_vec()),
            ("/b.txt", long.into_bytes()),
            ("/c.log", big.into_bytes()),
        ],
    )
    .await;
    let mut limits = Limits::default();
    limits.grep_max_matches = 2;
    limits.grep_line_chars = 30;
    limits.max_file_bytes = 1_024;
    let small = FileAccess::new(backend).with_limits(limits);
    snap!("grep_capped", small, "grep", {"pattern": "needle", "output_mode": "content"});
    snap!("grep_long_line_and_large_file", small, "grep", {"pattern": "needle", "path": "/", "glob": "{b,c}.*", "output_mode": "content"});
}
