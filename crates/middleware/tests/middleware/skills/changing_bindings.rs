//! Tools bound through a resolver label can change while the agent runs (an MCP server adds or
//! removes tools). Before each model call the labels of activated skills are resolved again: a tool
//! that appeared is disclosed in a new message at the end (mid-conversation models) or appended to
//! the tool list, without touching what the model saw before; a tool that is gone is withdrawn.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::json;
use trellis_middleware::backend::{Backend, StateBackend, VirtualPath, WriteMode};
use trellis_middleware::runtime::context::RunContext;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::skills::{BoundTools, SkillSource, ToolResolver};
use trellis_middleware::*;

use crate::common::caps;
use crate::common::tool_texts as results;

const SKILL: &str = "/skills/crm/SKILL.md";

/// Resolves `crm:tools` to whatever tools it currently holds (the test changes them).
#[derive(Debug, Default)]
struct ChangingResolver {
    tools: Mutex<Vec<Arc<dyn Tool>>>,
}

impl ChangingResolver {
    fn set(&self, names: &[&str]) {
        *self.tools.lock().unwrap() = names.iter().map(|n| echo(n)).collect();
    }
}

#[async_trait]
impl ToolResolver for ChangingResolver {
    async fn resolve(&self, label: &str, _cx: &RunContext) -> Vec<Arc<dyn Tool>> {
        if label == "crm:tools" {
            self.tools.lock().unwrap().clone()
        } else {
            Vec::new()
        }
    }
}

fn echo(name: &str) -> Arc<dyn Tool> {
    let answer = format!("{name} ran");
    Arc::new(FnTool::new(
        name,
        format!("The {name} tool."),
        json!({"type": "object", "properties": {}}),
        move |_| {
            let answer = answer.clone();
            async move { Ok(ToolOutput::text(answer)) }
        },
    ))
}

/// A tool that changes the resolver's tools to `to` when called.
fn changer(name: &str, resolver: &Arc<ChangingResolver>, to: &'static [&'static str]) -> Arc<dyn Tool> {
    let resolver = resolver.clone();
    Arc::new(FnTool::new(
        name,
        "Changes the CRM's tools.",
        json!({"type": "object", "properties": {}}),
        move |_| {
            resolver.set(to);
            async { Ok(ToolOutput::text("changed")) }
        },
    ))
}

/// Read the skill (binds `alpha`), `grow` (adds `beta`), call `beta`, `shrink` (drops `beta`),
/// call `beta` again.
async fn flow(mid_conversation: bool) -> (Vec<ModelRequest>, RunOutput) {
    let backend = Arc::new(StateBackend::new());
    backend
        .write(
            &VirtualPath::parse(SKILL).unwrap(),
            "---\nname: crm\ndescription: The CRM.\nmetadata:\n  include_tools: crm:tools\n---\n# CRM\n"
                .to_owned()
                .into(),
            WriteMode::Overwrite,
        )
        .await
        .unwrap();
    let resolver = Arc::new(ChangingResolver::default());
    resolver.set(&["alpha"]);
    let model = Arc::new(
        ScriptedModel::new()
            .with_capabilities(caps(mid_conversation))
            .then_tool_calls([ToolCall::new("c1", "read_file", json!({"file_path": SKILL}))])
            .then_tool_calls([ToolCall::new("c2", "grow", json!({}))])
            .then_tool_calls([ToolCall::new("c3", "beta", json!({}))])
            .then_tool_calls([ToolCall::new("c4", "shrink", json!({}))])
            .then_tool_calls([ToolCall::new("c5", "beta", json!({}))])
            .then_text("done"),
    );
    let skills = SkillsMiddleware::new(vec![SkillSource::new(backend.clone(), "/skills").unwrap()])
        .with_bound_tools(BoundTools::new().resolver(resolver.clone()));
    let agent = Agent::builder(model.clone())
        .middleware(FilesystemMiddleware::new(backend))
        .middleware(skills)
        .tool_arc(changer("grow", &resolver, &["alpha", "beta"]))
        .tool_arc(changer("shrink", &resolver, &["alpha"]))
        .build()
        .unwrap();
    let out = agent.run(RunInput::human("go")).await.unwrap();
    (model.requests(), out)
}

fn names(r: &ModelRequest) -> Vec<String> {
    r.tools.iter().map(|t| t.name.clone()).collect()
}

#[tokio::test]
async fn an_appeared_tool_is_appended_and_a_gone_one_withdrawn() {
    let (requests, out) = flow(false).await;
    let results = results(&out);
    assert_eq!(results[2], ("beta ran".to_owned(), false));
    assert!(results[4].1 && results[4].0.contains("beta"), "{:?}", results[4]);

    let (read, grown, shrunk) = (names(&requests[1]), names(&requests[2]), names(&requests[4]));
    assert_eq!(read.last().map(String::as_str), Some("alpha"));
    assert_eq!(&grown[..read.len()], &read[..], "the earlier list is a prefix");
    assert_eq!(&grown[read.len()..], ["beta".to_owned()]);
    assert_eq!(shrunk, read, "beta withdrawn, alpha stays");
}

#[tokio::test]
async fn an_appeared_tool_arrives_in_a_new_message_at_the_end() {
    let (requests, out) = flow(true).await;
    assert_eq!(results(&out)[2], ("beta ran".to_owned(), false));
    let (before, after) = (&requests[1], &requests[2]);
    assert_eq!(before.tools, after.tools, "the tool list never changes");
    let n = before.messages.len();
    assert_eq!(
        before.messages.iter().collect::<Vec<_>>(),
        after.messages.iter().take(n).collect::<Vec<_>>(),
        "the cached prefix is intact"
    );
    let disclosures = |r: &ModelRequest| -> Vec<Vec<String>> {
        r.messages
            .iter()
            .filter_map(|m| match m {
                Message::System(s) => Some(s.tools.iter().map(|t| t.name.clone()).collect()),
                _ => None,
            })
            .collect()
    };
    assert_eq!(disclosures(before), [vec!["alpha".to_owned()]]);
    assert_eq!(
        disclosures(after),
        [vec!["alpha".to_owned()], vec!["beta".to_owned()]]
    );
    let Some(Message::System(last)) = after.messages.last() else {
        panic!(
            "the new disclosure is the last message: {:?}",
            after.messages.last()
        );
    };
    assert_eq!(last.tools[0].name, "beta");
    // After `shrink`, beta's message no longer carries it.
    assert_eq!(disclosures(&requests[4]), [vec!["alpha".to_owned()]]);
}
