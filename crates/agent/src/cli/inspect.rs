//! `trellis inspect`: the exact first request the model would receive, without calling a model.
//!
//! The agent is assembled as `trellis run` would assemble it, but with a stand-in model that has the
//! chosen provider's declared capabilities (so cache breakpoints land where they would), answers at
//! once, and records the request. No API key is needed.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;
use serde::Serialize;
use serde_json::Value;
use trellis_middleware::runtime::context::RunContext;
use trellis_middleware::runtime::model::ModelCapabilities;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::skills::DEFAULT_PERSONAL_SKILLS_DIR;
use trellis_middleware::skills::SkillSource;
use trellis_middleware::skills::{LayeredCatalog, SKILLS, SkillsState};
use trellis_middleware::token_estimate::estimate_tokens;
use trellis_middleware::tools::{UserFiles, UserIdentity};
use trellis_middleware::{AgentError, ChatModel, Middleware, ModelRequest, RunInput, State};

use crate::builder::deep_agent;
use crate::cli::args::{DEFAULT_INSPECT_MODEL, InspectArgs};
use crate::cli::assemble;
use crate::cli::config::{self, Flags, RunConfig};
use crate::cli::mounts::{Mounts, USER_MEMORY};
use crate::cli::sandbox;
use crate::cli::sandbox::{SandboxStatus, Selected};
use crate::cli::state_dir::StateDir;
use crate::providers::{self, ModelOptions, ModelSpec};

/// `trellis inspect`: assemble the agent as `trellis run` would and print its first request
/// (text, or JSON with `--json`).
pub async fn command(args: InspectArgs) -> Result<ExitCode> {
    let flags = Flags {
        model: args.model,
        fallback_model: Some(DEFAULT_INSPECT_MODEL.to_owned()),
        model_settings: args.settings.settings(),
        skills: args.skills,
        memory: args.memory,
        workdir: args.workdir,
        sandbox: args.sandbox,
        ..Flags::default()
    };
    let (config, refusal) = config::resolve_checked(args.agent.as_deref(), &std::env::current_dir()?, flags)?;
    if let Some(refusal) = refusal {
        // inspect calls no model and runs nothing, so it shows what run and chat would refuse.
        eprintln!("trellis: note: run and chat would refuse this: {refusal}");
    }
    let (mut mounts, sub_skills) = assemble::mounts_of(&config)?;
    if let Some(user) = &args.user {
        mounts = mounts.for_user(user, &StateDir::new(args.state_dir))?;
    }
    let sandbox = sandbox::select(config.sandbox)?;
    let report = inspect_config(&config, &mounts, sub_skills, &sandbox, &args.task).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render_text(&report));
    }
    Ok(ExitCode::SUCCESS)
}

/// Everything `inspect` reports.
#[derive(Debug, Clone, Serialize)]
pub struct InspectReport {
    /// The model string.
    pub model: String,
    /// Its declared capabilities.
    pub capabilities: ModelCapabilities,
    /// Where each source is mounted.
    pub mounts: Vec<(String, String)>,
    /// The request, as the stack built it.
    pub request: ModelRequest,
    /// Estimated tokens: per system block, tools, messages, total.
    pub tokens: TokenEstimate,
    /// Skill load warnings and skipped files.
    pub warnings: Vec<String>,
    /// The provider's JSON body for this request, where the provider is known.
    pub provider_body: Option<Value>,
    /// Whether `execute` is offered, in which sandbox, and which limits hold.
    pub sandbox: SandboxStatus,
}

/// Estimated tokens (UTF-8 bytes / 4).
#[derive(Debug, Clone, Serialize)]
pub struct TokenEstimate {
    /// One entry per system block.
    pub system_blocks: Vec<usize>,
    /// All tool definitions.
    pub tools: usize,
    /// All messages.
    pub messages: usize,
    /// The sum.
    pub total: usize,
}

/// Keeps the skills state the first model call sees: the slot is private, so a run's output does
/// not carry it, and the warnings and issues `inspect` reports live there.
#[derive(Debug, Clone, Default)]
struct SkillsSeen(Arc<std::sync::Mutex<Option<SkillsState>>>);

#[async_trait::async_trait]
impl Middleware for SkillsSeen {
    fn name(&self) -> &str {
        "inspect.skills"
    }

    async fn before_model(&self, state: &mut State, _cx: &RunContext) -> Result<(), AgentError> {
        let mut seen = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if seen.is_none() {
            *seen = state.get(&SKILLS)?.cloned();
        }
        Ok(())
    }
}

/// Capabilities and request-body rendering for a model string, with no key needed.
/// A model string, parsed: the provider and model, and the options after `?`.
type ParsedModel = (ModelSpec, ModelOptions);

fn stand_in(model: &str) -> Result<(Arc<dyn ChatModel>, Option<ParsedModel>)> {
    let spec = ModelSpec::parse(model)?;
    let (_, options) = ModelOptions::split(model)?;
    // Stand-ins for what a provider needs to be built but inspect never uses: keys, and the
    // region and project of the cloud platforms.
    let real = providers::from_model_string_with_env(model, |var| {
        std::env::var(var)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .or_else(|| {
                let stand_in = match var {
                    "AWS_ACCESS_KEY_ID" | "AWS_SECRET_ACCESS_KEY" => "inspect-no-key",
                    "AWS_REGION" => "us-east-1",
                    "GOOGLE_CLOUD_PROJECT" => "inspect-project",
                    "CLOUD_ML_REGION" => "us-east5",
                    _ if var.ends_with("_API_KEY") => "inspect-no-key",
                    _ => return None,
                };
                Some(stand_in.to_owned())
            })
    })?;
    Ok((real, Some((spec, options))))
}

fn provider_body((spec, options): &ParsedModel, request: &ModelRequest) -> Option<Value> {
    match spec {
        ModelSpec::Anthropic { model } => {
            let mut config = providers::anthropic::AnthropicConfig::new(model.clone(), "inspect-no-key");
            config.prompt_caching = options.cache;
            providers::anthropic::AnthropicModel::new(config)
                .ok()?
                .request_body(request)
                .ok()
        }
        ModelSpec::OpenAi { model } => {
            let config = providers::openai::OpenAiConfig::openai(model.clone(), "inspect-no-key");
            providers::openai::OpenAiModel::new(config)
                .ok()?
                .request_body(request)
                .ok()
        }
        ModelSpec::Bedrock { model } => {
            let credentials = providers::AwsCredentials::new("inspect-no-key", "inspect-no-key", None);
            let mut config = providers::BedrockConfig::new(model.clone(), "us-east-1", credentials);
            config.anthropic.prompt_caching = options.cache;
            providers::AnthropicModel::bedrock(config)
                .ok()?
                .request_body(request)
                .ok()
        }
        ModelSpec::Vertex { model } => {
            // Never asked: rendering a body needs no token.
            let credentials = providers::GoogleCredentials::MetadataServer {
                base_url: "http://127.0.0.1:9".to_owned(),
            };
            let mut config =
                providers::VertexConfig::new(model.clone(), "inspect-project", "us-east5", credentials);
            config.anthropic.prompt_caching = options.cache;
            providers::AnthropicModel::vertex(config)
                .ok()?
                .request_body(request)
                .ok()
        }
        _ => None,
    }
}

/// Assemble the agent for `workspace`, with `execute` in `sandbox` if there is one, and capture its
/// first request for `task` (as the workspace's `--user`, with their memory and personal skills,
/// when it has one).
pub async fn inspect(
    model: &str,
    workspace: &Mounts,
    sandbox: &Selected,
    task: &str,
) -> Result<InspectReport> {
    let config = RunConfig {
        model: model.to_owned(),
        ..RunConfig::default()
    };
    inspect_config(&config, workspace, Vec::new(), sandbox, task).await
}

/// [`inspect`] for an effective configuration (the agent file under the flags): its system
/// prompt, model settings, permissions, limits and subagents shape the request as they would in
/// `trellis run`. Subagents run on the stand-in model (no model is called).
pub async fn inspect_config(
    config: &RunConfig,
    workspace: &Mounts,
    sub_skills: Vec<Vec<SkillSource>>,
    sandbox: &Selected,
    task: &str,
) -> Result<InspectReport> {
    let model = config.model.as_str();
    let (real, spec) = stand_in(model)?;
    let capabilities = real.capabilities();
    let recorder = Arc::new(
        ScriptedModel::new()
            .with_id(real.id().to_owned())
            .with_capabilities(capabilities)
            .then_text("(inspect: no model was called)"),
    );
    let mut builder = deep_agent(recorder.clone()).backend(workspace.backend.clone());
    if let Some(sandbox) = &sandbox.sandbox {
        builder = builder.sandbox(sandbox.clone());
    }
    builder = assemble::configure(builder, config, workspace, sub_skills, Vec::new())?;
    for path in &workspace.memory {
        builder = builder.memory_source(path.clone());
    }
    let mut input = RunInput::human(task);
    if let (Some(user), Some(files)) = (&workspace.user, &workspace.user_files) {
        builder = builder
            .user_memory(USER_MEMORY)
            .personal_skills(DEFAULT_PERSONAL_SKILLS_DIR);
        input = input
            .extension(UserIdentity::new(user.clone()))
            .extension(UserFiles(files.clone()));
    }
    let seen = SkillsSeen::default();
    let agent = builder.middleware(seen.clone()).build()?;
    agent.run(input).await?;
    let request = recorder
        .requests()
        .into_iter()
        .next()
        .ok_or_else(|| anyhow::anyhow!("the agent made no model call"))?;

    let mut warnings = Vec::new();
    let skills = seen.0.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(skills) = skills {
        let layered = LayeredCatalog::new(skills.catalog.clone(), skills.personal.clone());
        warnings.extend(layered.warnings().iter().cloned());
        let personal_issues = skills.personal.iter().flat_map(|p| p.issues());
        warnings.extend(
            skills
                .catalog
                .issues()
                .iter()
                .chain(personal_issues)
                .map(|i| format!("{}: {}", i.path, i.message)),
        );
    }
    let system_blocks: Vec<usize> = request.system.iter().map(|b| estimate_tokens(&b.text)).collect();
    let tools = request
        .tools
        .iter()
        .map(|t| {
            estimate_tokens(&t.name)
                + estimate_tokens(&t.description)
                + estimate_tokens(&t.parameters.to_string())
        })
        .sum();
    let messages = request.messages.iter().map(|m| estimate_tokens(&m.text())).sum();
    let total = system_blocks.iter().sum::<usize>() + tools + messages;
    let provider_body = spec.as_ref().and_then(|s| provider_body(s, &request));
    Ok(InspectReport {
        model: model.to_owned(),
        capabilities,
        mounts: workspace.mounts.clone(),
        request,
        tokens: TokenEstimate {
            system_blocks,
            tools,
            messages,
            total,
        },
        warnings,
        provider_body,
        sandbox: sandbox.status.clone(),
    })
}

/// The human-readable report.
pub fn render_text(report: &InspectReport) -> String {
    let caps = &report.capabilities;
    let mut out = String::new();
    out.push_str(&format!("model: {}\n", report.model));
    out.push_str(&format!(
        "capabilities: prompt caching {}, tools mid-conversation {}, context window {}\n",
        if caps.prompt_caching {
            format!("yes (up to {} breakpoints)", caps.max_cache_breakpoints)
        } else {
            "no".to_owned()
        },
        if caps.tools_mid_conversation { "yes" } else { "no" },
        caps.context_window
            .map_or("unknown".to_owned(), |w| format!("{w} tokens")),
    ));
    for (at, source) in &report.mounts {
        out.push_str(&format!("mounted: {at} <- {source}\n"));
    }
    out.push_str(&report.sandbox.render());
    out.push_str(&format!(
        "\nestimated tokens: {} (system {}, tools {}, messages {})\n",
        report.tokens.total,
        report.tokens.system_blocks.iter().sum::<usize>(),
        report.tokens.tools,
        report.tokens.messages,
    ));
    for (i, block) in report.request.system.iter().enumerate() {
        let source = block.source.as_deref().unwrap_or("system prompt");
        let tokens = report.tokens.system_blocks.get(i).copied().unwrap_or(0);
        out.push_str(&format!(
            "\n=== system block {} · {source} · ~{tokens} tokens ===\n",
            i + 1
        ));
        out.push_str(block.text.trim_end());
        out.push('\n');
        if let Some(ttl) = block.cache_breakpoint {
            let ttl = match ttl {
                trellis_middleware::runtime::message::CacheTtl::FiveMinutes => "5 min",
                trellis_middleware::runtime::message::CacheTtl::OneHour => "1 h",
            };
            out.push_str(&format!(
                "--- cache breakpoint ({ttl}): everything above is cached ---\n"
            ));
        }
    }
    out.push_str(&format!(
        "\n=== tools ({}) · ~{} tokens ===\n",
        report.request.tools.len(),
        report.tokens.tools
    ));
    for tool in &report.request.tools {
        let first_line = tool.description.lines().next().unwrap_or("");
        out.push_str(&format!("- {}: {first_line}\n", tool.name));
    }
    out.push_str(&format!(
        "\n=== messages ({}) ===\n",
        report.request.messages.len()
    ));
    for message in report.request.messages.iter() {
        let role = match message {
            trellis_middleware::Message::System(_) => "system",
            trellis_middleware::Message::Human(_) => "human",
            trellis_middleware::Message::Ai(_) => "ai",
            trellis_middleware::Message::Tool(_) => "tool",
        };
        out.push_str(&format!("[{role}] {}\n", message.text()));
    }
    if report.warnings.is_empty() {
        out.push_str("\nskill warnings: none\n");
    } else {
        out.push_str(&format!("\nskill warnings ({}):\n", report.warnings.len()));
        for w in &report.warnings {
            out.push_str(&format!("- {w}\n"));
        }
    }
    out
}
