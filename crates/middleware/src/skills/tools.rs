//! Tools of the skills middleware: `search_skills`, and how tools bound to skills are found.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::catalog::SkillCatalog;
use super::catalog::layers::LayeredCatalog;
use super::prompt::render::inline_untrusted;
use super::prompt::search::{LazySkillIndex, SearchHit};
use crate::runtime::context::RunContext;
use crate::tools::{Tool, ToolContext, ToolError, ToolOutput};

/// Turns a label from a skill's `metadata.include_tools` into tools, given the run's context (thread,
/// and the caller's identity through [`RunContext::extension`]). This is how a whole MCP server is
/// bound to one label, and how a tool is withheld from users without a role: return fewer tools.
#[async_trait]
pub trait ToolResolver: Send + Sync + fmt::Debug {
    /// Tools for `label`; an empty list when the label is unknown here or the user may not have them.
    async fn resolve(&self, label: &str, cx: &RunContext) -> Vec<Arc<dyn Tool>>;
}

/// Tools that skills may bind, by name, plus optional resolvers for labels.
#[derive(Debug, Clone, Default)]
pub struct BoundTools {
    by_name: BTreeMap<String, Arc<dyn Tool>>,
    resolvers: Vec<Arc<dyn ToolResolver>>,
}

impl BoundTools {
    /// No bound tools.
    pub fn new() -> Self {
        Self::default()
    }

    /// A tool a skill can name in `include_tools`.
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> Self {
        self.by_name.insert(tool.name().to_owned(), tool);
        self
    }

    /// A resolver asked for every entry that is not a tool name.
    pub fn resolver(mut self, resolver: Arc<dyn ToolResolver>) -> Self {
        self.resolvers.push(resolver);
        self
    }

    /// True when nothing can be bound.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty() && self.resolvers.is_empty()
    }

    /// True when some entry is left to a resolver (a label such as `mcp:crm`), whose tools can
    /// change while the agent runs; tool names alone always bind the same tools.
    pub fn has_labels(&self, entries: &[String]) -> bool {
        !self.resolvers.is_empty() && entries.iter().any(|e| !self.by_name.contains_key(e))
    }

    /// Every tool named or labelled by `entries`, deduplicated by name, in entry order.
    pub async fn resolve(&self, entries: &[String], cx: &RunContext) -> Vec<Arc<dyn Tool>> {
        let mut out: Vec<Arc<dyn Tool>> = Vec::new();
        for entry in entries {
            let found: Vec<Arc<dyn Tool>> = match self.by_name.get(entry) {
                Some(tool) => vec![tool.clone()],
                None => {
                    let mut all = Vec::new();
                    for resolver in &self.resolvers {
                        all.extend(resolver.resolve(entry, cx).await);
                    }
                    all
                }
            };
            for tool in found {
                if !out.iter().any(|t| t.name() == tool.name()) {
                    out.push(tool);
                }
            }
        }
        out
    }
}

/// `search_skills`: BM25 over names and descriptions of the skills this user may see. Offered when
/// the catalog is too large to list in full.
#[derive(Debug, Clone)]
pub struct SearchSkillsTool {
    catalog: Arc<LayeredCatalog>,
    org_index: Arc<LazySkillIndex>,
    personal_index: Option<Arc<LazySkillIndex>>,
    parameters: Value,
}

/// Most results `search_skills` returns.
pub const MAX_SEARCH_RESULTS: usize = 20;

impl SearchSkillsTool {
    /// Search `catalog` (already filtered for the viewer).
    pub fn new(catalog: Arc<SkillCatalog>) -> Self {
        Self::layered(Arc::new(LayeredCatalog::org_only(catalog)), Arc::default())
    }

    /// Search a user's layered catalog; `org_index` is the shared index of its organisation
    /// catalog (built by the first search, whoever searches), the personal skills get a small
    /// index of their own (also built by the first search). Shadowed organisation skills are
    /// never returned.
    pub fn layered(catalog: Arc<LayeredCatalog>, org_index: Arc<LazySkillIndex>) -> Self {
        let personal_index = catalog.personal().map(|_| Arc::new(LazySkillIndex::new()));
        Self {
            catalog,
            org_index,
            personal_index,
            parameters: json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Words describing the task, or a skill name."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_RESULTS, "description": "Most results (default 10)."}
                },
                "required": ["query"],
                "additionalProperties": false
            }),
        }
    }
}

impl SearchSkillsTool {
    /// The best `limit` hits of both layers, best first; personal skills first on equal scores.
    fn search(&self, query: &str, limit: usize) -> Vec<SearchHit> {
        let layers = &self.catalog;
        let shadowed = layers.shadowed();
        let mut hits: Vec<SearchHit> = match (layers.personal(), &self.personal_index) {
            (Some(personal), Some(index)) => index.get(personal).search(personal, query, limit),
            _ => Vec::new(),
        };
        let org = self
            .org_index
            .get(layers.org())
            .search(layers.org(), query, limit + shadowed.len())
            .into_iter()
            .filter(|h| !shadowed.contains(&h.name));
        hits.extend(org);
        // Stable: equal scores keep personal hits (pushed first) ahead.
        hits.sort_by(|a, b| b.score.total_cmp(&a.score));
        hits.truncate(limit);
        hits
    }
}

#[async_trait]
impl Tool for SearchSkillsTool {
    fn name(&self) -> &str {
        super::prompt::render::SEARCH_TOOL
    }

    fn description(&self) -> &str {
        "Find skills by what they do. Returns matching skills with their descriptions and the path of \
         their SKILL.md; read that file before using a skill."
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    /// It only searches the catalog.
    fn side_effects(&self) -> crate::tools::SideEffects {
        crate::tools::SideEffects::ReadOnly
    }

    async fn call(&self, args: Value, _cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let Some(query) = args
            .get("query")
            .and_then(Value::as_str)
            .filter(|q| !q.trim().is_empty())
        else {
            return Ok(ToolOutput::error(
                "search_skills needs `query` (a non-empty string) and takes an optional `limit` (integer, 1-20).",
            ));
        };
        let limit = args
            .get("limit")
            .and_then(Value::as_u64)
            .map_or(10, |l| (l as usize).clamp(1, MAX_SEARCH_RESULTS));
        let hits = self.search(query, limit);
        if hits.is_empty() {
            return Ok(ToolOutput::text(format!(
                "No skill matches \"{query}\". Try other words."
            )));
        }
        let mut out = String::new();
        for hit in hits {
            if let Some((_, skill)) = self.catalog.get(&hit.name) {
                out.push_str(&format!(
                    "- {}: {} ({})\n",
                    inline_untrusted(&skill.name),
                    inline_untrusted(&skill.description),
                    inline_untrusted(skill.path.as_str())
                ));
            }
        }
        Ok(ToolOutput::text(out.trim_end().to_owned()))
    }
}
