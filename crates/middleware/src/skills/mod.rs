//! Skills: discovery, validation, the catalog, its prompt section and search.
//!
//! The path of one skill:
//!
//! ```text
//! SkillSource (backend + dir, label)
//!   → discover(): ls each source, read_many the top 4 KiB of every <dir>/SKILL.md
//!   → frontmatter::split / frontmatter::parse (bounded YAML, scalars keep their text)
//!   → validate::validate (Agent Skills rules, limits, the three failure tiers)
//!   → SkillCatalog (ordered by source then name; later sources override by name)
//!   → render::render (budgeted, byte-identical for the same inputs) → a system block
//!   → SkillIndex::search for the `search_skills` tool when the listing is cut
//! ```
//!
//! This module holds no middleware state and registers no tool; the skills middleware builds on
//! these pieces: it keeps the [`SkillCatalog`] in thread state (it is serializable), renders it once
//! with [`prompt::render::render`], filters it per user with [`SkillCatalog::visible_to`], and on reload
//! calls [`rescan`] with the previous catalog.
//!
//! Failure tiers (see [`parse::validate`] and [`discover`]):
//! 1. a subdirectory without `SKILL.md` is silently not a skill;
//! 2. a broken skill (bad YAML, frontmatter not a mapping or missing, missing name or description,
//!    not UTF-8, too big, `SKILL.md` that is a directory or unreadable) is skipped and logged, and
//!    recorded in [`SkillCatalog::issues`];
//! 3. a source that cannot be listed becomes a warning shown to the model inside an
//!    untrusted-diagnostics block ([`prompt::render::render_warnings`], escaped by
//!    [`escape_untrusted`](crate::untrusted::escape_untrusted)).

/// The persisted catalog (its home is `discovery`, which it seeds), at the path users name.
pub use discovery::persist;

pub(crate) mod catalog;
pub(crate) mod discovery;
pub(crate) mod middleware;
pub mod parse;
pub mod prompt;
pub(crate) mod thread_state;
pub(crate) mod tools;

/// Entry points for the fuzz targets (`fuzz/`) and their replay test, which check the frontmatter
/// fast path against the full YAML parser. Not a stable API.
#[doc(hidden)]
pub mod fuzzing {
    use super::parse::frontmatter::{Frontmatter, FrontmatterError, YamlValue};

    /// The fast path alone: `Some` only for frontmatter in its simple subset, and then exactly what
    /// [`parse_full`] gives.
    pub fn parse_simple(text: &str) -> Option<Vec<(String, YamlValue)>> {
        super::parse::fastyaml::parse_simple(text)
    }

    /// The full YAML parser alone, with the nesting, value and text bounds of
    /// [`parse::frontmatter::parse`](super::parse::frontmatter::parse) (not its size check).
    pub fn parse_full(text: &str) -> Result<Frontmatter, FrontmatterError> {
        super::parse::frontmatter::parse_full(text)
    }
}

pub use catalog::layers::{Layer, LayeredCatalog};
pub use catalog::personal::{DEFAULT_PERSONAL_SKILLS_DIR, PERSONAL_LABEL, PersonalSkills};
pub use catalog::{RolesFromMetadata, SkillCatalog, SkillVisibility, SkippedFile, Viewer};
pub use discovery::source::{SkillSource, SourceError, SourceInfo, derive_label};
pub use discovery::{Discovery, DiscoveryOptions, DiscoveryStats, discover, rescan, rescan_owned};
pub use middleware::{
    DISCLOSURE_SOURCE, Disclosure, PIN_SKILLS, PINNED_SOURCE, RELOAD_SKILLS, SKILLS, SKILLS_ACTIVATED,
    SkillsMiddleware, SkillsState,
};
pub use parse::skill::{IssueCode, MetadataMap, Severity, SkillIssue, SkillMetadata};
pub use persist::{
    BucketIndex, CacheError, CacheReport, CatalogStore, LocalCatalogDir, Persisted, PersistedDiscovery,
    default_cache_dir, discover_persisted,
};
pub use prompt::render::{RenderOptions, RenderedSection, inline_untrusted, render, render_layered};
pub use prompt::search::{LazySkillIndex, SearchHit, SkillIndex};
pub use tools::{BoundTools, SearchSkillsTool, ToolResolver};

/// The file that makes a directory a skill.
pub const SKILL_FILE: &str = "SKILL.md";
/// Largest `SKILL.md`, in bytes (the size reported by the store; the file is never read whole).
pub const MAX_SKILL_FILE_BYTES: u64 = 10 * 1024 * 1024;
/// Longest valid name, in characters (longer names load with a warning).
pub const MAX_NAME_CHARS: usize = 64;
/// Longest description, in characters (longer ones are truncated, with a warning).
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
/// Longest compatibility note, in characters (longer ones are truncated, with a warning).
pub const MAX_COMPATIBILITY_CHARS: usize = 500;
/// Most source warnings shown to the model.
pub const MAX_SHOWN_WARNINGS: usize = 20;
/// Longest source warning shown to the model, in characters.
pub const MAX_WARNING_CHARS: usize = 1000;
