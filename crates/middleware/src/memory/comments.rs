//! HTML comments removed from memory text, markdown-aware.
//!
//! `<!-- … -->` lets people leave notes in a memory file for other people (or for tools) without the
//! model reading them. A comment inside a code span or a fenced or indented code block is content —
//! an example of HTML, say — and stays. An unclosed `<!--` is left as it is: hiding the rest of a
//! file because of a typo would silently drop memory.

use pulldown_cmark::{Event, Parser, Tag, TagEnd};

/// `text` without its HTML comments (outside code).
pub fn strip_html_comments(text: &str) -> String {
    if !text.contains("<!--") {
        return text.trim_start_matches('\n').trim_end().to_owned();
    }
    let protected = code_ranges(text);
    let mut out = String::with_capacity(text.len());
    let mut cursor = 0;
    let mut search = 0;
    while let Some(rel) = text[search..].find("<!--") {
        let start = search + rel;
        if let Some(range) = protected.iter().find(|r| r.contains(&start)) {
            search = range.end.max(start + 4);
            continue;
        }
        let Some(close) = text[start + 4..].find("-->") else {
            break;
        };
        let mut start = start;
        let mut end = start + 4 + close + 3;
        // A comment alone on its line(s) takes the line with it, so no blank line is left behind.
        let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1).max(cursor);
        let line_end = text[end..].find('\n').map_or(text.len(), |i| end + i);
        if text[line_start..start].trim().is_empty() && text[end..line_end].trim().is_empty() {
            start = line_start;
            end = (line_end + 1).min(text.len());
            // Between two blank lines, keep only one of them.
            if text[..start].ends_with("\n\n") && text[end..].starts_with('\n') {
                end += 1;
            }
        }
        out.push_str(&text[cursor..start]);
        cursor = end;
        search = end;
    }
    out.push_str(&text[cursor..]);
    out.trim_start_matches('\n').trim_end().to_owned()
}

/// Byte ranges of code spans and code blocks.
fn code_ranges(text: &str) -> Vec<std::ops::Range<usize>> {
    let mut ranges = Vec::new();
    let mut block_start = None;
    for (event, range) in Parser::new(text).into_offset_iter() {
        match event {
            Event::Code(_) => ranges.push(range),
            Event::Start(Tag::CodeBlock(_)) => block_start = Some(range.start),
            Event::End(TagEnd::CodeBlock) => {
                if let Some(start) = block_start.take() {
                    ranges.push(start..range.end);
                }
            }
            _ => {}
        }
    }
    ranges
}

#[cfg(test)]
mod tests {
    use super::strip_html_comments as strip;

    #[test]
    fn removes_comments_outside_code() {
        assert_eq!(strip("keep <!-- hidden --> this"), "keep  this");
        assert_eq!(strip("a\n<!--\nmulti\nline\n-->\nb"), "a\nb");
        assert_eq!(strip("- one\n  <!-- note -->\n- two"), "- one\n- two");
        assert_eq!(strip("# Title\n\n<!-- note -->\n\n## Next"), "# Title\n\n## Next");
        assert_eq!(strip("<!-- only a comment -->"), "");
        assert_eq!(strip("x <!-- a --> y <!-- b --> z"), "x  y  z");
    }

    #[test]
    fn keeps_comments_in_code() {
        assert_eq!(strip("use `<!-- x -->` in HTML"), "use `<!-- x -->` in HTML");
        let fenced = "```html\n<!-- sample -->\n```\n<!-- gone -->\nafter";
        assert_eq!(strip(fenced), "```html\n<!-- sample -->\n```\nafter");
        let indented = "para\n\n    <!-- code -->\n";
        assert_eq!(strip(indented), "para\n\n    <!-- code -->");
    }

    #[test]
    fn unclosed_comment_is_kept() {
        assert_eq!(strip("a <!-- never closed"), "a <!-- never closed");
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn never_panics_and_never_grows(s in "(<!--|-->|`|```|\n|    |[a-z <>!-]){0,80}") {
            let out = super::strip_html_comments(&s);
            prop_assert!(out.len() <= s.len());
        }

        #[test]
        fn text_without_comments_is_only_trimmed(s in "[a-z \n`#*-]{0,80}") {
            prop_assert_eq!(super::strip_html_comments(&s), s.trim_start_matches('\n').trim_end());
        }
    }
}
