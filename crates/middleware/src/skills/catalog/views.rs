//! The catalog as one run's viewer sees it: the organisation's skills they may see (built once per
//! catalog generation, and per viewer only when a visibility policy is set), with their personal
//! skills over them, and the `search_skills` tool over both.
//!
//! Without a visibility policy every user shares one organisation view: the catalog `Arc` of the
//! thread state and one search index. A user's view adds only their (small) personal layer.

use std::sync::{Arc, Mutex};

use crate::backend::VirtualPath;
use crate::skills::catalog::layers::LayeredCatalog;
use crate::skills::catalog::{SkillCatalog, SkillVisibility, Viewer};
use crate::skills::prompt::search::LazySkillIndex;
use crate::skills::tools::SearchSkillsTool;
use crate::tools::{HiddenPaths, Tool};

/// Organisation views kept (one per recent viewer under a policy; one in all without).
const MAX_ORG_VIEWS: usize = 16;
/// Per-user views kept (each holds only its personal layer and `Arc`s).
const MAX_VIEWS: usize = 64;

/// The skills one viewer sees, and its search tool.
#[derive(Clone)]
pub(in crate::skills) struct View {
    generation: u64,
    viewer: Option<String>,
    personal: Option<usize>,
    /// The organisation's visible skills with the viewer's personal ones over them.
    pub layers: Arc<LayeredCatalog>,
    /// Directories of the skills this viewer may not see.
    pub hidden: HiddenPaths,
    /// `search_skills` over `layers`.
    pub search: Arc<dyn Tool>,
}

/// The organisation's catalog as one viewer (or everyone) sees it.
struct OrgView {
    generation: u64,
    viewer: Option<String>,
    visible: Arc<SkillCatalog>,
    hidden: Vec<VirtualPath>,
    index: Arc<LazySkillIndex>,
}

/// The caches of views (shared by a middleware's clones).
#[derive(Default)]
pub(in crate::skills) struct Views {
    org: Mutex<Vec<OrgView>>,
    user: Mutex<Vec<View>>,
}

impl Views {
    /// The view of `catalog` (generation `generation`) with `personal` over it, for the viewer
    /// with id `viewer_id` (`viewer` builds it, only when no view is cached).
    pub fn get(
        &self,
        catalog: &Arc<SkillCatalog>,
        generation: u64,
        personal: Option<&Arc<SkillCatalog>>,
        viewer_id: Option<&str>,
        viewer: impl FnOnce() -> Option<Viewer>,
        policy: Option<&Arc<dyn SkillVisibility>>,
    ) -> View {
        let personal_key = personal.map(|p| Arc::as_ptr(p) as usize);
        let mut views = self.user.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(v) = views.iter().find(|v| {
            v.generation == generation && v.personal == personal_key && v.viewer.as_deref() == viewer_id
        }) {
            return v.clone();
        }
        let viewer = viewer();
        let viewer = viewer.as_ref();
        let viewer_id = viewer.and_then(|v| v.user_id.clone());
        let (org, mut hidden) = self.org(catalog, generation, viewer, policy);
        let personal = personal.map(|p| visible_part(p, policy, viewer, &mut hidden));
        let layers = Arc::new(LayeredCatalog::new(org.0, personal));
        let view = View {
            generation,
            viewer: viewer_id,
            personal: personal_key,
            search: Arc::new(SearchSkillsTool::layered(layers.clone(), org.1)),
            layers,
            hidden: HiddenPaths::new(hidden),
        };
        if views.len() >= MAX_VIEWS {
            views.remove(0);
        }
        views.push(view.clone());
        view
    }

    /// The visible organisation catalog and its index, and the directories hidden from `viewer`.
    #[allow(clippy::type_complexity)]
    fn org(
        &self,
        catalog: &Arc<SkillCatalog>,
        generation: u64,
        viewer: Option<&Viewer>,
        policy: Option<&Arc<dyn SkillVisibility>>,
    ) -> ((Arc<SkillCatalog>, Arc<LazySkillIndex>), Vec<VirtualPath>) {
        // Without a policy, everyone sees the same skills: one view for all.
        let key = policy.and(viewer.and_then(|v| v.user_id.clone()));
        let mut views = self.org.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(v) = views
            .iter()
            .find(|v| v.generation == generation && v.viewer == key)
        {
            return ((v.visible.clone(), v.index.clone()), v.hidden.clone());
        }
        let mut hidden = Vec::new();
        let visible = visible_part(catalog, policy, viewer, &mut hidden);
        let index = Arc::new(LazySkillIndex::new());
        if views.len() >= MAX_ORG_VIEWS {
            views.remove(0);
        }
        views.push(OrgView {
            generation,
            viewer: key,
            visible: visible.clone(),
            hidden: hidden.clone(),
            index: index.clone(),
        });
        ((visible, index), hidden)
    }
}

/// The skills of `catalog` that `viewer` may see under `policy` (the catalog itself, shared, without
/// one); the directories of the others are added to `hidden`.
fn visible_part(
    catalog: &Arc<SkillCatalog>,
    policy: Option<&Arc<dyn SkillVisibility>>,
    viewer: Option<&Viewer>,
    hidden: &mut Vec<VirtualPath>,
) -> Arc<SkillCatalog> {
    let Some(policy) = policy else {
        return catalog.clone();
    };
    let viewer = viewer.cloned().unwrap_or_default();
    Arc::new(catalog.filtered(|s| {
        let visible = policy.is_visible(s, &viewer);
        if !visible {
            hidden.push(s.dir());
        }
        visible
    }))
}
