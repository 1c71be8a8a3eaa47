//! SkillsMiddleware in the loop: the section, activation by read_file, tools bound to skills in both
//! disclosure modes, pinned skills, reload and per-user visibility.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::json;
use trellis_middleware::backend::{Backend, StateBackend, VirtualPath, WriteMode};
use trellis_middleware::runtime::events::{EventSink, RunEvent};
use trellis_middleware::runtime::model::ToolSpec;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::skills::{BoundTools, SkillSource};
use trellis_middleware::skills::{PIN_SKILLS, RELOAD_SKILLS, RolesFromMetadata, SKILLS_ACTIVATED, Viewer};
use trellis_middleware::*;

use crate::common::caps;
use crate::common::tool_texts;

async fn put(backend: &dyn Backend, path: &str, text: &str) {
    backend
        .write(
            &VirtualPath::parse(path).unwrap(),
            text.to_owned().into(),
            WriteMode::Overwrite,
        )
        .await
        .unwrap();
}

pub(crate) async fn library() -> Arc<StateBackend> {
    let backend = Arc::new(StateBackend::new());
    put(
        backend.as_ref(),
        "/skills/meeting-prep/SKILL.md",
        "---\nname: meeting-prep\ndescription: Prepare a brief for a customer meeting.\n---\n# Meeting prep\nWrite the brief.\n",
    )
    .await;
    put(
        backend.as_ref(),
        "/skills/call-transcripts/SKILL.md",
        "---\nname: call-transcripts\ndescription: Search recorded sales calls.\nmetadata:\n  include_tools: search_calls\n---\n# Calls\nUse search_calls.\n",
    )
    .await;
    put(
        backend.as_ref(),
        "/skills/forecast/SKILL.md",
        "---\nname: forecast\ndescription: Update the pipeline forecast.\nmetadata:\n  roles: manager\n---\n# Forecast\n",
    )
    .await;
    backend
}

fn search_calls() -> Arc<dyn Tool> {
    Arc::new(FnTool::new(
        "search_calls",
        "Search call recordings.",
        json!({"type": "object", "properties": {"account": {"type": "string"}}}),
        |_| async { Ok(ToolOutput::text("call-1: Acme kickoff")) },
    ))
}

fn skills_mw(backend: Arc<StateBackend>) -> SkillsMiddleware {
    let source = SkillSource::new(backend, "/skills").unwrap();
    SkillsMiddleware::new(vec![source]).with_bound_tools(BoundTools::new().tool(search_calls()))
}

async fn bound_tool_flow(mid_conversation: bool) -> (Vec<ModelRequest>, RunOutput) {
    let backend = library().await;
    let model = Arc::new(
        ScriptedModel::new()
            .with_capabilities(caps(mid_conversation))
            .then_tool_calls([ToolCall::new("c1", "search_calls", json!({"account": "Acme"}))])
            .then_tool_calls([ToolCall::new(
                "c2",
                "read_file",
                json!({"file_path": "/skills/call-transcripts/SKILL.md", "limit": 3}),
            )])
            .then_tool_calls([ToolCall::new("c3", "search_calls", json!({"account": "Acme"}))])
            .then_text("Found the Acme kickoff call."),
    );
    let agent = Agent::builder(model.clone())
        .system_prompt("Base.")
        .middleware(FilesystemMiddleware::new(backend.clone()))
        .middleware(skills_mw(backend))
        .build()
        .unwrap();
    let out = agent.run(RunInput::human("find the Acme call")).await.unwrap();
    (model.requests(), out)
}

#[tokio::test]
async fn bound_tools_are_hidden_until_the_skill_is_read_appended_mode() {
    let (requests, out) = bound_tool_flow(false).await;
    let texts = tool_texts(&out);
    assert!(
        texts[0].1 && texts[0].0.contains("search_calls"),
        "hidden tool fails like an unknown tool: {:?}",
        texts[0]
    );
    assert!(!texts[1].1, "a partial read of SKILL.md succeeds");
    assert_eq!(texts[2], ("call-1: Acme kickoff".to_owned(), false));
    let names = |r: &ModelRequest| r.tools.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
    assert!(!names(&requests[0]).contains(&"search_calls".to_owned()));
    assert!(!names(&requests[1]).contains(&"search_calls".to_owned()));
    let after = names(&requests[2]);
    assert_eq!(
        after.last().map(String::as_str),
        Some("search_calls"),
        "appended at the end: {after:?}"
    );
    assert_eq!(
        &after[..after.len() - 1],
        &names(&requests[1])[..],
        "the earlier tool list is a prefix"
    );
    assert_eq!(
        requests[1].system, requests[2].system,
        "the system prompt is unchanged"
    );
    let disclosed: Vec<&ToolSpec> = requests[2]
        .tools
        .iter()
        .skip(requests[1].tools.len())
        .map(|t| &**t)
        .collect();
    insta::assert_yaml_snapshot!("skills_appended_tools", disclosed);
    assert_eq!(
        out.state.get(&SKILLS_ACTIVATED).unwrap().unwrap(),
        vec!["call-transcripts".to_owned()]
    );
}

#[tokio::test]
async fn bound_tools_arrive_in_a_system_message_for_mid_conversation_models() {
    let (requests, out) = bound_tool_flow(true).await;
    assert_eq!(tool_texts(&out)[2], ("call-1: Acme kickoff".to_owned(), false));
    let (before, after) = (&requests[1], &requests[2]);
    assert_eq!(before.tools, after.tools, "the tool list never changes");
    assert_eq!(before.system, after.system);
    let n = before.messages.len();
    assert_eq!(
        before.messages.iter().collect::<Vec<_>>(),
        after.messages.iter().take(n).collect::<Vec<_>>(),
        "the cached prefix is intact"
    );
    let disclosed: Vec<&Message> = after.messages.iter().skip(n).collect();
    let Message::System(system) = disclosed.last().unwrap() else {
        panic!("expected a system message: {disclosed:?}")
    };
    assert_eq!(system.tools.len(), 1);
    assert_eq!(system.tools[0].name, "search_calls");
    insta::assert_yaml_snapshot!("skills_disclosure_message", system);
}

#[tokio::test]
async fn section_is_stable_and_lists_the_library() {
    let backend = library().await;
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([ToolCall::new("c1", "ls", json!({"path": "/skills"}))])
            .then_text("ok"),
    );
    let agent = Agent::builder(model.clone())
        .middleware(FilesystemMiddleware::new(backend.clone()))
        .middleware(skills_mw(backend))
        .build()
        .unwrap();
    agent.run(RunInput::human("hi")).await.unwrap();
    let requests = model.requests();
    assert_eq!(
        requests[0].system, requests[1].system,
        "byte-identical on every call"
    );
    let section = &requests[0]
        .system
        .iter()
        .find(|b| b.source.as_deref() == Some("skills"))
        .unwrap()
        .text;
    for name in ["meeting-prep", "call-transcripts", "forecast"] {
        assert!(section.contains(name), "{name} listed");
    }
    assert!(section.contains("/skills/meeting-prep/SKILL.md"));
    assert!(
        !requests[0].tools.iter().any(|t| t.name == "search_skills"),
        "no search tool while everything is listed"
    );
}

#[tokio::test]
async fn pinned_skills_are_added_once_with_their_tools() {
    let backend = library().await;
    let model = Arc::new(ScriptedModel::new().then_text("first").then_text("second"));
    let agent = Agent::builder(model.clone())
        .middleware(FilesystemMiddleware::new(backend.clone()))
        .middleware(skills_mw(backend))
        .build()
        .unwrap();
    let thread = ThreadId::new("pinned").unwrap();
    let pin = vec!["call-transcripts".to_owned()];
    agent
        .run(
            RunInput::human("/call-transcripts for Acme")
                .thread(thread.clone())
                .slot(&PIN_SKILLS, pin.clone()),
        )
        .await
        .unwrap();
    agent
        .run(RunInput::human("again").thread(thread).slot(&PIN_SKILLS, pin))
        .await
        .unwrap();
    let requests = model.requests();
    let pinned = |r: &ModelRequest| {
        r.messages
            .iter()
            .filter(|m| m.source() == Some("skills.pinned"))
            .count()
    };
    assert_eq!(pinned(&requests[0]), 1, "the pinned body is in the first call");
    assert_eq!(pinned(&requests[1]), 1, "and never added twice");
    let message = requests[0]
        .messages
        .iter()
        .find(|m| m.source() == Some("skills.pinned"))
        .unwrap();
    assert!(message.text().contains("Use search_calls."));
    assert_eq!(message.meta().display_name.as_deref(), Some("/call-transcripts"));
    assert!(
        requests[0].tools.iter().any(|t| t.name == "search_calls"),
        "bound tools come in the same call"
    );
}

#[tokio::test]
async fn reload_picks_up_new_skills_and_rereads_only_changed_files() {
    let backend = library().await;
    let model = Arc::new(ScriptedModel::new().then_text("one").then_text("two"));
    let agent = Agent::builder(model.clone())
        .middleware(skills_mw(backend.clone()))
        .build()
        .unwrap();
    let thread = ThreadId::new("reload").unwrap();
    agent
        .run(RunInput::human("hi").thread(thread.clone()))
        .await
        .unwrap();
    put(
        backend.as_ref(),
        "/skills/competitive-intel-card/SKILL.md",
        "---\nname: competitive-intel-card\ndescription: One-page card on a competitor.\n---\n",
    )
    .await;
    let (sink, mut events) = EventSink::channel();
    agent
        .run(
            RunInput::human("reload")
                .thread(thread)
                .slot(&RELOAD_SKILLS, true)
                .events(sink),
        )
        .await
        .unwrap();
    let requests = model.requests();
    assert!(!section(&requests[0]).contains("competitive-intel-card"));
    assert!(section(&requests[1]).contains("competitive-intel-card"));
    let mut reloaded = None;
    while let Ok(event) = events.try_recv() {
        if let RunEvent::Middleware { kind, data, .. } = event
            && kind == "reloaded"
        {
            reloaded = Some(data);
        }
    }
    let data = reloaded.expect("a reload event");
    assert_eq!(data["read"], 1, "only the new SKILL.md is read: {data}");
    assert_eq!(data["reused"], 3, "{data}");
}

/// The skills section of a request.
pub(crate) fn section(r: &ModelRequest) -> String {
    r.system
        .iter()
        .find(|b| b.source.as_deref() == Some("skills"))
        .unwrap()
        .text
        .clone()
}

/// The skills middleware's `loaded` events of one run on a new thread.
pub(crate) async fn loaded_events(agent: &Agent) -> Vec<serde_json::Value> {
    let (sink, mut events) = EventSink::channel();
    agent.run(RunInput::human("hi").events(sink)).await.unwrap();
    let mut loaded = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let RunEvent::Middleware {
            middleware,
            kind,
            data,
        } = event
            && middleware == "skills"
            && kind == "loaded"
        {
            loaded.push(data);
        }
    }
    loaded
}

/// The `loaded` event of one run on a new thread.
async fn loaded_on_a_new_thread(agent: &Agent) -> serde_json::Value {
    loaded_events(agent).await.pop().expect("a loaded event")
}

#[tokio::test]
async fn new_threads_rescan_against_the_latest_catalog() {
    let backend = library().await;
    let model = Arc::new(
        ScriptedModel::new()
            .then_text("one")
            .then_text("two")
            .then_text("three"),
    );
    let agent = Agent::builder(model.clone())
        .middleware(skills_mw(backend.clone()))
        .build()
        .unwrap();

    let first = loaded_on_a_new_thread(&agent).await;
    assert_eq!(
        (&first["read"], &first["reused"]),
        (&json!(3), &json!(0)),
        "{first}"
    );

    // Nothing changed: nothing is read again, and the section is byte-identical.
    let second = loaded_on_a_new_thread(&agent).await;
    assert_eq!(
        (&second["read"], &second["reused"]),
        (&json!(0), &json!(3)),
        "{second}"
    );

    // One skill changed: only it is read, and the new thread sees the change.
    put(
        backend.as_ref(),
        "/skills/meeting-prep/SKILL.md",
        "---\nname: meeting-prep\ndescription: Prepare a brief and an agenda for a customer meeting.\n---\n",
    )
    .await;
    let third = loaded_on_a_new_thread(&agent).await;
    assert_eq!(
        (&third["read"], &third["reused"]),
        (&json!(1), &json!(2)),
        "{third}"
    );

    let requests = model.requests();
    assert_eq!(section(&requests[0]), section(&requests[1]));
    assert!(!section(&requests[1]).contains("and an agenda"));
    assert!(section(&requests[2]).contains("and an agenda"));
}

#[tokio::test]
async fn skills_are_filtered_per_user() {
    let backend = library().await;
    let run_as = |viewer: Viewer| {
        let backend = backend.clone();
        async move {
            let model = Arc::new(
                ScriptedModel::new()
                    .then_tool_calls([ToolCall::new(
                        "c1",
                        "read_file",
                        json!({"file_path": "/skills/forecast/SKILL.md"}),
                    )])
                    .then_text("done"),
            );
            let skills =
                skills_mw(backend.clone()).with_visibility(Arc::new(RolesFromMetadata::new("roles")));
            let agent = Agent::builder(model.clone())
                .middleware(FilesystemMiddleware::new(backend))
                .middleware(skills)
                .build()
                .unwrap();
            let out = agent
                .run(RunInput::human("forecast").extension(viewer))
                .await
                .unwrap();
            let section = model.requests()[0]
                .system
                .iter()
                .find(|b| b.source.as_deref() == Some("skills"))
                .unwrap()
                .text
                .clone();
            (section, tool_texts(&out)[0].clone())
        }
    };
    let (section, read) = run_as(Viewer::new("rep", ["sales"])).await;
    assert!(!section.contains("forecast"), "invisible skills are not listed");
    assert!(
        read.1 && read.0.contains("not found"),
        "and cannot be read: {read:?}"
    );
    let (section, read) = run_as(Viewer::new("boss", ["manager"])).await;
    assert!(section.contains("forecast"));
    assert!(!read.1, "{read:?}");
}

#[tokio::test]
async fn over_budget_catalog_offers_search_that_reaches_every_skill() {
    let backend = Arc::new(StateBackend::new());
    for i in 0..300 {
        put(
            backend.as_ref(),
            &format!("/lib/skill-{i:03}/SKILL.md"),
            &format!("---\nname: skill-{i:03}\ndescription: Handles task number {i} about topic{i} in detail for the team.\n---\n"),
        )
        .await;
    }
    let source = SkillSource::new(backend.clone(), "/lib").unwrap();
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([ToolCall::new("s1", "search_skills", json!({"query": "topic287"}))])
            .then_text("ok"),
    );
    let agent = Agent::builder(model.clone())
        .middleware(SkillsMiddleware::new(vec![source]).with_budget_tokens(1_000))
        .build()
        .unwrap();
    let out = agent.run(RunInput::human("find it")).await.unwrap();
    let request = &model.requests()[0];
    let section = &request
        .system
        .iter()
        .find(|b| b.source.as_deref() == Some("skills"))
        .unwrap()
        .text;
    assert!(
        trellis_middleware::token_estimate::estimate_tokens(section) <= 1_000,
        "within budget"
    );
    assert!(request.tools.iter().any(|t| t.name == "search_skills"));
    let found = &tool_texts(&out)[0];
    assert!(found.0.starts_with("- skill-287:"), "{found:?}");
}

/// A second middleware over the same sources (what a new process builds) with a persisted catalog
/// reads no `SKILL.md` on its first thread, and still sees a change made in between.
#[tokio::test]
async fn a_persisted_catalog_seeds_a_new_middleware() {
    use trellis_middleware::skills::{CatalogStore, LocalCatalogDir, Persisted};
    let backend = library().await;
    let cache = tempfile::tempdir().unwrap();
    let store: Arc<dyn CatalogStore> = Arc::new(LocalCatalogDir::new(cache.path()));
    let agent = |model: Arc<ScriptedModel>| {
        Agent::builder(model)
            .middleware(
                skills_mw(backend.clone())
                    .with_persisted(vec![Some(Persisted::new("state://skills", store.clone()))]),
            )
            .build()
            .unwrap()
    };
    let first = loaded_on_a_new_thread(&agent(Arc::new(ScriptedModel::new().then_text("one")))).await;
    assert_eq!(
        (&first["read"], &first["reused"]),
        (&json!(3), &json!(0)),
        "{first}"
    );
    let second = loaded_on_a_new_thread(&agent(Arc::new(ScriptedModel::new().then_text("two")))).await;
    assert_eq!(
        (&second["read"], &second["reused"]),
        (&json!(0), &json!(3)),
        "{second}"
    );
    put(
        backend.as_ref(),
        "/skills/meeting-prep/SKILL.md",
        "---\nname: meeting-prep\ndescription: Changed between processes.\n---\n",
    )
    .await;
    let model = Arc::new(ScriptedModel::new().then_text("three"));
    let third = loaded_on_a_new_thread(&agent(model.clone())).await;
    assert_eq!(
        (&third["read"], &third["reused"]),
        (&json!(1), &json!(2)),
        "{third}"
    );
    assert!(section(&model.requests()[0]).contains("Changed between processes."));
}
