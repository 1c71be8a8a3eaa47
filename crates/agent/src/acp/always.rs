//! "Allow always", remembered narrowly: [`Always`] holds the calls a person allowed always in one
//! session, each keyed by its tool and an argument pattern ([`Pattern::of`]):
//!
//! | tool | the pattern is |
//! |---|---|
//! | `execute` | the exact command (not its program, not a prefix) |
//! | `write_file`, `edit_file`, `delete`, `read_file` | the exact file path |
//! | any other tool | the exact arguments |
//!
//! Scope: a session (one editor conversation), in memory. Nothing is written to the thread, the
//! user's config or the agent file: a new session, or the same thread loaded again in another
//! process, asks again. A call the remembered pattern does not match is asked about.

use serde_json::Value;
use trellis_middleware::tools::canonical::Sorted;

/// The key of a remembered approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    tool: String,
    what: String,
}

impl Pattern {
    /// The pattern a call of `tool` with `args` is remembered under (see the module docs).
    pub fn of(tool: &str, args: &Value) -> Self {
        let field = match tool {
            "execute" => Some("command"),
            "write_file" | "edit_file" | "delete" | "read_file" => Some("file_path"),
            _ => None,
        };
        let what = field
            .and_then(|f| args.get(f))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| Sorted(args).to_string());
        Self {
            tool: tool.to_owned(),
            what,
        }
    }

    /// The label of the "allow always" option: what it will allow.
    pub fn label(&self) -> String {
        let what: String = self.what.chars().take(120).collect();
        match self.tool.as_str() {
            "execute" => format!("Always allow the command `{what}` in this session"),
            "write_file" | "edit_file" | "delete" | "read_file" => {
                format!("Always allow {} on {what} in this session", self.tool)
            }
            _ => format!("Always allow {} with these arguments in this session", self.tool),
        }
    }
}

/// The approvals remembered in one session.
#[derive(Debug, Default)]
pub struct Always {
    allowed: Vec<Pattern>,
}

/// At most this many patterns are remembered per session (the oldest go first).
const LIMIT: usize = 1000;

impl Always {
    /// Remember `pattern`.
    pub fn remember(&mut self, pattern: Pattern) {
        if self.allowed.contains(&pattern) {
            return;
        }
        if self.allowed.len() >= LIMIT {
            self.allowed.remove(0);
        }
        self.allowed.push(pattern);
    }

    /// True when a call of `tool` with `args` was allowed always.
    pub fn allows(&self, tool: &str, args: &Value) -> bool {
        self.allowed.contains(&Pattern::of(tool, args))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_remembered_command_allows_only_that_command() {
        let mut always = Always::default();
        always.remember(Pattern::of("execute", &json!({"command": "cargo test"})));
        assert!(always.allows("execute", &json!({"command": "cargo test", "timeout": 5})));
        assert!(!always.allows("execute", &json!({"command": "cargo test; rm -rf /"})));
        assert!(!always.allows("execute", &json!({"command": "rm -rf /"})));
        assert!(!always.allows("write_file", &json!({"file_path": "cargo test"})));
    }

    #[test]
    fn a_remembered_path_allows_only_that_path() {
        let mut always = Always::default();
        always.remember(Pattern::of(
            "write_file",
            &json!({"file_path": "/workspace/a", "content": "1"}),
        ));
        assert!(always.allows(
            "write_file",
            &json!({"file_path": "/workspace/a", "content": "2"})
        ));
        assert!(!always.allows(
            "write_file",
            &json!({"file_path": "/workspace/b", "content": "1"})
        ));
        assert!(!always.allows("edit_file", &json!({"file_path": "/workspace/a"})));
    }
}
