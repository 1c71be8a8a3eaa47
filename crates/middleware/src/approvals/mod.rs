//! Approvals: [`InterruptOn`], the per-tool table of which calls wait for a person before they
//! run, and what that person may decide. Give it to
//! [`AgentBuilder::interrupt_on`](crate::AgentBuilder::interrupt_on); the loop does the rest (see
//! [`crate::runtime::interrupt`] for the protocol and docs/approvals.md for the guide).
//!
//! ```
//! use trellis_middleware::approvals::{Ask, InterruptOn};
//! use trellis_middleware::runtime::interrupt::DecisionKind;
//! use trellis_middleware::tools::CommandPolicy;
//!
//! let gate = InterruptOn::new()
//!     // Ask before every write under /workspace; other paths go through.
//!     .tool("write_file", Ask::paths(["/workspace/**"]).unwrap())
//!     // Run `ls` and the skills' scripts without asking; ask about anything else.
//!     .tool("execute", Ask::commands_outside(CommandPolicy::allow_only(["ls", "python3 /skills/"])))
//!     // Deleting may be approved or rejected, not edited or answered.
//!     .tool_allowing("delete", Ask::Always, &[DecisionKind::Approve, DecisionKind::Reject]);
//! ```
//!
//! A policy fails safe: a call whose arguments a predicate cannot read (no path, a path that does
//! not parse, no command) is asked about.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::runtime::interrupt::{DecisionKind, Review, ToolGate};
use crate::runtime::message::ToolCall;
use crate::tools::{Access, CommandPolicy, PermissionError, PermissionRule};

type Predicate = dyn Fn(&ToolCall) -> bool + Send + Sync;

/// When a tool's calls wait for a decision.
#[derive(Clone)]
#[non_exhaustive]
pub enum Ask {
    /// Every call.
    Always,
    /// No call (the same as not naming the tool, unless [`InterruptOn::every_tool`] is set).
    Never,
    /// Calls whose path argument (`file_path`, else `path`) matches one of these globs (the
    /// patterns of [path permissions](crate::tools::Permissions): absolute, `*` within a segment,
    /// `**` across segments).
    Paths(Vec<PermissionRule>),
    /// Calls whose `command` argument this policy does not allow: an allow-list asks about
    /// everything outside it, deny rules ask about what they match.
    CommandsOutside(CommandPolicy),
    /// Calls for which the function returns true.
    When(Arc<Predicate>),
}

impl Ask {
    /// [`Ask::Paths`] from glob patterns. Errors: a pattern that is not an absolute glob.
    pub fn paths<S: AsRef<str>>(globs: impl IntoIterator<Item = S>) -> Result<Self, PermissionError> {
        let rules = globs
            .into_iter()
            .map(|g| PermissionRule::deny(g.as_ref(), &[Access::Read, Access::Write]))
            .collect::<Result<_, _>>()?;
        Ok(Self::Paths(rules))
    }

    /// [`Ask::CommandsOutside`].
    pub fn commands_outside(policy: CommandPolicy) -> Self {
        Self::CommandsOutside(policy)
    }

    /// [`Ask::When`].
    pub fn when(predicate: impl Fn(&ToolCall) -> bool + Send + Sync + 'static) -> Self {
        Self::When(Arc::new(predicate))
    }

    /// `None` when the call may run; else why it waits.
    fn check(&self, call: &ToolCall) -> Option<Option<String>> {
        match self {
            Self::Always => Some(None),
            Self::Never => None,
            Self::Paths(rules) => {
                let Some(path) = call.file_path() else {
                    return Some(Some("the call names no path that can be checked".to_owned()));
                };
                rules
                    .iter()
                    .find(|r| r.applies_to(Access::Write, &path))
                    .map(|r| Some(format!("{path} matches {}", r.pattern())))
            }
            Self::CommandsOutside(policy) => match call.args.get("command").and_then(|c| c.as_str()) {
                Some(command) => policy.check(command).err().map(Some),
                None => Some(Some("the call names no command that can be checked".to_owned())),
            },
            Self::When(predicate) => predicate(call).then_some(None),
        }
    }
}

impl fmt::Debug for Ask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Always => f.write_str("Always"),
            Self::Never => f.write_str("Never"),
            Self::Paths(rules) => f
                .debug_tuple("Paths")
                .field(&rules.iter().map(PermissionRule::pattern).collect::<Vec<_>>())
                .finish(),
            Self::CommandsOutside(policy) => f.debug_tuple("CommandsOutside").field(policy).finish(),
            Self::When(_) => f.write_str("When(..)"),
        }
    }
}

/// One tool's entry: when to ask and what may be decided.
#[derive(Debug, Clone)]
struct Entry {
    ask: Ask,
    allowed: Vec<DecisionKind>,
}

/// Which tools' calls wait for a person, by tool name; a [`ToolGate`].
#[derive(Debug, Clone, Default)]
pub struct InterruptOn {
    tools: BTreeMap<String, Entry>,
    every_tool: Option<Entry>,
}

impl InterruptOn {
    /// Nothing waits.
    pub fn new() -> Self {
        Self::default()
    }

    /// Calls of `tool` wait when `ask` says so; every decision is allowed.
    pub fn tool(self, tool: impl Into<String>, ask: Ask) -> Self {
        self.tool_allowing(tool, ask, &DecisionKind::ALL)
    }

    /// Calls of `tool` wait when `ask` says so, and accept only `allowed` (all four when empty).
    pub fn tool_allowing(mut self, tool: impl Into<String>, ask: Ask, allowed: &[DecisionKind]) -> Self {
        self.tools.insert(tool.into(), entry(ask, allowed));
        self
    }

    /// The rule for tools not named with [`tool`](Self::tool); every decision allowed.
    pub fn every_tool(mut self, ask: Ask) -> Self {
        self.every_tool = Some(entry(ask, &DecisionKind::ALL));
        self
    }

    /// The names of the tools with their own entry.
    pub fn tools(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }
}

fn entry(ask: Ask, allowed: &[DecisionKind]) -> Entry {
    let mut allowed = if allowed.is_empty() {
        DecisionKind::ALL.to_vec()
    } else {
        allowed.to_vec()
    };
    allowed.sort();
    allowed.dedup();
    Entry { ask, allowed }
}

impl ToolGate for InterruptOn {
    fn review(&self, call: &ToolCall) -> Option<Review> {
        let entry = self.tools.get(&call.name).or(self.every_tool.as_ref())?;
        let description = entry.ask.check(call)?;
        Some(Review {
            description,
            allowed: entry.allowed.clone(),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(name: &str, args: serde_json::Value) -> ToolCall {
        ToolCall::new("c1", name, args)
    }

    #[test]
    fn paths_ask_only_about_matching_paths_and_fail_safe() {
        let gate = InterruptOn::new().tool("write_file", Ask::paths(["/workspace/**"]).unwrap());
        let asked = gate
            .review(&call("write_file", json!({"file_path": "/workspace/a/b.txt"})))
            .unwrap();
        assert_eq!(
            asked.description.as_deref(),
            Some("/workspace/a/b.txt matches /workspace/**")
        );
        assert_eq!(asked.allowed, DecisionKind::ALL);
        assert!(
            gate.review(&call("write_file", json!({"file_path": "/notes.txt"})))
                .is_none()
        );
        // `..` is normalized before matching; a missing or bad path is asked about.
        assert!(
            gate.review(&call("write_file", json!({"file_path": "/tmp/../workspace/x"})))
                .is_some()
        );
        assert!(gate.review(&call("write_file", json!({}))).is_some());
        assert!(
            gate.review(&call("read_file", json!({"file_path": "/workspace/x"})))
                .is_none()
        );
        assert!(Ask::paths(["relative/*"]).is_err());
    }

    #[test]
    fn commands_outside_an_allow_list_are_asked_about() {
        let gate = InterruptOn::new().tool(
            "execute",
            Ask::commands_outside(CommandPolicy::allow_only(["ls", "python3 /skills/"])),
        );
        assert!(
            gate.review(&call("execute", json!({"command": "ls -la"})))
                .is_none()
        );
        assert!(
            gate.review(&call("execute", json!({"command": "python3 /skills/a/run.py x"})))
                .is_none()
        );
        assert!(
            gate.review(&call("execute", json!({"command": "ls; rm -rf /"})))
                .is_some()
        );
        assert!(
            gate.review(&call("execute", json!({"command": "rm x"})))
                .is_some()
        );
        assert!(gate.review(&call("execute", json!({"cmd": "ls"}))).is_some());
    }

    #[test]
    fn named_tools_win_over_every_tool_and_allowed_kinds_are_kept() {
        let gate = InterruptOn::new()
            .every_tool(Ask::Always)
            .tool("read_file", Ask::Never)
            .tool_allowing(
                "delete",
                Ask::when(|c| c.args["path"] == "/keep"),
                &[DecisionKind::Reject, DecisionKind::Approve, DecisionKind::Reject],
            );
        assert!(gate.review(&call("read_file", json!({}))).is_none());
        assert!(gate.review(&call("anything", json!({}))).is_some());
        assert!(gate.review(&call("delete", json!({"path": "/other"}))).is_none());
        let review = gate.review(&call("delete", json!({"path": "/keep"}))).unwrap();
        assert_eq!(review.allowed, [DecisionKind::Approve, DecisionKind::Reject]);
        assert_eq!(gate.tools().collect::<Vec<_>>(), ["delete", "read_file"]);
    }
}
