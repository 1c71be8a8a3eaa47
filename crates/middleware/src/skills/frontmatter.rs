//! Finding and parsing the YAML frontmatter at the top of a `SKILL.md`.
//!
//! Two steps, both total functions over arbitrary bytes (they never panic):
//!
//! 1. [`split`] finds the fence: the file (after an optional UTF-8 byte-order mark) must start with a
//!    line that is exactly `---` (trailing spaces and a `\r` allowed), and the frontmatter ends at the
//!    next line that is exactly `---`. A `---` inside a value (`a---b`) or a body horizontal rule after
//!    the closing fence is harmless. It works on a *prefix* of the file: "not closed yet" is its own
//!    answer, so discovery can read only the top of each file and read on only when needed.
//! 2. [`parse`] reads the YAML between the fences with `serde_yaml` into a [`Frontmatter`]: an
//!    ordered list of top-level keys and [`YamlValue`]s in which **every scalar keeps the text that was
//!    written** (`yes` stays `yes`, `1.10` stays `1.10`, `0o7` stays `0o7`); only plain `~`/`null`/empty
//!    scalars are [`YamlValue::Null`].
//!
//! Bounds, checked before or during parsing so hostile input cannot hang or exhaust memory:
//! frontmatter over [`MAX_FRONTMATTER_BYTES`] is refused unread; flow collections (`[`/`{`) nested
//! deeper than [`MAX_FLOW_DEPTH`] are refused before the YAML parser sees them (the parser is
//! quadratic in flow depth); block nesting is capped by `serde_yaml` (128 levels); alias expansion
//! is capped at [`MAX_NODES`] values and [`MAX_TEXT_BYTES`] bytes of materialized text (an alias
//! "bomb" fails fast instead of expanding).

use std::cell::Cell;
use std::fmt;

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor,
};

/// Largest frontmatter accepted, in bytes, fences included.
pub const MAX_FRONTMATTER_BYTES: usize = 64 * 1024;
/// Deepest nesting of flow collections (`[`, `{`) accepted.
pub const MAX_FLOW_DEPTH: usize = 64;
/// Most YAML values (scalars and collections, alias expansions counted each time) one frontmatter
/// may produce.
pub const MAX_NODES: usize = 20_000;
/// Most bytes of scalar text one frontmatter may produce (alias expansions counted each time).
pub const MAX_TEXT_BYTES: usize = 4 * MAX_FRONTMATTER_BYTES;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Where the frontmatter of a (possibly partial) file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// Both fences found: the YAML is `bytes[yaml]`, the body starts at `body_start`.
    Closed {
        /// Byte range of the YAML text between the fences.
        yaml: (usize, usize),
        /// Byte offset of the first byte after the closing fence line.
        body_start: usize,
    },
    /// The opening fence is there but the closing one is not within the bytes given.
    Unclosed,
    /// The file does not start with a `---` line (after an optional BOM).
    Missing,
}

/// Why a frontmatter could not be read. The `Display` text is written for people (logs, CLI).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrontmatterError {
    /// No opening `---` line.
    Missing,
    /// An opening fence but no closing one.
    Unclosed,
    /// The closing fence is further than [`MAX_FRONTMATTER_BYTES`] into the file.
    TooLarge,
    /// The frontmatter bytes are not UTF-8.
    NotUtf8,
    /// Flow collections nested deeper than [`MAX_FLOW_DEPTH`].
    TooDeep,
    /// The YAML does not parse (or exceeds the value / text / nesting / alias bounds).
    InvalidYaml(String),
    /// The YAML parsed but is not a mapping (a list, a scalar, or empty).
    NotAMapping(&'static str),
}

impl fmt::Display for FrontmatterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing => f.write_str("no YAML frontmatter: the file must start with a `---` line"),
            Self::Unclosed => f.write_str("the frontmatter is not closed with a `---` line"),
            Self::TooLarge => write!(
                f,
                "the frontmatter is not closed within its first {} KiB",
                MAX_FRONTMATTER_BYTES / 1024
            ),
            Self::NotUtf8 => f.write_str("the frontmatter is not valid UTF-8"),
            Self::TooDeep => write!(f, "the frontmatter nests more than {MAX_FLOW_DEPTH} levels deep"),
            Self::InvalidYaml(msg) => write!(f, "invalid YAML in frontmatter: {msg}"),
            Self::NotAMapping(what) => write!(f, "the frontmatter must be a YAML mapping, found {what}"),
        }
    }
}

impl std::error::Error for FrontmatterError {}

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

/// A parsed frontmatter: top-level keys (as text) and values, in written order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frontmatter {
    /// Keys and values in the order written; a key written twice appears twice.
    pub entries: Vec<(String, YamlValue)>,
}

impl Frontmatter {
    /// The value of the last occurrence of `key` (YAML loaders let the last one win).
    pub fn get(&self, key: &str) -> Option<&YamlValue> {
        self.entries.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Keys written more than once, each named once, in first-seen order.
    pub fn duplicate_keys(&self) -> Vec<&str> {
        let mut dups: Vec<&str> = Vec::new();
        for (i, (key, _)) in self.entries.iter().enumerate() {
            if self.entries[..i].iter().any(|(k, _)| k == key) && !dups.contains(&key.as_str()) {
                dups.push(key);
            }
        }
        dups
    }
}

/// Strip a leading UTF-8 byte-order mark.
pub fn strip_bom(bytes: &[u8]) -> &[u8] {
    bytes.strip_prefix(BOM).unwrap_or(bytes)
}

fn is_fence(line: &[u8]) -> bool {
    let mut end = line.len();
    while end > 0 && matches!(line[end - 1], b' ' | b'\t' | b'\r') {
        end -= 1;
    }
    &line[..end] == b"---"
}

/// Locate the frontmatter in `bytes`: the whole file when `complete`, otherwise a prefix of it (then a
/// last line without its newline is not trusted to be a fence: the file may go on). Offsets are
/// relative to `bytes` itself, BOM included. Scans at most [`MAX_FRONTMATTER_BYTES`]: a closing fence
/// beyond that is reported as [`Split::Unclosed`].
pub fn split(bytes: &[u8], complete: bool) -> Split {
    if !complete && bytes.len() < BOM.len() && BOM.starts_with(bytes) {
        // The start of a byte-order mark: the fence may follow.
        return Split::Unclosed;
    }
    let offset = if bytes.starts_with(BOM) { BOM.len() } else { 0 };
    let text = &bytes[offset..];
    let limit = text.len().min(MAX_FRONTMATTER_BYTES);
    let Some(first_nl) = memchr_nl(&text[..limit], 0) else {
        // No complete first line yet: either the fence is still arriving or there is none.
        let could_be_fence = if complete {
            is_fence(text)
        } else {
            b"---".starts_with(trim_end_ws(text)) || is_fence(text)
        };
        return if could_be_fence {
            Split::Unclosed
        } else {
            Split::Missing
        };
    };
    if !is_fence(&text[..first_nl]) {
        return Split::Missing;
    }
    let yaml_start = first_nl + 1;
    let mut line_start = yaml_start;
    while line_start <= limit {
        let line_end = memchr_nl(&text[..limit], line_start);
        let line = &text[line_start..line_end.unwrap_or(limit)];
        let at_eof = complete && line_end.is_none() && limit == text.len();
        if is_fence(line) && (line_end.is_some() || at_eof) {
            // The YAML ends before the newline that precedes the closing fence.
            let yaml_end = line_start.saturating_sub(1).max(yaml_start);
            let body_start = line_end.map_or(text.len(), |e| e + 1);
            return Split::Closed {
                yaml: (offset + yaml_start, offset + yaml_end),
                body_start: offset + body_start,
            };
        }
        match line_end {
            Some(end) => line_start = end + 1,
            None => break,
        }
    }
    Split::Unclosed
}

fn trim_end_ws(bytes: &[u8]) -> &[u8] {
    let mut end = bytes.len();
    while end > 0 && matches!(bytes[end - 1], b' ' | b'\t' | b'\r') {
        end -= 1;
    }
    &bytes[..end]
}

fn memchr_nl(bytes: &[u8], from: usize) -> Option<usize> {
    bytes
        .get(from..)?
        .iter()
        .position(|&b| b == b'\n')
        .map(|i| i + from)
}

/// Split and parse the frontmatter of a complete file (or of a prefix known to hold the closing
/// fence). Returns the frontmatter and the byte offset where the body starts.
pub fn parse_file(bytes: &[u8]) -> Result<(Frontmatter, usize), FrontmatterError> {
    match split(bytes, true) {
        Split::Missing => Err(FrontmatterError::Missing),
        Split::Unclosed if strip_bom(bytes).len() >= MAX_FRONTMATTER_BYTES => Err(FrontmatterError::TooLarge),
        Split::Unclosed => Err(FrontmatterError::Unclosed),
        Split::Closed { yaml, body_start } => {
            let fm = parse(bytes.get(yaml.0..yaml.1).unwrap_or_default())?;
            Ok((fm, body_start))
        }
    }
}

/// The body of a skill file: everything after the closing fence (the whole text when there is no
/// frontmatter), with surrounding whitespace trimmed. `None` when the bytes are not UTF-8.
pub fn body(bytes: &[u8]) -> Option<&str> {
    let text = strip_bom(bytes);
    let start = match split(bytes, true) {
        Split::Closed { body_start, .. } => body_start.saturating_sub(bytes.len() - text.len()),
        _ => 0,
    };
    std::str::from_utf8(text.get(start..)?).ok().map(str::trim)
}

/// Parse the YAML text between the fences. Checks every bound in the module docs and never panics.
pub fn parse(yaml: &[u8]) -> Result<Frontmatter, FrontmatterError> {
    if yaml.len() > MAX_FRONTMATTER_BYTES {
        return Err(FrontmatterError::TooLarge);
    }
    let text = std::str::from_utf8(yaml).map_err(|_| FrontmatterError::NotUtf8)?;
    if let Some(entries) = super::fastyaml::parse_simple(text)
        && !entries.is_empty()
    {
        return Ok(Frontmatter { entries });
    }
    parse_full(text)
}

/// [`parse`] without the fast path (the property tests compare the two).
pub(crate) fn parse_full(text: &str) -> Result<Frontmatter, FrontmatterError> {
    if flow_depth(text) > MAX_FLOW_DEPTH {
        return Err(FrontmatterError::TooDeep);
    }
    // serde_yaml is not expected to panic on any input, but this parser reads untrusted files: a
    // panic in a dependency must cost one skill, never the agent.
    let parsed = std::panic::catch_unwind(|| parse_value(text))
        .map_err(|_| FrontmatterError::InvalidYaml("the YAML parser failed on this input".to_owned()))?;
    match parsed? {
        YamlValue::Map(entries) => Ok(Frontmatter {
            entries: entries
                .into_iter()
                .map(|(k, v)| {
                    let key = match k {
                        YamlValue::Text(s) => s,
                        other => other.to_flow_text(),
                    };
                    (key, v)
                })
                .collect(),
        }),
        YamlValue::Null => Err(FrontmatterError::NotAMapping("nothing (it is empty)")),
        YamlValue::Text(_) => Err(FrontmatterError::NotAMapping("a scalar")),
        YamlValue::Seq(_) => Err(FrontmatterError::NotAMapping("a list")),
    }
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
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn text(v: &str) -> YamlValue {
        YamlValue::Text(v.to_owned())
    }

    #[test]
    fn split_finds_fences_with_bom_and_crlf() {
        let file = b"\xEF\xBB\xBF---\r\nname: a\r\n---\r\nbody\r\n";
        let Split::Closed { yaml, body_start } = split(file, true) else {
            panic!("not closed");
        };
        assert_eq!(&file[yaml.0..yaml.1], b"name: a\r");
        assert_eq!(&file[body_start..], b"body\r\n");
        assert_eq!(split(b"---\nname: a\n", true), Split::Unclosed);
        assert_eq!(split(b"--", false), Split::Unclosed);
        assert_eq!(split(b"--", true), Split::Missing);
        assert_eq!(split(b"# title\n---\n", true), Split::Missing);
        assert_eq!(split(b"\n---\nname: a\n---\n", true), Split::Missing);
        assert!(matches!(split(b"---\nname: a\n---", true), Split::Closed { .. }));
        // In a prefix, a last `---` without its newline may be the start of `----`.
        assert_eq!(split(b"---\nname: a\n---", false), Split::Unclosed);
        assert!(matches!(
            split(b"---\n---\n", true),
            Split::Closed { yaml: (4, 4), .. }
        ));
    }

    #[test]
    fn scalars_keep_their_text() {
        let fm =
            parse(b"a: yes\nb: 1.10\nc: 0o7\nd: ~\ne:\nf: 'null'\ng: [1, true, x]\nh: {1: 2.50}").unwrap();
        assert_eq!(fm.get("a"), Some(&text("yes")));
        assert_eq!(fm.get("b"), Some(&text("1.10")));
        assert_eq!(fm.get("c"), Some(&text("0o7")));
        assert_eq!(fm.get("d"), Some(&YamlValue::Null));
        assert_eq!(fm.get("e"), Some(&YamlValue::Null));
        assert_eq!(fm.get("f"), Some(&text("null")));
        assert_eq!(
            fm.get("g"),
            Some(&YamlValue::Seq(vec![text("1"), text("true"), text("x")]))
        );
        assert_eq!(
            fm.get("h"),
            Some(&YamlValue::Map(vec![(text("1"), text("2.50"))]))
        );
    }

    #[test]
    fn non_mappings_and_bad_yaml_are_errors() {
        assert!(matches!(
            parse(b"- a\n- b"),
            Err(FrontmatterError::NotAMapping(_))
        ));
        assert!(matches!(parse(b""), Err(FrontmatterError::NotAMapping(_))));
        assert!(matches!(
            parse(b"just text"),
            Err(FrontmatterError::NotAMapping(_))
        ));
        assert!(matches!(parse(b"a: [b"), Err(FrontmatterError::InvalidYaml(_))));
        assert!(matches!(parse(b"a: \xff"), Err(FrontmatterError::NotUtf8)));
    }

    #[test]
    fn flow_text_round_trips_simply() {
        let v = YamlValue::Seq(vec![text("a"), text("b c, d"), YamlValue::Null]);
        assert_eq!(v.to_flow_text(), "[a, \"b c, d\", null]");
    }
}
