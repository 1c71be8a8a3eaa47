//! Agent assembly: the agent a [`RunConfig`] describes ([`build`]), with its [`Mounts`], its MCP
//! servers and the checkpointer of the state dir. `trellis run`, `trellis resume`, `trellis chat`
//! and `trellis inspect` build their agents here.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use trellis_middleware::backend::sandbox::{AllowedDomains, Network};
use trellis_middleware::skills::DEFAULT_PERSONAL_SKILLS_DIR;
use trellis_middleware::skills::PIN_SKILLS;
use trellis_middleware::skills::SkillSource;
use trellis_middleware::tools::{CommandPolicy, UserFiles, UserIdentity};
use trellis_middleware::{Agent, BackendCheckpointer, ChatModel, RunInput, ThreadId};

use crate::builder::{DeclaredSubagent, DeepAgentBuilder, deep_agent};
use crate::cli::config::RunConfig;
use crate::cli::mounts::{self, Mounts};
use crate::cli::pin::{self, Leading};
use crate::cli::state_dir::StateDir;
use crate::cli::{approvals, sandbox, skills, threads};
use crate::mcp::{McpServerConfig, McpServers};
use crate::model_settings::ModelSettingsMiddleware;
use crate::providers;

/// The MCP servers `config` names (each starts on first use), or `None` without `--mcp`.
pub fn mcp_servers(config: &RunConfig) -> Result<Option<Arc<McpServers>>> {
    let timeout = Duration::from_secs(config.mcp_timeout_secs.max(1));
    let mcp = config
        .mcp
        .iter()
        .map(|spec| McpServerConfig::parse_spec(spec).map(|c| c.with_call_timeout(timeout)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((!mcp.is_empty())
        .then(|| McpServers::new(mcp).map(Arc::new))
        .transpose()?)
}

/// The agent a [`RunConfig`] describes, with the workspace and the checkpointer its runs use.
/// `trellis run`, `trellis resume` and `trellis chat` build their agents here.
#[derive(Debug)]
pub struct Built {
    /// The agent.
    pub agent: Agent,
    /// The skills, memory and user files it was built from.
    pub ws: Mounts,
    /// The threads of the state dir.
    pub checkpointer: Arc<BackendCheckpointer>,
}

impl Built {
    /// `input` as a run of `thread`, with the user's identity and files when there is a user.
    pub fn prepare(&self, input: RunInput, thread: &ThreadId) -> RunInput {
        let mut input = input.thread(thread.clone());
        if let Some(files) = &self.ws.user_files {
            input = input
                .extension(UserIdentity::new(self.ws.user.clone().unwrap_or_else(local_user)))
                .extension(UserFiles(files.clone()));
        }
        input
    }
}

/// Build the agent of `config`, keeping threads in `state_dir` (created if missing).
pub async fn build(
    config: &RunConfig,
    state_dir: &StateDir,
    servers: Option<Arc<McpServers>>,
) -> Result<Built> {
    let checkpointer = Arc::new(state_dir.checkpointer()?);
    build_on(config, state_dir, servers, checkpointer).await
}

/// [`build`] with a checkpointer of the state dir's threads that other agents share (`trellis
/// serve` builds one agent per graph and user over one checkpointer).
pub async fn build_on(
    config: &RunConfig,
    state_dir: &StateDir,
    servers: Option<Arc<McpServers>>,
    checkpointer: Arc<BackendCheckpointer>,
) -> Result<Built> {
    let model = providers::connect_model_string(&config.model).await?;
    let sandbox = sandbox::select(config.sandbox)?;
    if let Some(note) = &sandbox.status.note {
        tracing::warn!("{note}");
    }
    let (mut ws, sub_skills) = mounts_of(config)?;
    if let Some(user) = &config.user {
        ws = ws.for_user(user, state_dir)?;
    }
    let mut sub_models = Vec::new();
    for sub in &config.subagents {
        sub_models.push(match &sub.model {
            Some(m) => Some(providers::connect_model_string(m).await?),
            None => None,
        });
    }
    // The thread's own files live in the state dir beside its checkpoints; skills and memory are
    // shared mounts; --workdir is the user's workspace at /workspace.
    let mut builder = deep_agent(model)
        .backend(ws.backend.clone())
        .file_layout(ws.layout())
        .checkpointer(checkpointer.clone());
    builder = configure(builder, config, &ws, sub_skills, sub_models)?;
    builder = builder.skills_persisted(skills::persistence(&ws, &config.skills, &config.skills_cache));
    for path in &ws.memory {
        builder = builder.memory_source(path.clone());
    }
    if let Some(servers) = servers {
        builder = builder.mcp_servers(servers);
    }
    if let Some(sandbox) = sandbox.sandbox {
        builder = builder.sandbox(sandbox);
    }
    builder = builder.sandbox_network(network(config)?);
    if !config.allow_command.is_empty() {
        builder = builder.commands(CommandPolicy::allow_only(config.allow_command.clone()));
    }
    if ws.user.is_some() {
        builder = builder
            .user_memory(mounts::USER_MEMORY)
            .personal_skills(DEFAULT_PERSONAL_SKILLS_DIR);
    }
    if let Some(gate) = approvals::gate(&config.ask)? {
        builder = builder.interrupt_on(gate);
    }
    Ok(Built {
        agent: builder.build()?,
        ws,
        checkpointer,
    })
}

/// The thread a task starts on: a fork of `ID@STEP`, `--thread ID`, or a new one.
pub async fn start_thread(
    checkpointer: &BackendCheckpointer,
    thread: Option<String>,
    fork: Option<String>,
) -> Result<ThreadId> {
    Ok(match (fork, thread) {
        (Some(spec), _) => threads::fork(checkpointer, &spec).await?,
        (None, Some(id)) => ThreadId::new(id)?,
        (None, None) => ThreadId::generate(),
    })
}

/// The first input of a task: a leading `/skill` pins that skill (see [`crate::cli::pin`]).
pub async fn task_input(task: String, ws: &Mounts) -> Result<RunInput> {
    if pin::leading_word(&task).is_none() && !task.starts_with("//") {
        return Ok(RunInput::human(task));
    }
    Ok(match pin::parse(&task, &pin::catalog(ws).await)? {
        Leading::Plain(text) => RunInput::human(text),
        Leading::Pin { skill, rest } => {
            if rest.is_empty() {
                bail!("/{skill} pins the skill {skill}: give the task after its name (/{skill} TASK)");
            }
            RunInput::human(rest).slot(&PIN_SKILLS, vec![skill])
        }
    })
}

/// The mounts for `config`, with the subagents' own skills sources mounted after the main
/// agent's; returns, per subagent, its sources.
pub fn mounts_of(config: &RunConfig) -> Result<(Mounts, Vec<Vec<SkillSource>>)> {
    let mut all = config.skills.clone();
    for sub in &config.subagents {
        all.extend(sub.skills.iter().cloned());
    }
    let mut ws = Mounts::from_sources(&all, &config.memory, config.workdir.as_deref())?;
    let mut rest = ws.skills.split_off(config.skills.len().min(ws.skills.len()));
    let mut per_subagent = Vec::new();
    for sub in &config.subagents {
        let tail = rest.split_off(sub.skills.len().min(rest.len()));
        per_subagent.push(std::mem::replace(&mut rest, tail));
    }
    Ok((ws, per_subagent))
}

/// Apply what `config` sets beyond the sources and the sandbox to `builder`: the main agent's
/// skills, permissions, the system prompt, model settings, budgets, summarization, file-tool
/// limits and the declared subagents (each with its own skills and, when given, its own model).
pub fn configure(
    mut builder: DeepAgentBuilder,
    config: &RunConfig,
    ws: &Mounts,
    sub_skills: Vec<Vec<SkillSource>>,
    sub_models: Vec<Option<Arc<dyn ChatModel>>>,
) -> Result<DeepAgentBuilder> {
    let mut permissions = ws.permissions(config.writable_skills)?;
    for spec in &config.permissions {
        permissions.push(spec.rule().map_err(anyhow::Error::msg)?);
    }
    builder = builder.permissions(permissions);
    for source in &ws.skills {
        builder = builder.skills_source(source.clone());
    }
    if let Some(prompt) = &config.system_prompt {
        builder = builder.system_prompt(prompt.clone());
    }
    if !config.model_settings.is_empty() {
        builder = builder.middleware(ModelSettingsMiddleware(config.model_settings.clone()));
    }
    if let Some(chars) = config.memory_budget_chars {
        builder = builder.memory_budget_chars(chars);
    }
    if let Some(n) = config.max_steps {
        builder = builder.max_steps(n);
    }
    if config.todos {
        builder = builder.middleware(trellis_middleware::TodoListMiddleware::new());
    }
    builder = match config
        .summarization
        .config()
        .map_err(|(k, m)| anyhow::anyhow!("summarization.{k}: {m}"))?
    {
        Some(s) => builder.summarization(s),
        None => builder.without_summarization(),
    };
    if let Some(limits) = config.limits.limits() {
        builder = builder.limits(limits);
    }
    let models = sub_models.into_iter().chain(std::iter::repeat(None));
    for ((sub, skills), model) in config.subagents.iter().zip(sub_skills).zip(models) {
        builder = builder.declared_subagent(DeclaredSubagent {
            name: sub.name.clone(),
            description: sub.description.clone(),
            prompt: sub.prompt.clone(),
            model,
            tools: sub.tools.clone(),
            skills,
        });
    }
    Ok(builder)
}

/// The local user a `--workdir` belongs to: `$USER`, else `local`.
pub fn local_user() -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "local".to_owned())
}

/// The network `execute`'s commands get: the host's under `--unsafe-host-network`, allowed domains
/// through the sandbox's proxy under `--allow-domain` (a bad domain is an error naming it), else
/// none. Both at once is an error: the host's network would make the list meaningless.
pub fn network(config: &RunConfig) -> Result<Network> {
    match (config.sandbox_network, config.allow_domain.is_empty()) {
        (true, false) => bail!(
            "--unsafe-host-network shares the host's whole network, so --allow-domain would limit nothing: give one of them"
        ),
        (true, true) => Ok(Network::Host),
        (false, false) => match AllowedDomains::parse(&config.allow_domain) {
            Ok(allowed) => Ok(Network::Domains(allowed)),
            Err(why) => bail!("--allow-domain: {why}"),
        },
        (false, true) => Ok(Network::None),
    }
}
