//! The record of one skill ([`SkillMetadata`]) and of what was wrong with a file ([`SkillIssue`]).

use crate::backend::{Version, VirtualPath};
use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One loaded skill: what the catalog lists and what activation needs. Serializable, so a catalog
/// can live in thread state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillMetadata {
    /// The name from the frontmatter, trimmed (not necessarily valid: invalid names load with a
    /// warning).
    pub name: String,
    /// The description, trimmed, at most [`MAX_DESCRIPTION_CHARS`](crate::skills::MAX_DESCRIPTION_CHARS)
    /// characters.
    pub description: String,
    /// The `SKILL.md` path the model reads, `<source>/<dir>/SKILL.md`.
    pub path: VirtualPath,
    /// `license`, trimmed; absent when missing, null or empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    /// `compatibility`, trimmed, at most [`MAX_COMPATIBILITY_CHARS`](crate::skills::MAX_COMPATIBILITY_CHARS)
    /// characters; absent when missing, null or empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compatibility: Option<String>,
    /// `metadata`, string to string, in written order.
    #[serde(default, skip_serializing_if = "MetadataMap::is_empty")]
    pub metadata: MetadataMap,
    /// `allowed-tools` (advisory: shown to the model, not enforced).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_tools: Vec<String>,
    /// Tool names or labels bound to this skill, from `metadata.include_tools`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub include_tools: Vec<String>,
    /// Index of the source the skill came from (after overrides, the winning one).
    pub source: usize,
    /// Version tag of the `SKILL.md` that was read, where the store has one (rescans compare it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<Version>,
}

impl SkillMetadata {
    /// The name of the skill's directory (the segment before `SKILL.md`).
    pub fn dir_name(&self) -> &str {
        self.path.segments().rev().nth(1).unwrap_or("")
    }

    /// The skill's directory.
    pub fn dir(&self) -> VirtualPath {
        self.path.parent().unwrap_or_else(VirtualPath::root)
    }
}

/// The `metadata` mapping: string keys to string values, in the order written. Serializes as a JSON
/// object (keys in order).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetadataMap(Vec<(String, String)>);

impl MetadataMap {
    /// Empty.
    pub fn new() -> Self {
        Self::default()
    }

    /// Set `key` (replacing an earlier value in place).
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) {
        let (key, value) = (key.into(), value.into());
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.0.push((key, value)),
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Entries in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for MetadataMap {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut map = Self::new();
        for (k, v) in iter {
            map.insert(k, v);
        }
        map
    }
}

impl Serialize for MetadataMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for MetadataMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MetadataMap;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<MetadataMap, A::Error> {
                let mut map = MetadataMap::new();
                while let Some((k, v)) = access.next_entry::<String, String>()? {
                    map.insert(k, v);
                }
                Ok(map)
            }
        }
        d.deserialize_map(V)
    }
}

/// What kind of problem a [`SkillIssue`] is. Stable, for tools that match on it (`trellis skills
/// validate --json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum IssueCode {
    // --- the skill is skipped (tier 2) ---
    /// `SKILL.md` could not be read (other than "not found").
    Unreadable,
    /// `SKILL.md` is a directory.
    SkillMdIsDirectory,
    /// Larger than [`MAX_SKILL_FILE_BYTES`](crate::skills::MAX_SKILL_FILE_BYTES).
    FileTooLarge,
    /// No frontmatter, an unclosed one, or one over the size limit.
    FrontmatterMissing,
    /// The frontmatter is not UTF-8.
    NotUtf8,
    /// The YAML does not parse (or breaks a parsing bound).
    InvalidYaml,
    /// The YAML is not a mapping.
    NotAMapping,
    /// `name` missing, null, empty or not a scalar.
    NameMissing,
    /// The name holds a line break, a control or invisible formatting character, or ASCII
    /// punctuation other than `-`, `_` and `.` (markup such as `<`, `*` or a backtick): it could change
    /// the structure of the prompt that lists it, so the skill is not loaded.
    NameUnsafe,
    /// `description` missing, null, blank or not a scalar.
    DescriptionMissing,
    // --- the skill loads with a warning ---
    /// Longer than 64 characters.
    NameTooLong,
    /// Characters other than lowercase letters, digits and `-`.
    NameCharset,
    /// Leading, trailing or doubled hyphen.
    NameHyphens,
    /// The name differs from the directory name.
    NameDirectoryMismatch,
    /// The description was cut to 1,024 characters.
    DescriptionTruncated,
    /// `compatibility` was cut to 500 characters.
    CompatibilityTruncated,
    /// A field that should be a string was a list or mapping (kept as YAML text) or is unusable.
    FieldType,
    /// `allowed-tools` is neither a string nor a list of strings.
    AllowedToolsMalformed,
    /// `metadata` is not a mapping (ignored), or a value is not a string (kept as YAML text).
    MetadataMalformed,
    /// `metadata.include_tools` is not one space-separated string.
    IncludeToolsMalformed,
    /// A top-level key is written twice (the last one wins).
    DuplicateKey,
    /// Two skills of one source share a name (the later path wins).
    DuplicateName,
    // --- not a problem for loading; a violation of the Agent Skills spec only ---
    /// A top-level key the spec does not define.
    UnknownField,
    /// `compatibility` present but empty.
    CompatibilityEmpty,
}

/// How much an issue matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    /// Only a strict spec check cares (the loader says nothing).
    Spec,
    /// The skill loads; the issue is logged as a warning.
    Warning,
    /// The skill is skipped; the issue is logged as a warning.
    Skipped,
}

impl IssueCode {
    /// The issue's severity for the loader.
    pub fn severity(self) -> Severity {
        use IssueCode::*;
        match self {
            Unreadable | SkillMdIsDirectory | FileTooLarge | FrontmatterMissing | NotUtf8 | InvalidYaml
            | NotAMapping | NameMissing | NameUnsafe | DescriptionMissing => Severity::Skipped,
            NameTooLong
            | NameCharset
            | NameHyphens
            | NameDirectoryMismatch
            | DescriptionTruncated
            | CompatibilityTruncated
            | FieldType
            | AllowedToolsMalformed
            | MetadataMalformed
            | IncludeToolsMalformed
            | DuplicateKey
            | DuplicateName => Severity::Warning,
            UnknownField | CompatibilityEmpty => Severity::Spec,
        }
    }

    /// True when the issue breaks a rule of the Agent Skills specification (what `trellis skills
    /// validate` reports as an error). Truncations count: the file itself is over the limit.
    pub fn violates_spec(self) -> bool {
        use IssueCode::*;
        !matches!(
            self,
            DuplicateName | IncludeToolsMalformed | AllowedToolsMalformed | DuplicateKey
        )
    }
}

/// One problem found in one `SKILL.md`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillIssue {
    /// The `SKILL.md` path.
    pub path: VirtualPath,
    /// What kind of problem.
    pub code: IssueCode,
    /// A sentence for people, naming the field and the limit where there is one.
    pub message: String,
}

impl SkillIssue {
    /// An issue whose message is made safe for one line of a terminal or log with
    /// [`escape_controls`](crate::untrusted::escape_controls): messages quote text from the file (names,
    /// keys, parser errors), and that text must not start lines or send terminal escapes.
    pub fn new(path: VirtualPath, code: IssueCode, message: impl AsRef<str>) -> Self {
        Self {
            path,
            code,
            message: crate::untrusted::escape_controls(message.as_ref()),
        }
    }

    /// The loader's severity.
    pub fn severity(&self) -> Severity {
        self.code.severity()
    }
}

impl std::fmt::Display for SkillIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}
