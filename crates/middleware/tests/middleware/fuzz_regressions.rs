//! Regressions found while fuzzing the `SKILL.md` frontmatter parser (fuzz target `frontmatter`,
//! see docs/fuzzing.md). The inputs are also kept under `fuzz/regressions/frontmatter/`.

#![allow(clippy::unwrap_used)]

use trellis_middleware::skills::parse::frontmatter::{
    self, FrontmatterError, MAX_TEXT_BYTES, Split, YamlValue,
};

#[test]
fn a_prefix_holding_part_of_a_byte_order_mark_is_not_missing_its_frontmatter() {
    // One or two bytes of a BOM were read as "no frontmatter", though the file had one.
    let file = b"\xEF\xBB\xBF---\r\nname: crlf-bom\r\ndescription: d\r\n---\r\n# Body\r\n";
    assert!(matches!(frontmatter::split(file, true), Split::Closed { .. }));
    assert_eq!(frontmatter::split(&file[..1], false), Split::Unclosed);
    assert_eq!(frontmatter::split(&file[..2], false), Split::Unclosed);
    assert_eq!(frontmatter::split(&file[..3], false), Split::Unclosed);
    // A whole file that is only part of a BOM has no frontmatter.
    assert_eq!(frontmatter::split(&file[..2], true), Split::Missing);
    assert_eq!(frontmatter::split(b"\xEFx", false), Split::Missing);
}

#[test]
fn aliases_of_a_long_written_number_stay_within_the_text_bound() {
    // The first pass budgets typed text (`0x000…1` is `1`); the second pass, which re-reads every
    // scalar as written, had no budget: 62 KB of frontmatter materialized 240 MB of text.
    let yaml = format!(
        "a: &n 0x{}1\nb: [{}]\n",
        "0".repeat(1000),
        vec!["*n"; 300].join(", ")
    );
    assert!(yaml.len() < 3000);
    match frontmatter::parse(yaml.as_bytes()) {
        Err(FrontmatterError::InvalidYaml(message)) => assert!(message.contains("KiB of text"), "{message}"),
        other => panic!("expected the text bound to refuse it, got {other:?}"),
    }
    // Under the bound, the written text is still kept.
    let yaml = format!("a: &n 0x{}1\nb: [{}]\n", "0".repeat(10), ["*n"; 3].join(", "));
    let fm = frontmatter::parse(yaml.as_bytes()).unwrap();
    let written = YamlValue::Text(format!("0x{}1", "0".repeat(10)));
    assert_eq!(fm.get("b"), Some(&YamlValue::Seq(vec![written; 3])));
    assert!(yaml.len() * 4 < MAX_TEXT_BYTES);
}
