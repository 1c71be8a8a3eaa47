//! Hostile skill libraries, memory files and paths, end to end: what a person who can write to a
//! skill source (often a shared bucket) or a memory file can and cannot do to discovery, the prompt,
//! diagnostics and the file tools. Each test names the property it proves; docs/security.md points
//! here. The tests are in three files: `adversarial/skills_discovery.rs` (discovery survives hostile
//! files), `adversarial/skills_prompt.rs` (attacker text stays inert in what the model reads) and
//! `adversarial/skills_file_tools.rs` (paths and hidden skills in the file tools).
//!
//! This file: the file tools refuse traversal, encoded and linked paths, and hidden skills are absent
//! for every file tool and for subagents.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::{Value, json};
use trellis_middleware::backend::{Backend, BackendExt, FilesystemBackend, StateBackend};
use trellis_middleware::runtime::message::ContentBlock;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::skills::SkillSource;
use trellis_middleware::skills::{RolesFromMetadata, Viewer};
use trellis_middleware::subagents::SubAgent;
use trellis_middleware::tools::{FileAccess, ToolContext};
use trellis_middleware::*;

use crate::adversarial::common::*;
use crate::common::tool_texts;

// --------------------------------------------------------- 4. symlinks and encodings: file tools

/// Paths given to the file tools: `..`, percent-escapes of `.`, `/` and `\`, NUL, backslashes, host
/// paths and links out of the root are refused with an error, never decoded or followed, and nothing
/// outside the root is read, changed or created.
#[tokio::test]
async fn file_tools_refuse_traversal_encoded_and_linked_paths() {
    let outer = tempfile::tempdir().unwrap();
    let root = outer.path().join("root");
    let outside = outer.path().join("outside");
    write(&outside, "secret.txt", "TOP-SECRET");
    write(&root, "skills/good/SKILL.md", skill_md("good", "Fine."));
    std::os::unix::fs::symlink(&outside, root.join("skills/escape")).unwrap();
    let backend: Arc<dyn Backend> = Arc::new(FilesystemBackend::new(&root).unwrap());
    let tools = trellis_middleware::tools::file_tools(FileAccess::new(backend));
    let context = ToolContext::detached("call_1");
    let tool = |name: &str| tools.iter().find(|t| t.name() == name).unwrap().clone();

    let hostile = [
        "../outside/secret.txt",
        "/skills/../../outside/secret.txt",
        "..%2f..%2foutside%2fsecret.txt",
        "%2e%2e/outside/secret.txt",
        "%2E%2E%2Foutside",
        "/skills/..%5c..%5csecret.txt",
        "/skills\\..\\..\\outside\\secret.txt",
        "/skills/good\0/SKILL.md",
        "/skills/escape/secret.txt",
        "\u{FF0E}\u{FF0E}/outside/secret.txt",
        "C:\\outside\\secret.txt",
        "~/secret.txt",
    ];
    for path in hostile {
        let calls: [(&str, Value); 7] = [
            ("read_file", json!({"file_path": path})),
            ("ls", json!({"path": path})),
            ("glob", json!({"pattern": "**", "path": path})),
            ("grep", json!({"pattern": "SECRET", "path": path})),
            ("write_file", json!({"file_path": path, "content": "pwned"})),
            (
                "edit_file",
                json!({"file_path": path, "old_string": "TOP", "new_string": "PWN"}),
            ),
            ("delete", json!({"file_path": path})),
        ];
        for (name, args) in calls {
            let out = tool(name).call(args, &context).await.unwrap();
            assert!(
                out.is_error,
                "{name} {path:?} was not refused: {}",
                out.text_content()
            );
            assert!(
                !out.text_content().contains("TOP-SECRET"),
                "{name} {path:?}: {}",
                out.text_content()
            );
        }
    }
    // Searches from the root do not follow the link out.
    let grep = tool("grep")
        .call(json!({"pattern": "TOP-SECRET"}), &context)
        .await
        .unwrap();
    assert!(
        !grep.text_content().contains("outside") && !grep.text_content().contains("TOP-SECRET:"),
        "{}",
        grep.text_content()
    );
    let glob = tool("glob")
        .call(json!({"pattern": "**/*.txt"}), &context)
        .await
        .unwrap();
    assert!(!glob.text_content().contains("secret"), "{}", glob.text_content());
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "TOP-SECRET"
    );
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        1,
        "nothing created outside"
    );
}

// -------------------------------------------- visibility: hidden skills are absent for file tools

async fn visibility_library() -> Arc<StateBackend> {
    let b = Arc::new(StateBackend::new());
    put(
        b.as_ref(),
        "/skills/meeting-prep/SKILL.md",
        skill_md("meeting-prep", "Prepare a meeting brief."),
    )
    .await;
    put(
        b.as_ref(),
        "/skills/forecast/SKILL.md",
        "---\nname: forecast\ndescription: Update the pipeline forecast.\nmetadata:\n  roles: manager\n---\n# Forecast\nQUARTERLY-TARGETS live in targets.md.\n",
    )
    .await;
    put(
        b.as_ref(),
        "/skills/forecast/targets.md",
        "QUARTERLY-TARGETS: 12M\n",
    )
    .await;
    b
}

/// The calls a curious user makes, at a hidden skill and at a path that does not exist. Outputs
/// for the two must not differ except in the path.
fn probing_calls(dir: &str) -> Vec<ToolCall> {
    let calls: Vec<(&str, Value)> = vec![
        ("ls", json!({"path": "/skills"})),
        ("ls", json!({"path": dir})),
        ("glob", json!({"pattern": "**/*.md", "path": "/"})),
        ("glob", json!({"pattern": "*", "path": dir})),
        (
            "grep",
            json!({"pattern": "QUARTERLY-TARGETS", "path": "/", "output_mode": "content"}),
        ),
        ("grep", json!({"pattern": "QUARTERLY-TARGETS", "path": dir})),
        ("read_file", json!({"file_path": format!("{dir}/SKILL.md")})),
        ("read_file", json!({"file_path": format!("{dir}/targets.md")})),
        (
            "edit_file",
            json!({"file_path": format!("{dir}/targets.md"), "old_string": "12M", "new_string": "0"}),
        ),
        ("delete", json!({"file_path": format!("{dir}/targets.md")})),
        (
            "write_file",
            json!({"file_path": format!("{dir}/SKILL.md"), "content": "---\nname: forecast\ndescription: pwned\n---\n", "overwrite": true}),
        ),
    ];
    calls
        .into_iter()
        .enumerate()
        .map(|(i, (name, args))| ToolCall::new(format!("c{i}"), name, args))
        .collect()
}

async fn probe(backend: Arc<StateBackend>, viewer: Viewer, dir: &str) -> Vec<(String, bool)> {
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls(probing_calls(dir))
            .then_text("done"),
    );
    let skills = SkillsMiddleware::new(vec![SkillSource::new(backend.clone(), "/skills").unwrap()])
        .with_visibility(Arc::new(RolesFromMetadata::new("roles")));
    let agent = Agent::builder(model)
        .middleware(FilesystemMiddleware::new(backend))
        .middleware(skills)
        .build()
        .unwrap();
    let out = agent
        .run(RunInput::human("look around").extension(viewer))
        .await
        .unwrap();
    tool_texts(&out)
}

/// For a viewer without the role, a hidden skill's directory does not exist for any file tool: `ls`,
/// `glob` and `grep` leave it out, `read_file`, `edit_file` and `delete` answer exactly as for a
/// missing path, and `write_file` is refused, so its files are neither shown nor changed. A viewer
/// with the role sees and reaches everything.
#[tokio::test]
async fn hidden_skills_are_absent_for_every_file_tool() {
    let backend = visibility_library().await;
    let rep = probe(backend.clone(), Viewer::new("rep", ["sales"]), "/skills/forecast").await;
    let missing = probe(backend.clone(), Viewer::new("rep", ["sales"]), "/skills/nope").await;
    for (i, ((hidden, hidden_err), (absent, absent_err))) in rep.iter().zip(&missing).enumerate().take(10) {
        assert!(
            !hidden.contains("12M") && !hidden.contains("pipeline"),
            "call {i} leaked: {hidden}"
        );
        assert_eq!(
            (hidden.replace("/skills/forecast", "/skills/nope"), hidden_err),
            (absent.clone(), absent_err),
            "call {i} tells a hidden skill from a missing one"
        );
    }
    assert!(
        !rep[0].0.contains("forecast") && rep[0].0.contains("meeting-prep"),
        "{}",
        rep[0].0
    );
    let (write, is_error) = &rep[10];
    assert!(*is_error && write.contains("refused access"), "{write}");
    assert_eq!(
        backend
            .read_to_string(&vp("/skills/forecast/targets.md"))
            .await
            .unwrap(),
        "QUARTERLY-TARGETS: 12M\n",
        "nothing was edited or deleted"
    );
    assert!(
        backend
            .read_to_string(&vp("/skills/forecast/SKILL.md"))
            .await
            .unwrap()
            .contains("Update the pipeline")
    );

    let boss = probe(
        backend.clone(),
        Viewer::new("boss", ["manager"]),
        "/skills/forecast",
    )
    .await;
    assert!(boss[0].0.contains("forecast"), "{}", boss[0].0);
    assert!(
        boss[4].0.contains("QUARTERLY-TARGETS") && boss[6].0.contains("# Forecast"),
        "{boss:?}"
    );
    assert!(boss.iter().take(9).all(|(_, e)| !e), "{boss:?}");
}

/// Subagents inherit the hidden directories: a subagent whose file tools share the parent's backend
/// cannot list a skill its user may not see.
#[tokio::test]
async fn hidden_skills_stay_hidden_from_subagents() {
    let backend = visibility_library().await;
    let child_model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([
                ToolCall::new("k1", "ls", json!({"path": "/skills"})),
                ToolCall::new(
                    "k2",
                    "grep",
                    json!({"pattern": "QUARTERLY", "output_mode": "content"}),
                ),
            ])
            .then_text("listed"),
    );
    let child = SubAgent::new("scout", "Looks around.")
        .model(child_model.clone())
        .tools(trellis_middleware::tools::file_tools(FileAccess::new(
            backend.clone(),
        )));
    let parent = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([ToolCall::new(
                "t1",
                "task",
                json!({"description": "List the skills.", "subagent_type": "scout"}),
            )])
            .then_text("done"),
    );
    let skills = SkillsMiddleware::new(vec![SkillSource::new(backend.clone(), "/skills").unwrap()])
        .with_visibility(Arc::new(RolesFromMetadata::new("roles")));
    let agent = Agent::builder(parent)
        .middleware(skills)
        .middleware(SubAgentMiddleware::new([child]).unwrap())
        .build()
        .unwrap();
    agent
        .run(RunInput::human("go").extension(Viewer::new("rep", ["sales"])))
        .await
        .unwrap();
    let seen: Vec<String> = child_model
        .last_request()
        .unwrap()
        .messages
        .iter()
        .filter_map(|m| m.as_tool())
        .map(|t| t.content.iter().filter_map(ContentBlock::as_text).collect())
        .collect();
    assert_eq!(seen.len(), 2);
    assert!(
        seen[0].contains("meeting-prep") && !seen[0].contains("forecast"),
        "{}",
        seen[0]
    );
    assert!(
        seen[1].starts_with("No matches") && !seen[1].contains("targets.md"),
        "{}",
        seen[1]
    );
}
