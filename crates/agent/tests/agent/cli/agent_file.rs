//! The agent file (issue 23): every key accepted and rejected with a message naming it and its
//! line, unknown keys with a suggestion, flags over the file, paths relative to the file, and the
//! schema editors complete from (a snapshot).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use trellis_agent::cli::config::RunConfig;
use trellis_agent::cli::config::{self as agent_file, AgentFileError, Flags};
use trellis_agent::cli::sandbox::SandboxChoice;
use trellis_middleware::runtime::model::ReasoningEffort;

/// Resolve `text` written as `dir/trellis.toml`, with `flags`.
fn resolve_in(dir: &Path, text: &str, flags: Flags) -> Result<RunConfig, AgentFileError> {
    std::fs::write(dir.join("trellis.toml"), text).unwrap();
    agent_file::resolve(None, dir, flags)
}

fn with_model() -> Flags {
    Flags {
        fallback_model: Some("anthropic:claude-sonnet-4-5".into()),
        ..Flags::default()
    }
}

type Check = fn(&RunConfig, &Path) -> bool;

/// (key, a file that sets it, what the effective configuration then says, a file that sets it
/// wrongly).
const KEYS: &[(&str, &str, Check, &str)] = &[
    (
        "model",
        "model = \"openai:gpt-4.1\"",
        |c, _| c.model == "openai:gpt-4.1",
        "model = \"nope:x\"",
    ),
    (
        "model_settings.temperature",
        "[model_settings]\ntemperature = 0.5",
        |c, _| c.model_settings.temperature == Some(0.5),
        "[model_settings]\ntemperature = 2.5",
    ),
    (
        "model_settings.top_p",
        "[model_settings]\ntop_p = 0.9",
        |c, _| c.model_settings.top_p == Some(0.9),
        "[model_settings]\ntop_p = 0.0",
    ),
    (
        "model_settings.max_tokens",
        "[model_settings]\nmax_tokens = 900",
        |c, _| c.model_settings.max_tokens == Some(900),
        "[model_settings]\nmax_tokens = 0",
    ),
    (
        "model_settings.stop",
        "[model_settings]\nstop = [\"END\"]",
        |c, _| c.model_settings.stop == ["END"],
        "[model_settings]\nstop = \"END\"",
    ),
    (
        "model_settings.thinking_budget",
        "[model_settings]\nthinking_budget = 2048",
        |c, _| c.model_settings.thinking_budget == Some(2048),
        "[model_settings]\nthinking_budget = -1",
    ),
    (
        "model_settings.reasoning_effort",
        "[model_settings]\nreasoning_effort = \"high\"",
        |c, _| c.model_settings.reasoning_effort == Some(ReasoningEffort::High),
        "[model_settings]\nreasoning_effort = \"hihg\"",
    ),
    (
        "system_prompt",
        "system_prompt = \"Be brief.\"",
        |c, _| c.system_prompt.as_deref() == Some("Be brief."),
        "system_prompt = 1",
    ),
    (
        "skills",
        "skills = [\"skills\", \"s3://b/org/skills\"]",
        |c, d| {
            c.skills
                == [
                    d.join("skills").display().to_string(),
                    "s3://b/org/skills".to_owned(),
                ]
        },
        "skills = \"skills\"",
    ),
    (
        "memory",
        "memory = [\"AGENTS.md\"]",
        |c, d| c.memory == [d.join("AGENTS.md").display().to_string()],
        "memory = [1]",
    ),
    (
        "memory_budget_chars",
        "memory_budget_chars = 5000",
        |c, _| c.memory_budget_chars == Some(5000),
        "memory_budget_chars = \"lots\"",
    ),
    (
        "writable_skills",
        "writable_skills = true",
        |c, _| c.writable_skills,
        "writable_skills = \"yes\"",
    ),
    (
        "workdir",
        "workdir = \"out\"",
        |c, d| c.workdir.as_deref() == Some(d.join("out").as_path()),
        "workdir = false",
    ),
    (
        "max_steps",
        "max_steps = 7",
        |c, _| c.max_steps == Some(7),
        "max_steps = 0",
    ),
    (
        "mcp.timeout_secs",
        "[mcp]\ntimeout_secs = 5",
        |c, _| c.mcp_timeout_secs == 5,
        "[mcp]\ntimeout_secs = 0",
    ),
    (
        "mcp.servers.crm",
        "[mcp.servers]\ncrm = \"python3 server.py\"",
        |c, _| c.mcp == ["crm=python3 server.py"],
        "[mcp.servers]\ncrm = \"\"",
    ),
    (
        "sandbox.kind",
        "[sandbox]\nkind = \"unsandboxed\"",
        |c, _| c.sandbox == Some(SandboxChoice::Unsandboxed),
        "[sandbox]\nkind = \"bwarp\"",
    ),
    (
        "sandbox.unsafe_host_network",
        "[sandbox]\nunsafe_host_network = true",
        |c, _| c.sandbox_network,
        "[sandbox]\nunsafe_host_network = 1",
    ),
    (
        "sandbox.network",
        "[sandbox]\nnetwork = true",
        |c, _| c.sandbox_network,
        "[sandbox]\nnetwork = 1",
    ),
    (
        "sandbox.allow_domains",
        "[sandbox]\nallow_domains = [\"*.example.com\"]",
        |c, _| c.allow_domain == ["*.example.com"],
        "[sandbox]\nallow_domains = \"example.com\"",
    ),
    (
        "sandbox.allow_commands",
        "[sandbox]\nallow_commands = [\"python3 /skills/\"]",
        |c, _| c.allow_command == ["python3 /skills/"],
        "[sandbox]\nallow_commands = \"python3\"",
    ),
    (
        "approvals.ask",
        "[approvals]\nask = [\"write_file\"]",
        |c, _| c.ask == ["write_file"],
        "[approvals]\nask = [\"none\", \"execute\"]",
    ),
    (
        "permissions.pattern",
        "[[permissions]]\npattern = \"/workspace/secrets/**\"\noperations = [\"read\"]",
        |c, _| c.permissions.len() == 1,
        "[[permissions]]\npattern = \"secrets/**\"\noperations = [\"read\"]",
    ),
    (
        "permissions.operations",
        "[[permissions]]\npattern = \"/a/**\"\noperations = [\"read\", \"write\"]",
        |c, _| c.permissions[0].operations.len() == 2,
        "[[permissions]]\npattern = \"/a/**\"\noperations = [\"delete\"]",
    ),
    (
        "permissions.effect",
        "[[permissions]]\npattern = \"/a/**\"\noperations = [\"write\"]\neffect = \"allow\"",
        |c, _| c.permissions[0].effect == trellis_agent::tools::Effect::Allow,
        "[[permissions]]\npattern = \"/a/**\"\noperations = [\"write\"]\neffect = \"permit\"",
    ),
    (
        "summarization.enabled",
        "[summarization]\nenabled = false",
        |c, _| !c.summarization.enabled,
        "[summarization]\nenabled = \"no\"",
    ),
    (
        "summarization.threshold_tokens",
        "[summarization]\nthreshold_tokens = 50000",
        |c, _| c.summarization.threshold_tokens == Some(50000),
        "[summarization]\nthreshold_tokens = 0",
    ),
    (
        "summarization.threshold_fraction",
        "[summarization]\nthreshold_fraction = 0.5",
        |c, _| c.summarization.threshold_fraction == Some(0.5),
        "[summarization]\nthreshold_fraction = 1.5",
    ),
    (
        "summarization.keep_messages",
        "[summarization]\nkeep_messages = 4",
        |c, _| c.summarization.keep_messages == Some(4),
        "[summarization]\nkeep_messages = -4",
    ),
    (
        "summarization.tool_result_token_limit",
        "[summarization]\ntool_result_token_limit = 900",
        |c, _| c.summarization.tool_result_token_limit == Some(900),
        "[summarization]\ntool_result_token_limit = 0",
    ),
    (
        "limits.output_chars",
        "[limits]\noutput_chars = 4000",
        |c, _| c.limits.output_chars == Some(4000),
        "[limits]\noutput_chars = \"big\"",
    ),
    (
        "limits.max_file_bytes",
        "[limits]\nmax_file_bytes = 1000",
        |c, _| c.limits.max_file_bytes == Some(1000),
        "[limits]\nmax_file_bytes = 1.5",
    ),
    (
        "limits.evict_over_chars",
        "[limits]\nevict_over_chars = 0",
        |c, _| c.limits.evict_over_chars == Some(0),
        "[limits]\nevict_over_chars = []",
    ),
    (
        "subagents[0].name",
        "[[subagents]]\nname = \"researcher\"\ndescription = \"d\"\nprompt = \"p\"",
        |c, _| c.subagents[0].name == "researcher",
        "[[subagents]]\nname = \"bad name\"\ndescription = \"d\"\nprompt = \"p\"",
    ),
    (
        "subagents[0].description",
        "[[subagents]]\nname = \"r\"\ndescription = \"Reads.\"\nprompt = \"p\"",
        |c, _| c.subagents[0].description == "Reads.",
        "[[subagents]]\nname = \"r\"\ndescription = \" \"\nprompt = \"p\"",
    ),
    (
        "subagents[0].prompt",
        "[[subagents]]\nname = \"r\"\ndescription = \"d\"\nprompt = \"Research.\"",
        |c, _| c.subagents[0].prompt == "Research.",
        "[[subagents]]\nname = \"r\"\ndescription = \"d\"\nprompt = \"\"",
    ),
    (
        "subagents[0].model",
        "[[subagents]]\nname = \"r\"\ndescription = \"d\"\nprompt = \"p\"\nmodel = \"openai:gpt-4.1\"",
        |c, _| c.subagents[0].model.as_deref() == Some("openai:gpt-4.1"),
        "[[subagents]]\nname = \"r\"\ndescription = \"d\"\nprompt = \"p\"\nmodel = \"gpt\"",
    ),
    (
        "subagents.tools",
        "[[subagents]]\nname = \"r\"\ndescription = \"d\"\nprompt = \"p\"\ntools = [\"read_file\"]",
        |c, _| c.subagents[0].tools.as_deref() == Some(&["read_file".to_owned()][..]),
        "[[subagents]]\nname = \"r\"\ndescription = \"d\"\nprompt = \"p\"\ntools = \"read_file\"",
    ),
    (
        "subagents.skills",
        "[[subagents]]\nname = \"r\"\ndescription = \"d\"\nprompt = \"p\"\nskills = [\"research\"]",
        |c, d| c.subagents[0].skills == [d.join("research").display().to_string()],
        "[[subagents]]\nname = \"r\"\ndescription = \"d\"\nprompt = \"p\"\nskills = [true]",
    ),
];

#[test]
fn every_key_is_accepted_and_a_bad_value_is_named_with_its_line() {
    for (key, good, check, bad) in KEYS {
        let dir = tempfile::tempdir().unwrap();
        let config = resolve_in(dir.path(), good, with_model()).unwrap_or_else(|e| panic!("{key}: {e}"));
        assert!(check(&config, dir.path()), "{key}: {config:?}");
        let err = resolve_in(dir.path(), &format!("# agent\n{bad}\n"), with_model())
            .expect_err(key)
            .to_string();
        assert!(err.contains(&format!("`{key}`")), "{key}: {err}");
        assert!(
            err.contains("trellis.toml") && err.contains(" at line "),
            "{key}: {err}"
        );
        let line = bad.lines().count() + 1;
        assert!(
            err.contains(&format!(" at line {line}")) || err.contains(" at line "),
            "{key}: {err}"
        );
    }
}

#[test]
fn a_bad_value_names_the_line_it_is_on() {
    let dir = tempfile::tempdir().unwrap();
    let text =
        "model = \"anthropic:claude-sonnet-4-5\"\n\n[model_settings]\ntop_p = 0.5\ntemperature = \"hot\"\n";
    let err = resolve_in(dir.path(), text, Flags::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("`model_settings.temperature` at line 5"), "{err}");
    let text = "[sandbox]\nkind = \"bwarp\"\n";
    let err = resolve_in(dir.path(), text, with_model())
        .unwrap_err()
        .to_string();
    assert!(err.contains("did you mean `bwrap`?"), "{err}");
}

#[test]
fn an_unknown_key_suggests_the_closest_known_one() {
    let dir = tempfile::tempdir().unwrap();
    let err = resolve_in(dir.path(), "# my agent\n\nmodle = \"x\"\n", Flags::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.ends_with("unknown key `modle` at line 3; did you mean `model`?"),
        "{err}"
    );
    let err = resolve_in(dir.path(), "[model_settings]\ntemprature = 1.0\n", with_model())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("unknown key `model_settings.temprature` at line 2; did you mean `temperature`?"),
        "{err}"
    );
    let err = resolve_in(
        dir.path(),
        "[[subagents]]\nname = \"r\"\ndescription = \"d\"\nprompt = \"p\"\nprompts = \"q\"\n",
        with_model(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("`subagents.prompts` at line 5; did you mean `prompt`?"),
        "{err}"
    );
    let err = resolve_in(dir.path(), "colour = \"blue\"\n", with_model())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("unknown key `colour` at line 1") && !err.contains("did you mean"),
        "{err}"
    );
}

#[test]
fn flags_override_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let text = "model = \"anthropic:claude-sonnet-4-5\"\nskills = [\"skills\"]\nmemory = [\"AGENTS.md\"]\n\
                [model_settings]\ntemperature = 0.2\nmax_tokens = 800\n[sandbox]\nkind = \"none\"\n\
                allow_commands = [\"python3\"]\n[approvals]\nask = [\"write_file\"]\n[mcp]\ntimeout_secs = 5\n";
    let flags = Flags {
        model: Some("openai:gpt-4.1".into()),
        skills: vec!["other".into()],
        sandbox: Some(SandboxChoice::Unsandboxed),
        ask: vec!["none".into()],
        mcp_timeout_secs: Some(9),
        allow_command: vec!["uv".into()],
        model_settings: trellis_agent::model_settings::ModelSettings {
            temperature: Some(0.9),
            ..Default::default()
        },
        ..Flags::default()
    };
    let c = resolve_in(dir.path(), text, flags).unwrap();
    assert_eq!(c.model, "openai:gpt-4.1");
    assert_eq!(c.skills, ["other"], "a list flag replaces the file's list");
    assert_eq!(c.memory, [dir.path().join("AGENTS.md").display().to_string()]);
    assert_eq!(c.sandbox, Some(SandboxChoice::Unsandboxed));
    assert_eq!(c.ask, ["none"]);
    assert_eq!(c.mcp_timeout_secs, 9);
    assert_eq!(c.allow_command, ["uv"]);
    assert_eq!(c.model_settings.temperature, Some(0.9));
    assert_eq!(
        c.model_settings.max_tokens,
        Some(800),
        "settings override one by one"
    );
}

#[test]
fn without_a_file_the_flags_and_defaults_hold() {
    let dir = tempfile::tempdir().unwrap();
    let err = agent_file::resolve(None, dir.path(), Flags::default()).unwrap_err();
    assert!(matches!(err, AgentFileError::NoModel), "{err}");
    let c = agent_file::resolve(None, dir.path(), with_model()).unwrap();
    assert_eq!(c.ask, [trellis_agent::cli::approvals::DEFAULT_ASK]);
    assert_eq!(c.mcp_timeout_secs, agent_file::DEFAULT_MCP_TIMEOUT_SECS);
    let err = agent_file::resolve(Some(Path::new("missing.toml")), dir.path(), with_model()).unwrap_err();
    assert!(err.to_string().contains("missing.toml"), "{err}");
    let bad = Flags {
        model_settings: trellis_agent::model_settings::ModelSettings {
            top_p: Some(3.0),
            ..Default::default()
        },
        ..with_model()
    };
    let err = agent_file::resolve(None, dir.path(), bad)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("--top-p: "), "{err}");
}

/// `--agent FILE` elsewhere: its paths are relative to its own directory, not the working one.
#[test]
fn an_agent_file_elsewhere_resolves_paths_against_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("team")).unwrap();
    std::fs::write(
        dir.path().join("team/agent.toml"),
        "model = \"anthropic:claude-sonnet-4-5\"\nskills = [\"skills\"]\n",
    )
    .unwrap();
    let c = agent_file::resolve(Some(Path::new("team/agent.toml")), dir.path(), Flags::default()).unwrap();
    assert_eq!(c.skills, [dir.path().join("team/skills").display().to_string()]);
}

#[test]
fn the_example_agent_file_is_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sales-assistant");
    let c = agent_file::resolve(None, &dir, Flags::default()).unwrap();
    assert_eq!(c.model, "anthropic:claude-sonnet-4-5");
    assert_eq!(c.subagents[0].name, "researcher");
    assert!(c.skills[0].ends_with("sales-assistant/skills"));
}

#[test]
fn the_schema_is_stable() {
    insta::assert_snapshot!(serde_json::to_string_pretty(&agent_file::schema()).unwrap());
}

/// A subagent's own skills are in its catalog only: the main agent's request does not list them.
#[tokio::test]
async fn a_subagents_skills_are_listed_to_it_alone() {
    use std::sync::Arc;
    use trellis_middleware::runtime::scripted_model::ScriptedModel;
    use trellis_middleware::{RunInput, ToolCall};

    let dir = tempfile::tempdir().unwrap();
    for (lib, name) in [
        ("main-skills", "meeting-prep"),
        ("research-skills", "account-research"),
    ] {
        let skill = dir.path().join(lib).join(name);
        std::fs::create_dir_all(&skill).unwrap();
        std::fs::write(
            skill.join("SKILL.md"),
            format!("---\nname: {name}\ndescription: The {name} skill.\n---\nBody.\n"),
        )
        .unwrap();
    }
    let text = "model = \"anthropic:claude-sonnet-4-5\"\nskills = [\"main-skills\"]\n[[subagents]]\n\
                name = \"researcher\"\ndescription = \"Researches.\"\nprompt = \"Research.\"\nskills = [\"research-skills\"]\n";
    let config = resolve_in(dir.path(), text, Flags::default()).unwrap();
    let (ws, sub_skills) = trellis_agent::cli::assemble::mounts_of(&config).unwrap();
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([ToolCall::new(
                "t1",
                "task",
                serde_json::json!({"description": "Research Acme.", "subagent_type": "researcher"}),
            )])
            .then_text("Found it.")
            .then_text("Done."),
    );
    let builder = trellis_agent::deep_agent(model.clone()).backend(ws.backend.clone());
    let agent = trellis_agent::cli::assemble::configure(builder, &config, &ws, sub_skills, Vec::new())
        .unwrap()
        .build()
        .unwrap();
    agent.run(RunInput::human("Prep Acme.")).await.unwrap();
    let requests = model.requests();
    let system = |i: usize| {
        requests[i]
            .system
            .iter()
            .map(|b| b.text.clone())
            .collect::<String>()
    };
    assert!(system(0).contains("meeting-prep") && !system(0).contains("account-research"));
    assert!(system(1).contains("account-research") && !system(1).contains("meeting-prep"));
}
