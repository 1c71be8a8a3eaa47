//! [`ExecuteTool`]: the model-facing `execute`.

use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use trellis_backend::sandbox::{ExecFiles, ExecRequest, LimitKind, Network, Sandbox, SandboxError};
use trellis_backend::{PathFilter, VirtualPath};

use super::policy::CommandPolicy;
use super::report::render;
use crate::files::format::parse_path;
use crate::files::{Access, Effect, FileAccess, LARGE_RESULTS_DIR};
use crate::tool::parse_args_described as parse_args;
use crate::tool::{Tool, ToolContext, ToolError, ToolOutput};

/// Timeout of a command that asks for none: the sandbox contract's default,
/// [`trellis_backend::sandbox::DEFAULT_TIMEOUT`].
pub const DEFAULT_EXEC_TIMEOUT: Duration = trellis_backend::sandbox::DEFAULT_TIMEOUT;
/// The environment variable that holds the call's idempotency key
/// ([`ToolContext::idempotency_key`]): the same when a run resumed after a crash runs the call
/// again, so a script can do its effect once.
pub const IDEMPOTENCY_KEY_VAR: &str = "TRELLIS_IDEMPOTENCY_KEY";
/// Longest timeout a command may ask for.
const MAX_EXEC_TIMEOUT: Duration = Duration::from_secs(30 * 60);

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ExecuteArgs {
    /// The shell command, run with `/bin/sh -c`, e.g. `python3 /skills/team/pdf/scripts/fill.py /uploads/form.pdf`.
    command: String,
    /// Seconds before the command and everything it started are killed (default and maximum in the tool description).
    #[serde(default)]
    timeout: Option<u64>,
    /// Working directory, an absolute path (default `/`). Created if missing.
    #[serde(default)]
    cwd: Option<String>,
}

/// `execute`: runs a shell command in a sandbox over the agent's files, and returns its output,
/// its exit code and which files it changed.
///
/// The sandbox is the one given ([`ExecuteTool::with_sandbox`]), else the one the call's backend
/// offers for the working directory ([`Backend::sandbox`](trellis_backend::Backend::sandbox)).
/// The files are the call's view ([`FileAccess::for_call`]): the thread's space, the user's
/// workspace, and the shared sources; skill sources are read-only and copied in only as far as the
/// command reaches them ([`ExecuteTool::skill_sources`]). The permission rules apply to every file:
/// a file the model may not read is not there, a change the model may not write is not saved.
/// [`CommandPolicy`] decides which commands may run at all.
#[derive(Debug, Clone)]
pub struct ExecuteTool {
    description: String,
    schema: Value,
    files: FileAccess,
    sandbox: Option<Arc<dyn Sandbox>>,
    policy: CommandPolicy,
    skill_sources: Vec<VirtualPath>,
    read_only: Vec<VirtualPath>,
    network: Network,
    default_timeout: Duration,
}

impl ExecuteTool {
    /// `execute` over `files`, running in the sandbox `files.backend` offers for `/` (if any; else
    /// the one the call's view offers for the command's working directory).
    pub fn new(files: FileAccess) -> Self {
        let sandbox = files.backend.sandbox(&VirtualPath::root());
        let mut me = Self {
            description: String::new(),
            schema: crate::tool::parameters_schema::<ExecuteArgs>(),
            files,
            sandbox,
            policy: CommandPolicy::allow_all(),
            skill_sources: Vec::new(),
            read_only: Vec::new(),
            network: Network::None,
            default_timeout: DEFAULT_EXEC_TIMEOUT,
        };
        me.describe();
        me
    }

    /// Run in `sandbox` (rather than the backend's).
    pub fn with_sandbox(mut self, sandbox: Arc<dyn Sandbox>) -> Self {
        self.sandbox = Some(sandbox);
        self.describe();
        self
    }

    /// Skill sources at these paths: read-only, each skill folder copied in only when a command
    /// names a path inside it (see `trellis_backend::sandbox::ExecMount::on_reach`).
    pub fn skill_sources(mut self, roots: impl IntoIterator<Item = VirtualPath>) -> Self {
        self.skill_sources = roots.into_iter().collect();
        self.describe();
        self
    }

    /// Read-only (and copied in full) at these paths.
    pub fn read_only(mut self, paths: impl IntoIterator<Item = VirtualPath>) -> Self {
        self.read_only = paths.into_iter().collect();
        self.describe();
        self
    }

    /// Which commands may run.
    pub fn commands(mut self, policy: CommandPolicy) -> Self {
        self.policy = policy;
        self.describe();
        self
    }

    /// Network access for commands (default none).
    pub fn network(mut self, network: Network) -> Self {
        self.network = network;
        self.describe();
        self
    }

    /// Timeout of a command that asks for none (at most 30 minutes).
    pub fn default_timeout(mut self, timeout: Duration) -> Self {
        self.default_timeout = timeout.min(MAX_EXEC_TIMEOUT);
        self.describe();
        self
    }

    /// Replace the model-facing description.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// What the tool works on.
    pub fn files(&self) -> &FileAccess {
        &self.files
    }

    /// True when the tool can run anything: there is a sandbox and the policy allows some command.
    pub fn is_offered(&self) -> bool {
        !self.policy.denies_everything() && self.sandbox.is_some()
    }

    fn describe(&mut self) {
        let report = self.sandbox.as_ref().map(|s| s.report());
        let isolated = report.as_ref().is_none_or(|r| r.enforces(LimitKind::Filesystem));
        let offline =
            report.as_ref().is_none_or(|r| r.enforces(LimitKind::Network)) && self.network == Network::None;
        let mut d = if isolated {
            String::from(
                "Run a shell command (`/bin/sh -c`) in an isolated sandbox and get its output (stdout and stderr together), its exit code and the files it changed.\n\n\
                 The command sees the same files as the file tools, at the same absolute paths",
            )
        } else {
            String::from(
                "Run a shell command (`/bin/sh -c`) directly on the host, NOT isolated, and get its output (stdout and stderr together), its exit code and the files it changed.\n\n\
                 The command runs in a copy of the files the file tools see, but `/` is the host's root: use paths relative to the working directory (`cwd`), not absolute ones",
            )
        };
        if self.skill_sources.is_empty() {
            d.push('.');
        } else {
            let roots: Vec<String> = self.skill_sources.iter().map(|r| format!("`{r}`")).collect();
            d.push_str(&format!(
                ". Skills under {} are read-only, and a skill's folder is there only when the command names a path inside it: run a skill's script by its full path, e.g. `python3 {}/<skill>/scripts/<script>.py`.",
                roots.join(", "),
                if isolated {
                    self.skill_sources[0].to_string()
                } else {
                    self.skill_sources[0].as_str().trim_start_matches('/').to_owned()
                }
            ));
        }
        d.push_str(
            " Files the command creates, changes or deletes elsewhere are saved when it ends; the result lists them, and any it could not save.\n\n",
        );
        d.push_str(&format!(
            "- Working directory: `cwd` (default `/`).\n- Timeout: `timeout` in seconds (default {}, at most {}); the command and everything it started are then killed.\n",
            self.default_timeout.as_secs(),
            MAX_EXEC_TIMEOUT.as_secs()
        ));
        // The seccomp filter refuses every socket but AF_UNIX without network: loopback too.
        let unix_only = report.as_ref().is_some_and(|r| r.enforces(LimitKind::Syscalls));
        match &self.network {
            Network::Domains(allowed) if report.as_ref().is_none_or(|r| r.enforces(LimitKind::Network)) => {
                d.push_str(&format!(
                    "- Network access only over HTTP(S) through the sandbox's proxy (`http_proxy`/`https_proxy` are set; programs that ignore them have no network), and only to these domains: {}. Other hosts and IP addresses are refused with status 403.\n",
                    if allowed.is_empty() { "none".to_owned() } else { allowed.to_string() }
                ));
            }
            _ => d.push_str(if offline && unix_only {
                "- No network access: nothing can be downloaded or installed, and only Unix sockets open (no TCP or UDP, not even to 127.0.0.1).\n"
            } else if offline {
                "- No network access: nothing can be downloaded or installed.\n"
            } else {
                "- Network access is available.\n"
            }),
        }
        d.push_str(
            "- Long output is cut in the middle; the result then names a file holding all of it, which read_file can page through.\n\
             - Each call starts fresh: only files persist between calls, not processes, variables or `cd`.",
        );
        if self.policy.default == crate::files::Effect::Deny {
            d.push_str(&format!(
                "\n- Only these commands may run, each on its own (no `;`, `&&`, pipes or redirections): {}.",
                self.policy.allowed()
            ));
        }
        self.description = d;
    }

    async fn run(&self, args: Value, cx: &ToolContext<'_>) -> Result<ToolOutput, ToolOutput> {
        let args: ExecuteArgs = parse_args(self.name(), &self.schema, args)?;
        self.policy
            .check(&args.command)
            .map_err(|why| ToolOutput::error(format!("command refused: {why}.")))?;
        let cwd = match &args.cwd {
            Some(raw) => parse_path("cwd", raw)?,
            None => VirtualPath::root(),
        };
        let files = self.files.for_call(cx)?;
        let sandbox = self
            .sandbox
            .clone()
            .or_else(|| files.backend.sandbox(&cwd))
            .ok_or_else(|| ToolOutput::error("no sandbox is available to run commands here."))?;
        let timeout = args
            .timeout
            .map_or(self.default_timeout, Duration::from_secs)
            .clamp(Duration::from_secs(1), MAX_EXEC_TIMEOUT);
        let output_path = VirtualPath::parse(&format!(
            "{LARGE_RESULTS_DIR}/execute-{}.txt",
            safe_id(cx.call_id())
        ))
        .map_err(|e| ToolOutput::error(format!("cannot name the output file: {e}")))?;
        let request = ExecRequest::new(args.command)
            .env(IDEMPOTENCY_KEY_VAR, cx.idempotency_key())
            .cwd(cwd)
            .timeout(timeout)
            .network(self.network.clone())
            .full_output_path(output_path);
        let exec_files = self.exec_files(&files).cache_key(cx.thread_id());
        let out = sandbox.execute(&exec_files, &request).await.map_err(|e| {
            ToolOutput::error(match e {
                SandboxError::InvalidRequest(why) => format!("{why}."),
                SandboxError::TooLarge(why) => format!("{why}."),
                other => format!("the sandbox failed: {other}"),
            })
        })?;
        let structured = json!({
            "exit_code": out.exit_code,
            "timed_out": out.timed_out,
            "out_of_memory": out.out_of_memory,
            "truncated": out.truncated,
            "output_bytes": out.output_bytes,
            "full_output_path": out.full_output_path,
            "changes": out.changes,
            "not_written": out.not_written,
        });
        Ok(ToolOutput::text(render(&out, timeout.as_secs())).with_structured(structured))
    }

    fn exec_files(&self, files: &FileAccess) -> ExecFiles {
        let read = Arc::clone(&files.permissions);
        let write = Arc::clone(&files.permissions);
        // Without a rule that can deny a read, every file is readable: no filter, so a sandbox may
        // mount a local directory whole instead of copying it file by file.
        let limits_reads = files
            .permissions
            .rules()
            .iter()
            .any(|r| r.covers(Access::Read) && r.effect() == Effect::Deny);
        let mut exec = ExecFiles::new(Arc::clone(&files.backend))
            .writable(PathFilter::new(move |p| write.allows(Access::Write, p)));
        if limits_reads {
            exec = exec.readable(PathFilter::new(move |p| read.allows(Access::Read, p)));
        }
        for root in &self.skill_sources {
            exec = exec.read_only_on_reach(root.clone());
        }
        for path in &self.read_only {
            exec = exec.read_only(path.clone());
        }
        exec
    }
}

/// A call id as one file-name-safe segment.
fn safe_id(id: &str) -> String {
    let s: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(120)
        .collect();
    if s.is_empty() { "call".into() } else { s }
}

#[async_trait::async_trait]
impl Tool for ExecuteTool {
    fn name(&self) -> &str {
        "execute"
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> &Value {
        &self.schema
    }

    fn bounds_own_output(&self) -> bool {
        true
    }

    /// A command may do anything; a script can dedupe with `TRELLIS_IDEMPOTENCY_KEY`.
    fn side_effects(&self) -> crate::tool::SideEffects {
        crate::tool::SideEffects::External
    }

    async fn call(&self, args: Value, cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        Ok(match self.run(args, cx).await {
            Ok(out) | Err(out) => out,
        })
    }
}
