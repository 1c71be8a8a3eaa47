//! Each tool's definition in a provider's request body, made once per definition and reused.
//!
//! A served agent is built once per user (`trellis serve`), so its tools are the same
//! `Arc<ToolSpec>`s on every step of every run. Without this cache, each request turns each
//! tool's schema into the provider's form again: the schema is copied, normalized
//! (`function_parameters`) and copied into the body. Profiled on the serve bench (1,000 concurrent
//! four-step runs, 2026-12-06), that was about 8% of the server's CPU.
//!
//! A definition is kept twice, made once: as JSON, for [`request_body`] (what a caller inspects),
//! and as the bytes sent, its keys sorted as [`JsonBody`] writes every object. The request sent
//! splices those bytes in ([`Tools`]' `Serialize`), so a tool is neither copied nor serialized
//! again. Copying the JSON on every request was still 4.7% of the server's CPU in a profile of
//! the serve bench's paced wave (2026-12-07), and writing it out again about 2%.
//!
//! Entries are keyed by the spec's allocation and each holds a reference to its spec, so no other
//! spec can reuse that address while the entry lives. A spec is immutable behind its `Arc`.
//!
//! Tools a middleware adds for one call arrive as new `Arc`s each time. They miss, and are made
//! again as before. The cache is emptied when it reaches [`MAX_ENTRIES`], which bounds it. One cache
//! belongs to one model and so to one wire format.
//!
//! [`request_body`]: super::OpenAiApiModel::request_body
//! [`JsonBody`]: super::http::JsonBody

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;
use trellis_middleware::tools::ToolSpec;
use trellis_middleware::tools::canonical::Sorted;

/// Entries kept before the cache is emptied: far more than one agent's tools.
const MAX_ENTRIES: usize = 512;

/// One tool's definition: its JSON and the same JSON as sent (keys sorted).
#[derive(Debug)]
pub(crate) struct ToolJson {
    json: Value,
    sent: Box<RawValue>,
}

impl ToolJson {
    /// `json` and its bytes as sent; `None` if it cannot be written (a map with non-string
    /// keys cannot occur in a `Value`, so in practice never).
    fn new(json: Value) -> Option<Arc<Self>> {
        let text = serde_json::to_string(&Sorted(&json)).ok()?;
        let sent = RawValue::from_string(text).ok()?;
        Some(Arc::new(Self { json, sent }))
    }
}

/// One spec, held so its address stays its own, and its definition (`None`: left out).
type Entry = (Arc<ToolSpec>, Option<Arc<ToolJson>>);

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
    ) -> Option<Arc<ToolJson>> {
        let key = Arc::as_ptr(spec) as usize;
        {
            let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((held, json)) = entries.get(&key)
                && Arc::ptr_eq(held, spec)
            {
                return json.clone();
            }
        }
        let json = make(spec).and_then(ToolJson::new);
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
    ) -> Tools {
        let mut names: HashSet<&str> = HashSet::new();
        let mut tools = Vec::with_capacity(specs.len());
        for spec in specs {
            if names.insert(spec.name.as_str()) {
                tools.extend(self.get_or_make(spec, make));
            }
        }
        for spec in disclosed {
            if names.insert(spec.name.as_str()) {
                tools.extend(make(spec).and_then(ToolJson::new));
            }
        }
        Tools(tools)
    }
}

/// A request's `tools`, shared with the cache. Serializes as the array sent, from the kept
/// bytes.
#[derive(Debug, Default)]
pub(crate) struct Tools(Vec<Arc<ToolJson>>);

impl Tools {
    /// No tool: the request has no `tools` key (nor a `tool_choice`).
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The definitions as JSON, copied: for a body a caller inspects.
    pub(crate) fn to_json(&self) -> Value {
        Value::Array(self.0.iter().map(|tool| tool.json.clone()).collect())
    }

    /// `body` as sent: every object's keys sorted, and these tools in the place the body keeps
    /// for them (its top-level `tools`). The bytes are those of `body` with that place filled by
    /// [`to_json`](Self::to_json), serialized with sorted keys.
    pub(crate) fn sent_in<'a>(&'a self, body: &'a Value) -> SentBody<'a> {
        SentBody { body, tools: self }
    }
}

/// A request body with its tools spliced in; see [`Tools::sent_in`].
#[derive(Debug)]
pub(crate) struct SentBody<'a> {
    body: &'a Value,
    tools: &'a Tools,
}

impl Serialize for SentBody<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let map = match self.body {
            Value::Object(map) if !self.tools.is_empty() => map,
            _ => return Sorted(self.body).serialize(serializer),
        };
        let mut entries: Vec<(&String, &Value)> = map.iter().collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let mut out = serializer.serialize_map(Some(entries.len()))?;
        for (key, value) in entries {
            if key == "tools" {
                out.serialize_entry(key, self.tools)?;
            } else {
                out.serialize_entry(key, &Sorted(value))?;
            }
        }
        out.end()
    }
}

impl Serialize for Tools {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for tool in &self.0 {
            seq.serialize_element(&*tool.sent)?;
        }
        seq.end()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;

    use super::*;

    /// A tool named `name`, its description quoting, its schema's keys unsorted.
    pub(crate) fn spec(name: &str) -> Arc<ToolSpec> {
        Arc::new(ToolSpec {
            name: name.into(),
            description: format!("{name} \"things\""),
            parameters: json!({"type": "object", "required": ["z", "a"],
                               "properties": {"z": {"type": "string"}, "a": {"type": "integer"}}}),
        })
    }

    /// The JSON of what the cache gave.
    fn json(tool: Option<Arc<ToolJson>>) -> Option<Value> {
        tool.map(|t| t.json.clone())
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
        let first = cache.get_or_make(&ls, make).unwrap();
        let second = cache.get_or_make(&ls, make).unwrap();
        assert!(Arc::ptr_eq(&first, &second), "the same definition, not a copy");
        assert_eq!(made.load(Ordering::Relaxed), 1);

        // Another spec, even with equal content, is its own entry: it may differ next time.
        let again = spec("ls");
        assert_eq!(json(cache.get_or_make(&again, make)).unwrap()["n"], 2);
        // A spec left out (None) is remembered as left out.
        let bad = spec("bad");
        assert!(cache.get_or_make(&bad, |_| None).is_none());
        assert!(cache.get_or_make(&bad, make).is_none());
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
            json(cache.get_or_make(&specs[3], |s| Some(json!(s.name)))),
            Some(json!("t3"))
        );
    }

    #[test]
    fn tools_are_sent_as_their_json_with_sorted_keys_and_disclosed_ones_follow_once() {
        let cache = ToolJsonCache::default();
        let make = |s: &ToolSpec| -> Option<Value> {
            Some(json!({"type": "function", "function": {
                "name": s.name, "parameters": {"type": "object", "required": ["b", "a"]},
                "description": s.description,
            }}))
        };
        let ls = spec("ls");
        let grep = spec("grep");
        let disclosed = ToolSpec {
            name: "late".into(),
            description: "disclosed \"late\" ü".into(),
            parameters: json!({}),
        };
        let tools = cache.request_tools(&[ls.clone(), grep, ls.clone()], vec![&disclosed, &*ls], make);
        let expected = json!([
            make(&ls).unwrap(),
            make(&spec("grep")).unwrap(),
            make(&disclosed).unwrap()
        ]);
        assert_eq!(tools.to_json(), expected);
        assert_eq!(
            serde_json::to_string(&tools).unwrap(),
            serde_json::to_string(&Sorted(&expected)).unwrap()
        );
        assert!(!tools.is_empty());
        assert_eq!(serde_json::to_string(&Tools::default()).unwrap(), "[]");
    }
}
