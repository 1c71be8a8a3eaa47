//! Text-keeping YAML: the full YAML parser behind [`frontmatter::parse`](crate::skills::parse::frontmatter::parse),
//! reading any YAML into a [`YamlValue`] in which **every scalar keeps the text that was written**
//! (`yes` stays `yes`, `1.10` stays `1.10`, `0o7` stays `0o7`); only plain `~`/`null`/empty scalars
//! are [`YamlValue::Null`].
//!
//! [`parse`] is a total function over any text (it never panics) and enforces the parsing bounds, so
//! hostile input cannot hang or exhaust memory: flow collections (`[`/`{`) nested deeper than
//! [`MAX_FLOW_DEPTH`] are refused before the YAML parser sees them (the parser is quadratic in flow
//! depth); block nesting is capped by `serde_yaml` (128 levels); alias expansion is capped at
//! [`MAX_NODES`] values and [`MAX_TEXT_BYTES`] bytes of materialized text (an alias "bomb" fails fast
//! instead of expanding). The size bound on the input itself
//! ([`MAX_FRONTMATTER_BYTES`](crate::skills::parse::frontmatter::MAX_FRONTMATTER_BYTES)) is checked by the caller.

use std::cell::Cell;
use std::fmt;

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor,
};

use crate::skills::parse::frontmatter::{FrontmatterError, MAX_FRONTMATTER_BYTES};

/// Deepest nesting of flow collections (`[`, `{`) accepted.
pub const MAX_FLOW_DEPTH: usize = 64;
/// Most YAML values (scalars and collections, alias expansions counted each time) one frontmatter
/// may produce.
pub const MAX_NODES: usize = 20_000;
/// Most bytes of scalar text one frontmatter may produce (alias expansions counted each time).
pub const MAX_TEXT_BYTES: usize = 4 * MAX_FRONTMATTER_BYTES;

/// A YAML value with the written text of every scalar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum YamlValue {
    /// A plain null: `~`, `null`, `Null`, `NULL` or nothing at all.
    Null,
    /// Any other scalar, as written (quotes removed, escapes resolved, folded/literal blocks joined
    /// the YAML way). Numbers and booleans are text too.
    Text(String),
    /// A sequence.
    Seq(Vec<YamlValue>),
    /// A mapping, in written order; duplicate keys are kept.
    Map(Vec<(YamlValue, YamlValue)>),
}

impl YamlValue {
    /// The text of a scalar; `None` for null and collections.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Self::Text(s) => Some(s),
            _ => None,
        }
    }

    /// A one-line YAML rendering (flow style), used when a collection stands where text is expected.
    pub fn to_flow_text(&self) -> String {
        let mut out = String::new();
        self.write_flow(&mut out);
        out
    }

    fn write_flow(&self, out: &mut String) {
        match self {
            Self::Null => out.push_str("null"),
            Self::Text(s) => {
                let plain = !s.is_empty()
                    && !s.contains(|c: char| ",[]{}:#'\"\n\r\t".contains(c) || c.is_control())
                    && s.trim() == s;
                if plain {
                    out.push_str(s);
                } else {
                    out.push('"');
                    for c in s.chars() {
                        match c {
                            '"' => out.push_str("\\\""),
                            '\\' => out.push_str("\\\\"),
                            '\n' => out.push_str("\\n"),
                            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
                            c => out.push(c),
                        }
                    }
                    out.push('"');
                }
            }
            Self::Seq(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.write_flow(out);
                }
                out.push(']');
            }
            Self::Map(entries) => {
                out.push('{');
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    k.write_flow(out);
                    out.push_str(": ");
                    v.write_flow(out);
                }
                out.push('}');
            }
        }
    }

    /// A short name of the value's kind, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Null => "null",
            Self::Text(_) => "a scalar",
            Self::Seq(_) => "a list",
            Self::Map(_) => "a mapping",
        }
    }
}

/// Parse `text` as one YAML value, every scalar kept as written. Checks the nesting, value and text
/// bounds in the module docs (not the input size) and never panics.
pub(crate) fn parse(text: &str) -> Result<YamlValue, FrontmatterError> {
    if flow_depth(text) > MAX_FLOW_DEPTH {
        return Err(FrontmatterError::TooDeep);
    }
    // serde_yaml is not expected to panic on any input, but this parser reads untrusted files: a
    // panic in a dependency must cost one skill, never the agent.
    std::panic::catch_unwind(|| parse_value(text))
        .map_err(|_| FrontmatterError::InvalidYaml("the YAML parser failed on this input".to_owned()))?
}

/// An upper bound of the flow-collection nesting depth: every `[`/`{` opens and every `]`/`}`
/// closes, quoted or not, so quoted brackets can only over-count.
fn flow_depth(text: &str) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    for b in text.bytes() {
        match b {
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// Two passes: the first learns the shape (scalars typed the YAML way); only when some scalar was
/// typed (a number, a boolean) does a second pass, guided by that shape, read every scalar back as
/// written text. Most frontmatters are all strings and parse once.
fn parse_value(text: &str) -> Result<YamlValue, FrontmatterError> {
    let budget = Budget::default();
    let shape = ShapeSeed { budget: &budget }
        .deserialize(serde_yaml::Deserializer::from_str(text))
        .map_err(|e| FrontmatterError::InvalidYaml(e.to_string()))?;
    if !shape.has_typed {
        return Ok(shape.value);
    }
    // The second pass follows the first one's shape; if it disagrees anyway, keep the typed text.
    // It has a budget of its own: written text can be much longer than its typed form (`0x000…1`
    // is `1`), and aliases repeat it.
    let budget = Budget::default();
    let second = TextSeed {
        shape: &shape.value,
        budget: &budget,
    }
    .deserialize(serde_yaml::Deserializer::from_str(text));
    match second {
        Ok(value) => Ok(value),
        Err(e) if budget.exceeded() => Err(FrontmatterError::InvalidYaml(e.to_string())),
        Err(_) => Ok(shape.value),
    }
}

#[derive(Default)]
struct Budget {
    nodes: Cell<usize>,
    text: Cell<usize>,
}

impl Budget {
    fn take<E: de::Error>(&self, text_len: usize) -> Result<(), E> {
        let nodes = self.nodes.get() + 1;
        let text = self.text.get().saturating_add(text_len);
        self.nodes.set(nodes);
        self.text.set(text);
        if nodes > MAX_NODES || text > MAX_TEXT_BYTES {
            return Err(E::custom(format!(
                "more than {MAX_NODES} values or {} KiB of text (alias expansion counted)",
                MAX_TEXT_BYTES / 1024
            )));
        }
        Ok(())
    }

    fn exceeded(&self) -> bool {
        self.nodes.get() > MAX_NODES || self.text.get() > MAX_TEXT_BYTES
    }
}

/// First pass output: the value, and whether any scalar was typed (its text then needs pass two).
struct Shaped {
    value: YamlValue,
    has_typed: bool,
}

struct ShapeSeed<'a> {
    budget: &'a Budget,
}

impl<'de> DeserializeSeed<'de> for ShapeSeed<'_> {
    type Value = Shaped;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Shaped, D::Error> {
        d.deserialize_any(ShapeVisitor { budget: self.budget })
    }
}

struct ShapeVisitor<'a> {
    budget: &'a Budget,
}

impl ShapeVisitor<'_> {
    fn typed<E: de::Error>(&self, text: String) -> Result<Shaped, E> {
        self.budget.take(text.len())?;
        Ok(Shaped {
            value: YamlValue::Text(text),
            has_typed: true,
        })
    }
}

impl<'de> Visitor<'de> for ShapeVisitor<'_> {
    type Value = Shaped;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Shaped, E> {
        self.budget.take(v.len())?;
        Ok(Shaped {
            value: YamlValue::Text(v.to_owned()),
            has_typed: false,
        })
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Shaped, E> {
        self.typed(v.to_string())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Shaped, E> {
        self.typed(v.to_string())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Shaped, E> {
        self.typed(v.to_string())
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Shaped, E> {
        self.typed(v.to_string())
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Shaped, E> {
        self.typed(v.to_string())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Shaped, E> {
        self.typed(v.to_string())
    }
    fn visit_unit<E: de::Error>(self) -> Result<Shaped, E> {
        self.budget.take(0)?;
        Ok(Shaped {
            value: YamlValue::Null,
            has_typed: false,
        })
    }
    fn visit_none<E: de::Error>(self) -> Result<Shaped, E> {
        self.visit_unit()
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Shaped, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Shaped, A::Error> {
        self.budget.take(0)?;
        let (mut items, mut has_typed) = (Vec::new(), false);
        while let Some(item) = seq.next_element_seed(ShapeSeed { budget: self.budget })? {
            has_typed |= item.has_typed;
            items.push(item.value);
        }
        Ok(Shaped {
            value: YamlValue::Seq(items),
            has_typed,
        })
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Shaped, A::Error> {
        self.budget.take(0)?;
        let (mut entries, mut has_typed) = (Vec::new(), false);
        while let Some(key) = map.next_key_seed(ShapeSeed { budget: self.budget })? {
            let value = map.next_value_seed(ShapeSeed { budget: self.budget })?;
            has_typed |= key.has_typed | value.has_typed;
            entries.push((key.value, value.value));
        }
        Ok(Shaped {
            value: YamlValue::Map(entries),
            has_typed,
        })
    }
    /// A custom tag (`!thing value`): the tag is dropped, the value kept.
    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Shaped, A::Error> {
        let (_tag, variant): (de::IgnoredAny, _) = data.variant()?;
        variant.newtype_variant_seed(ShapeSeed { budget: self.budget })
    }
}

/// Second pass: follows a known shape and reads every non-null scalar with `deserialize_str`, which
/// hands over the text as written, within the same bounds as the first pass.
struct TextSeed<'a> {
    shape: &'a YamlValue,
    budget: &'a Budget,
}

impl<'de> DeserializeSeed<'de> for TextSeed<'_> {
    type Value = YamlValue;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<YamlValue, D::Error> {
        let visitor = TextVisitor {
            shape: self.shape,
            budget: self.budget,
        };
        match self.shape {
            YamlValue::Seq(_) => d.deserialize_seq(visitor),
            YamlValue::Map(_) => d.deserialize_map(visitor),
            _ => d.deserialize_str(visitor),
        }
    }
}

struct TextVisitor<'a> {
    shape: &'a YamlValue,
    budget: &'a Budget,
}

impl<'de> Visitor<'de> for TextVisitor<'_> {
    type Value = YamlValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.shape.kind())
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<YamlValue, E> {
        match self.shape {
            YamlValue::Null => {
                self.budget.take(0)?;
                Ok(YamlValue::Null)
            }
            YamlValue::Text(_) => {
                self.budget.take(v.len())?;
                Ok(YamlValue::Text(v.to_owned()))
            }
            _ => Err(E::custom("shape changed between passes")),
        }
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<YamlValue, A::Error> {
        let YamlValue::Seq(shapes) = self.shape else {
            return Err(de::Error::custom("shape changed between passes"));
        };
        self.budget.take(0)?;
        let budget = self.budget;
        let mut items = Vec::with_capacity(shapes.len());
        for shape in shapes {
            match seq.next_element_seed(TextSeed { shape, budget })? {
                Some(item) => items.push(item),
                None => return Err(de::Error::custom("shape changed between passes")),
            }
        }
        Ok(YamlValue::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<YamlValue, A::Error> {
        let YamlValue::Map(shapes) = self.shape else {
            return Err(de::Error::custom("shape changed between passes"));
        };
        self.budget.take(0)?;
        let budget = self.budget;
        let mut entries = Vec::with_capacity(shapes.len());
        for (key_shape, value_shape) in shapes {
            let Some(key) = map.next_key_seed(TextSeed {
                shape: key_shape,
                budget,
            })?
            else {
                return Err(de::Error::custom("shape changed between passes"));
            };
            let value = map.next_value_seed(TextSeed {
                shape: value_shape,
                budget,
            })?;
            entries.push((key, value));
        }
        Ok(YamlValue::Map(entries))
    }
    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<YamlValue, A::Error> {
        let (_tag, variant): (de::IgnoredAny, _) = data.variant()?;
        variant.newtype_variant_seed(TextSeed {
            shape: self.shape,
            budget: self.budget,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(v: &str) -> YamlValue {
        YamlValue::Text(v.to_owned())
    }

    #[test]
    fn flow_text_round_trips_simply() {
        let v = YamlValue::Seq(vec![text("a"), text("b c, d"), YamlValue::Null]);
        assert_eq!(v.to_flow_text(), "[a, \"b c, d\", null]");
    }
}
