//! A fast path for the frontmatter almost every skill has: `key: value` lines, values plain or simply
//! quoted, and one level of nested `key: value` lines (for `metadata`).
//!
//! [`parse_simple`] either returns exactly what the full YAML parser would give for the same text
//! (under this module's text-keeping semantics) or declines with `None`, and then the caller runs the
//! full parser. It declines anything it is not sure about: tabs, comments after values, block
//! scalars, flow collections at the start of a value, anchors, tags, escapes, multi-line scalars,
//! `: ` inside a value, deeper nesting. A property test checks it against the full parser.
//!
//! Why: the full parser costs ~6 µs for a typical 300-byte frontmatter, as much as reading the file;
//! this path costs well under 1 µs.

use crate::skills::parse::yaml_text::YamlValue;

/// Parse `text` if it is in the simple subset; `None` otherwise (never a wrong answer).
pub fn parse_simple(text: &str) -> Option<Vec<(String, YamlValue)>> {
    let mut entries: Vec<(String, YamlValue)> = Vec::new();
    let mut nested: Option<(usize, Vec<(YamlValue, YamlValue)>)> = None;
    // The key whose value is still open (an empty value may start a nested mapping).
    let mut open = false;
    for raw in text.split('\n') {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if line.chars().any(|c| {
            c.is_control() || matches!(c, '\u{feff}' | '\u{fffe}' | '\u{ffff}' | '\u{2028}' | '\u{2029}')
        }) {
            return None;
        }
        if line.trim().is_empty() {
            continue;
        }
        let indent = line.len() - line.trim_start_matches(' ').len();
        if indent == 0 {
            if line.starts_with('#') {
                continue;
            }
            close(&mut entries, &mut nested, &mut open);
            let (key, value) = key_value(line)?;
            match value {
                Some(value) => entries.push((key, value)),
                None => {
                    entries.push((key, YamlValue::Null));
                    open = true;
                }
            }
        } else {
            // Only lines of a mapping nested one level under an empty-valued key.
            match &mut nested {
                None if open => nested = Some((indent, Vec::new())),
                Some((expected, _)) if *expected == indent => {}
                _ => return None,
            }
            let (key, value) = key_value(&line[indent..])?;
            let value = value?; // an empty nested value could open a deeper level: decline
            if let Some((_, items)) = &mut nested {
                items.push((YamlValue::Text(key), value));
            }
        }
    }
    close(&mut entries, &mut nested, &mut open);
    Some(entries)
}

fn close(
    entries: &mut [(String, YamlValue)],
    nested: &mut Option<(usize, Vec<(YamlValue, YamlValue)>)>,
    open: &mut bool,
) {
    if let Some((_, items)) = nested.take()
        && let Some(last) = entries.last_mut()
    {
        last.1 = YamlValue::Map(items);
    }
    *open = false;
}

/// `key: value` or `key:`; the value is `None` when empty.
fn key_value(line: &str) -> Option<(String, Option<YamlValue>)> {
    let colon = line.find(':')?;
    let key = &line[..colon];
    let key_ok = !key.is_empty()
        && !key.starts_with('-')
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !key_ok {
        return None;
    }
    let rest = &line[colon + 1..];
    if rest.trim().is_empty() {
        return Some((key.to_owned(), None));
    }
    let value = rest.strip_prefix(' ')?.trim_matches(' ');
    Some((key.to_owned(), Some(scalar(value)?)))
}

fn scalar(value: &str) -> Option<YamlValue> {
    if let Some(inner) = value.strip_prefix('\'') {
        let inner = inner.strip_suffix('\'')?;
        // Every quote inside must be doubled.
        let mut out = String::with_capacity(inner.len());
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            if c == '\'' && chars.next() != Some('\'') {
                return None;
            }
            out.push(c);
        }
        return Some(YamlValue::Text(out));
    }
    if let Some(inner) = value.strip_prefix('"') {
        let inner = inner.strip_suffix('"')?;
        if inner.contains(['"', '\\']) {
            return None;
        }
        return Some(YamlValue::Text(inner.to_owned()));
    }
    let first = value.chars().next()?;
    let plain_ok = !"-?:,[]{}#&*!|>'\"%@`".contains(first)
        && !value.contains(": ")
        && !value.contains(" #")
        && !value.ends_with(':');
    if !plain_ok {
        return None;
    }
    Some(match value {
        "~" | "null" | "Null" | "NULL" => YamlValue::Null,
        _ => YamlValue::Text(value.to_owned()),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_common_shape() {
        let got = parse_simple(
            "name: pdf\r\ndescription: 'It''s for PDFs, [forms] too'\nlicense: ~\nmetadata:\n  author: \"me\"\n  version: 1.10\n",
        )
        .unwrap();
        assert_eq!(got[0], ("name".into(), YamlValue::Text("pdf".into())));
        assert_eq!(got[1].1, YamlValue::Text("It's for PDFs, [forms] too".into()));
        assert_eq!(got[2].1, YamlValue::Null);
        assert_eq!(
            got[3].1,
            YamlValue::Map(vec![
                (YamlValue::Text("author".into()), YamlValue::Text("me".into())),
                (YamlValue::Text("version".into()), YamlValue::Text("1.10".into())),
            ])
        );
    }

    #[test]
    fn declines_what_it_does_not_know() {
        for text in [
            "description: >-\n  folded",
            "a: b # comment",
            "a: [x, y]",
            "a: \"esc\\n\"",
            "a: &x 1",
            "a:\n  b:\n    c: d",
            "a: one\n  two",
            "a:\tb",
            "- a",
            "a: b: c",
        ] {
            assert_eq!(parse_simple(text), None, "{text:?}");
        }
    }

    fn line() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let key = prop_oneof![
            "[a-z][a-z0-9_-]{0,6}",
            "[ -~]{1,4}",
            Just("name".to_owned()),
            Just("true".to_owned()),
            Just("1".to_owned()),
        ];
        let value = prop_oneof![
            "[ -~]{0,16}",
            "[a-zé ,\\[\\]{}#:'\"-]{0,16}",
            "'[ -~]{0,8}'",
            "\"[ -~]{0,8}\"",
            Just(String::new()),
            Just("~".to_owned()),
            Just("1.10".to_owned()),
            Just("yes".to_owned()),
        ];
        (
            0usize..4,
            key,
            prop_oneof![Just(": "), Just(":"), Just(" : "), Just(":  ")],
            value,
        )
            .prop_map(|(indent, k, sep, v)| {
                format!("{}{k}{sep}{v}", " ".repeat(if indent == 3 { 0 } else { indent }))
            })
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(4000))]
        #[test]
        fn agrees_with_the_full_parser(lines in proptest::collection::vec(line(), 1..6), crlf in proptest::bool::ANY) {
            let text = lines.join(if crlf { "\r\n" } else { "\n" });
            if let Some(fast) = parse_simple(&text).filter(|e| !e.is_empty()) {
                let full = crate::skills::parse::frontmatter::parse_full(&text);
                proptest::prop_assert_eq!(full.map(|f| f.entries), Ok(fast), "{:?}", text);
            }
        }
    }
}
