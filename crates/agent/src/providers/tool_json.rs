//! Each tool's definition in a provider's request body, made once per definition and reused.
//!
//! A served agent is built once per user (`trellis serve`), so its tools are the same
//! `Arc<ToolSpec>`s on every step of every run. Without this cache, each request turns each
//! tool's schema into the provider's form again: the schema is copied, normalized
//! (`function_parameters`) and copied into the body. Profiled on the serve bench (1,000 concurrent
//! four-step runs, 2026-12-06), that was about 8% of the server's CPU.
//!
//! Entries are keyed by the spec's allocation and each holds a reference to its spec, so no other
//! spec can reuse that address while the entry lives. A spec is immutable behind its `Arc`.
//!
//! Tools a middleware adds for one call arrive as new `Arc`s each time. They miss, and are made
//! again as before. The cache is emptied when it reaches [`MAX_ENTRIES`], which bounds it. One cache
//! belongs to one model and so to one wire format.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use trellis_middleware::tools::ToolSpec;

/// Entries kept before the cache is emptied: far more than one agent's tools.
const MAX_ENTRIES: usize = 512;

/// One spec, held so its address stays its own, and its definition (`None`: left out).
type Entry = (Arc<ToolSpec>, Option<Value>);

/// Tool definitions in one provider's form, by spec; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct ToolJsonCache {
    entries: Mutex<HashMap<usize, Entry>>,
}

impl ToolJsonCache {
    /// `spec` in the provider's form: the cached copy, else `make(spec)`, kept for next time.
    /// `None` (also kept) leaves the tool out of the request.
    pub(crate) fn get_or_make(
        &self,
        spec: &Arc<ToolSpec>,
        make: impl FnOnce(&ToolSpec) -> Option<Value>,
    ) -> Option<Value> {
        let key = Arc::as_ptr(spec) as usize;
        {
            let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((held, json)) = entries.get(&key)
                && Arc::ptr_eq(held, spec)
            {
                return json.clone();
            }
        }
        let json = make(spec);
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= MAX_ENTRIES {
            entries.clear();
        }
        entries.insert(key, (spec.clone(), json.clone()));
        json
    }

    /// A request's `tools`: its own (`specs`), then those a mid-conversation system message
    /// disclosed, each made by `make` (`None`: left out). A name already sent is skipped, so a tool
    /// that arrives twice is sent once, the first time. Disclosed specs are not shared, so they are
    /// made every time.
    pub(crate) fn request_tools(
        &self,
        specs: &[Arc<ToolSpec>],
        disclosed: Vec<&ToolSpec>,
        make: fn(&ToolSpec) -> Option<Value>,
    ) -> Vec<Value> {
        let mut names: HashSet<&str> = HashSet::new();
        let mut tools = Vec::with_capacity(specs.len());
        for spec in specs {
            if names.insert(spec.name.as_str()) {
                tools.extend(self.get_or_make(spec, make));
            }
        }
        for spec in disclosed {
            if names.insert(spec.name.as_str()) {
                tools.extend(make(spec));
            }
        }
        tools
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;

    use super::*;

    fn spec(name: &str) -> Arc<ToolSpec> {
        Arc::new(ToolSpec {
            name: name.into(),
            description: format!("{name} things"),
            parameters: json!({"type": "object"}),
        })
    }

    #[test]
    fn a_spec_is_made_once_and_another_allocation_of_the_same_tool_is_made_again() {
        let cache = ToolJsonCache::default();
        let made = AtomicUsize::new(0);
        let make = |s: &ToolSpec| {
            made.fetch_add(1, Ordering::Relaxed);
            Some(json!({"name": s.name, "n": made.load(Ordering::Relaxed)}))
        };
        let ls = spec("ls");
        let first = cache.get_or_make(&ls, make);
        assert_eq!(cache.get_or_make(&ls, make), first);
        assert_eq!(made.load(Ordering::Relaxed), 1);

        // Another spec, even with equal content, is its own entry: it may differ next time.
        let again = spec("ls");
        assert_eq!(cache.get_or_make(&again, make).unwrap()["n"], 2);
        // A spec left out (None) is remembered as left out.
        let bad = spec("bad");
        assert_eq!(cache.get_or_make(&bad, |_| None), None);
        assert_eq!(cache.get_or_make(&bad, make), None);
        assert_eq!(made.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn the_cache_is_bounded() {
        let cache = ToolJsonCache::default();
        let specs: Vec<_> = (0..MAX_ENTRIES + 10).map(|i| spec(&format!("t{i}"))).collect();
        for s in &specs {
            cache.get_or_make(s, |s| Some(json!(s.name)));
        }
        assert!(cache.entries.lock().unwrap().len() <= MAX_ENTRIES);
        // Still correct after emptying.
        assert_eq!(
            cache.get_or_make(&specs[3], |s| Some(json!(s.name))),
            Some(json!("t3"))
        );
    }
}
