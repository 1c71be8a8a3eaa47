//! The per-user layer of memory and skills: each run's user sees the agent's memory and skills plus
//! their own (`agents/*.md`, `agents/skills/`), nobody else's; a personal skill shadows an
//! organisation skill of its name for that user only; bad user ids are refused by type; the caches
//! are bounded and the organisation catalog is shared.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::json;
use trellis_middleware::backend::{Backend, BackendExt, StateBackend, VirtualPath, WriteMode};
use trellis_middleware::memory::MemoryError;
use trellis_middleware::runtime::context::{Extensions, RunContext};
use trellis_middleware::runtime::message::AiMessage;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::skills::{
    BoundTools, LayeredCatalog, PIN_SKILLS, PersonalSkills, RolesFromMetadata, SKILLS, SKILLS_ACTIVATED,
    SkillSource,
};
use trellis_middleware::tools::{UserFiles, UserIdentity, UserSpaces};
use trellis_middleware::users::{UserHomeError, UserHomes};
use trellis_middleware::*;

use crate::common::{caps, put};

fn skill_md(name: &str, description: &str, extra: &str) -> String {
    format!("---\nname: {name}\ndescription: {description}\n{extra}---\n# {name}\nSteps for {name}.\n")
}

/// The agent's files (`/AGENTS.md`, `/skills/…`) and two users' workspaces under `/users`.
async fn store() -> Arc<StateBackend> {
    let s = Arc::new(StateBackend::new());
    put(s.as_ref(), "/AGENTS.md", "# Team\n- Answer in English.\n").await;
    for (name, description, extra) in [
        ("meeting-prep", "Prepare a brief for a customer meeting.", ""),
        (
            "forecast",
            "Update the pipeline forecast.",
            "metadata:\n  roles: manager\n",
        ),
        (
            "call-transcripts",
            "Search recorded sales calls.",
            "metadata:\n  include_tools: search_calls\n",
        ),
    ] {
        put(
            s.as_ref(),
            &format!("/skills/{name}/SKILL.md"),
            &skill_md(name, description, extra),
        )
        .await;
    }
    put(
        s.as_ref(),
        "/users/ada/agents/AGENTS.md",
        "Ada works on the Acme account.\n",
    )
    .await;
    put(
        s.as_ref(),
        "/users/ada/agents/USER.md",
        "Ada prefers bullet points. ada-secret-7731\n",
    )
    .await;
    put(
        s.as_ref(),
        "/users/ada/agents/MEMORY.md",
        "- Acme renewal is in March.\n",
    )
    .await;
    put(
        s.as_ref(),
        "/users/ada/agents/skills/ada-notes/SKILL.md",
        &skill_md("ada-notes", "Ada's way of writing call notes.", ""),
    )
    .await;
    put(
        s.as_ref(),
        "/users/ada/agents/skills/meeting-prep/SKILL.md",
        &skill_md("meeting-prep", "Ada's own meeting brief format.", ""),
    )
    .await;
    put(
        s.as_ref(),
        "/users/bob/agents/USER.md",
        "Bob likes long answers. bob-secret-4410\n",
    )
    .await;
    put(
        s.as_ref(),
        "/users/bob/agents/skills/bob-crm/SKILL.md",
        &skill_md(
            "bob-crm",
            "Bob's CRM export.",
            "metadata:\n  include_tools: search_calls\n",
        ),
    )
    .await;
    s
}

fn homes(store: &Arc<StateBackend>) -> UserHomes {
    UserHomes::new().with_user_spaces(UserSpaces::new(
        store.clone(),
        VirtualPath::parse("/users").unwrap(),
    ))
}

fn search_calls() -> Arc<dyn Tool> {
    Arc::new(FnTool::new(
        "search_calls",
        "Search call recordings.",
        json!({"type": "object", "properties": {}}),
        |_| async { Ok(ToolOutput::text("call-1")) },
    ))
}

fn skills(store: &Arc<StateBackend>) -> SkillsMiddleware {
    SkillsMiddleware::new(vec![
        SkillSource::labeled(store.clone(), "/skills", "Org").unwrap(),
    ])
    .with_personal_skills(
        PersonalSkills::new("agents/skills")
            .unwrap()
            .with_homes(homes(store)),
    )
    .with_bound_tools(BoundTools::new().tool(search_calls()))
}

fn memory(store: &Arc<StateBackend>) -> MemoryMiddleware {
    MemoryMiddleware::new(store.clone(), ["/AGENTS.md"])
        .unwrap()
        .with_user_sources(["agents/AGENTS.md", "agents/USER.md", "agents/MEMORY.md"])
        .unwrap()
        .with_user_homes(homes(store))
}

fn agent(model: Arc<ScriptedModel>, skills: SkillsMiddleware, memory: MemoryMiddleware) -> Agent {
    Agent::builder(model)
        .system_prompt("Base prompt.")
        .middleware(skills)
        .middleware(PromptCachingMiddleware::new())
        .middleware(memory)
        .build()
        .unwrap()
}

fn block<'a>(req: &'a ModelRequest, source: &str) -> &'a str {
    req.system
        .iter()
        .find(|b| b.source.as_deref() == Some(source))
        .map(|b| b.text.as_str())
        .unwrap_or_default()
}

fn as_user(user: &str) -> RunInput {
    RunInput::human("hi").extension(UserIdentity::new(user))
}

/// Records the skills state each model call sees (the slot is private: runs do not return it).
#[derive(Debug, Clone, Default)]
struct Capture(Arc<std::sync::Mutex<Vec<skills::SkillsState>>>);

#[async_trait::async_trait]
impl Middleware for Capture {
    fn name(&self) -> &str {
        "capture"
    }

    async fn before_model(&self, state: &mut State, _cx: &RunContext) -> Result<(), AgentError> {
        if let Some(skills) = state.get(&SKILLS)? {
            self.0.lock().unwrap().push(skills.clone());
        }
        Ok(())
    }
}

fn texts(n: usize) -> Arc<ScriptedModel> {
    let mut model = ScriptedModel::new().with_capabilities(caps(false));
    for _ in 0..n {
        model = model.then_text("ok");
    }
    Arc::new(model)
}

#[tokio::test]
async fn each_user_sees_the_agents_layer_and_only_their_own() {
    let store = store().await;
    let model = texts(3);
    let agent = agent(model.clone(), skills(&store), memory(&store));
    agent.run(as_user("ada")).await.unwrap();
    agent.run(as_user("bob")).await.unwrap();
    agent.run(RunInput::human("hi")).await.unwrap();
    let requests = model.requests();
    let (ada, bob, anonymous) = (&requests[0], &requests[1], &requests[2]);

    let (ada_mem, bob_mem) = (block(ada, "memory"), block(bob, "memory"));
    for mem in [ada_mem, bob_mem, block(anonymous, "memory")] {
        assert!(
            mem.contains("Answer in English."),
            "the agent's memory for all: {mem}"
        );
    }
    assert!(ada_mem.contains("ada-secret-7731") && ada_mem.contains("Acme renewal"));
    assert!(
        ada_mem.find("Answer in English.") < ada_mem.find("Ada works on"),
        "the user's memory comes after the agent's"
    );
    assert!(ada_mem.contains("<memory path=\"/workspace/agents/MEMORY.md\">"));
    assert!(!ada_mem.contains("bob-secret-4410"));
    assert!(bob_mem.contains("bob-secret-4410") && !bob_mem.contains("ada-secret"));
    assert!(
        !bob_mem.contains("<memory path=\"/workspace/agents/MEMORY.md\">"),
        "bob has none: skipped"
    );
    assert!(
        bob_mem.contains(
            "Not created yet: `/workspace/agents/AGENTS.md`, `/workspace/agents/MEMORY.md`; create one with `write_file`"
        ),
        "bob is told where his memory can go: {bob_mem}"
    );
    assert!(
        !block(anonymous, "memory").contains("This user's memory"),
        "no user, no user note"
    );
    assert!(!block(anonymous, "memory").contains("-secret-"));

    let (ada_sk, bob_sk) = (block(ada, "skills"), block(bob, "skills"));
    let anon_sk = block(anonymous, "skills");
    assert!(ada_sk.contains("/workspace/agents/skills/ada-notes/SKILL.md"));
    assert!(!ada_sk.contains("bob-crm"));
    assert!(bob_sk.contains("bob-crm") && !bob_sk.contains("ada-notes"));
    assert!(
        !anon_sk.contains("/workspace/"),
        "no user, no personal skills: {anon_sk}"
    );
    assert!(
        bob_sk.contains("Prepare a brief for a customer meeting."),
        "bob sees the org's meeting-prep"
    );
}

#[tokio::test]
async fn a_personal_skill_shadows_the_org_skill_of_its_name_for_its_user_only() {
    let store = store().await;
    let model = texts(2);
    let agent = agent(model.clone(), skills(&store), memory(&store));
    agent.run(as_user("ada")).await.unwrap();
    agent.run(as_user("bob")).await.unwrap();
    let requests = model.requests();
    let ada_sk = block(&requests[0], "skills");
    assert!(ada_sk.contains("Ada's own meeting brief format."));
    assert!(
        !ada_sk.contains("Prepare a brief for a customer meeting."),
        "the org's meeting-prep is not listed for ada"
    );
    assert!(
        ada_sk.contains("<skill_load_warnings>")
            && ada_sk.contains("personal skill \"meeting-prep\" (/workspace/agents/skills/meeting-prep/SKILL.md) replaces the skill of the same name from Org"),
        "{ada_sk}"
    );
    let bob_sk = block(&requests[1], "skills");
    assert!(
        !bob_sk.contains("skill_load_warnings"),
        "no notice for bob: {bob_sk}"
    );
    assert!(bob_sk.contains("Prepare a brief for a customer meeting."));
}

#[tokio::test]
async fn snapshot_first_request_with_agent_memory_user_memory_org_and_personal_skills() {
    let store = store().await;
    let model = texts(1);
    let agent = agent(model.clone(), skills(&store), memory(&store));
    agent.run(as_user("ada")).await.unwrap();
    let request = model.requests().remove(0);
    let sources: Vec<&str> = request
        .system
        .iter()
        .map(|b| b.source.as_deref().unwrap_or("prompt"))
        .collect();
    assert_eq!(sources, ["prompt", "skills", "memory"]);
    insta::assert_snapshot!("user_layer_skills_section", block(&request, "skills"));
    insta::assert_snapshot!("user_layer_memory_section", block(&request, "memory"));
}

#[tokio::test]
async fn personal_skills_activate_pin_bind_tools_and_follow_visibility_like_org_skills() {
    let store = store().await;
    put(
        store.as_ref(),
        "/users/bob/agents/skills/bob-board/SKILL.md",
        &skill_md("bob-board", "Bob's board pack.", "metadata:\n  roles: manager\n"),
    )
    .await;
    let model = Arc::new(
        ScriptedModel::new()
            .with_capabilities(caps(false))
            .then_tool_calls([ToolCall::new(
                "r1",
                "read_file",
                json!({"file_path": "/workspace/agents/skills/bob-crm/SKILL.md"}),
            )])
            .then_text("read")
            .then_text("pinned"),
    );
    let reader = FnTool::new(
        "read_file",
        "Read a file.",
        json!({"type": "object", "properties": {"file_path": {"type": "string"}}}),
        |_| async { Ok(ToolOutput::text("---\nname: bob-crm\n---")) },
    );
    let skills = skills(&store).with_visibility(Arc::new(RolesFromMetadata::new("roles")));
    let agent = Agent::builder(model.clone())
        .middleware(skills)
        .tool(reader)
        .build()
        .unwrap();
    let thread = ThreadId::new("bob-1").unwrap();
    let out = agent.run(as_user("bob").thread(thread.clone())).await.unwrap();
    assert_eq!(
        out.state.get(&SKILLS_ACTIVATED).unwrap().unwrap(),
        vec!["bob-crm".to_owned()]
    );
    let requests = model.requests();
    let tools: Vec<&str> = requests[1].tools.iter().map(|t| t.name.as_str()).collect();
    assert!(
        tools.contains(&"search_calls"),
        "the personal skill's bound tool: {tools:?}"
    );
    let section = block(&requests[0], "skills");
    assert!(
        !section.contains("bob-board") && !section.contains("forecast"),
        "role-gated skills, personal or org, are hidden without the role: {section}"
    );

    // A pin of a personal skill adds its body, read from the user's workspace.
    agent
        .run(
            as_user("bob")
                .thread(thread)
                .slot(&PIN_SKILLS, vec!["bob-crm".to_owned()]),
        )
        .await
        .unwrap();
    let last = model.last_request().unwrap();
    let pinned = last
        .messages
        .iter()
        .find(|m| m.text().contains("<pinned_skill name=\"bob-crm\""))
        .expect("the pinned personal skill");
    assert!(pinned.text().contains("Steps for bob-crm."));
}

#[tokio::test]
async fn a_user_id_that_is_not_a_safe_segment_fails_the_run_with_a_typed_error() {
    let store = store().await;
    for bad in ["../ada", "a/b", ".hidden", ""] {
        let agent = agent(texts(1), skills(&store), memory(&store));
        let err = agent.run(as_user(bad)).await.unwrap_err();
        let message = err.to_string();
        assert!(message.contains(&format!("invalid user id {bad:?}")), "{message}");
        let source = std::error::Error::source(&err).expect("a typed cause");
        assert!(
            source.downcast_ref::<UserHomeError>().is_some()
                || source.downcast_ref::<MemoryError>().is_some(),
            "{source:?}"
        );
    }
}

#[tokio::test]
async fn templates_are_created_once_and_never_overwrite() {
    let store = store().await;
    let templated = memory(&store)
        .with_user_template("agents/MEMORY.md", "# Memory\n(first-use template)\n")
        .unwrap();
    assert!(
        memory(&store).with_user_template("agents/OTHER.md", "x").is_err(),
        "a template needs a user source of its path"
    );
    let model = texts(2);
    let agent = agent(model.clone(), skills(&store), templated);
    agent.run(as_user("bob")).await.unwrap();
    agent.run(as_user("ada")).await.unwrap();
    let bobs = VirtualPath::parse("/users/bob/agents/MEMORY.md").unwrap();
    assert_eq!(
        store.read_to_string(&bobs).await.unwrap(),
        "# Memory\n(first-use template)\n",
        "bob had none: created"
    );
    let adas = VirtualPath::parse("/users/ada/agents/MEMORY.md").unwrap();
    assert_eq!(
        store.read_to_string(&adas).await.unwrap(),
        "- Acme renewal is in March.\n",
        "ada's existing file is untouched"
    );
    let requests = model.requests();
    assert!(block(&requests[0], "memory").contains("(first-use template)"));
    assert!(!block(&requests[1], "memory").contains("(first-use template)"));
}

#[tokio::test]
async fn a_caller_given_workspace_serves_the_user_layer_without_user_spaces() {
    let store = store().await;
    let mine: Arc<dyn Backend> = Arc::new(StateBackend::new());
    put(mine.as_ref(), "/agents/USER.md", "Local user: prefers tabs.\n").await;
    put(
        mine.as_ref(),
        "/agents/skills/local-only/SKILL.md",
        &skill_md("local-only", "A skill from a local workdir.", ""),
    )
    .await;
    let skills = SkillsMiddleware::new(vec![SkillSource::new(store.clone(), "/skills").unwrap()])
        .with_personal_skills(PersonalSkills::new("agents/skills").unwrap());
    let memory = MemoryMiddleware::new(store.clone(), ["/AGENTS.md"])
        .unwrap()
        .with_user_sources(["agents/USER.md"])
        .unwrap();
    let model = texts(1);
    agent(model.clone(), skills, memory)
        .run(as_user("me").extension(UserFiles(mine)))
        .await
        .unwrap();
    let request = model.requests().remove(0);
    assert!(block(&request, "memory").contains("prefers tabs"));
    assert!(block(&request, "skills").contains("/workspace/agents/skills/local-only/SKILL.md"));
}

#[tokio::test]
async fn many_users_share_one_org_catalog_and_the_caches_stay_bounded() {
    let store = store().await;
    for i in 0..40 {
        put(
            store.as_ref(),
            &format!("/users/u{i}/agents/skills/own-{i}/SKILL.md"),
            &skill_md(&format!("own-{i}"), "A personal skill.", ""),
        )
        .await;
    }
    let personal = PersonalSkills::new("agents/skills")
        .unwrap()
        .with_homes(homes(&store))
        .with_cache_capacity(8);
    let skills = SkillsMiddleware::new(vec![SkillSource::new(store.clone(), "/skills").unwrap()])
        .with_personal_skills(personal);
    let model = Arc::new(
        ScriptedModel::from_fn(|_| Ok(ModelResponse::new(AiMessage::text("ok"))))
            .with_capabilities(caps(false)),
    );
    let seen = Capture::default();
    let agent = Agent::builder(model.clone())
        .middleware(skills.clone())
        .middleware(seen.clone())
        .build()
        .unwrap();
    for i in 0..40 {
        agent.run(as_user(&format!("u{i}"))).await.unwrap();
    }
    let states = seen.0.lock().unwrap().clone();
    assert_eq!(states.len(), 40);
    for (i, state) in states.iter().enumerate() {
        assert_eq!(
            state.personal.as_ref().unwrap().skills()[0].name,
            format!("own-{i}")
        );
        assert_eq!(state.personal_owner.as_deref(), Some(format!("u{i}").as_str()));
        let layered = LayeredCatalog::new(state.catalog.clone(), state.personal.clone());
        assert_eq!(layered.len(), 4, "three org skills and one of their own");
    }
    let catalogs: Vec<_> = states.iter().map(|s| s.catalog.clone()).collect();
    assert!(
        catalogs.windows(2).all(|w| Arc::ptr_eq(&w[0], &w[1])),
        "every user's thread holds the same organisation catalog, not a copy"
    );
    assert_eq!(
        skills.personal_skills().unwrap().cached_users(),
        8,
        "the personal cache holds at most its capacity"
    );
    let requests = model.requests();
    assert!(block(&requests[39], "skills").contains("own-39"));
    assert!(!block(&requests[39], "skills").contains("own-38"));
}

#[tokio::test]
async fn a_broken_personal_skill_is_skipped_and_the_rest_load() {
    let store = store().await;
    put(
        store.as_ref(),
        "/users/bob/agents/skills/broken/SKILL.md",
        "---\nname: [unclosed\n---\n",
    )
    .await;
    put(
        store.as_ref(),
        "/users/bob/agents/skills/no-description/SKILL.md",
        "---\nname: no-description\n---\n",
    )
    .await;
    let model = texts(1);
    agent(model.clone(), skills(&store), memory(&store))
        .run(as_user("bob"))
        .await
        .unwrap();
    let requests = model.requests();
    let section = block(&requests[0], "skills");
    assert!(
        section.contains("bob-crm"),
        "the good personal skill loads: {section}"
    );
    assert!(!section.contains("/workspace/agents/skills/broken/"));
    assert!(!section.contains("no-description"));
}

#[tokio::test]
async fn two_anonymous_workspaces_never_share_memory_or_skills() {
    let store = store().await;
    let (one, two): (Arc<dyn Backend>, Arc<dyn Backend>) =
        (Arc::new(StateBackend::new()), Arc::new(StateBackend::new()));
    put(one.as_ref(), "/agents/USER.md", "first-workspace-1101\n").await;
    put(
        one.as_ref(),
        "/agents/skills/first-only/SKILL.md",
        &skill_md("first-only", "Only in the first workspace.", ""),
    )
    .await;
    put(two.as_ref(), "/agents/USER.md", "second-workspace-2202\n").await;
    let model = texts(3);
    let agent = agent(model.clone(), skills(&store), memory(&store));
    let thread = ThreadId::new("anon-2").unwrap();
    let second = || {
        RunInput::human("hi")
            .thread(thread.clone())
            .extension(UserFiles(two.clone()))
    };
    agent.run(second()).await.unwrap();
    agent
        .run(RunInput::human("hi").extension(UserFiles(one.clone())))
        .await
        .unwrap();
    agent.run(second()).await.unwrap();
    let requests = model.requests();
    for i in [0, 2] {
        let text = format!(
            "{}{}",
            block(&requests[i], "memory"),
            block(&requests[i], "skills")
        );
        assert!(text.contains("second-workspace-2202"), "{text}");
        assert!(
            !text.contains("first-workspace-1101") && !text.contains("first-only"),
            "request {i} shows the other workspace: {text}"
        );
    }
    assert!(block(&requests[1], "memory").contains("first-workspace-1101"));
}

mod ids;
