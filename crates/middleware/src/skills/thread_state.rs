//! What the skills middleware keeps per thread ([`SKILLS`], [`SkillsState`]) and the slots a
//! caller sets or reads ([`PIN_SKILLS`], [`RELOAD_SKILLS`], [`SKILLS_ACTIVATED`]). All of it is
//! thread state: it lives in the thread's checkpoint, so another thread never sees it.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::catalog::SkillCatalog;
use crate::runtime::state::Slot;

/// The thread's skills bookkeeping (private).
pub static SKILLS: Slot<SkillsState> = Slot::private("_skills");
/// Names of activated skills, in activation order (public: UIs may show them).
pub static SKILLS_ACTIVATED: Slot<Vec<String>> = Slot::public("skills_activated");
/// Run input: skill names to pin before the next model call.
pub static PIN_SKILLS: Slot<Vec<String>> = Slot::public("pin_skills");
/// Run input: `true` rescans every source before the next model call.
pub static RELOAD_SKILLS: Slot<bool> = Slot::public("reload_skills");

/// Source tag of pinned-skill messages.
pub const PINNED_SOURCE: &str = "skills.pinned";
/// Source tag of tool-disclosure system messages.
pub const DISCLOSURE_SOURCE: &str = "skills.tools";

/// What the middleware keeps per thread.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SkillsState {
    /// The catalog (all skills, before per-viewer filtering); shared, so state clones are cheap,
    /// and stored by content in checkpoints, so a step that keeps it does not serialize it.
    #[serde(serialize_with = "crate::runtime::checkpoint::serialize_by_content")]
    pub catalog: Arc<SkillCatalog>,
    /// Changes whenever the catalog is (re)loaded; keys the per-viewer caches.
    pub generation: u64,
    /// The rendered section and the viewer it was rendered for; stored by content in checkpoints,
    /// so the steps that keep it do not write it again.
    #[serde(serialize_with = "crate::runtime::checkpoint::serialize_str_by_content")]
    pub section: String,
    /// User id the section was rendered for.
    pub section_viewer: Option<String>,
    /// True when the listing is cut and `search_skills` is offered.
    pub needs_search: bool,
    /// Skills whose pinned body was added to the conversation.
    pub pinned: Vec<String>,
    /// Tools disclosed so far.
    pub disclosed: Vec<Disclosure>,
    /// Messages already scanned for skill activations.
    pub scanned: usize,
    /// The run's user's personal skills (see [`SkillsMiddleware::with_personal_skills`](super::SkillsMiddleware::with_personal_skills)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub personal: Option<Arc<SkillCatalog>>,
    /// The user `personal` belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub personal_owner: Option<String>,
}

/// One disclosed bound tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disclosure {
    /// The tool.
    pub tool: String,
    /// The skill that bound it.
    pub skill: String,
    /// Number of messages in the conversation when it was disclosed.
    pub at_message: usize,
}
