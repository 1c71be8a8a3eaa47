//! [`SkillsMiddleware`]: progressive disclosure of skills in a running agent.
//!
//! * **Loading.** The first run of a thread scans every source and keeps the catalog in the
//!   thread's private state; later runs reuse it. The first thread of a middleware discovers from
//!   scratch ([`discover`](super::discover)); later new threads [`rescan`](super::rescan) against the newest catalog any thread
//!   loaded, so only `SKILL.md` files whose version tag changed are read again (on object stores
//!   that is one listing instead of one GET per skill), and when nothing changed they share that
//!   catalog outright. These loads are single-flight: threads that start while one runs wait for
//!   it and share its catalog (so a change stays unseen by a new thread for at most one scan; see
//!   `skills/catalog/shared_catalog.rs`). A run input of [`RELOAD_SKILLS`]
//!   `true` rescans before the next call, re-reading only `SKILL.md` files whose version changed
//!   ([`rescan`](super::rescan)), and recomputes the disclosed tools against the new catalog.
//! * **The section.** The catalog, filtered for the run's viewer, is rendered once per catalog (and
//!   viewer) under a token budget and cached in state: every call sends the same bytes.
//! * **Activation.** A successful `read_file` of a skill's `SKILL.md` (a partial read counts) or
//!   pinning activates it. Activated skills are recorded in [`SKILLS_ACTIVATED`] and their bound tools
//!   (`metadata.include_tools`) become available: for models that accept tools mid-conversation they
//!   arrive in a system message inserted where the skill was activated (so the cached prefix above is
//!   untouched); for others they are appended to the end of the tool list. A bound tool that was not
//!   disclosed is not offered, so calling it fails like an unknown tool.
//! * **Changing bindings.** A label in `include_tools` (such as `mcp:crm`) can resolve to other
//!   tools over time: an MCP server adds or removes tools, or was unavailable when the skill was
//!   read. Before each model call the labels of activated skills are resolved again; a tool that
//!   appeared is disclosed then, in a new message at the end of the conversation, and a tool that
//!   is gone is no longer offered.
//! * **Pinning.** Skill names given in [`PIN_SKILLS`] with a run are added before the next model call
//!   as one tagged message each, once per skill per thread, and activated.
//! * **Visibility.** With a [`SkillVisibility`] policy, the viewer (a [`Viewer`] or a
//!   [`UserIdentity`](crate::tools::UserIdentity) run extension) sees only its skills in the
//!   section and in search. The directories of the skills it may not see are added to the run's
//!   [`HiddenPaths`] for every tool call, so for the file tools (and for subagents, which inherit
//!   the run's extensions) they do not exist: `ls`, `glob` and `grep` leave them out, `read_file`, `edit_file` and `delete` answer
//!   "not found" exactly as for a missing file, and `write_file` is refused.
//! * **Personal skills.** With [`SkillsMiddleware::with_personal_skills`], each user's own skills
//!   (in their workspace, see [`PersonalSkills`]) are the highest-priority source, for that user
//!   only: a thread keeps its user's personal catalog beside the shared organisation catalog, and
//!   every lookup, the section, search, activation and pins go through the layered view
//!   ([`LayeredCatalog`]). A personal skill with an organisation
//!   skill's name shadows it for that user, with a notice among the catalog's warnings.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use crate::backend::Backend;

use async_trait::async_trait;

use super::SkillMetadata;
use super::catalog::layers::{Layer, LayeredCatalog};
use super::catalog::personal::PersonalSkills;
use super::catalog::shared_catalog::{SharedCatalog, Sources};
use super::catalog::views::{View, Views};
use super::catalog::{SkillCatalog, SkillVisibility, Viewer};
use super::discovery::DiscoveryOptions;
use super::discovery::source::SkillSource;
use super::persist::Persisted;
use super::prompt::activation::{activations, disclose_in_messages, pinned_message};
use super::prompt::render::{RenderOptions, render_layered};
use super::tools::BoundTools;
use crate::runtime::context::RunContext;
use crate::runtime::error::AgentError;
use crate::runtime::message::{SystemBlock, ToolCall};
use crate::runtime::middleware::{Middleware, Next, ToolNext};
use crate::runtime::model::{ModelRequest, ModelResponse};
use crate::runtime::state::State;
use crate::tools::HiddenPaths;
use crate::tools::{Extensions, Tool, ToolContext, ToolOutput, UserIdentity};

pub use super::thread_state::{
    DISCLOSURE_SOURCE, Disclosure, PIN_SKILLS, PINNED_SOURCE, RELOAD_SKILLS, SKILLS, SKILLS_ACTIVATED,
    SkillsState,
};

/// Progressive disclosure of skills; see the module docs.
#[derive(Clone)]
pub struct SkillsMiddleware {
    sources: Vec<SkillSource>,
    discovery: DiscoveryOptions,
    budget_tokens: Option<usize>,
    bound: BoundTools,
    visibility: Option<Arc<dyn SkillVisibility>>,
    personal: Option<Arc<PersonalSkills>>,
    persisted: Arc<[Option<Persisted>]>,
    views: Arc<Views>,
    /// The newest catalog of the sources (agent-scoped, shared by the clones).
    shared: Arc<SharedCatalog>,
}

impl fmt::Debug for SkillsMiddleware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SkillsMiddleware")
            .field("sources", &self.sources)
            .field("budget_tokens", &self.budget_tokens)
            .field("bound", &self.bound)
            .field("visibility", &self.visibility.is_some())
            .finish()
    }
}

impl SkillsMiddleware {
    /// Skills from `sources`, in order (later sources override earlier ones by name).
    pub fn new(sources: Vec<SkillSource>) -> Self {
        Self {
            sources,
            discovery: DiscoveryOptions::default(),
            budget_tokens: None,
            bound: BoundTools::new(),
            visibility: None,
            personal: None,
            persisted: Arc::new([]),
            views: Arc::default(),
            shared: Arc::default(),
        }
    }

    /// Seed the first discovery of this middleware with each source's persisted catalog
    /// (`persisted[i]` for source `i`; see [`persist`](super::persist)), so a new process reads
    /// only the `SKILL.md` files that changed since; the caches are updated after it. Agent-scoped:
    /// every thread and user of the middleware shares these sources' catalogs.
    pub fn with_persisted(mut self, persisted: Vec<Option<Persisted>>) -> Self {
        self.persisted = persisted.into();
        self
    }

    /// Budget of the section in tokens (default: 2% of the model's context window).
    pub fn with_budget_tokens(mut self, tokens: usize) -> Self {
        self.budget_tokens = Some(tokens);
        self
    }

    /// Tools skills may bind with `metadata.include_tools`.
    pub fn with_bound_tools(mut self, bound: BoundTools) -> Self {
        self.bound = bound;
        self
    }

    /// Per-user visibility.
    pub fn with_visibility(mut self, policy: Arc<dyn SkillVisibility>) -> Self {
        self.visibility = Some(policy);
        self
    }

    /// Each user's own skills, layered over these sources for that user only (see
    /// [`PersonalSkills`]).
    pub fn with_personal_skills(mut self, personal: PersonalSkills) -> Self {
        self.personal = Some(Arc::new(personal));
        self
    }

    /// The personal skills source, when there is one.
    pub fn personal_skills(&self) -> Option<&PersonalSkills> {
        self.personal.as_deref()
    }

    /// How discovery reads.
    pub fn with_discovery_options(mut self, options: DiscoveryOptions) -> Self {
        self.discovery = options;
        self
    }

    fn viewer(extensions: &Extensions) -> Option<Viewer> {
        if let Some(v) = extensions.get::<Viewer>() {
            return Some(v.clone());
        }
        extensions
            .get::<UserIdentity>()
            .map(|u| Viewer::new(u.user_id.clone(), u.roles.iter().cloned()))
    }

    /// The catalog as this run's viewer sees it, and its search tool (cached per generation,
    /// viewer and personal catalog).
    fn view(&self, skills: &SkillsState, extensions: &Extensions) -> View {
        // The id alone finds a cached view; the viewer (a clone) is built only on a miss.
        let viewer_id = match extensions.get::<Viewer>() {
            Some(v) => v.user_id.as_deref(),
            None => extensions.get::<UserIdentity>().map(|u| u.user_id.as_str()),
        };
        self.views.get(
            &skills.catalog,
            skills.generation,
            skills.personal.as_ref(),
            viewer_id,
            || Self::viewer(extensions),
            self.visibility.as_ref(),
        )
    }

    /// The run's user's personal catalog and its owner, or `None`s without personal skills or a
    /// user workspace.
    async fn load_personal(
        &self,
        cx: &RunContext,
    ) -> Result<(Option<Arc<SkillCatalog>>, Option<String>), AgentError> {
        match &self.personal {
            Some(personal) => personal.load_for_run(cx, &self.discovery).await,
            None => Ok((None, None)),
        }
    }

    /// The backend a skill of `layer` is read from in this run.
    fn backend_of(
        &self,
        layer: Layer,
        skill: &SkillMetadata,
        extensions: &Extensions,
    ) -> Option<Arc<dyn Backend>> {
        match layer {
            Layer::Org => self.sources.get(skill.source).map(|s| s.backend().clone()),
            Layer::Personal => self.personal.as_ref()?.backend_for_run(extensions),
        }
    }

    fn render_into(&self, skills: &mut SkillsState, cx: &RunContext, keep: &[String]) {
        let budget = self.budget_tokens.unwrap_or_else(|| {
            let window = cx.model().capabilities().context_window.unwrap_or(200_000) as usize;
            RenderOptions::for_context_window(window).budget_tokens
        });
        let options = RenderOptions::with_budget(budget).keep(keep.iter().cloned());
        let rendered = render_layered(&self.view(skills, cx.extensions()).layers, &options);
        skills.needs_search = rendered.needs_search();
        skills.section = rendered.text;
        skills.section_viewer = Self::viewer(cx.extensions()).and_then(|v| v.user_id);
    }

    /// The sources, as [`SharedCatalog`] reads them.
    fn shared_sources(&self) -> Sources<'_> {
        Sources {
            sources: &self.sources,
            persisted: &self.persisted,
            discovery: &self.discovery,
        }
    }

    /// Tools bound by `skill` for this run.
    async fn bound_for(&self, skill: &SkillMetadata, cx: &RunContext) -> Vec<Arc<dyn Tool>> {
        if skill.include_tools.is_empty() || self.bound.is_empty() {
            return Vec::new();
        }
        self.bound.resolve(&skill.include_tools, cx).await
    }

    /// The tools the skill of each disclosure binds for this run, looked up in `catalog` and
    /// resolved once per skill (one skill may have disclosed many tools). Unknown skills bind
    /// nothing.
    async fn bindings<'a>(
        &self,
        catalog: &LayeredCatalog,
        disclosed: &'a [Disclosure],
        cx: &RunContext,
    ) -> BTreeMap<&'a str, Vec<Arc<dyn Tool>>> {
        let mut bound = BTreeMap::new();
        for name in disclosed.iter().map(|d| d.skill.as_str()) {
            if bound.contains_key(name) {
                continue;
            }
            let tools = match catalog.get(name) {
                Some((_, skill)) => self.bound_for(skill, cx).await,
                None => Vec::new(),
            };
            bound.insert(name, tools);
        }
        bound
    }

    /// Tools that the labels of activated skills resolve to now but that were never disclosed (an
    /// MCP server's tool list changed, or the server was unavailable at activation), as
    /// disclosures at message `at`.
    async fn appeared_tools(
        &self,
        skills: &SkillsState,
        activated: &[String],
        at: usize,
        cx: &RunContext,
    ) -> Vec<Disclosure> {
        let mut appeared: Vec<Disclosure> = Vec::new();
        if activated.is_empty() {
            return appeared;
        }
        let view = self.view(skills, cx.extensions());
        for name in activated {
            let Some((_, skill)) = view.layers.get(name) else {
                continue;
            };
            if !self.bound.has_labels(&skill.include_tools) {
                continue;
            }
            for tool in self.bound_for(skill, cx).await {
                let known = |d: &Disclosure| d.tool == tool.name();
                if !skills.disclosed.iter().any(known) && !appeared.iter().any(known) {
                    appeared.push(Disclosure {
                        tool: tool.name().to_owned(),
                        skill: skill.name.clone(),
                        at_message: at,
                    });
                }
            }
        }
        if !appeared.is_empty() {
            let tools: Vec<&str> = appeared.iter().map(|d| d.tool.as_str()).collect();
            cx.emit_middleware(
                "skills",
                "tools_appeared",
                || serde_json::json!({ "tools": tools }),
            );
        }
        appeared
    }

    /// Record an activation: the skill's name and the tools it discloses.
    async fn activate(
        &self,
        skills: &mut SkillsState,
        activated: &mut Vec<String>,
        skill: &SkillMetadata,
        at_message: usize,
        cx: &RunContext,
    ) {
        if !activated.contains(&skill.name) {
            activated.push(skill.name.clone());
        }
        for tool in self.bound_for(skill, cx).await {
            if !skills.disclosed.iter().any(|d| d.tool == tool.name()) {
                skills.disclosed.push(Disclosure {
                    tool: tool.name().to_owned(),
                    skill: skill.name.clone(),
                    at_message,
                });
            }
        }
        cx.emit_middleware(
            "skills",
            "activated",
            || serde_json::json!({ "skill": skill.name }),
        );
    }
}

#[async_trait]
impl Middleware for SkillsMiddleware {
    fn name(&self) -> &str {
        "skills"
    }

    async fn request_tools(&self, state: &State, cx: &RunContext) -> Result<Vec<Arc<dyn Tool>>, AgentError> {
        let Some(skills) = state.get(&SKILLS)? else {
            return Ok(Vec::new());
        };
        let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
        if !skills.needs_search && skills.disclosed.is_empty() {
            return Ok(tools);
        }
        let view = self.view(skills, cx.extensions());
        if skills.needs_search {
            tools.push(view.search.clone());
        }
        if !skills.disclosed.is_empty() {
            let bound = self.bindings(&view.layers, &skills.disclosed, cx).await;
            let mut seen = BTreeSet::new();
            for d in &skills.disclosed {
                let found = bound
                    .get(d.skill.as_str())
                    .and_then(|tools| tools.iter().find(|t| t.name() == d.tool));
                if let Some(tool) = found
                    && seen.insert(d.tool.as_str())
                {
                    tools.push(tool.clone());
                }
            }
        }
        Ok(tools)
    }

    async fn before_agent(&self, state: &mut State, cx: &RunContext) -> Result<(), AgentError> {
        let reload = state.get(&RELOAD_SKILLS)?.copied().unwrap_or(false);
        let current = state.get(&SKILLS)?.cloned();
        let owner = self
            .personal
            .as_ref()
            .and_then(|p| p.homes().resolve(cx.extensions()).ok().flatten())
            .map(|home| home.key);
        let mut skills = match (current, reload) {
            // A thread resumed by another user gets that user's personal layer.
            (Some(mut s), false) if self.personal.is_some() && s.personal_owner != owner => {
                (s.personal, s.personal_owner) = self.load_personal(cx).await?;
                s.section.clear();
                s
            }
            (Some(s), false) => s,
            (previous, _) => {
                let latest = match &previous {
                    Some(p) => self.shared.reload(self.shared_sources(), &p.catalog, cx).await,
                    None => self.shared.for_new_thread(self.shared_sources(), cx).await,
                };
                let (personal, personal_owner) = self.load_personal(cx).await?;
                let mut fresh = SkillsState {
                    catalog: latest.catalog,
                    generation: latest.generation,
                    pinned: previous.as_ref().map(|p| p.pinned.clone()).unwrap_or_default(),
                    personal,
                    personal_owner,
                    ..SkillsState::default()
                };
                // Disclosed tools survive a reload only while their skill still binds them.
                if let Some(previous) = previous {
                    let layers = self.view(&fresh, cx.extensions()).layers;
                    let bound = self.bindings(&layers, &previous.disclosed, cx).await;
                    let still_bound = |d: &Disclosure| {
                        bound
                            .get(d.skill.as_str())
                            .is_some_and(|tools| tools.iter().any(|t| t.name() == d.tool))
                    };
                    fresh.disclosed = previous
                        .disclosed
                        .iter()
                        .filter(|d| still_bound(d))
                        .cloned()
                        .collect();
                }
                fresh.section.clear();
                fresh
            }
        };
        if reload {
            state.set(&RELOAD_SKILLS, false);
        }
        let viewer_id = Self::viewer(cx.extensions()).and_then(|v| v.user_id);
        if skills.section.is_empty() || skills.section_viewer != viewer_id {
            let mut keep = state.get(&SKILLS_ACTIVATED)?.cloned().unwrap_or_default();
            keep.extend(state.get(&PIN_SKILLS)?.cloned().unwrap_or_default());
            self.render_into(&mut skills, cx, &keep);
        }
        state.set(&SKILLS, skills);
        Ok(())
    }

    async fn before_model(&self, state: &mut State, cx: &RunContext) -> Result<(), AgentError> {
        let Some(current) = state.get(&SKILLS)? else {
            return Ok(());
        };
        let activated = state.get(&SKILLS_ACTIVATED)?.cloned().unwrap_or_default();
        let appeared = self
            .appeared_tools(current, &activated, state.messages.len(), cx)
            .await;
        if !appeared.is_empty() {
            state.update(&SKILLS, |s| s.disclosed.extend(appeared))?;
        }
        let Some(current) = state.get(&SKILLS)? else {
            return Ok(());
        };
        let pending_pin = state
            .get(&PIN_SKILLS)?
            .is_some_and(|pins| pins.iter().any(|p| !current.pinned.contains(p)));
        let unscanned = state
            .messages
            .iter()
            .skip(current.scanned)
            .any(|m| m.as_ai().is_some_and(|ai| ai.has_tool_calls()));
        if !pending_pin && !unscanned {
            if current.scanned != state.messages.len() {
                let scanned = state.messages.len();
                state.update(&SKILLS, |s| s.scanned = scanned)?;
            }
            return Ok(());
        }
        let mut skills = current.clone();
        let mut activated = state.get(&SKILLS_ACTIVATED)?.cloned().unwrap_or_default();
        let visible = self.view(&skills, cx.extensions()).layers;
        let before = (skills.clone(), activated.len());

        // Activations: successful read_file calls of a SKILL.md since the last scan. Disclosed tools
        // go after the last tool result, never between a call and its result.
        let at = state.messages.len();
        for skill in activations(&state.messages, skills.scanned, &visible) {
            self.activate(&mut skills, &mut activated, &skill, at, cx).await;
        }

        // Pinned skills: one tagged message each, once per thread.
        let pins = state.get(&PIN_SKILLS)?.cloned().unwrap_or_default();
        for name in pins {
            if skills.pinned.contains(&name) {
                continue;
            }
            skills.pinned.push(name.clone());
            let Some((layer, skill)) = visible.get(&name).map(|(l, s)| (l, s.clone())) else {
                tracing::warn!(skill = %name, "pinned skill is unknown or not visible to this user");
                continue;
            };
            let Some(backend) = self.backend_of(layer, &skill, cx.extensions()) else {
                continue;
            };
            let body = match backend.read(&skill.path, None).await {
                Ok(out) => String::from_utf8_lossy(&out.bytes).into_owned(),
                Err(e) => {
                    tracing::warn!(skill = %name, error = %e, "could not read a pinned skill");
                    continue;
                }
            };
            state.messages.push(pinned_message(&skill, &body));
            let at = state.messages.len();
            self.activate(&mut skills, &mut activated, &skill, at, cx).await;
        }
        skills.scanned = state.messages.len();
        if before.0 != skills || before.1 != activated.len() {
            state.set(&SKILLS, skills);
            state.set(&SKILLS_ACTIVATED, activated);
        }
        Ok(())
    }

    async fn wrap_model_call(
        &self,
        mut request: ModelRequest,
        state: &mut State,
        cx: &RunContext,
        next: Next<'_>,
    ) -> Result<ModelResponse, AgentError> {
        if let Some(skills) = state.get(&SKILLS)? {
            if !skills.section.is_empty() {
                request.push_system(SystemBlock::new(skills.section.clone()).with_source("skills"));
            }
            if !skills.disclosed.is_empty() && next.model().capabilities().tools_mid_conversation {
                disclose_in_messages(&mut request, &skills.disclosed);
            }
        }
        next.run(request, state, cx).await
    }

    async fn wrap_tool_call(
        &self,
        call: ToolCall,
        cx: &ToolContext<'_>,
        next: ToolNext<'_>,
    ) -> Result<ToolOutput, AgentError> {
        let Some(skills) = cx.slot(&SKILLS)? else {
            return next.run(call, cx).await;
        };
        let view = self.view(skills, cx.extensions());
        if view.hidden.is_empty() {
            return next.run(call, cx).await;
        }
        // Every tool call, not only file tools: a `task` call passes the extensions to its subagent.
        let mut extensions = cx.extensions().clone();
        let hidden = match extensions.get::<HiddenPaths>() {
            Some(theirs) => theirs.merged(&view.hidden),
            None => view.hidden,
        };
        extensions.insert(hidden);
        next.run(call, &cx.with_extensions(&extensions)).await
    }
}
