//! Path permissions: ordered allow/deny rules on path globs, first match wins, default allow.
//!
//! A rule has a pattern, the operations it covers (read, write or both) and an effect. For a given
//! operation and path, the first rule (in the order given) that covers the operation and whose
//! pattern matches the path decides; when none does, access is allowed.
//!
//! The file tools map onto operations like this: `ls`, `read_file`, `glob` and `grep` read;
//! `write_file` and `delete` write; `edit_file` reads and writes. Every tool checks the path it was
//! given before the backend is touched, and `ls`, `glob` and `grep` also drop every result the rules
//! do not let the model read, so a read-denied file never appears in their output.
//!
//! # Patterns
//!
//! Patterns are absolute globs (they start with `/`) matched against the normalized
//! [`VirtualPath`] of the file or directory, case-sensitively, with [`globset`]:
//!
//! * `*`, `?` and classes (`[abc]`, `[!a]`) stay within one path segment, and **do** match names
//!   starting with `.` (a deny rule on `/secrets/*` covers `/secrets/.env`);
//! * `**` as a whole segment spans any number of directories (`/**/*.pem` is every `.pem` file);
//! * `{a,b}` gives alternatives;
//! * a pattern ending in `/**` also matches the directory itself (`/secrets/**` covers `/secrets`,
//!   so denying it hides the directory from `ls /` too), and a trailing `/` means the same as a
//!   trailing `/**`.
//!
//! A path the model may write but not read is not entirely hidden: `write_file` (which refuses to
//! replace an existing file) and `delete` still tell whether a file exists there. Deny both
//! operations to hide a path completely.
//!
//! Rules match the normalized path only; every path a tool receives is parsed into a
//! [`VirtualPath`] first, so `//secrets/./x` is checked as `/secrets/x`, and `..` never gets through.

use std::fmt;

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use serde::{Deserialize, Serialize};
use trellis_backend::VirtualPath;

/// An operation on a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// Listing, reading, searching.
    Read,
    /// Creating, changing, deleting.
    Write,
}

impl Access {
    /// `"read"` or `"write"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
        }
    }
}

/// What a matching rule decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    /// Access is allowed.
    Allow,
    /// Access is refused (and the path is hidden from listings and searches, for reads).
    Deny,
}

/// Why a rule could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PermissionError {
    /// The pattern does not start with `/`.
    #[error("permission pattern {0:?} must be absolute (start with `/`)")]
    NotAbsolute(String),
    /// The pattern has a `..` segment.
    #[error("permission pattern {0:?} must not contain a `..` segment")]
    Traversal(String),
    /// A rule that covers no operation.
    #[error("permission rule for {0:?} covers no operation")]
    NoOperations(String),
    /// The glob does not compile.
    #[error("permission pattern {pattern:?} is not a valid glob: {reason}")]
    InvalidGlob {
        /// The pattern.
        pattern: String,
        /// The glob compiler's message.
        reason: String,
    },
}

/// The serialized form of a rule: `{"pattern": "/secrets/**", "operations": ["read", "write"],
/// "effect": "deny"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct RuleSpec {
    pattern: String,
    operations: Vec<Access>,
    effect: Effect,
}

/// One permission rule. Serializes as `{"pattern", "operations", "effect"}`.
#[derive(Clone, Serialize, Deserialize)]
#[serde(try_from = "RuleSpec", into = "RuleSpec")]
pub struct PermissionRule {
    pattern: String,
    read: bool,
    write: bool,
    effect: Effect,
    matcher: GlobSet,
}

impl PermissionRule {
    /// A rule with `effect` for the `operations` on paths matching `pattern`.
    pub fn new(pattern: &str, operations: &[Access], effect: Effect) -> Result<Self, PermissionError> {
        if !pattern.starts_with('/') {
            return Err(PermissionError::NotAbsolute(pattern.to_owned()));
        }
        if pattern.split('/').any(|s| s == "..") {
            return Err(PermissionError::Traversal(pattern.to_owned()));
        }
        if operations.is_empty() {
            return Err(PermissionError::NoOperations(pattern.to_owned()));
        }
        let mut effective = pattern.to_owned();
        if effective.len() > 1 && effective.ends_with('/') {
            effective.push_str("**");
        }
        let mut set = GlobSetBuilder::new();
        set.add(compile(pattern, &effective)?);
        if let Some(dir) = effective.strip_suffix("/**")
            && !dir.is_empty()
        {
            set.add(compile(pattern, dir)?);
        }
        let matcher = set.build().map_err(|e| PermissionError::InvalidGlob {
            pattern: pattern.to_owned(),
            reason: e.to_string(),
        })?;
        Ok(Self {
            pattern: pattern.to_owned(),
            read: operations.contains(&Access::Read),
            write: operations.contains(&Access::Write),
            effect,
            matcher,
        })
    }

    /// Allow `operations` on `pattern`.
    pub fn allow(pattern: &str, operations: &[Access]) -> Result<Self, PermissionError> {
        Self::new(pattern, operations, Effect::Allow)
    }

    /// Deny `operations` on `pattern`.
    pub fn deny(pattern: &str, operations: &[Access]) -> Result<Self, PermissionError> {
        Self::new(pattern, operations, Effect::Deny)
    }

    /// The pattern as written.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// The rule's effect.
    pub fn effect(&self) -> Effect {
        self.effect
    }

    /// True when the rule covers `access`.
    pub fn covers(&self, access: Access) -> bool {
        match access {
            Access::Read => self.read,
            Access::Write => self.write,
        }
    }

    /// True when the rule covers `access` and its pattern matches `path`.
    pub fn applies_to(&self, access: Access, path: &VirtualPath) -> bool {
        self.covers(access) && self.matcher.is_match(path.as_str())
    }
}

fn compile(pattern: &str, glob: &str) -> Result<Glob, PermissionError> {
    GlobBuilder::new(glob)
        .literal_separator(true)
        .backslash_escape(true)
        .empty_alternates(true)
        .build()
        .map_err(|e| PermissionError::InvalidGlob {
            pattern: pattern.to_owned(),
            reason: e.kind().to_string(),
        })
}

impl fmt::Debug for PermissionRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PermissionRule")
            .field("pattern", &self.pattern)
            .field("read", &self.read)
            .field("write", &self.write)
            .field("effect", &self.effect)
            .finish()
    }
}

impl PartialEq for PermissionRule {
    fn eq(&self, other: &Self) -> bool {
        self.pattern == other.pattern
            && self.read == other.read
            && self.write == other.write
            && self.effect == other.effect
    }
}

impl TryFrom<RuleSpec> for PermissionRule {
    type Error = PermissionError;
    fn try_from(spec: RuleSpec) -> Result<Self, Self::Error> {
        Self::new(&spec.pattern, &spec.operations, spec.effect)
    }
}

impl From<PermissionRule> for RuleSpec {
    fn from(rule: PermissionRule) -> Self {
        let mut operations = Vec::new();
        if rule.read {
            operations.push(Access::Read);
        }
        if rule.write {
            operations.push(Access::Write);
        }
        Self {
            pattern: rule.pattern,
            operations,
            effect: rule.effect,
        }
    }
}

/// An ordered list of rules; the first rule that applies decides, and no rule means allow.
/// Serializes as the list of rules.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Permissions {
    rules: Vec<PermissionRule>,
}

impl Permissions {
    /// These rules, in order.
    pub fn new(rules: Vec<PermissionRule>) -> Self {
        Self { rules }
    }

    /// No rules: everything is allowed.
    pub fn allow_all() -> Self {
        Self::default()
    }

    /// Append a rule (it applies after the existing ones).
    pub fn push(&mut self, rule: PermissionRule) {
        self.rules.push(rule);
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[PermissionRule] {
        &self.rules
    }

    /// The effect for `access` to `path`: the first applicable rule's, or [`Effect::Allow`].
    pub fn decide(&self, access: Access, path: &VirtualPath) -> Effect {
        self.rules
            .iter()
            .find(|r| r.applies_to(access, path))
            .map_or(Effect::Allow, PermissionRule::effect)
    }

    /// True when `access` to `path` is allowed.
    pub fn allows(&self, access: Access, path: &VirtualPath) -> bool {
        self.decide(access, path) == Effect::Allow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> VirtualPath {
        VirtualPath::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn rule(pattern: &str, effect: Effect) -> PermissionRule {
        PermissionRule::new(pattern, &[Access::Read, Access::Write], effect).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn first_match_wins_default_allow() {
        let perms = Permissions::new(vec![
            rule("/workspace/public/**", Effect::Allow),
            rule("/workspace/**", Effect::Deny),
        ]);
        assert!(perms.allows(Access::Read, &p("/workspace/public/a.txt")));
        assert!(!perms.allows(Access::Read, &p("/workspace/private/a.txt")));
        assert!(!perms.allows(Access::Write, &p("/workspace")));
        assert!(perms.allows(Access::Read, &p("/elsewhere/x")));
        assert!(perms.allows(Access::Read, &VirtualPath::root()));
    }

    #[test]
    fn pattern_semantics() {
        let deny = |pat: &str, path: &str| {
            Permissions::new(vec![rule(pat, Effect::Deny)]).decide(Access::Read, &p(path)) == Effect::Deny
        };
        assert!(deny("/secrets/**", "/secrets"));
        assert!(deny("/secrets/**", "/secrets/a/b/c"));
        assert!(deny("/secrets/**", "/secrets/.env"));
        assert!(!deny("/secrets/**", "/secrets2/a"));
        assert!(!deny("/secret", "/secrets"));
        assert!(deny("/secrets/", "/secrets/x"));
        assert!(deny("/secrets/*", "/secrets/.hidden"));
        assert!(!deny("/secrets/*", "/secrets/a/b"));
        assert!(deny("/**/*.pem", "/a.pem"));
        assert!(deny("/**/*.pem", "/deep/er/b.pem"));
        assert!(deny("/**", "/"));
        assert!(deny("/**", "/any/thing"));
        assert!(deny("/{a,b}/x?", "/b/x1"));
        assert!(!deny("/{a,b}/x?", "/b/x12"));
        assert!(deny("/data/[!t]*.csv", "/data/a.csv"));
        assert!(!deny("/data/[!t]*.csv", "/data/t.csv"));
    }

    #[test]
    fn operations_filter_rules() {
        let perms = Permissions::new(vec![
            PermissionRule::deny("/ro/**", &[Access::Write]).unwrap_or_else(|e| panic!("{e}")),
        ]);
        assert!(perms.allows(Access::Read, &p("/ro/a")));
        assert!(!perms.allows(Access::Write, &p("/ro/a")));
    }

    #[test]
    fn invalid_rules() {
        assert_eq!(
            PermissionRule::deny("secrets/**", &[Access::Read]).err(),
            Some(PermissionError::NotAbsolute("secrets/**".into()))
        );
        assert_eq!(
            PermissionRule::deny("/a/../b", &[Access::Read]).err(),
            Some(PermissionError::Traversal("/a/../b".into()))
        );
        assert_eq!(
            PermissionRule::deny("/a", &[]).err(),
            Some(PermissionError::NoOperations("/a".into()))
        );
        assert!(matches!(
            PermissionRule::deny("/a/[", &[Access::Read]),
            Err(PermissionError::InvalidGlob { .. })
        ));
    }

    #[test]
    fn serde_round_trip() {
        let json = r#"[{"pattern":"/secrets/**","operations":["read","write"],"effect":"deny"}]"#;
        let perms: Permissions = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}"));
        assert!(!perms.allows(Access::Read, &p("/secrets/k")));
        assert_eq!(serde_json::to_string(&perms).ok().as_deref(), Some(json));
        assert!(
            serde_json::from_str::<Permissions>(r#"[{"pattern":"x","operations":["read"],"effect":"deny"}]"#)
                .is_err()
        );
    }
}
