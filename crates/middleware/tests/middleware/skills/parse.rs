//! Frontmatter parsing and validation: the reference's parsing tests (reference-deepagents-tests.md
//! §A, "Name validation / parsing"), adapted where Trellis deliberately differs (see
//! docs/differences-skills.md), plus the fixes, the bounds and a never-panics property.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use trellis_middleware::backend::VirtualPath;
use trellis_middleware::skills::parse::frontmatter::{self, FrontmatterError, YamlValue};
use trellis_middleware::skills::parse::validate::{self, Validated};
use trellis_middleware::skills::{IssueCode, MetadataMap, Severity, SkillMetadata};

fn path(dir: &str) -> VirtualPath {
    VirtualPath::parse(&format!("/skills/{dir}/SKILL.md")).unwrap()
}

fn check(dir: &str, text: &str) -> Validated {
    validate::validate_file(text.as_bytes(), &path(dir))
}

fn loaded(dir: &str, text: &str) -> SkillMetadata {
    let v = check(dir, text);
    v.skill.unwrap_or_else(|| panic!("skipped: {:?}", v.issues))
}

fn skipped(dir: &str, text: &str) -> IssueCode {
    let v = check(dir, text);
    assert!(v.skill.is_none(), "expected a skip, loaded {:?}", v.skill);
    v.skip_reason().expect("a skipping issue").code
}

fn codes(v: &Validated) -> Vec<IssueCode> {
    v.issues.iter().map(|i| i.code).collect()
}

// ---- name validation (test_validate_skill_name_*) ----

#[test]
fn valid_names_have_no_issue() {
    for name in ["web-research", "pdf", "a1-b2-c3", "1abc", "café", "über-tool"] {
        assert!(validate::name_problems(name, name).is_empty(), "{name}");
    }
}

#[test]
fn invalid_names_load_with_a_warning() {
    let cases: [(&str, IssueCode); 9] = [
        (&"a".repeat(65), IssueCode::NameTooLong),
        ("Web-Research", IssueCode::NameCharset),
        ("-lead", IssueCode::NameHyphens),
        ("trail-", IssueCode::NameHyphens),
        ("dou--ble", IssueCode::NameHyphens),
        ("under_score", IssueCode::NameCharset),
        ("ÉCOLE", IssueCode::NameCharset),
        ("技能", IssueCode::NameCharset),
        ("rocket-🚀", IssueCode::NameCharset),
    ];
    for (name, code) in cases {
        let text = format!("---\nname: {name}\ndescription: d\n---\n");
        let v = check(name, &text);
        assert!(v.skill.is_some(), "{name} still loads");
        assert!(codes(&v).contains(&code), "{name}: {:?}", v.issues);
        assert!(v.issues.iter().all(|i| i.severity() != Severity::Skipped));
    }
    let v = check("other-dir", "---\nname: web\ndescription: d\n---\n");
    assert_eq!(codes(&v), vec![IssueCode::NameDirectoryMismatch]);
    assert!(v.issues[0].message.contains("must match"));
    assert_eq!(v.skill.unwrap().name, "web", "the frontmatter name is used");
}

// ---- parsing (test_parse_skill_metadata_*) ----

#[test]
fn full_frontmatter_parses_to_exact_metadata() {
    let skill = loaded(
        "web-research",
        "---\nname: web-research\ndescription: Structured web research\nlicense: MIT\ncompatibility: Python 3.10+\n\
         metadata:\n  author: ada\n  version: \"1.0\"\nallowed-tools: web_search read_file\n---\n# Body\n",
    );
    assert_eq!(
        skill,
        SkillMetadata {
            name: "web-research".into(),
            description: "Structured web research".into(),
            path: path("web-research"),
            license: Some("MIT".into()),
            compatibility: Some("Python 3.10+".into()),
            metadata: [("author", "ada"), ("version", "1.0")].into_iter().collect(),
            allowed_tools: vec!["web_search".into(), "read_file".into()],
            include_tools: vec![],
            source: 0,
            version: None,
        }
    );
}

#[test]
fn minimal_frontmatter_has_empty_optionals() {
    let skill = loaded("min", "---\nname: min\ndescription: Minimal\n---\n");
    assert_eq!(skill.license, None);
    assert_eq!(skill.compatibility, None);
    assert_eq!(skill.metadata, MetadataMap::new());
    assert!(skill.allowed_tools.is_empty());
}

#[test]
fn broken_frontmatter_is_skipped_with_its_reason() {
    assert_eq!(skipped("a", "# Just markdown\n"), IssueCode::FrontmatterMissing);
    assert_eq!(
        skipped("a", "---\nname: a\ndescription: d\n"),
        IssueCode::FrontmatterMissing
    );
    assert_eq!(
        skipped("a", "---\nname: [unclosed\ndescription: d\n---\n"),
        IssueCode::InvalidYaml
    );
    assert_eq!(skipped("a", "---\n- a\n- b\n---\n"), IssueCode::NotAMapping);
    assert_eq!(skipped("a", "---\n---\nbody\n"), IssueCode::NotAMapping);
    assert_eq!(
        skipped("a", "---\ndescription: only\n---\n"),
        IssueCode::NameMissing
    );
    assert_eq!(skipped("a", "---\nname: a\n---\n"), IssueCode::DescriptionMissing);
    assert_eq!(
        skipped("a", "---\nname: a\ndescription: \"   \"\n---\n"),
        IssueCode::DescriptionMissing
    );
    assert_eq!(
        skipped("a", "---\nname: a\ndescription: ~\n---\n"),
        IssueCode::DescriptionMissing
    );
    assert_eq!(
        skipped("a", "---\nname: [a]\ndescription: d\n---\n"),
        IssueCode::NameMissing
    );
    assert_eq!(
        skipped("a", "---\nname: a\ndescription: {x: y}\n---\n"),
        IssueCode::DescriptionMissing
    );
    let v = validate::validate_file(b"---\nname: a\ndescription: caf\xe9\n---\n", &path("a"));
    assert_eq!(v.skip_reason().unwrap().code, IssueCode::NotUtf8);
}

#[test]
fn long_description_is_truncated_with_a_warning() {
    let text = format!("---\nname: a\ndescription: {}\n---\n", "x".repeat(1124));
    let v = check("a", &text);
    let skill = v.skill.clone().unwrap();
    assert_eq!(skill.description.chars().count(), 1024);
    let issue = &v.issues[0];
    assert_eq!(issue.code, IssueCode::DescriptionTruncated);
    let shown = issue.to_string();
    for part in ["/skills/a/SKILL.md", "1124", "1024", "description"] {
        assert!(shown.contains(part), "{shown}");
    }
    // Characters, not bytes.
    let text = format!("---\nname: a\ndescription: {}\n---\n", "é".repeat(1024));
    assert!(check("a", &text).issues.is_empty());
}

#[test]
fn empty_optional_fields_are_absent() {
    let v = check(
        "a",
        "---\nname: a\ndescription: d\nlicense: ''\ncompatibility: ''\n---\n",
    );
    let skill = v.skill.clone().unwrap();
    assert_eq!((skill.license, skill.compatibility), (None, None));
    assert_eq!(codes(&v), vec![IssueCode::CompatibilityEmpty]);
    assert_eq!(v.issues[0].severity(), Severity::Spec);
}

#[test]
fn long_compatibility_is_truncated_with_a_warning() {
    let v = check(
        "a",
        &format!(
            "---\nname: a\ndescription: d\ncompatibility: {}\n---\n",
            "c".repeat(600)
        ),
    );
    assert_eq!(v.skill.clone().unwrap().compatibility.unwrap().len(), 500);
    assert_eq!(codes(&v), vec![IssueCode::CompatibilityTruncated]);
    let shown = v.issues[0].to_string();
    assert!(shown.contains("600") && shown.contains("500") && shown.contains("/skills/a/SKILL.md"));
}

#[test]
fn allowed_tools_forms() {
    let tools = |value: &str| {
        loaded(
            "a",
            &format!("---\nname: a\ndescription: d\nallowed-tools: {value}\n---\n"),
        )
        .allowed_tools
    };
    assert_eq!(tools("Bash  Read   Write"), ["Bash", "Read", "Write"]);
    assert_eq!(tools("Bash, Read,Write"), ["Bash", "Read", "Write"]);
    assert_eq!(tools("[Bash, Read]"), ["Bash", "Read"]);
    assert_eq!(tools("['  Bash  ', '', Read]"), ["Bash", "Read"]);
    assert!(tools("[]").is_empty());
    // Claude Code style patterns: spaces inside parentheses belong to the pattern, and two patterns
    // sharing words are two entries (splitting at every space dropped the repeated `uv`).
    assert_eq!(
        tools("Read Bash(uv run python:*) Bash(uv pip install:*)"),
        ["Read", "Bash(uv run python:*)", "Bash(uv pip install:*)"]
    );
    assert_eq!(
        tools("Bash(git log:*),Bash(git diff:*) Bash(git log:*)"),
        ["Bash(git log:*)", "Bash(git diff:*)"]
    );
    assert_eq!(tools("Bash(f(x) y) Read"), ["Bash(f(x) y)", "Read"]);
    assert_eq!(tools("Read) Bash(open ended"), ["Read)", "Bash(open ended"]);
    // A scalar is text, so a number is one (odd) tool name rather than nothing (the reference drops it).
    assert_eq!(tools("123"), ["123"]);
    let v = check(
        "a",
        "---\nname: a\ndescription: d\nallowed-tools: [Bash, [nested], {k: v}]\n---\n",
    );
    assert_eq!(v.skill.clone().unwrap().allowed_tools, ["Bash"]);
    assert_eq!(codes(&v), vec![IssueCode::AllowedToolsMalformed]);
    let v = check("a", "---\nname: a\ndescription: d\nallowed-tools: {k: v}\n---\n");
    assert!(v.skill.clone().unwrap().allowed_tools.is_empty());
    assert_eq!(codes(&v), vec![IssueCode::AllowedToolsMalformed]);
}

#[test]
fn metadata_forms() {
    let v = check("a", "---\nname: a\ndescription: d\nmetadata: some-text\n---\n");
    assert!(v.skill.clone().unwrap().metadata.is_empty());
    assert_eq!(codes(&v), vec![IssueCode::MetadataMalformed]);
    let v = check("a", "---\nname: a\ndescription: d\nmetadata: [a, b]\n---\n");
    assert!(v.skill.clone().unwrap().metadata.is_empty());
    // Non-string scalars keep the text written: `True` stays `True`, `42` stays `42`.
    let skill = loaded(
        "a",
        "---\nname: a\ndescription: d\nmetadata:\n  count: 42\n  active: True\n  beta: yes\n---\n",
    );
    assert_eq!(
        skill.metadata,
        [("count", "42"), ("active", "True"), ("beta", "yes")]
            .into_iter()
            .collect()
    );
    // Collections are kept as their YAML text, with a warning; null values are dropped.
    let v = check(
        "a",
        "---\nname: a\ndescription: d\nmetadata:\n  tags: [x, y]\n  gone: ~\n  ok: v\n---\n",
    );
    assert_eq!(
        v.skill.clone().unwrap().metadata,
        [("tags", "[x, y]"), ("ok", "v")].into_iter().collect()
    );
    assert_eq!(codes(&v), vec![IssueCode::MetadataMalformed]);
}

#[test]
fn license_keeps_the_text_written() {
    assert_eq!(
        loaded("a", "---\nname: a\ndescription: d\nlicense: true\n---\n")
            .license
            .as_deref(),
        Some("true")
    );
    assert_eq!(
        loaded("a", "---\nname: a\ndescription: d\nlicense: null\n---\n").license,
        None
    );
    let v = check("a", "---\nname: a\ndescription: d\nlicense: [MIT]\n---\n");
    assert_eq!(v.skill.clone().unwrap().license.as_deref(), Some("[MIT]"));
    assert_eq!(codes(&v), vec![IssueCode::FieldType]);
}

// ---- the reference's accidents, fixed ----

#[test]
fn scalars_keep_the_text_that_was_written() {
    let skill = loaded(
        "a",
        "---\nname: a\ndescription: d\nmetadata:\n  beta: yes\n  version: 1.10\n  released: 2024-01-02\n  octal: 0o17\n  flag: off\n---\n",
    );
    let m = &skill.metadata;
    assert_eq!(
        (
            m.get("beta"),
            m.get("version"),
            m.get("released"),
            m.get("octal"),
            m.get("flag")
        ),
        (
            Some("yes"),
            Some("1.10"),
            Some("2024-01-02"),
            Some("0o17"),
            Some("off")
        )
    );
    // The full parser (flow style forces it) gives the same text.
    let skill = loaded(
        "a",
        "---\nname: a\ndescription: d\nmetadata: {beta: yes, version: 1.10, n: 007}\n---\n",
    );
    assert_eq!(
        skill.metadata,
        [("beta", "yes"), ("version", "1.10"), ("n", "007")]
            .into_iter()
            .collect()
    );
    assert_eq!(
        loaded("123", "---\nname: 123\ndescription: 1.50\n---\n").description,
        "1.50"
    );
}

#[test]
fn bom_crlf_and_dashes_are_fine() {
    let skill = loaded(
        "a",
        "\u{feff}---\r\nname: a\r\ndescription: with BOM and CRLF\r\n---\r\nbody\r\n",
    );
    assert_eq!(skill.description, "with BOM and CRLF");
    assert_eq!(
        loaded("a", "---\nname: a\ndescription: a---b\n---\n").description,
        "a---b"
    );
    let skill = loaded(
        "a",
        "---\nname: a\ndescription: d\n---\n# Title\n\n---\n\nmore\n---\n",
    );
    assert_eq!(skill.description, "d");
    assert_eq!(loaded("a", "---\nname: '  a  '\ndescription: d\n---\n").name, "a");
    // A literal block keeps its newline in the record (the prompt shows it on one line).
    assert_eq!(
        loaded("a", "---\nname: a\ndescription: |\n  one\n  two\n---\n").description,
        "one\ntwo"
    );
    assert_eq!(
        loaded("a", "---\nname: a\ndescription: >-\n  one\n  two\n---\n").description,
        "one two"
    );
}

#[test]
fn duplicate_and_unknown_keys() {
    let v = check(
        "a",
        "---\nname: a\ndescription: first\ndescription: second\nversion: 1\nwhen: x\n---\n",
    );
    assert_eq!(v.skill.clone().unwrap().description, "second");
    assert_eq!(codes(&v), vec![IssueCode::DuplicateKey, IssueCode::UnknownField]);
    assert_eq!(v.issues[1].severity(), Severity::Spec);
    assert!(
        v.issues[1].message.contains(r#""version", "when""#),
        "{}",
        v.issues[1].message
    );
}

#[test]
fn include_tools_is_read_from_metadata() {
    let skill = loaded(
        "crm",
        "---\nname: crm\ndescription: d\nmetadata:\n  include_tools: create_request  list_requests\n---\n",
    );
    assert_eq!(skill.include_tools, ["create_request", "list_requests"]);
    assert_eq!(
        skill.metadata.get("include_tools"),
        Some("create_request  list_requests")
    );
    // A top-level include_tools is an unknown field, not a binding.
    let v = check("crm", "---\nname: crm\ndescription: d\ninclude_tools: x\n---\n");
    assert!(v.skill.clone().unwrap().include_tools.is_empty());
    let v = check(
        "crm",
        "---\nname: crm\ndescription: d\nmetadata:\n  include_tools: {a: b}\n---\n",
    );
    assert!(v.skill.clone().unwrap().include_tools.is_empty());
    assert_eq!(codes(&v), vec![IssueCode::IncludeToolsMalformed]);
}

// ---- bounds: hostile input fails fast ----

fn fast<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = f();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{what} took {:?}",
        started.elapsed()
    );
    out
}

#[test]
fn deep_flow_nesting_is_refused_before_parsing() {
    let depth = 30_000;
    let yaml = format!("name: {}x{}", "[".repeat(depth), "]".repeat(depth));
    let err = fast("deep flow", || frontmatter::parse(yaml.as_bytes())).unwrap_err();
    assert_eq!(err, FrontmatterError::TooDeep);
    let ok = format!("a: {}x{}", "[".repeat(60), "]".repeat(60));
    assert!(frontmatter::parse(ok.as_bytes()).is_ok());
}

#[test]
fn deep_block_nesting_is_an_error() {
    let yaml: String = (0..200).map(|i| format!("{}k:\n", "  ".repeat(i))).collect();
    let result = fast("deep block", || frontmatter::parse(yaml.as_bytes()));
    assert!(
        matches!(result, Err(FrontmatterError::InvalidYaml(_))),
        "{result:?}"
    );
}

#[test]
fn alias_bombs_fail_fast() {
    let mut yaml = String::from(
        "name: x\ndescription: d\nmetadata:\n  a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
    );
    for i in 1..10 {
        let refs = vec![format!("*a{}", i - 1); 9].join(", ");
        yaml.push_str(&format!("  a{i}: &a{i} [{refs}]\n"));
    }
    let result = fast("billion laughs", || frontmatter::parse(yaml.as_bytes()));
    assert!(
        matches!(result, Err(FrontmatterError::InvalidYaml(_))),
        "{result:?}"
    );
    // One big scalar aliased many times: bounded by the text budget.
    let big = "x".repeat(30_000);
    let mut yaml = format!("name: &big {big}\ndescription: d\nmetadata:\n");
    for i in 0..2_000 {
        yaml.push_str(&format!("  k{i}: *big\n"));
    }
    assert!(yaml.len() < frontmatter::MAX_FRONTMATTER_BYTES);
    let result = fast("aliased scalar", || frontmatter::parse(yaml.as_bytes()));
    assert!(
        matches!(result, Err(FrontmatterError::InvalidYaml(_))),
        "{result:?}"
    );
    // A few aliases are fine.
    let fm = frontmatter::parse(b"name: &n web\ndescription: d\nmetadata: {owner: *n}").unwrap();
    assert_eq!(
        fm.get("metadata"),
        Some(&YamlValue::Map(vec![(
            YamlValue::Text("owner".into()),
            YamlValue::Text("web".into())
        )]))
    );
}

#[test]
fn oversized_frontmatter_is_refused_unread() {
    let yaml = format!(
        "name: a\ndescription: {}\n",
        "x".repeat(frontmatter::MAX_FRONTMATTER_BYTES)
    );
    assert_eq!(
        frontmatter::parse(yaml.as_bytes()),
        Err(FrontmatterError::TooLarge)
    );
    let file = format!("---\n{yaml}---\n");
    assert_eq!(skipped("a", &file), IssueCode::FrontmatterMissing);
    let v = check("a", &file);
    assert!(v.issues[0].message.contains("64 KiB"), "{}", v.issues[0].message);
}

// ---- never panics ----

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config::with_cases(3_000))]

    #[test]
    fn parser_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
        let _ = frontmatter::split(&bytes, true);
        let _ = frontmatter::split(&bytes, false);
        let _ = frontmatter::parse(&bytes);
        let _ = frontmatter::body(&bytes);
        let mut file = b"---\n".to_vec();
        file.extend_from_slice(&bytes);
        file.extend_from_slice(b"\n---\nbody");
        let _ = validate::validate_file(&file, &path("a"));
    }

    #[test]
    fn parser_never_panics_on_yaml_like_text(text in "([a-z:\\- \\[\\]{},&*!|>'\"#%@?\\n\\t~0-9.]|\\\\u[0-9a-f]{4}){0,200}") {
        let _ = frontmatter::parse(text.as_bytes());
        let file = format!("---\nname: a\ndescription: d\n{text}\n---\n");
        let _ = validate::validate_file(file.as_bytes(), &path("a"));
    }
}
