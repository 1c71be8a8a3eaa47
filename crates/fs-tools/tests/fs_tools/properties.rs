//! Property tests: edit_file agrees with `str::replace`, paging read_file visits every line once, and
//! no argument value panics a tool.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use trellis_backend::StateBackend;
use trellis_fs_tools::{EditFileTool, FileAccess, Limits, ReadFileTool, Tool, ToolContext, file_tools};

use crate::common::{content, fill, fixture_files};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn replace_all_equals_str_replace(
        text in "[ab\n]{0,40}",
        old in "[ab\n]{1,3}",
        new in "[abc\n]{0,3}",
    ) {
        runtime().block_on(async {
            let backend = Arc::new(StateBackend::new());
            fill(backend.as_ref(), &[("/f.txt", text.clone().into_bytes())]).await;
            let ctx = FileAccess::new(backend.clone());
            let args = json!({"file_path": "/f.txt", "old_string": old, "new_string": new, "replace_all": true});
            let out = EditFileTool::new(ctx.clone()).call(args, &ToolContext::detached("call_1")).await.unwrap();
            let after = content(backend.as_ref(), "/f.txt").await.unwrap();
            if old != new && text.contains(old.as_str()) {
                prop_assert!(!out.is_error, "{:?}", out);
                prop_assert_eq!(after, text.replace(old.as_str(), new.as_str()));
            } else {
                prop_assert!(out.is_error, "{:?}", out);
                prop_assert_eq!(after, text);
            }
            Ok(())
        })?;
    }

    #[test]
    fn single_replacement_matches_replacen_or_refuses(
        text in "[ab\n]{0,30}",
        old in "[ab]{1,3}",
        new in "[c]{0,2}",
    ) {
        runtime().block_on(async {
            let backend = Arc::new(StateBackend::new());
            fill(backend.as_ref(), &[("/f.txt", text.clone().into_bytes())]).await;
            let ctx = FileAccess::new(backend.clone());
            let args = json!({"file_path": "/f.txt", "old_string": old, "new_string": new});
            let out = EditFileTool::new(ctx.clone()).call(args, &ToolContext::detached("call_1")).await.unwrap();
            let after = content(backend.as_ref(), "/f.txt").await.unwrap();
            if text.matches(old.as_str()).count() == 1 {
                prop_assert!(!out.is_error, "{:?}", out);
                prop_assert_eq!(after, text.replacen(old.as_str(), new.as_str(), 1));
            } else {
                prop_assert!(out.is_error, "{:?}", out);
                prop_assert_eq!(after, text);
            }
            Ok(())
        })?;
    }

    #[test]
    fn paging_returns_every_line_once(
        lines in prop::collection::vec("[a-z \t\u{e9}\u{4e16}]{0,300}", 1..60),
        final_newline in any::<bool>(),
        limit in 1u64..30,
    ) {
        let mut text = lines.join("\n");
        if final_newline {
            text.push('\n');
        }
        // A final line break ends the last line rather than starting a new one: without an added
        // final newline, a trailing empty element means the text ends with a line break.
        let mut expected = lines.clone();
        if !final_newline && expected.last().is_some_and(String::is_empty) {
            expected.pop();
        }
        runtime().block_on(async {
            let backend = Arc::new(StateBackend::new());
            fill(backend.as_ref(), &[("/f.txt", text.clone().into_bytes())]).await;
            let mut limits = Limits::default();
            limits.output_chars = 2_000;
            limits.line_chunk_chars = 50;
            let ctx = FileAccess::new(backend).with_limits(limits);
            let read = ReadFileTool::new(ctx.clone());
            let mut seen: Vec<(usize, String)> = Vec::new();
            let mut offset = 0u64;
            for _ in 0..200 {
                let out = read.call(json!({"file_path": "/f.txt", "offset": offset, "limit": limit}), &ToolContext::detached("call_1")).await.unwrap();
                prop_assert!(!out.is_error, "{:?}", out);
                if expected.is_empty() {
                    prop_assert_eq!(out.text_content(), "[/f.txt is empty]");
                    return Ok(());
                }
                prop_assert!(out.text_content().chars().count() <= 2_000, "over budget: {}", out.text_content().len());
                let text = out.text_content();
                let (header, body) = text.split_once('\n').unwrap_or((text.as_str(), ""));
                for row in body.split('\n') {
                    let (marker, piece) = row.split_once('\t').unwrap();
                    let marker = marker.trim_start();
                    let (line, cont) = marker.split_once('.').map_or((marker, false), |(l, _)| (l, true));
                    let line: usize = line.parse().unwrap();
                    if cont {
                        let last = seen.last_mut().unwrap();
                        prop_assert_eq!(last.0, line);
                        last.1.push_str(piece);
                    } else {
                        seen.push((line, piece.to_owned()));
                    }
                }
                match header.split("next offset: ").nth(1) {
                    Some(rest) => {
                        let next: u64 = rest.split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap();
                        prop_assert!(next > offset);
                        offset = next;
                    }
                    None => break,
                }
            }
            let numbers: Vec<usize> = seen.iter().map(|(n, _)| *n).collect();
            prop_assert_eq!(numbers, (1..=expected.len()).collect::<Vec<_>>());
            let texts: Vec<String> = seen.into_iter().map(|(_, t)| t).collect();
            prop_assert_eq!(texts, expected);
            Ok(())
        })?;
    }
}

/// Strings a model might plausibly (or implausibly) send.
fn any_string() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("/".to_owned()),
        Just("/src/main.rs".to_owned()),
        Just("/docs/guide.md".to_owned()),
        Just("/notes".to_owned()),
        Just("../../etc/passwd".to_owned()),
        Just("C:\\x".to_owned()),
        Just("**/*.{rs,md}".to_owned()),
        Just("{a,{b,c}}[!x]?*".to_owned()),
        Just("content".to_owned()),
        Just("count".to_owned()),
        Just("TODO".to_owned()),
        Just("\n".to_owned()),
        Just("-1".to_owned()),
        Just("18446744073709551615".to_owned()),
        "\\PC{0,40}",
        "[/a-z.*{}\\[\\]!?\n]{0,20}",
    ]
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        any_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((field_name(), inner), 0..6)
                .prop_map(|fields| Value::Object(fields.into_iter().collect::<Map<String, Value>>())),
        ]
    })
}

fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec![
            "path", "file_path", "offset", "limit", "content", "overwrite", "old_string", "new_string",
            "replace_all", "pattern", "glob", "output_mode",
        ])
        .prop_map(str::to_owned),
        1 => "[a-z_]{1,8}",
    ]
}

/// Objects with only known fields, so calls get past argument parsing more often.
fn plausible_args() -> impl Strategy<Value = Value> {
    let value = prop_oneof![
        any_string().prop_map(Value::String),
        any::<u64>().prop_map(|n| json!(n)),
        (0u64..200).prop_map(|n| json!(n)),
        any::<bool>().prop_map(Value::Bool),
    ];
    prop::collection::vec((field_name(), value), 0..6)
        .prop_map(|fields| Value::Object(fields.into_iter().collect::<Map<String, Value>>()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn no_argument_value_panics_a_tool(args in prop_oneof![any_json(), plausible_args()]) {
        runtime().block_on(async {
            let backend = Arc::new(StateBackend::new());
            fill(backend.as_ref(), &fixture_files()).await;
            let ctx = FileAccess::new(backend);
            for tool in file_tools(ctx.clone()) {
                let out = tool.call(args.clone(), &ToolContext::detached("call_1")).await.unwrap();
                prop_assert!(!out.text_content().is_empty(), "{} gave no text", tool.name());
                prop_assert_eq!(out.is_error, out.text_content().starts_with("Error: "), "{}: {:?}", tool.name(), out);
            }
            Ok(())
        })?;
    }
}
