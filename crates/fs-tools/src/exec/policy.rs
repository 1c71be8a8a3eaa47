//! [`CommandPolicy`]: which commands `execute` may run.
//!
//! Rules are command prefixes with an effect, checked in order; the first that matches decides, and
//! when none does the policy's default does. A prefix is a list of words (split like the shell
//! splits them, quotes respected); it matches a command whose leading words are equal to it, except
//! that a last prefix word ending in `/` matches any word starting with it that names a path inside
//! that directory (`python3 /skills/` matches `python3 /skills/team/pdf/fill.py`, but not
//! `python3 /skills/../workspace/x.py`, nor a word the shell would expand: `*`, `?`, `[`, `$`).
//!
//! An **allow-list** (default deny) admits only a *simple* command: one command with no `;`, `&`,
//! `|`, `<`, `>`, `` ` ``, `$(`, parentheses, braces or line breaks anywhere in it, quoted or not, so
//! `ls; rm -rf /outputs` can never ride on an allowed `ls`. A **deny rule** under a default allow
//! checks every command the text chains (split at those operators) and refuses if any matches; it
//! is a guard against mistakes rather than a boundary (`sh -c "…"` or a script can run anything):
//! the sandbox is the boundary, and an allow-list is the way to restrict commands for real.

use serde::{Deserialize, Serialize};

use crate::files::Effect;

/// One rule: a command prefix and what it decides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandRule {
    /// The prefix, as shell words (`"python3 /skills/"`).
    pub prefix: String,
    /// Allow or deny.
    pub effect: Effect,
}

/// Which commands `execute` may run. `Default` allows every command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandPolicy {
    /// Checked in order; the first matching rule decides.
    #[serde(default)]
    pub rules: Vec<CommandRule>,
    /// What decides when no rule matches.
    pub default: Effect,
}

impl Default for CommandPolicy {
    fn default() -> Self {
        Self::allow_all()
    }
}

/// Characters that make a command more than one simple command.
const COMPOUND: &[char] = &[';', '&', '|', '<', '>', '`', '(', ')', '{', '}', '\n', '\r'];

impl CommandPolicy {
    /// Every command may run.
    pub fn allow_all() -> Self {
        Self {
            rules: Vec::new(),
            default: Effect::Allow,
        }
    }

    /// No command may run: the `execute` tool is not offered at all.
    pub fn deny_all() -> Self {
        Self {
            rules: Vec::new(),
            default: Effect::Deny,
        }
    }

    /// Only simple commands starting with one of `prefixes`.
    pub fn allow_only<S: Into<String>>(prefixes: impl IntoIterator<Item = S>) -> Self {
        Self {
            rules: prefixes
                .into_iter()
                .map(|p| CommandRule {
                    prefix: p.into(),
                    effect: Effect::Allow,
                })
                .collect(),
            default: Effect::Deny,
        }
    }

    /// Add a rule after the existing ones.
    pub fn rule(mut self, prefix: impl Into<String>, effect: Effect) -> Self {
        self.rules.push(CommandRule {
            prefix: prefix.into(),
            effect,
        });
        self
    }

    /// True when no command can ever run.
    pub fn denies_everything(&self) -> bool {
        self.default == Effect::Deny && self.rules.iter().all(|r| r.effect == Effect::Deny)
    }

    /// `Ok` when `command` may run; otherwise why not, for the model.
    pub fn check(&self, command: &str) -> Result<(), String> {
        if self.denies_everything() {
            return Err("running commands is not allowed for this agent".into());
        }
        let allow_list = self.default == Effect::Deny;
        let segments: Vec<&str> = if allow_list {
            if command.contains(COMPOUND) || command.contains("$(") {
                return Err(format!(
                    "only simple commands may run (no `;`, `&&`, `|`, redirections, substitutions or line breaks); allowed: {}",
                    self.allowed()
                ));
            }
            vec![command]
        } else {
            command.split(|c| COMPOUND.contains(&c) || c == '$').collect()
        };
        for segment in segments {
            let Some(words) = shlex::split(segment) else {
                return Err("the command has an unterminated quote".into());
            };
            if words.is_empty() {
                continue;
            }
            let effect = self
                .rules
                .iter()
                .find(|r| prefix_matches(&r.prefix, &words))
                .map_or(self.default, |r| r.effect);
            if effect == Effect::Deny {
                return Err(if allow_list {
                    format!("this command is not allowed; allowed: {}", self.allowed())
                } else {
                    format!("`{}` is not allowed for this agent", words.join(" "))
                });
            }
        }
        Ok(())
    }

    /// The allowed prefixes, for messages and the tool description.
    pub fn allowed(&self) -> String {
        let list: Vec<String> = self
            .rules
            .iter()
            .filter(|r| r.effect == Effect::Allow)
            .map(|r| format!("`{}`", r.prefix))
            .collect();
        if list.is_empty() {
            "none".into()
        } else {
            list.join(", ")
        }
    }
}

fn prefix_matches(prefix: &str, words: &[String]) -> bool {
    let Some(prefix) = shlex::split(prefix) else {
        return false;
    };
    if prefix.is_empty() || prefix.len() > words.len() {
        return false;
    }
    let last = prefix.len() - 1;
    prefix.iter().zip(words).enumerate().all(|(i, (p, w))| {
        if i == last && p.ends_with('/') {
            w.strip_prefix(p.as_str()).is_some_and(stays_below)
        } else {
            p == w
        }
    })
}

/// True when `rest`, the part of a word after a directory prefix, names something inside that
/// directory as the shell and the kernel will read it: no `..` segment (the kernel resolves
/// `/skills/../workspace` to `/workspace`), and none of `*`, `?`, `[` or `$`, which the shell
/// would expand into other words.
fn stays_below(rest: &str) -> bool {
    !rest.contains(['*', '?', '[', '$']) && !rest.split('/').any(|segment| segment == "..")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_allow_list_admits_only_simple_commands_with_a_listed_prefix() {
        let p = CommandPolicy::allow_only(["python3 /skills/", "ls"]);
        assert!(p.check("python3 /skills/team/pdf/fill.py /uploads/a.pdf").is_ok());
        assert!(p.check("ls -la /outputs").is_ok());
        assert!(p.check("python3 /tmp/x.py").is_err());
        assert!(p.check("python3").is_err());
        assert!(p.check("lsblk").is_err());
        for chained in [
            "ls; rm -rf /",
            "ls && rm x",
            "ls | sh",
            "ls > /x",
            "ls $(rm x)",
            "ls `rm x`",
            "ls\nrm x",
        ] {
            assert!(p.check(chained).is_err(), "{chained:?}");
        }
        assert!(p.check("ls 'unterminated").is_err());
    }

    #[test]
    fn a_directory_prefix_admits_nothing_that_resolves_outside_it() {
        // Security review F7: `python3 /skills/../workspace/evil.py` started with `/skills/`, and
        // the kernel resolves `..` because `/skills/team` exists.
        let p = CommandPolicy::allow_only(["python3 /skills/"]);
        for escape in [
            "python3 /skills/../workspace/evil.py",
            "python3 /skills/team/../../workspace/evil.py",
            "python3 /skills/..",
            "python3 '/skills/../x.py'",
            "python3 /skills/*/../../x.py",
            "python3 /skills/$HOME",
            "python3 /skills/[a]/x.py",
            "python3 /skills/?/x.py",
        ] {
            assert!(p.check(escape).is_err(), "{escape:?}");
        }
        for inside in [
            "python3 /skills/team/pdf/fill.py",
            "python3 /skills/team/./pdf/fill.py",
            "python3 /skills/team/pdf..v2/fill.py",
            "python3 /skills/team/pdf/fill.py ../uploads/a.pdf",
        ] {
            assert!(p.check(inside).is_ok(), "{inside:?}");
        }
    }

    #[test]
    fn deny_rules_check_every_chained_command() {
        let p = CommandPolicy::allow_all()
            .rule("rm", Effect::Deny)
            .rule("git push", Effect::Deny);
        assert!(p.check("ls -la && cat x").is_ok());
        assert!(p.check("ls; rm -rf /outputs").is_err());
        assert!(p.check("echo $(rm x)").is_err());
        assert!(p.check("git push origin").is_err());
        assert!(p.check("git status").is_ok());
    }

    #[test]
    fn deny_all_denies_everything_and_serializes() {
        let p = CommandPolicy::deny_all();
        assert!(p.denies_everything());
        assert!(p.check("true").is_err());
        let json = serde_json::to_value(CommandPolicy::allow_only(["ls"])).unwrap_or_default();
        assert_eq!(json["default"], "deny");
        assert_eq!(json["rules"][0]["prefix"], "ls");
    }
}
