//! Turning the model's arguments into a typed value, and describing a schema's fields when that
//! fails.

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::output::{ToolError, ToolOutput};

/// The JSON schema of `T` as a tool's parameters: a self-contained object schema (subschemas
/// inlined, no `$ref`), without the `$schema` and `title` keys and without `"default": null` on
/// optional fields, which some providers reject. Its objects' keys are sorted
/// ([`super::canonical`]).
pub fn parameters_schema<T: JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    let mut value = generator.into_root_schema_for::<T>().to_value();
    if let Value::Object(map) = &mut value {
        map.remove("$schema");
        map.remove("title");
        if let Some(Value::Object(props)) = map.get_mut("properties") {
            for prop in props.values_mut() {
                if let Value::Object(p) = prop
                    && p.get("default") == Some(&Value::Null)
                {
                    p.remove("default");
                }
            }
        }
    }
    super::canonical::canonical(value)
}

/// Parse a tool's arguments into `T`, with an error message the model can fix its call from.
///
/// Accepts an object or a string holding JSON (providers pass arguments that were not JSON as a
/// string, and some models encode the arguments twice).
pub fn parse_args<T: DeserializeOwned>(args: Value) -> Result<T, ToolError> {
    let args = match args {
        Value::String(raw) => serde_json::from_str(&raw)
            .map_err(|e| ToolError::InvalidArguments(format!("arguments must be a JSON object ({e})")))?,
        other => other,
    };
    serde_json::from_value(super::canonical::canonical(args))
        .map_err(|e| ToolError::InvalidArguments(e.to_string()))
}

/// Parse a file tool's arguments into `T`, the file tools' stricter form of [`parse_args`].
///
/// Accepts an object, `null` (read as `{}`), or a string holding a JSON object (some models encode
/// the arguments twice). On failure, returns the error the model sees: what was wrong and the
/// expected fields with their types, read from `schema`.
pub(crate) fn parse_args_described<T: DeserializeOwned>(
    tool: &str,
    schema: &Value,
    args: Value,
) -> Result<T, ToolOutput> {
    let object = match args {
        Value::Null => Value::Object(Map::new()),
        Value::Object(_) => args,
        Value::String(ref s) => match serde_json::from_str::<Value>(s) {
            Ok(inner @ Value::Object(_)) => inner,
            _ => return Err(invalid(tool, schema, "the arguments must be a JSON object")),
        },
        _ => return Err(invalid(tool, schema, "the arguments must be a JSON object")),
    };
    // Sorted, so the first unknown or missing field named is the same in every build.
    serde_json::from_value(super::canonical::canonical(object))
        .map_err(|e| invalid(tool, schema, &e.to_string()))
}

fn invalid(tool: &str, schema: &Value, problem: &str) -> ToolOutput {
    ToolOutput::error(format!(
        "invalid arguments for {tool}: {problem}.\nExpected an object with: {}.",
        describe_fields(schema)
    ))
}

/// `name (type, required), name (type, default …)`, required fields first.
pub fn describe_fields(schema: &Value) -> String {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return "no arguments".to_owned();
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut names: Vec<&str> = required
        .iter()
        .copied()
        .filter(|n| props.contains_key(*n))
        .collect();
    names.extend(props.keys().map(String::as_str).filter(|n| !required.contains(n)));
    let parts: Vec<String> = names
        .into_iter()
        .map(|name| {
            let field = &props[name];
            let mut notes = vec![describe_type(schema, field)];
            if required.contains(&name) {
                notes.push("required".to_owned());
            } else if let Some(default) = field.get("default") {
                notes.push(format!("default {default}"));
            } else {
                notes.push("optional".to_owned());
            }
            format!("{name} ({})", notes.join(", "))
        })
        .collect();
    parts.join(", ")
}

fn describe_type(root: &Value, field: &Value) -> String {
    if let Some(reference) = field.get("$ref").and_then(Value::as_str) {
        let resolved = reference
            .strip_prefix("#/$defs/")
            .and_then(|name| root.get("$defs").and_then(|d| d.get(name)));
        return resolved.map_or_else(|| "object".to_owned(), |r| describe_type(root, r));
    }
    if let Some(values) = field.get("enum").and_then(Value::as_array) {
        return values
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join(" | ");
    }
    if let Some(value) = field.get("const") {
        return value.to_string();
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(options) = field.get(key).and_then(Value::as_array) {
            let described: Vec<String> = options
                .iter()
                .filter(|o| o.get("type").and_then(Value::as_str) != Some("null"))
                .map(|o| describe_type(root, o))
                .collect();
            return described.join(" | ");
        }
    }
    let types: Vec<&str> = match field.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .collect(),
        _ => vec![],
    };
    let mut out = if types.is_empty() {
        "any".to_owned()
    } else {
        types.join(" or ")
    };
    if let Some(min) = field.get("minimum") {
        out.push_str(&format!(" >= {min}"));
    }
    out
}

/// Lenient deserializers for fields models often send with the wrong JSON type: numbers as strings
/// (`"100"`) and booleans as strings (`"true"`).
pub(crate) mod lenient {
    use serde::Deserialize;
    use serde::de::{self, Deserializer, Unexpected};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NumberLike {
        Unsigned(u64),
        Signed(i64),
        Float(f64),
        Text(String),
    }

    /// A non-negative integer, also written as a string or a whole float.
    pub(crate) fn u64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
        let expected = &"a non-negative integer";
        match NumberLike::deserialize(deserializer)? {
            NumberLike::Unsigned(n) => Ok(n),
            NumberLike::Signed(n) => Err(de::Error::invalid_value(Unexpected::Signed(n), expected)),
            NumberLike::Float(f) if f >= 0.0 && f.fract() == 0.0 && f < 1.8e19 => Ok(f as u64),
            NumberLike::Float(f) => Err(de::Error::invalid_value(Unexpected::Float(f), expected)),
            NumberLike::Text(s) => s
                .trim()
                .parse::<u64>()
                .map_err(|_| de::Error::invalid_value(Unexpected::Str(&s), expected)),
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum BoolLike {
        Bool(bool),
        Text(String),
    }

    /// A boolean, also written as `"true"` / `"false"`.
    pub(crate) fn bool<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
        match BoolLike::deserialize(deserializer)? {
            BoolLike::Bool(b) => Ok(b),
            BoolLike::Text(s) => match s.trim().to_ascii_lowercase().as_str() {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(de::Error::invalid_value(Unexpected::Str(&s), &"true or false")),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use schemars::JsonSchema;
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Debug, Deserialize, JsonSchema, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Sample {
        /// A name.
        name: String,
        /// How many.
        #[serde(default, deserialize_with = "lenient::u64")]
        count: u64,
        /// A flag.
        #[serde(default, deserialize_with = "lenient::bool")]
        flag: bool,
    }

    fn parse(args: Value) -> Result<Sample, String> {
        parse_args_described::<Sample>("sample", &parameters_schema::<Sample>(), args)
            .map_err(|e| e.text_content())
    }

    #[test]
    fn accepts_lenient_forms() {
        let want = Sample {
            name: "x".into(),
            count: 3,
            flag: true,
        };
        assert_eq!(parse(json!({"name": "x", "count": 3, "flag": true})), Ok(want));
        let s = parse(json!({"name": "x", "count": "3", "flag": "TRUE"}));
        assert_eq!(s.map(|s| (s.count, s.flag)), Ok((3, true)));
        let s = parse(json!(r#"{"name": "x", "count": 4.0}"#));
        assert_eq!(s.map(|s| (s.count, s.flag)), Ok((4, false)));
        assert!(parse(Value::Null).is_err());
    }

    #[test]
    fn errors_name_the_expected_fields() {
        let err = parse(json!({"count": 1})).err().unwrap_or_default();
        assert!(
            err.starts_with("Error: invalid arguments for sample: missing field `name`."),
            "{err}"
        );
        assert!(err.contains("name (string, required)"), "{err}");
        assert!(err.contains("count (integer >= 0, default 0)"), "{err}");
        let err = parse(json!({"name": "x", "count": -1})).err().unwrap_or_default();
        assert!(err.contains("expected a non-negative integer"), "{err}");
        let err = parse(json!([1, 2])).err().unwrap_or_default();
        assert!(err.contains("must be a JSON object"), "{err}");
        let err = parse(json!({"name": "x", "nme": 1})).err().unwrap_or_default();
        assert!(err.contains("unknown field `nme`"), "{err}");
    }

    #[derive(Deserialize, Debug, PartialEq)]
    struct PathArgs {
        path: String,
    }

    #[test]
    fn schemas_are_inline() {
        #[derive(JsonSchema)]
        #[allow(dead_code)]
        struct Inner {
            x: u8,
        }
        #[derive(JsonSchema)]
        #[allow(dead_code)]
        struct Outer {
            items: Vec<Inner>,
        }
        let schema = parameters_schema::<Outer>();
        assert!(schema.get("$schema").is_none());
        assert!(schema.get("$defs").is_none(), "{schema}");
        assert_eq!(
            schema["properties"]["items"]["items"]["properties"]["x"]["type"],
            "integer"
        );
    }

    #[test]
    fn parse_args_accepts_objects_and_json_strings() {
        assert_eq!(
            parse_args::<PathArgs>(json!({"path": "/a"})),
            Ok(PathArgs { path: "/a".into() })
        );
        assert_eq!(
            parse_args::<PathArgs>(json!("{\"path\": \"/b\"}")),
            Ok(PathArgs { path: "/b".into() })
        );
        let err = parse_args::<PathArgs>(json!({"file": "/a"}))
            .err()
            .map(|e| e.to_string());
        assert!(err.unwrap_or_default().contains("missing field `path`"));
        assert!(matches!(
            parse_args::<PathArgs>(json!("{oops")),
            Err(ToolError::InvalidArguments(_))
        ));
    }
}
