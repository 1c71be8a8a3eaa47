//! JSON schemas as OpenAI accepts them.
//!
//! * [`strict`]: a schema for Structured Outputs with `strict: true`. OpenAI's strict mode
//!   (<https://platform.openai.com/docs/guides/structured-outputs#supported-schemas>) needs
//!   `additionalProperties: false` on every object and every property listed in `required`; an
//!   optional property must instead admit `null`. schemars output has neither, so most Rust types
//!   were refused with 400. The transform also drops the keywords strict mode rejects (`default`,
//!   `$schema`, and `format`s outside its list). A map (an object whose `additionalProperties` is a
//!   schema) cannot be strict: the caller then sends the schema with `strict: false`.
//! * [`function_parameters`]: a tool's parameters as Chat Completions validates them even without
//!   strict mode: an object at the top, and `items` on every array (`{"type": "array"}` alone is
//!   refused with 400). A tool whose parameters are not an object schema at all is left out by the
//!   caller, with a warning naming it — one badly written MCP tool must not break every call.

use serde_json::{Map, Value, json};
use trellis_middleware::tools::canonical::canonical;

/// `format` values strict mode accepts.
const STRICT_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// `schema` made acceptable to strict mode, or why it cannot be.
pub(crate) fn strict(schema: &Value) -> Result<Value, String> {
    // Sorted first: `required` lists the properties in map order, so every build sends the same.
    let mut schema = canonical(schema.clone());
    if let Value::Object(root) = &mut schema {
        root.remove("$schema");
    }
    make_strict(&mut schema)?;
    Ok(canonical(schema))
}

fn make_strict(schema: &mut Value) -> Result<(), String> {
    let Value::Object(map) = schema else { return Ok(()) };
    map.remove("default");
    if map
        .get("format")
        .and_then(Value::as_str)
        .is_some_and(|f| !STRICT_FORMATS.contains(&f))
    {
        map.remove("format");
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(Value::Array(list)) = map.get_mut(key) {
            for s in list {
                make_strict(s)?;
            }
        }
    }
    for key in ["$defs", "definitions"] {
        if let Some(Value::Object(defs)) = map.get_mut(key) {
            for s in defs.values_mut() {
                make_strict(s)?;
            }
        }
    }
    if let Some(items) = map.get_mut("items") {
        make_strict(items)?;
    }
    if map
        .get("additionalProperties")
        .is_some_and(|a| a.is_object() || a == &Value::Bool(true))
    {
        return Err("a map (an object with `additionalProperties`) cannot be a strict schema".into());
    }
    let is_object = type_includes(map, "object") || map.contains_key("properties");
    if !is_object {
        return Ok(());
    }
    let required: Vec<String> = map
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default();
    let mut all = Vec::new();
    if let Some(Value::Object(props)) = map.get_mut("properties") {
        for (name, prop) in props.iter_mut() {
            make_strict(prop)?;
            if !required.contains(name) {
                admit_null(prop);
            }
            all.push(Value::String(name.clone()));
        }
    }
    map.insert("required".into(), Value::Array(all));
    map.insert("additionalProperties".into(), Value::Bool(false));
    Ok(())
}

fn type_includes(map: &Map<String, Value>, name: &str) -> bool {
    match map.get("type") {
        Some(Value::String(t)) => t == name,
        Some(Value::Array(ts)) => ts.iter().any(|t| t == name),
        _ => false,
    }
}

/// Let `schema` also be `null` (an optional property under strict mode).
fn admit_null(schema: &mut Value) {
    let Value::Object(map) = schema else { return };
    if type_includes(map, "null") {
        return;
    }
    let null_branch = |list: &Vec<Value>| list.iter().any(|s| s.get("type") == Some(&json!("null")));
    if let Some(Value::Array(list)) = map.get("anyOf")
        && null_branch(list)
    {
        return;
    }
    let has_enum = map.contains_key("enum");
    match map.get_mut("type") {
        Some(Value::String(t)) if !has_enum => {
            let t = t.clone();
            map.insert("type".into(), json!([t, "null"]));
        }
        Some(Value::Array(ts)) if !has_enum => ts.push(json!("null")),
        _ => {
            let inner = Value::Object(std::mem::take(map));
            map.insert("anyOf".into(), json!([inner, {"type": "null"}]));
        }
    }
}

/// A tool's parameters as Chat Completions accepts them, or `None` when they are not an object
/// schema.
pub(crate) fn function_parameters(schema: &Value) -> Option<Value> {
    let mut schema = schema.clone();
    let Value::Object(map) = &mut schema else {
        return None;
    };
    match map.get("type") {
        None => {
            map.insert("type".into(), json!("object"));
        }
        Some(t) if t == "object" => {}
        Some(_) => return None,
    }
    map.entry("properties").or_insert_with(|| json!({}));
    add_items(&mut schema);
    Some(canonical(schema))
}

fn add_items(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if type_includes(map, "array") && !map.contains_key("items") && !map.contains_key("prefixItems") {
                map.insert("items".into(), json!({}));
            }
            for v in map.values_mut() {
                add_items(v);
            }
        }
        Value::Array(list) => list.iter_mut().for_each(add_items),
        _ => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeMap;

    use schemars::JsonSchema;

    use super::*;

    #[allow(dead_code)]
    #[derive(JsonSchema)]
    enum Priority {
        Low,
        High,
    }

    #[allow(dead_code)]
    #[derive(JsonSchema)]
    struct Inner {
        note: Option<String>,
        count: u32,
    }

    #[allow(dead_code)]
    #[derive(JsonSchema)]
    struct Outer {
        title: String,
        priority: Priority,
        inner: Option<Inner>,
        items: Vec<Inner>,
        #[serde(default)]
        tags: Vec<String>,
    }

    #[allow(dead_code)]
    #[derive(JsonSchema)]
    struct WithMap {
        scores: BTreeMap<String, u32>,
    }

    /// Every object in `v` is closed and requires all its properties.
    fn all_objects_strict(v: &Value) -> bool {
        match v {
            Value::Object(map) => {
                let object = map.contains_key("properties");
                let ok = !object
                    || (map.get("additionalProperties") == Some(&Value::Bool(false)) && {
                        let props: Vec<&String> = map["properties"].as_object().unwrap().keys().collect();
                        let req: Vec<&str> = map["required"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .filter_map(Value::as_str)
                            .collect();
                        props.iter().all(|p| req.contains(&p.as_str()))
                    });
                ok && !map.contains_key("default") && map.values().all(all_objects_strict)
            }
            Value::Array(list) => list.iter().all(all_objects_strict),
            _ => true,
        }
    }

    #[test]
    fn a_nested_type_with_options_enums_and_defaults_becomes_strict() {
        let schema = schemars::schema_for!(Outer).to_value();
        let out = strict(&schema).unwrap();
        assert!(all_objects_strict(&out), "{out:#}");
        assert!(out.get("$schema").is_none());
        // Optional fields admit null; required ones do not.
        let props = &out["properties"];
        assert!(
            props["tags"]["type"].as_array().unwrap().contains(&json!("null")),
            "{props:#}"
        );
        assert_eq!(props["title"]["type"], "string");
        let inner = &out["$defs"]["Inner"];
        assert!(
            inner["properties"]["note"]["type"]
                .as_array()
                .unwrap()
                .contains(&json!("null"))
        );
        assert!(
            !inner["properties"]["count"]
                .as_object()
                .unwrap()
                .contains_key("format"),
            "{inner:#}"
        );
    }

    #[test]
    fn a_map_cannot_be_strict() {
        let schema = schemars::schema_for!(WithMap).to_value();
        assert!(strict(&schema).is_err());
    }

    #[test]
    fn function_parameters_get_an_object_top_and_items_on_arrays() {
        let fixed = function_parameters(
            &json!({"properties": {"ids": {"type": "array"}, "nested": {"type": "object",
            "properties": {"xs": {"type": ["array", "null"]}}}}}),
        )
        .unwrap();
        assert_eq!(fixed["type"], "object");
        assert_eq!(fixed["properties"]["ids"]["items"], json!({}));
        assert_eq!(
            fixed["properties"]["nested"]["properties"]["xs"]["items"],
            json!({})
        );
        assert_eq!(
            function_parameters(&json!({})).unwrap(),
            json!({"type": "object", "properties": {}})
        );
        assert!(function_parameters(&json!({"type": "string"})).is_none());
        assert!(function_parameters(&json!("nope")).is_none());
    }
}
