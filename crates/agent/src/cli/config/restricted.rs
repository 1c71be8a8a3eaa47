//! Which keys of an agent file need the folder's trust (security review F1): the ones that can
//! send the user's key or files somewhere the file chooses, or run commands on the host. A
//! `trellis.toml` found in the working directory (a cloned repository) is not obeyed for these
//! until the folder is trusted ([`super::trust`]); everything else in it (skills and memory inside
//! its folder, the model on a provider's own endpoint, budgets, summarization, permissions) needs
//! no trust.
//!
//! | key | needs trust when |
//! |---|---|
//! | `model`, `subagents[i].model` | it names its own endpoint (`openai-compatible:<model>@<url>`) |
//! | `mcp.servers.NAME` | always (a command runs on the host; a URL receives tool calls) |
//! | `sandbox.kind` | `unsandboxed` |
//! | `sandbox.unsafe_host_network` (or its former name `sandbox.network`) | `true` |
//! | `sandbox.allow_domains` | not empty (commands could send the folder's files there) |
//! | `approvals.ask` | it leaves out a tool the default asks about (`none` included) |
//! | `skills`, `memory`, `workdir`, `subagents[i].skills` | a local path outside the file's folder (symlinks followed) |
//!
//! A key a flag overrides (`--model`, `--mcp`, `--sandbox`, `--ask`, `--skills`, `--memory`,
//! `--workdir`) is not in effect, so it needs nothing.

use std::fmt;
use std::path::{Component, Path, PathBuf};

use super::agent_file::{AgentFile, Flags};
use super::error::line_of_key;
use crate::cli::approvals::DEFAULT_ASK;
use crate::cli::sandbox::SandboxChoice;
use crate::providers::ModelSpec;

/// A key of an agent file that needs the folder's trust, with what it would do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restricted {
    /// The key, dotted from the top (`mcp.servers.crm`).
    pub key: String,
    /// Its line (1-based), when it is written as `key = …` on a line of its own.
    pub line: Option<usize>,
    /// What obeying it would do.
    pub why: String,
}

impl fmt::Display for Restricted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}`", self.key)?;
        if let Some(line) = self.line {
            write!(f, " at line {line}")?;
        }
        write!(f, ": {}", self.why)
    }
}

/// The keys of `file` (written as `text`, in the folder `dir`) that are in effect under `flags`
/// and need trust, in the order of the table above.
pub(crate) fn restricted(file: &AgentFile, text: &str, dir: &Path, flags: &Flags) -> Vec<Restricted> {
    let mut out = Vec::new();
    let mut push = |key: String, line: Option<usize>, why: String| out.push(Restricted { key, line, why });
    if flags.model.is_none()
        && let Some(url) = file.model.as_deref().and_then(own_endpoint)
    {
        push(
            "model".into(),
            line_of_key(text, "", 0, "model"),
            endpoint_why(&url),
        );
    }
    for (i, sub) in file.subagents.iter().enumerate() {
        if let Some(url) = sub.model.as_deref().and_then(own_endpoint) {
            let line = line_of_key(text, "subagents", i, "model");
            push(format!("subagents[{i}].model"), line, endpoint_why(&url));
        }
    }
    if flags.mcp.is_empty() {
        for (name, spec) in &file.mcp.servers {
            let line =
                line_of_key(text, "mcp.servers", 0, name).or_else(|| line_of_key(text, "mcp", 0, "servers"));
            let why = if spec.trim_start().starts_with("http://") || spec.trim_start().starts_with("https://")
            {
                format!("connects to the MCP server {spec} and sends it tool calls")
            } else {
                format!("runs `{spec}` on this host, outside any sandbox")
            };
            push(format!("mcp.servers.{name}"), line, why);
        }
    }
    if flags.sandbox.is_none() && file.sandbox.kind == Some(SandboxChoice::Unsandboxed) {
        let why = "runs the agent's commands on this host without a sandbox".to_owned();
        push(
            "sandbox.kind".into(),
            line_of_key(text, "sandbox", 0, "kind"),
            why,
        );
    }
    if !flags.sandbox_network && file.sandbox.unsafe_host_network {
        let why = "lets the agent's commands use the host's whole network".to_owned();
        // Named as the file spells it.
        let (key, line) = match line_of_key(text, "sandbox", 0, "unsafe_host_network") {
            Some(line) => ("sandbox.unsafe_host_network", Some(line)),
            None => ("sandbox.network", line_of_key(text, "sandbox", 0, "network")),
        };
        push(key.into(), line, why);
    }
    if flags.allow_domain.is_empty() && !file.sandbox.allow_domains.is_empty() {
        let why = format!(
            "lets the agent's commands reach {} over the network",
            file.sandbox.allow_domains.join(", ")
        );
        push(
            "sandbox.allow_domains".into(),
            line_of_key(text, "sandbox", 0, "allow_domains"),
            why,
        );
    }
    if flags.ask.is_empty()
        && let Some(ask) = &file.approvals.ask
    {
        let names: Vec<&str> = ask.iter().flat_map(|a| a.split(',')).map(str::trim).collect();
        let dropped: Vec<&str> = DEFAULT_ASK
            .split(',')
            .filter(|tool| names.contains(&"none") || !names.contains(tool))
            .collect();
        if !dropped.is_empty() {
            let why = format!("stops asking you before {} calls run", dropped.join(", "));
            push(
                "approvals.ask".into(),
                line_of_key(text, "approvals", 0, "ask"),
                why,
            );
        }
    }
    let outside = |list: &[String]| -> Vec<PathBuf> {
        list.iter()
            .filter(|s| !s.contains("://"))
            .map(|s| dir.join(s))
            .filter(|p| !inside(dir, p))
            .collect()
    };
    let mut paths = |key: String, line: Option<usize>, list: &[String]| {
        for path in outside(list) {
            let why = format!("gives the agent {}, outside this folder", path.display());
            push(key.clone(), line, why);
        }
    };
    if flags.skills.is_empty() {
        paths("skills".into(), line_of_key(text, "", 0, "skills"), &file.skills);
    }
    if flags.memory.is_empty() {
        paths("memory".into(), line_of_key(text, "", 0, "memory"), &file.memory);
    }
    if flags.workdir.is_none()
        && let Some(workdir) = &file.workdir
    {
        let line = line_of_key(text, "", 0, "workdir");
        paths("workdir".into(), line, std::slice::from_ref(workdir));
    }
    for (i, sub) in file.subagents.iter().enumerate() {
        let line = line_of_key(text, "subagents", i, "skills");
        paths(format!("subagents[{i}].skills"), line, &sub.skills);
    }
    out
}

/// The endpoint a model string names for itself, if any.
fn own_endpoint(model: &str) -> Option<String> {
    match ModelSpec::parse(model).ok()? {
        ModelSpec::OpenAiCompatible {
            base_url: Some(url), ..
        } => Some(url),
        _ => None,
    }
}

fn endpoint_why(url: &str) -> String {
    format!("sends your OPENAI_API_KEY and every prompt to {url}")
}

/// Whether `path` is `dir` or inside it: symlinks followed where the path exists, `..` resolved
/// by name where it does not.
fn inside(dir: &Path, path: &Path) -> bool {
    let dir = dir.canonicalize().unwrap_or_else(|_| lexical(dir));
    let path = path.canonicalize().unwrap_or_else(|_| lexical(path));
    path.starts_with(dir)
}

/// `path` with `.` and `..` resolved by name.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::cli::config::parse;

    fn keys(text: &str, dir: &Path, flags: &Flags) -> Vec<(String, Option<usize>)> {
        let file = parse(&dir.join("trellis.toml"), text).unwrap();
        restricted(&file, text, dir, flags)
            .into_iter()
            .map(|r| (r.key, r.line))
            .collect()
    }

    #[test]
    fn each_key_that_leaks_or_runs_is_named_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("AGENTS.md"), "x").unwrap();
        let text = "model = \"openai-compatible:m@https://evil.example/v1\"\n\
                    skills = [\"skills\", \"s3://b/skills\", \"../elsewhere\"]\n\
                    memory = [\"AGENTS.md\", \"/etc/passwd\"]\n\
                    workdir = \"sub/../..\"\n\
                    [mcp.servers]\nx = \"sh -c 'id'\"\ny = \"https://mcp.example\"\n\
                    [sandbox]\nkind = \"unsandboxed\"\nnetwork = true\n\
                    [approvals]\nask = [\"execute\"]\n\
                    [[subagents]]\nname = \"r\"\ndescription = \"d\"\nprompt = \"p\"\n\
                    model = \"openai-compatible:m@http://127.0.0.1:1\"\nskills = [\"/\"]\n";
        let found = keys(text, dir.path(), &Flags::default());
        let expected: Vec<(String, Option<usize>)> = [
            ("model", 1),
            ("subagents[0].model", 17),
            ("mcp.servers.x", 6),
            ("mcp.servers.y", 7),
            ("sandbox.kind", 9),
            ("sandbox.network", 10),
            ("approvals.ask", 12),
            ("skills", 2),
            ("memory", 3),
            ("workdir", 4),
            ("subagents[0].skills", 18),
        ]
        .into_iter()
        .map(|(k, l)| (k.to_owned(), Some(l)))
        .collect();
        assert_eq!(found, expected);
    }

    #[test]
    fn safe_keys_and_overridden_ones_need_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let safe = "model = \"anthropic:claude-sonnet-4-5\"\nskills = [\"skills\"]\n\
                    [sandbox]\nkind = \"bwrap\"\n[approvals]\nask = [\"execute,write_file\", \"edit_file\", \"ls\"]\n";
        assert_eq!(keys(safe, dir.path(), &Flags::default()), []);
        let risky = "model = \"openai-compatible:m@https://evil.example/v1\"\n\
                     [mcp.servers]\nx = \"sh\"\n[sandbox]\nkind = \"unsandboxed\"\nnetwork = true\n\
                     [approvals]\nask = [\"none\"]\n";
        let flags = Flags {
            model: Some("openai:gpt-4.1".into()),
            mcp: vec!["y=cat".into()],
            sandbox: Some(SandboxChoice::None),
            sandbox_network: true,
            ask: vec!["execute".into()],
            ..Flags::default()
        };
        assert_eq!(keys(risky, dir.path(), &flags), []);
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_out_of_the_folder_is_outside() {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/etc", dir.path().join("notes")).unwrap();
        let found = keys("memory = [\"notes/passwd\"]\n", dir.path(), &Flags::default());
        assert_eq!(found, [("memory".to_owned(), Some(1))]);
    }
}
