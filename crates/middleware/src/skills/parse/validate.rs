//! From a parsed [`Frontmatter`] to a [`SkillMetadata`], with the Agent Skills rules and the
//! loader's limits.
//!
//! Three outcomes per file (the tiers of failure):
//! * the skill is **skipped** ([`Severity::Skipped`]): missing/blank `name` or `description`, or
//!   either one a list or mapping, a name that could change the prompt's structure
//!   ([`is_safe_name`]) (and, before this module runs, unreadable, too large, no
//!   frontmatter, bad YAML, not a mapping, not UTF-8);
//! * the skill **loads with warnings** ([`Severity::Warning`]): a name that breaks the spec (too
//!   long, bad characters, hyphens, directory mismatch), a description over 1,024 characters or a
//!   compatibility over 500 (cut, with a warning), fields of the wrong type (kept as YAML text or
//!   ignored), a malformed `allowed-tools` or `metadata.include_tools`, duplicate keys;
//! * **spec-only** findings ([`Severity::Spec`]) the loader does not log: unknown top-level keys, an
//!   empty `compatibility`.
//!
//! Lengths are counted in Unicode scalar values (what the spec and the reference call characters).
//! Messages quote file text with [`quote`] (escaped, cut to [`MAX_QUOTED_CHARS`]), and every
//! [`SkillIssue`] message is passed through
//! [`escape_controls`](crate::untrusted::escape_controls), so an issue is one line of plain text.

use crate::backend::VirtualPath;

use crate::skills::parse::frontmatter::{self, Frontmatter, FrontmatterError, YamlValue};
use crate::skills::parse::skill::{IssueCode, MetadataMap, Severity, SkillIssue, SkillMetadata};
use crate::skills::{MAX_COMPATIBILITY_CHARS, MAX_DESCRIPTION_CHARS, MAX_NAME_CHARS};

/// The frontmatter keys the Agent Skills spec defines.
pub const SPEC_FIELDS: [&str; 6] = [
    "allowed-tools",
    "compatibility",
    "description",
    "license",
    "metadata",
    "name",
];

/// The `metadata` key that binds tools to a skill.
pub const INCLUDE_TOOLS_KEY: &str = "include_tools";

/// What validating one file gives: the skill (unless it was skipped) and every issue found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validated {
    /// The skill, `None` when it is skipped. `source` is 0 and `version` is `None`: the caller fills
    /// them in.
    pub skill: Option<SkillMetadata>,
    /// Every issue, in the order found.
    pub issues: Vec<SkillIssue>,
}

impl Validated {
    fn skipped(path: &VirtualPath, code: IssueCode, message: impl AsRef<str>) -> Self {
        Self {
            skill: None,
            issues: vec![SkillIssue::new(path.clone(), code, message)],
        }
    }

    /// The issue that made the loader skip the skill, if it was skipped.
    pub fn skip_reason(&self) -> Option<&SkillIssue> {
        self.issues.iter().find(|i| i.severity() == Severity::Skipped)
    }
}

/// Map a frontmatter failure to the skipping issue.
pub fn frontmatter_issue(path: &VirtualPath, err: &FrontmatterError) -> SkillIssue {
    let code = match err {
        FrontmatterError::Missing | FrontmatterError::Unclosed | FrontmatterError::TooLarge => {
            IssueCode::FrontmatterMissing
        }
        FrontmatterError::NotUtf8 => IssueCode::NotUtf8,
        FrontmatterError::TooDeep | FrontmatterError::InvalidYaml(_) => IssueCode::InvalidYaml,
        FrontmatterError::NotAMapping(_) => IssueCode::NotAMapping,
    };
    SkillIssue::new(path.clone(), code, err.to_string())
}

/// Longest piece of file text (a name, a key) quoted in an issue message, in characters.
pub const MAX_QUOTED_CHARS: usize = 80;

/// File text as an issue message quotes it: cut to [`MAX_QUOTED_CHARS`] characters (`…` marks a
/// cut), in double quotes with Rust's debug escapes, so newlines, control and formatting characters,
/// quotes and backslashes show as escapes (`"a\nb"`, `"\u{202e}"`).
pub fn quote(text: &str) -> String {
    match truncate_chars(text, MAX_QUOTED_CHARS) {
        Some(cut) => format!("{cut:?}…"),
        None => format!("{text:?}"),
    }
}

/// True when `name` can be shown in the prompt as it is: ASCII letters and digits, `-`, `_`, `.` and
/// spaces, and any other printable non-ASCII character (accented letters, CJK, emoji). Other names
/// ([`IssueCode::NameUnsafe`]) are not loaded: a line break, a control or invisible formatting
/// character (bidirectional overrides, zero-width characters) or ASCII markup (`<`, `>`, `*`, `#`,
/// backticks, quotes, …) could change the structure of the prompt that lists the name. The narrower
/// Agent Skills rules are checked by [`name_problems`], as warnings.
pub fn is_safe_name(name: &str) -> bool {
    name.chars().all(|c| {
        if c.is_ascii() {
            c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ' ')
        } else {
            !c.is_control() && !c.is_whitespace() && !crate::untrusted::is_invisible_format(c)
        }
    })
}

/// Validate a whole `SKILL.md` (bytes as stored). `path` is the `SKILL.md` path; its parent
/// directory's name is what the skill name must match.
pub fn validate_file(bytes: &[u8], path: &VirtualPath) -> Validated {
    match frontmatter::parse_file(bytes) {
        Ok((fm, _)) => validate(&fm, path),
        Err(err) => Validated {
            skill: None,
            issues: vec![frontmatter_issue(path, &err)],
        },
    }
}

/// Validate a parsed frontmatter. See the module docs for the outcomes.
pub fn validate(fm: &Frontmatter, path: &VirtualPath) -> Validated {
    let mut issues = Vec::new();
    let mut issue =
        |code: IssueCode, message: String| issues.push(SkillIssue::new(path.clone(), code, message));

    let name = match fm.get("name") {
        Some(YamlValue::Text(s)) if !s.trim().is_empty() => s.trim().to_owned(),
        Some(v @ (YamlValue::Seq(_) | YamlValue::Map(_))) => {
            return Validated::skipped(
                path,
                IssueCode::NameMissing,
                format!("`name` must be a string, found {}", v.kind()),
            );
        }
        _ => return Validated::skipped(path, IssueCode::NameMissing, "`name` is required"),
    };
    if !is_safe_name(&name) {
        return Validated::skipped(
            path,
            IssueCode::NameUnsafe,
            format!(
                "name {} holds a line break, a control or formatting character, or ASCII punctuation other \
                 than `-`, `_` and `.`; not loaded",
                quote(&name)
            ),
        );
    }
    let description = match fm.get("description") {
        Some(YamlValue::Text(s)) if !s.trim().is_empty() => s.trim().to_owned(),
        Some(v @ (YamlValue::Seq(_) | YamlValue::Map(_))) => {
            return Validated::skipped(
                path,
                IssueCode::DescriptionMissing,
                format!("`description` must be a string, found {}", v.kind()),
            );
        }
        _ => {
            return Validated::skipped(
                path,
                IssueCode::DescriptionMissing,
                "`description` is required and must not be blank",
            );
        }
    };

    for dup in fm.duplicate_keys() {
        issue(
            IssueCode::DuplicateKey,
            format!(
                "key {} is written more than once; the last one is used",
                quote(dup)
            ),
        );
    }
    let mut unknown: Vec<&str> = fm
        .entries
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| !SPEC_FIELDS.contains(k))
        .collect();
    unknown.sort_unstable();
    unknown.dedup();
    if !unknown.is_empty() {
        issue(
            IssueCode::UnknownField,
            format!(
                "fields not defined by the Agent Skills spec: {} (allowed: {})",
                unknown.iter().map(|k| quote(k)).collect::<Vec<_>>().join(", "),
                SPEC_FIELDS.join(", ")
            ),
        );
    }

    let dir = path.segments().rev().nth(1).unwrap_or("");
    for (code, message) in name_problems(&name, dir) {
        issue(code, message);
    }

    let description = match truncate_chars(&description, MAX_DESCRIPTION_CHARS) {
        Some(cut) => {
            issue(
                IssueCode::DescriptionTruncated,
                format!(
                    "`description` is {} characters, over the limit of {MAX_DESCRIPTION_CHARS}; truncated",
                    description.chars().count()
                ),
            );
            cut
        }
        None => description,
    };

    let license = optional_text(fm.get("license"), "license", &mut issue);
    let mut compatibility = optional_text(fm.get("compatibility"), "compatibility", &mut issue);
    if matches!(fm.get("compatibility"), Some(YamlValue::Text(s)) if s.trim().is_empty()) {
        issue(
            IssueCode::CompatibilityEmpty,
            "`compatibility` is empty; the spec wants 1-500 characters when present".to_owned(),
        );
    }
    if let Some(cut) = compatibility
        .as_deref()
        .and_then(|c| truncate_chars(c, MAX_COMPATIBILITY_CHARS))
    {
        let len = compatibility.as_deref().map_or(0, |c| c.chars().count());
        issue(
            IssueCode::CompatibilityTruncated,
            format!(
                "`compatibility` is {len} characters, over the limit of {MAX_COMPATIBILITY_CHARS}; truncated"
            ),
        );
        compatibility = Some(cut);
    }

    let allowed_tools = allowed_tools(fm.get("allowed-tools"), &mut issue);
    let (metadata, include_tools) = metadata(fm.get("metadata"), &mut issue);

    Validated {
        skill: Some(SkillMetadata {
            name,
            description,
            path: path.clone(),
            license,
            compatibility,
            metadata,
            allowed_tools,
            include_tools,
            source: 0,
            version: None,
        }),
        issues,
    }
}

/// The Agent Skills name rules, as warnings: length, characters (lowercase letters, digits and `-`;
/// lowercase letters may be any script that has case, as in the reference loader, so `café` passes
/// and CJK or emoji do not), hyphens, and equality with the directory name. Empty when valid.
pub fn name_problems(name: &str, dir: &str) -> Vec<(IssueCode, String)> {
    let mut out = Vec::new();
    let len = name.chars().count();
    if len > MAX_NAME_CHARS {
        out.push((
            IssueCode::NameTooLong,
            format!("name is {len} characters, over the limit of {MAX_NAME_CHARS}"),
        ));
    }
    if name.starts_with('-') || name.ends_with('-') || name.contains("--") {
        out.push((
            IssueCode::NameHyphens,
            format!(
                "name {} must not start or end with `-` or contain `--`",
                quote(name)
            ),
        ));
    }
    if !name
        .chars()
        .all(|c| c == '-' || c.is_ascii_digit() || (c.is_alphabetic() && c.is_lowercase()))
    {
        out.push((
            IssueCode::NameCharset,
            format!(
                "name {} may only contain lowercase letters, digits and `-`",
                quote(name)
            ),
        ));
    }
    if name != dir {
        out.push((
            IssueCode::NameDirectoryMismatch,
            format!(
                "name {} must match its directory name {}",
                quote(name),
                quote(dir)
            ),
        ));
    }
    out
}

/// `Some(cut)` when `text` is longer than `max` characters.
pub fn truncate_chars(text: &str, max: usize) -> Option<String> {
    let (cut, _) = text.char_indices().nth(max)?;
    Some(text[..cut].to_owned())
}

fn optional_text(
    value: Option<&YamlValue>,
    field: &str,
    issue: &mut impl FnMut(IssueCode, String),
) -> Option<String> {
    match value? {
        YamlValue::Null => None,
        YamlValue::Text(s) => Some(s.trim().to_owned()).filter(|s| !s.is_empty()),
        other => {
            issue(
                IssueCode::FieldType,
                format!(
                    "`{field}` should be a string, found {}; kept as YAML text",
                    other.kind()
                ),
            );
            Some(other.to_flow_text())
        }
    }
}

fn allowed_tools(value: Option<&YamlValue>, issue: &mut impl FnMut(IssueCode, String)) -> Vec<String> {
    let mut tools: Vec<String> = Vec::new();
    let mut push = |t: &str| {
        let t = t.trim();
        if !t.is_empty() && !tools.iter().any(|x| x == t) {
            tools.push(t.to_owned());
        }
    };
    match value {
        None | Some(YamlValue::Null) => {}
        // The spec says space-separated; commas are tolerated as the reference does.
        Some(YamlValue::Text(s)) => split_tool_patterns(s).for_each(&mut push),
        Some(YamlValue::Seq(items)) => {
            let mut odd = 0;
            for item in items {
                match item {
                    YamlValue::Text(t) => push(t),
                    YamlValue::Null => {}
                    _ => odd += 1,
                }
            }
            if odd > 0 {
                issue(
                    IssueCode::AllowedToolsMalformed,
                    format!("`allowed-tools` has {odd} item(s) that are not tool names; ignored"),
                );
            }
        }
        Some(other) => issue(
            IssueCode::AllowedToolsMalformed,
            format!(
                "`allowed-tools` should be a space-separated string, found {}; ignored",
                other.kind()
            ),
        ),
    }
    tools
}

/// Split an `allowed-tools` string at spaces and commas outside parentheses, so a pattern such
/// as `Bash(uv run python:*)` stays one entry. A `(` that is never closed runs to the end of the
/// string; a `)` with no `(` before it is an ordinary character.
fn split_tool_patterns(s: &str) -> impl Iterator<Item = &str> {
    let mut depth = 0usize;
    let mut start = 0;
    let mut parts = Vec::new();
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            c if depth == 0 && (c.is_whitespace() || c == ',') => {
                parts.push(&s[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts.into_iter()
}

/// `metadata` as a string map (non-string values kept as their YAML text, with a warning; null
/// values dropped), and the tool names of `metadata.include_tools`.
fn metadata(
    value: Option<&YamlValue>,
    issue: &mut impl FnMut(IssueCode, String),
) -> (MetadataMap, Vec<String>) {
    let mut map = MetadataMap::new();
    let mut include = Vec::new();
    let entries = match value {
        None | Some(YamlValue::Null) => return (map, include),
        Some(YamlValue::Map(entries)) => entries,
        Some(other) => {
            issue(
                IssueCode::MetadataMalformed,
                format!("`metadata` should be a mapping, found {}; ignored", other.kind()),
            );
            return (map, include);
        }
    };
    for (key, value) in entries {
        let key = match key {
            YamlValue::Text(k) => k.clone(),
            other => other.to_flow_text(),
        };
        if key == INCLUDE_TOOLS_KEY {
            include = include_tools(value, issue);
        }
        match value {
            YamlValue::Null => {}
            YamlValue::Text(v) => map.insert(key, v.clone()),
            other => {
                if key != INCLUDE_TOOLS_KEY {
                    issue(
                        IssueCode::MetadataMalformed,
                        format!(
                            "`metadata.{}` should be a string, found {}; kept as YAML text",
                            quote(&key),
                            other.kind()
                        ),
                    );
                }
                map.insert(key, other.to_flow_text());
            }
        }
    }
    (map, include)
}

fn include_tools(value: &YamlValue, issue: &mut impl FnMut(IssueCode, String)) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut push = |t: &str| {
        if !t.is_empty() && !names.iter().any(|x| x == t) {
            names.push(t.to_owned());
        }
    };
    match value {
        YamlValue::Null => {}
        YamlValue::Text(s) => {
            if s.contains(',') {
                issue(
                    IssueCode::IncludeToolsMalformed,
                    format!(
                        "`metadata.{INCLUDE_TOOLS_KEY}` should be separated by spaces, not commas: {}",
                        quote(s)
                    ),
                );
            }
            s.split(|c: char| c.is_whitespace() || c == ',')
                .for_each(&mut push);
        }
        YamlValue::Seq(items) => {
            issue(
                IssueCode::IncludeToolsMalformed,
                format!("`metadata.{INCLUDE_TOOLS_KEY}` should be one space-separated string, found a list"),
            );
            for item in items {
                if let YamlValue::Text(t) = item {
                    t.split(|c: char| c.is_whitespace() || c == ',')
                        .for_each(&mut push);
                }
            }
        }
        YamlValue::Map(_) => issue(
            IssueCode::IncludeToolsMalformed,
            format!(
                "`metadata.{INCLUDE_TOOLS_KEY}` should be one space-separated string, found a mapping; ignored"
            ),
        ),
    }
    names
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn path(dir: &str) -> VirtualPath {
        VirtualPath::parse(&format!("/skills/{dir}/SKILL.md")).unwrap()
    }

    fn codes(v: &Validated) -> Vec<IssueCode> {
        v.issues.iter().map(|i| i.code).collect()
    }

    #[test]
    fn name_rules() {
        assert!(name_problems("web-research", "web-research").is_empty());
        assert!(name_problems("café", "café").is_empty());
        assert!(name_problems("1abc", "1abc").is_empty());
        let code = |n: &str| {
            name_problems(n, n)
                .into_iter()
                .map(|(c, _)| c)
                .collect::<Vec<_>>()
        };
        assert_eq!(code("Web"), vec![IssueCode::NameCharset]);
        assert_eq!(code("-a"), vec![IssueCode::NameHyphens]);
        assert_eq!(code("a--b"), vec![IssueCode::NameHyphens]);
        assert_eq!(code("技能"), vec![IssueCode::NameCharset]);
        assert_eq!(code("a_b"), vec![IssueCode::NameCharset]);
        assert_eq!(code(&"a".repeat(65)), vec![IssueCode::NameTooLong]);
        assert!(code(&"a".repeat(64)).is_empty());
        assert_eq!(
            name_problems("a", "b")
                .into_iter()
                .map(|(c, _)| c)
                .collect::<Vec<_>>(),
            vec![IssueCode::NameDirectoryMismatch]
        );
    }

    #[test]
    fn include_tools_forms() {
        let v = validate_file(
            b"---\nname: a\ndescription: d\nmetadata:\n  include_tools: \"x  y, z\"\n---\n",
            &path("a"),
        );
        assert_eq!(v.skill.clone().unwrap().include_tools, vec!["x", "y", "z"]);
        assert_eq!(codes(&v), vec![IssueCode::IncludeToolsMalformed]);
        let v = validate_file(
            b"---\nname: a\ndescription: d\nmetadata:\n  include_tools: [x, y]\n---\n",
            &path("a"),
        );
        let skill = v.skill.clone().unwrap();
        assert_eq!(skill.include_tools, vec!["x", "y"]);
        assert_eq!(skill.metadata.get("include_tools"), Some("[x, y]"));
        assert_eq!(codes(&v), vec![IssueCode::IncludeToolsMalformed]);
    }
}
