//! [`RunConfig`]: what builds a run's agent (the agent file under the flags), and its saved
//! file.
//!
//! `trellis run` and `trellis chat` save the configuration beside the thread
//! ([`StateDir::run_config_file`]: `<state-dir>/runs/<thread>.json`, local paths made absolute), so
//! `trellis resume ID --state-dir DIR` rebuilds the same agent in another process and continues the
//! thread where it stopped. The file belongs to the thread: `trellis threads delete` removes it with
//! the thread. It records the command line's settings (model string, sources, MCP server commands),
//! never an API key: keys come from the environment of the process that resumes.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use trellis_middleware::ThreadId;

use super::sections::{LimitsSettings, PermissionSpec, SubagentConfig, SummarizationSettings};
use crate::cli::sandbox::SandboxChoice;
use crate::cli::skills::CacheChoice;
use crate::cli::state_dir::StateDir;
use crate::model_settings::ModelSettings;

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
    /// `--unsafe-host-network`.
    pub sandbox_network: bool,
    /// `--allow-domain` domains.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_domain: Vec<String>,
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
    /// `todos`: the todo list middleware.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub todos: bool,
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

impl RunConfig {
    /// Save this configuration for `thread` (written to a temporary file, then renamed into
    /// place).
    pub fn save(&self, state_dir: &StateDir, thread: &ThreadId) -> Result<()> {
        let path = state_dir.run_config_file(thread);
        let bytes = serde_json::to_vec_pretty(self)?;
        if std::fs::read(&path).is_ok_and(|saved| saved == bytes) {
            // Saved already (every run of a served thread saves it): creating a file costs more
            // than reading one.
            return Ok(());
        }
        let dir = state_dir.runs_dir();
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        // A temporary file of its own per save (two runs of one served thread may save at once:
        // a shared temporary name let one rename take the other's file away), renamed over the
        // old one, so a reader sees one whole configuration or the other.
        let mut tmp = tempfile::Builder::new()
            .prefix(&format!(".{thread}."))
            .suffix(".json.tmp")
            .tempfile_in(&dir)
            .with_context(|| format!("cannot write in {}", dir.display()))?;
        std::io::Write::write_all(&mut tmp, &bytes)
            .with_context(|| format!("cannot write {}", tmp.path().display()))?;
        tmp.persist(&path)
            .map_err(|e| e.error)
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(())
    }

    /// The configuration `trellis run` saved for `thread`.
    pub fn load(state_dir: &StateDir, thread: &ThreadId) -> Result<Self> {
        let path = state_dir.run_config_file(thread);
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
    pub fn delete_saved(state_dir: &StateDir, thread: &ThreadId) -> Result<()> {
        match std::fs::remove_file(state_dir.run_config_file(thread)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }
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
            allow_domain: Vec::new(),
            allow_command: Vec::new(),
            ask: vec![crate::cli::approvals::DEFAULT_ASK.into()],
            model_settings: ModelSettings::default(),
            system_prompt: None,
            memory_budget_chars: None,
            max_steps: None,
            todos: false,
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

    /// Two runs of one thread save its configuration at once (`trellis serve` checks a new run's
    /// input while the run before it starts): every save succeeds and the file reads back whole.
    #[test]
    fn concurrent_saves_of_one_thread_all_succeed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::new(tmp.path());
        let thread = ThreadId::new("t-1").unwrap();
        std::thread::scope(|s| {
            let saves: Vec<_> = (0..4)
                .map(|_| s.spawn(|| (0..200).try_for_each(|_| config().save(&dir, &thread))))
                .collect();
            for save in saves {
                save.join().unwrap().unwrap();
            }
        });
        assert_eq!(RunConfig::load(&dir, &thread).unwrap(), config());
        let left: Vec<_> = std::fs::read_dir(dir.runs_dir()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file is left: {left:?}");
    }

    #[test]
    fn a_saved_config_reads_back_and_is_deleted_with_the_thread() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::new(tmp.path());
        let thread = ThreadId::new("t-1").unwrap();
        assert!(RunConfig::load(&dir, &thread).is_err());
        config().save(&dir, &thread).unwrap();
        assert_eq!(RunConfig::load(&dir, &thread).unwrap(), config());
        RunConfig::delete_saved(&dir, &thread).unwrap();
        RunConfig::delete_saved(&dir, &thread).unwrap();
        let err = RunConfig::load(&dir, &thread).unwrap_err().to_string();
        assert!(err.contains("no run of thread t-1"), "{err}");
    }
}
