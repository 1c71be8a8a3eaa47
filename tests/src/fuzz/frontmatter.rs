//! The `SKILL.md` frontmatter: fence splitting, the bounded YAML parser, its fast path, and
//! validation into a skill.
//!
//! Input: the bytes of a whole `SKILL.md`.

use trellis_backend::VirtualPath;
use trellis_middleware::skills::parse::frontmatter::{
    self, Frontmatter, FrontmatterError, MAX_FRONTMATTER_BYTES, MAX_NODES, MAX_TEXT_BYTES, Split, YamlValue,
};
use trellis_middleware::skills::parse::validate;
use trellis_middleware::skills::{MAX_COMPATIBILITY_CHARS, MAX_DESCRIPTION_CHARS, fuzzing};

/// Check the input as described in the module docs.
pub fn check(data: &[u8]) {
    let split = frontmatter::split(data, true);
    check_prefixes(data, split);
    let parsed = frontmatter::parse_file(data);
    match (&parsed, split) {
        (
            Ok((fm, body_start)),
            Split::Closed {
                yaml,
                body_start: split_body,
            },
        ) => {
            assert_eq!(*body_start, split_body);
            assert!(yaml.0 <= yaml.1 && yaml.1 <= split_body && split_body <= data.len());
            check_bounds(fm);
        }
        (Err(FrontmatterError::Missing), Split::Missing)
        | (Err(FrontmatterError::Unclosed | FrontmatterError::TooLarge), Split::Unclosed) => {}
        (Err(error), Split::Closed { yaml, .. }) => {
            assert!(
                !matches!(error, FrontmatterError::Missing | FrontmatterError::Unclosed),
                "closed fences but {error:?}"
            );
            if matches!(error, FrontmatterError::TooLarge) {
                assert!(yaml.1 - yaml.0 > MAX_FRONTMATTER_BYTES);
            }
        }
        (other, split) => panic!("parse_file gave {other:?} for {split:?}"),
    }
    if let Err(error) = &parsed {
        assert!(!error.to_string().is_empty());
    }
    check_body(data, split);

    // The fast path must agree with the full parser wherever it answers. The exception is the
    // full parser's flow-depth pre-check, which counts every bracket (quoted or inside a plain
    // scalar) and so may refuse, as `TooDeep`, text the fast path reads correctly.
    if let Split::Closed { yaml, .. } = split
        && let Some(Ok(text)) = data.get(yaml.0..yaml.1).map(std::str::from_utf8)
        && let Some(fast) = fuzzing::parse_simple(text).filter(|entries| !entries.is_empty())
    {
        let full = fuzzing::parse_full(text).map(|fm| fm.entries);
        if full != Err(FrontmatterError::TooDeep) {
            assert_eq!(
                full,
                Ok(fast),
                "the fast path and the full parser disagree on {text:?}"
            );
        }
    }

    // The whole input as YAML too: reaches the parser without needing fences.
    if let Ok(fm) = frontmatter::parse(data) {
        check_bounds(&fm);
    }

    let path = VirtualPath::parse("/skills/fuzz-skill/SKILL.md").unwrap_or_else(|_| VirtualPath::root());
    let validated = match &parsed {
        Ok((fm, _)) => validate::validate(fm, &path),
        Err(_) => validate::validate_file(data, &path),
    };
    assert_eq!(validated.skill.is_some(), validated.skip_reason().is_none());
    if parsed.is_err() {
        assert_eq!(validated.issues.len(), 1, "{:?}", validated.issues);
    }
    if let Some(skill) = &validated.skill {
        assert!(!skill.name.is_empty() && skill.name.trim() == skill.name);
        assert!(!skill.description.is_empty());
        assert!(skill.description.chars().count() <= MAX_DESCRIPTION_CHARS);
        let compatibility = skill.compatibility.as_deref().unwrap_or_default();
        assert!(compatibility.chars().count() <= MAX_COMPATIBILITY_CHARS);
    }
}

/// What a reader of only the start of the file decides must hold for the whole file: a closed
/// frontmatter in a prefix is the same frontmatter, and a prefix without one means none.
fn check_prefixes(data: &[u8], whole: Split) {
    let len = data.len();
    for cut in [1, 2, 3, 4, 5, len / 2, len.saturating_sub(1)] {
        if cut == 0 || cut >= len {
            continue;
        }
        match frontmatter::split(&data[..cut], false) {
            Split::Unclosed => {}
            Split::Missing => assert_eq!(whole, Split::Missing, "a {cut}-byte prefix said Missing"),
            closed => assert_eq!(whole, closed, "a {cut}-byte prefix disagrees with the file"),
        }
    }
}

fn check_body(data: &[u8], split: Split) {
    let Some(body) = frontmatter::body(data) else {
        return;
    };
    assert_eq!(body.trim(), body);
    if let Split::Closed { body_start, .. } = split {
        let rest = std::str::from_utf8(&data[body_start..]).map(str::trim);
        assert_eq!(rest, Ok(body), "body() is not the text after the closing fence");
    }
}

/// A parsed frontmatter stays within the value and text bounds.
fn check_bounds(fm: &Frontmatter) {
    let (mut nodes, mut text) = (1usize, 0usize);
    for (key, value) in &fm.entries {
        nodes += 1;
        text += key.len();
        count(value, &mut nodes, &mut text);
    }
    assert!(nodes <= MAX_NODES, "{nodes} values, over MAX_NODES");
    assert!(
        text <= MAX_TEXT_BYTES,
        "{text} bytes of text, over MAX_TEXT_BYTES"
    );
}

fn count(value: &YamlValue, nodes: &mut usize, text: &mut usize) {
    *nodes += 1;
    match value {
        YamlValue::Null => {}
        YamlValue::Text(s) => *text += s.len(),
        YamlValue::Seq(items) => items.iter().for_each(|v| count(v, nodes, text)),
        YamlValue::Map(entries) => {
            for (k, v) in entries {
                count(k, nodes, text);
                count(v, nodes, text);
            }
        }
    }
}
