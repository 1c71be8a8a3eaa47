//! `trellis run` and `trellis resume`: build the agent a [`RunConfig`] describes, run a thread,
//! and carry it through approvals (see [`crate::approval_cli`]).
//!
//! `run` saves its configuration beside the thread (`<state-dir>/runs/<thread>.json`, local paths
//! made absolute), so `trellis resume ID --state-dir DIR` rebuilds the same agent in another
//! process and continues the thread where it stopped. The file belongs to the thread: `trellis
//! threads delete` removes it with the thread. It records the command line's settings (model
//! string, sources, MCP server commands), never an API key: keys come from the environment of the
//! process that resumes.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use trellis_middleware::backend::sandbox::Network;
use trellis_middleware::runtime::interrupt::Decisions;
use trellis_middleware::skills::PIN_SKILLS;
use trellis_middleware::skills::SkillSource;
use trellis_middleware::tools::{CommandPolicy, UserFiles, UserIdentity};
use trellis_middleware::{Agent, BackendCheckpointer, ChatModel, RunInput, ThreadId};

use crate::agent_file::{LimitsSettings, PermissionSpec, SubagentConfig, SummarizationSettings};
use crate::approval_cli::{self, ApproveRule, EXIT_WAITING, LinePrompter, Outcome, Prompter};
use crate::builder::{DeclaredSubagent, DeepAgentBuilder, deep_agent};
use crate::mcp::{McpServerConfig, McpServers};
use crate::model_settings::{ModelSettings, ModelSettingsMiddleware};
use crate::pin::{self, Leading};
use crate::run_output::{self, OutputMode};
use crate::run_summary::Prices;
use crate::sandbox_cli::{self, SandboxChoice};
use crate::skills_cli::{self, CacheChoice};
use crate::{providers, threads_cli, workspace};

/// What `trellis run` was told, as saved for `trellis resume`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    /// The model string.
    pub model: String,
    /// `--skills` sources.
    pub skills: Vec<String>,
    /// `--memory` sources.
    pub memory: Vec<String>,
    /// `--user`.
    pub user: Option<String>,
    /// `--workdir`.
    pub workdir: Option<PathBuf>,
    /// `--mcp` specs.
    pub mcp: Vec<String>,
    /// `--mcp-timeout` seconds.
    pub mcp_timeout_secs: u64,
    /// `--writable-skills`.
    pub writable_skills: bool,
    /// `--sandbox`.
    pub sandbox: Option<SandboxChoice>,
    /// `--sandbox-network`.
    pub sandbox_network: bool,
    /// `--allow-command` prefixes.
    pub allow_command: Vec<String>,
    /// `--ask` tools.
    pub ask: Vec<String>,
    // What only the agent file sets (and the typed model flags). Runs saved before these existed
    // read back with the defaults.
    /// Typed settings for every model call (`[model_settings]`, `--temperature`, …).
    #[serde(default, skip_serializing_if = "ModelSettings::is_empty")]
    pub model_settings: ModelSettings,
    /// `system_prompt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// `memory_budget_chars`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_budget_chars: Option<usize>,
    /// `max_steps`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u32>,
    /// `[[permissions]]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub permissions: Vec<PermissionSpec>,
    /// `[summarization]`.
    #[serde(default)]
    pub summarization: SummarizationSettings,
    /// `[limits]`.
    #[serde(default)]
    pub limits: LimitsSettings,
    /// `[[subagents]]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subagents: Vec<SubagentConfig>,
    /// Where the skill sources' persisted catalogs are kept (`--cache-dir`, `--no-cache`; by
    /// default the user's cache directory), so a new process reads only the `SKILL.md` files
    /// that changed since the last one.
    #[serde(default)]
    pub skills_cache: CacheChoice,
}

impl RunConfig {
    /// The same configuration with relative local paths made absolute against `cwd`, so it means
    /// the same from any directory. Object-store URLs are left alone.
    pub fn absolute(mut self, cwd: &Path) -> Self {
        let fix = |s: &mut String| {
            if !s.contains("://") && Path::new(s.as_str()).is_relative() {
                *s = cwd.join(&*s).to_string_lossy().into_owned();
            }
        };
        self.skills.iter_mut().for_each(fix);
        self.memory.iter_mut().for_each(fix);
        for sub in &mut self.subagents {
            sub.skills.iter_mut().for_each(fix);
        }
        if let Some(dir) = &mut self.workdir
            && dir.is_relative()
        {
            *dir = cwd.join(&*dir);
        }
        if let Some(dir) = &mut self.skills_cache.dir
            && dir.is_relative()
        {
            *dir = cwd.join(&*dir);
        }
        self
    }
}

/// How decisions are made in this process (and the prices the summary uses).
#[derive(Debug, Clone, Default)]
pub struct Approvals {
    /// Prices for the summary's cost.
    pub prices: Prices,
    /// `--approve`.
    pub rule: ApproveRule,
    /// `--decisions FILE`.
    pub given: Option<Decisions>,
}

/// Where the saved configuration of `thread` lives.
fn config_path(state_dir: &Path, thread: &ThreadId) -> PathBuf {
    state_dir.join("runs").join(format!("{thread}.json"))
}

/// Save `config` for `thread` (written to a temporary file, then renamed into place).
pub fn save_config(state_dir: &Path, thread: &ThreadId, config: &RunConfig) -> Result<()> {
    let path = config_path(state_dir, thread);
    let dir = state_dir.join("runs");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let tmp = dir.join(format!(".{thread}.json.tmp"));
    std::fs::write(&tmp, serde_json::to_vec_pretty(config)?)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// The configuration `trellis run` saved for `thread`.
pub fn load_config(state_dir: &Path, thread: &ThreadId) -> Result<RunConfig> {
    let path = config_path(state_dir, thread);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "no run of thread {thread} was saved in {} (start it with `trellis run` and the same --state-dir)",
            state_dir.display()
        ),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    serde_json::from_slice(&bytes).with_context(|| format!("{} is not a saved run", path.display()))
}

/// Remove the saved configuration of `thread`, if any.
pub fn delete_config(state_dir: &Path, thread: &ThreadId) -> Result<()> {
    match std::fs::remove_file(config_path(state_dir, thread)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

/// Where a run starts.
#[derive(Debug)]
pub enum Start {
    /// A new thread, or `--thread ID`, with this task.
    Task {
        /// `--thread`.
        thread: Option<String>,
        /// `--fork ID@STEP`.
        fork: Option<String>,
        /// The task.
        task: String,
    },
    /// `trellis resume ID`: the thread waits for decisions.
    Resume(ThreadId),
}

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

/// `trellis run` / `trellis resume`: start the MCP servers, run, and stop them again.
pub async fn run(
    config: RunConfig,
    state_dir: &Path,
    start: Start,
    approvals: Approvals,
    json: bool,
) -> Result<ExitCode> {
    let servers = mcp_servers(&config)?;
    let result = run_agent(&config, state_dir, start, servers.clone(), &approvals, json).await;
    // Stop the MCP servers (and wait for their processes) whether the run succeeded or not.
    if let Some(servers) = servers {
        servers.shutdown().await;
    }
    result
}

/// The agent a [`RunConfig`] describes, with the workspace and the checkpointer its runs use.
/// `trellis run`, `trellis resume` and `trellis chat` build their agents here.
#[derive(Debug)]
pub struct Built {
    /// The agent.
    pub agent: Agent,
    /// The skills, memory and user files it was built from.
    pub ws: workspace::Workspace,
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
pub async fn build(config: &RunConfig, state_dir: &Path, servers: Option<Arc<McpServers>>) -> Result<Built> {
    let model = providers::connect_model_string(&config.model).await?;
    let sandbox = sandbox_cli::select(config.sandbox)?;
    if let Some(note) = &sandbox.status.note {
        tracing::warn!("{note}");
    }
    let (mut ws, sub_skills) = assemble(config)?;
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
    std::fs::create_dir_all(state_dir).with_context(|| format!("cannot create {}", state_dir.display()))?;
    let checkpointer = Arc::new(threads_cli::checkpointer(state_dir)?);
    // The thread's own files live in the state dir beside its checkpoints; skills and memory are
    // shared mounts; --workdir is the user's workspace at /workspace.
    let mut builder = deep_agent(model)
        .backend(ws.backend.clone())
        .file_layout(ws.layout())
        .checkpointer(checkpointer.clone());
    builder = configure(builder, config, &ws, sub_skills, sub_models)?;
    builder = builder.skills_persisted(skills_cli::persistence(&ws, &config.skills, &config.skills_cache));
    for path in &ws.memory {
        builder = builder.memory_source(path.clone());
    }
    if let Some(servers) = servers {
        builder = builder.mcp_servers(servers);
    }
    if let Some(sandbox) = sandbox.sandbox {
        builder = builder.sandbox(sandbox);
    }
    if config.sandbox_network {
        builder = builder.sandbox_network(Network::Host);
    }
    if !config.allow_command.is_empty() {
        builder = builder.commands(CommandPolicy::allow_only(config.allow_command.clone()));
    }
    if ws.user.is_some() {
        builder = builder
            .user_memory(workspace::USER_MEMORY)
            .personal_skills(workspace::PERSONAL_SKILLS_DIR);
    }
    if let Some(gate) = approval_cli::gate(&config.ask)? {
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
        (Some(spec), _) => threads_cli::fork(checkpointer, &spec).await?,
        (None, Some(id)) => ThreadId::new(id)?,
        (None, None) => ThreadId::generate(),
    })
}

/// The first input of a task: a leading `/skill` pins that skill (see [`crate::pin`]).
pub async fn task_input(task: String, ws: &workspace::Workspace) -> Result<RunInput> {
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

async fn run_agent(
    config: &RunConfig,
    state_dir: &Path,
    start: Start,
    servers: Option<Arc<McpServers>>,
    approvals: &Approvals,
    json: bool,
) -> Result<ExitCode> {
    let built = build(config, state_dir, servers).await?;
    let agent = &built.agent;
    let (thread_id, task) = match start {
        Start::Task { thread, fork, task } => {
            (start_thread(&built.checkpointer, thread, fork).await?, Some(task))
        }
        Start::Resume(id) => (id, None),
    };
    let first = match task {
        Some(task) => {
            let first = task_input(task, &built.ws).await?;
            save_config(state_dir, &thread_id, config)?;
            eprintln!("thread {thread_id} (resume with --thread {thread_id})");
            first
        }
        None => {
            let Some(interrupt) = agent.pending_interrupt(&thread_id).await? else {
                bail!(
                    "thread {thread_id} waits for no decisions; continue it with `trellis run --thread {thread_id}`"
                );
            };
            match decide(&interrupt, approvals)? {
                Outcome::Decided(decisions) => RunInput::resume(decisions),
                Outcome::Waiting(waiting) => {
                    eprint!(
                        "{}",
                        approval_cli::waiting_message(&interrupt, &waiting, state_dir)
                    );
                    return Ok(ExitCode::from(EXIT_WAITING));
                }
            }
        }
    };
    let prepare = |input: RunInput| built.prepare(input, &thread_id);
    drive(agent, first, prepare, approvals, json, state_dir).await
}

/// The workspace for `config`, with the subagents' own skills sources mounted after the main
/// agent's; returns, per subagent, its sources.
pub fn assemble(config: &RunConfig) -> Result<(workspace::Workspace, Vec<Vec<SkillSource>>)> {
    let mut all = config.skills.clone();
    for sub in &config.subagents {
        all.extend(sub.skills.iter().cloned());
    }
    let mut ws = workspace::assemble(&all, &config.memory, config.workdir.as_deref())?;
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
    ws: &workspace::Workspace,
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

/// Run, and while the run stops for decisions, decide and resume.
async fn drive(
    agent: &Agent,
    first: RunInput,
    prepare: impl Fn(RunInput) -> RunInput,
    approvals: &Approvals,
    json: bool,
    state_dir: &Path,
) -> Result<ExitCode> {
    let mode = if json {
        OutputMode::Json
    } else if std::io::stdout().is_terminal() {
        OutputMode::Terminal
    } else {
        OutputMode::Plain
    };
    let started = std::time::Instant::now();
    let (events, printed) = run_output::sink(mode, approvals.prices.clone());
    let mut input = prepare(first).events(events.clone());
    loop {
        let out = agent.run(input).await?;
        let Some(interrupt) = &out.interrupt else {
            run_output::finish(&out, mode, &printed);
            run_output::summary(&printed, mode, started.elapsed());
            return Ok(ExitCode::SUCCESS);
        };
        match decide(interrupt, approvals)? {
            Outcome::Decided(decisions) => {
                input = prepare(RunInput::resume(decisions)).events(events.clone());
            }
            Outcome::Waiting(waiting) => {
                run_output::summary(&printed, mode, started.elapsed());
                eprint!(
                    "{}",
                    approval_cli::waiting_message(interrupt, &waiting, state_dir)
                );
                return Ok(ExitCode::from(EXIT_WAITING));
            }
        }
    }
}

/// Decide with the flags, and on a terminal (stdin and stderr) by asking.
fn decide(
    interrupt: &trellis_middleware::runtime::interrupt::Interrupt,
    approvals: &Approvals,
) -> Result<Outcome> {
    let given = approvals.given.as_ref();
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return approval_cli::decide(interrupt, &approvals.rule, given, None);
    }
    let mut prompter = LinePrompter::new(std::io::stdin().lock(), std::io::stderr());
    approval_cli::decide(
        interrupt,
        &approvals.rule,
        given,
        Some(&mut prompter as &mut dyn Prompter),
    )
}

/// Read `--decisions`: a JSON object of request id → decision, from a file or `-` (stdin).
pub fn read_decisions(path: &Path) -> Result<Decisions> {
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin())?
    } else {
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?
    };
    serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a decisions file: a JSON object like {{\"CALL_ID\": {{\"decision\": \"approve\"}}}}",
            path.display()
        )
    })
}

/// The local user a `--workdir` belongs to: `$USER`, else `local`.
pub fn local_user() -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "local".to_owned())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn config() -> RunConfig {
        RunConfig {
            model: "anthropic:claude-sonnet-4-5".into(),
            skills: vec!["skills".into(), "s3://bucket/skills".into(), "/abs".into()],
            memory: vec!["AGENTS.md".into()],
            user: None,
            workdir: Some("work".into()),
            mcp: Vec::new(),
            mcp_timeout_secs: 60,
            writable_skills: false,
            sandbox: Some(SandboxChoice::None),
            sandbox_network: false,
            allow_command: Vec::new(),
            ask: vec![approval_cli::DEFAULT_ASK.into()],
            model_settings: ModelSettings::default(),
            system_prompt: None,
            memory_budget_chars: None,
            max_steps: None,
            permissions: Vec::new(),
            summarization: SummarizationSettings::default(),
            limits: LimitsSettings::default(),
            subagents: Vec::new(),
            skills_cache: CacheChoice::default(),
        }
    }

    /// A run saved before the agent file existed still reads back, with today's defaults.
    #[test]
    fn a_run_saved_before_the_agent_file_reads_back() {
        let old = r#"{"model":"anthropic:claude-sonnet-4-5","skills":[],"memory":[],"user":null,
            "workdir":null,"mcp":[],"mcp_timeout_secs":60,"writable_skills":false,"sandbox":"none",
            "sandbox_network":false,"allow_command":[],"ask":["execute"]}"#;
        let config: RunConfig = serde_json::from_str(old).unwrap();
        assert!(config.model_settings.is_empty() && config.subagents.is_empty());
        assert!(config.summarization.enabled);
    }

    #[test]
    fn relative_local_paths_become_absolute_and_urls_stay() {
        let c = config().absolute(Path::new("/home/me/project"));
        assert_eq!(
            c.skills,
            ["/home/me/project/skills", "s3://bucket/skills", "/abs"]
        );
        assert_eq!(c.memory, ["/home/me/project/AGENTS.md"]);
        assert_eq!(c.workdir, Some(PathBuf::from("/home/me/project/work")));
    }

    #[test]
    fn a_saved_config_reads_back_and_is_deleted_with_the_thread() {
        let dir = tempfile::tempdir().unwrap();
        let thread = ThreadId::new("t-1").unwrap();
        assert!(load_config(dir.path(), &thread).is_err());
        save_config(dir.path(), &thread, &config()).unwrap();
        assert_eq!(load_config(dir.path(), &thread).unwrap(), config());
        delete_config(dir.path(), &thread).unwrap();
        delete_config(dir.path(), &thread).unwrap();
        let err = load_config(dir.path(), &thread).unwrap_err().to_string();
        assert!(err.contains("no run of thread t-1"), "{err}");
    }
}
