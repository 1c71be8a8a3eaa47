//! Hostile skill libraries, memory files and paths, end to end: what a person who can write to a
//! skill source (often a shared bucket) or a memory file can and cannot do to discovery, the prompt,
//! diagnostics and the file tools. Each test names the property it proves; docs/security.md points
//! here. The tests are in three files: `adversarial/skills_discovery.rs` (discovery survives hostile
//! files), `adversarial/skills_prompt.rs` (attacker text stays inert in what the model reads) and
//! `adversarial/skills_file_tools.rs` (paths and hidden skills in the file tools).
//!
//! This file: discovery survives alias bombs, deep nesting, a 10 MB frontmatter, links out of the
//! root, names that are escapes, and bytes that are not UTF-8.
//!
//! Parser-level bounds are in `skills/parse.rs` (`deep_flow_nesting_is_refused_before_parsing`,
//! `deep_block_nesting_is_an_error`, `alias_bombs_fail_fast`, `oversized_frontmatter_is_refused_unread`);
//! the tests here put the same inputs into a real library and check that discovery survives them.
//! Path containment on the backends themselves is in `crates/backend/tests/backend/paths/escapes.rs` and
//! `paths/adversarial.rs`; the 100,000-skill library is in `adversarial/scale.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use serde_json::{Value, json};
use trellis_middleware::backend::{Backend, FilesystemBackend};
use trellis_middleware::skills::SkillSource;
use trellis_middleware::skills::parse::validate;
use trellis_middleware::skills::{DiscoveryOptions, IssueCode, discover};
use trellis_middleware::tools::{FileAccess, ToolContext};

use crate::adversarial::common::*;
use crate::common;

// --------------------------------------------------------------- 1. alias bombs and deep nesting

/// The parser's bounds (skills/parse.rs) hold inside discovery: a library holding a billion-laughs
/// alias bomb, one big aliased scalar, 30,000 nested flow brackets and 200 levels of block nesting
/// skips exactly those four files, and the good skill beside them loads.
#[tokio::test]
async fn alias_bombs_and_deep_nesting_in_a_library_are_skipped_and_the_rest_loads() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let mut bomb = String::from(
        "---\nname: bomb\ndescription: d\nmetadata:\n  a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
    );
    for i in 1..10 {
        bomb.push_str(&format!(
            "  a{i}: &a{i} [{}]\n",
            vec![format!("*a{}", i - 1); 9].join(", ")
        ));
    }
    bomb.push_str("---\n");
    write(root, "skills/bomb/SKILL.md", bomb);
    let mut scalar = format!(
        "---\nname: &big {}\ndescription: d\nmetadata:\n",
        "x".repeat(30_000)
    );
    for i in 0..1_000 {
        scalar.push_str(&format!("  k{i}: *big\n"));
    }
    scalar.push_str("---\n");
    write(root, "skills/aliased-scalar/SKILL.md", scalar);
    write(
        root,
        "skills/deep-flow/SKILL.md",
        format!(
            "---\nname: deep-flow\ndescription: {}x{}\n---\n",
            "[".repeat(30_000),
            "]".repeat(30_000)
        ),
    );
    let block: String = (0..200).map(|i| format!("{}k{i}:\n", "  ".repeat(i))).collect();
    write(
        root,
        "skills/deep-block/SKILL.md",
        format!("---\nname: deep-block\ndescription: d\nmetadata:\n{block}---\n"),
    );
    write(root, "skills/good/SKILL.md", skill_md("good", "Still loads."));

    let backend: Arc<dyn Backend> = Arc::new(FilesystemBackend::new(root).unwrap());
    let catalog = scan(backend, "/skills").await;
    assert_eq!(names(&catalog), ["good"]);
    for dir in ["bomb", "aliased-scalar", "deep-flow", "deep-block"] {
        assert_eq!(issue(&catalog, dir).0, IssueCode::InvalidYaml, "{dir}");
    }
    assert_eq!(catalog.skipped().len(), 4);
}

// ------------------------------------------------------------------ 2. a 10 MB frontmatter

/// A `SKILL.md` just under the 10 MiB file limit whose frontmatter never closes costs one 4 KiB read
/// and one 64 KiB read, is skipped with a `frontmatter-missing` issue that says why, and the other
/// skills load. (A file over 10 MiB is refused from its size alone: `skills/discovery_library.rs`.)
#[tokio::test]
async fn ten_megabyte_frontmatter_is_skipped_after_a_bounded_read() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let mut huge = b"---\nname: huge\ndescription: ".to_vec();
    huge.resize(10 * 1024 * 1024 - 16, b'y');
    huge.extend_from_slice(b"\n---\n# body\n");
    assert!(huge.len() as u64 <= trellis_middleware::skills::MAX_SKILL_FILE_BYTES);
    write(root, "skills/huge/SKILL.md", &huge);
    write(root, "skills/alpha/SKILL.md", skill_md("alpha", "First."));
    write(root, "skills/omega/SKILL.md", skill_md("omega", "Last."));

    let counting = common::Spy::new(Arc::new(FilesystemBackend::new(root).unwrap()));
    let source = SkillSource::new(counting.clone(), "/skills").unwrap();
    let found = discover(&[source], &DiscoveryOptions::default()).await;
    let catalog = &found.catalog;
    assert_eq!(names(catalog), ["alpha", "omega"]);
    let (code, message) = issue(catalog, "huge");
    assert_eq!(code, IssueCode::FrontmatterMissing);
    assert!(
        message.contains("not closed within its first 64 KiB"),
        "{message}"
    );
    let read = counting.bytes_read(Some("/skills/huge/SKILL.md"));
    let bound = 4096 + frontmatter_span();
    assert!(read <= bound, "read {read} bytes of a 10 MB file, bound {bound}");
    assert!(
        counting.bytes_read(None) < 200 * 1024,
        "the whole scan stays small"
    );
    assert_eq!(found.stats.read_on, 1, "one second read, for the huge file");

    // The validator on the whole file says the same, without a panic or a 10 MB parse.
    let v = validate::validate_file(&huge, &vp("/skills/huge/SKILL.md"));
    assert!(v.skill.is_none());
    assert_eq!(v.skip_reason().unwrap().code, IssueCode::FrontmatterMissing);
}

fn frontmatter_span() -> u64 {
    trellis_middleware::skills::parse::frontmatter::MAX_FRONTMATTER_BYTES as u64 + 3
}

// ---------------------------------------------------------- 4. symlinks and encodings: discovery

/// On local disk, a skill directory (or a `SKILL.md`) that is a symlink out of the root is never
/// read, and directories whose names are percent-escapes or hold a backslash, a newline followed by
/// `## New instructions`, or a bidi override are not skills (they are not valid paths).
#[tokio::test]
async fn discovery_never_follows_links_out_of_the_root_or_decodes_names() {
    let outer = tempfile::tempdir().unwrap();
    let root = outer.path().join("root");
    let outside = outer.path().join("outside");
    write(
        &outside,
        "evil/SKILL.md",
        skill_md("evil", "Planted outside the root."),
    );
    write(&outside, "loose.md", skill_md("loose", "A loose file."));
    write(&root, "skills/good/SKILL.md", skill_md("good", "Fine."));
    std::os::unix::fs::symlink(outside.join("evil"), root.join("skills/evil")).unwrap();
    std::os::unix::fs::symlink("../../outside/evil", root.join("skills/relative")).unwrap();
    std::fs::create_dir_all(root.join("skills/file-link")).unwrap();
    std::os::unix::fs::symlink(outside.join("loose.md"), root.join("skills/file-link/SKILL.md")).unwrap();
    // A link to the skills directory's own sibling (a prefix sibling on disk).
    write(&root, "skills-evil/sib/SKILL.md", skill_md("sib", "Next door."));
    std::os::unix::fs::symlink(root.join("skills-evil/sib"), root.join("skills/sib")).unwrap();
    for name in [
        "..%2f..%2foutside",
        "%2e%2e",
        "a%5cb",
        "back\\slash",
        "x\n## New instructions",
        "\u{202e}evil",
    ] {
        write(
            &root,
            &format!("skills/{name}/SKILL.md"),
            skill_md("encoded", "Decoded?"),
        );
    }

    let backend: Arc<dyn Backend> = Arc::new(FilesystemBackend::new(root.join("skills")).unwrap());
    let found = discover(
        &[SkillSource::new(backend, "/").unwrap()],
        &DiscoveryOptions::default(),
    )
    .await;
    assert_eq!(names(&found.catalog), ["good"]);
    let (code, _) = issue(&found.catalog, "file-link");
    assert_eq!(
        code,
        IssueCode::Unreadable,
        "the link out is refused, not followed"
    );
    assert_eq!(
        found.stats.candidates, 2,
        "only `good` and `file-link` are listed"
    );
}

// ------------------------------------------------------------------------ 5. non-UTF-8 everywhere

/// Names that are not UTF-8 and bytes that are not UTF-8, on local disk: discovery skips the
/// directory it cannot name and the frontmatter it cannot decode (`not-utf8` issue); a skill whose
/// *body* is not UTF-8 loads, and `read_file` answers that it is binary; `ls`, `glob` and `grep` over
/// a directory with non-UTF-8 names and binary files answer with the rest. No panic anywhere.
#[tokio::test]
async fn non_utf8_names_and_bytes_are_skipped_or_reported() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let bad_name = std::ffi::OsStr::from_bytes(b"bad-\xff\xfe-name");
    std::fs::create_dir_all(root.join("skills").join(bad_name)).unwrap();
    std::fs::write(
        root.join("skills").join(bad_name).join("SKILL.md"),
        skill_md("bad-name", "Unnameable directory."),
    )
    .unwrap();
    write(
        root,
        "skills/latin1/SKILL.md",
        b"---\nname: latin1\ndescription: caf\xe9\n---\n",
    );
    write(
        root,
        "skills/binary-body/SKILL.md",
        [
            &b"---\nname: binary-body\ndescription: Body is not text.\n---\n"[..],
            b"\xff\xfe\x00\x01 body",
        ]
        .concat(),
    );
    write(root, "skills/good/SKILL.md", skill_md("good", "Fine."));
    write(root, "skills/good/notes.txt", "needle in text\n");
    write(root, "skills/good/blob.bin", b"needle\x00\xff\xfe binary");
    std::fs::write(
        root.join("skills/good")
            .join(std::ffi::OsStr::from_bytes(b"needle-\xff.txt")),
        "needle",
    )
    .unwrap();

    let backend: Arc<dyn Backend> = Arc::new(FilesystemBackend::new(root).unwrap());
    let catalog = scan(backend.clone(), "/skills").await;
    assert_eq!(names(&catalog), ["binary-body", "good"]);
    assert_eq!(issue(&catalog, "latin1").0, IssueCode::NotUtf8);
    assert!(
        catalog.issues().iter().all(|i| !i.path.as_str().contains("bad-")),
        "the unnameable directory is never a candidate"
    );

    let tools = trellis_middleware::tools::file_tools(FileAccess::new(backend));
    let call = |name: &str, args: Value| {
        let tool = tools.iter().find(|t| t.name() == name).unwrap().clone();
        async move { tool.call(args, &ToolContext::detached("call_1")).await.unwrap() }
    };
    let read = call("read_file", json!({"file_path": "/skills/binary-body/SKILL.md"})).await;
    assert!(
        read.text_content().contains("binary file"),
        "{}",
        read.text_content()
    );
    let ls = call("ls", json!({"path": "/skills/good"})).await;
    assert!(
        !ls.is_error && ls.text_content().contains("notes.txt") && ls.text_content().contains("blob.bin"),
        "{}",
        ls.text_content()
    );
    assert!(
        !ls.text_content().contains("needle-"),
        "the non-UTF-8 name is left out: {}",
        ls.text_content()
    );
    let glob = call("glob", json!({"pattern": "**"})).await;
    assert!(
        !glob.is_error && glob.text_content().contains("notes.txt"),
        "{}",
        glob.text_content()
    );
    let grep = call(
        "grep",
        json!({"pattern": "needle", "path": "/skills", "output_mode": "content"}),
    )
    .await;
    assert!(!grep.is_error, "{}", grep.text_content());
    assert!(
        grep.text_content().contains("notes.txt"),
        "{}",
        grep.text_content()
    );
    assert!(
        !grep.text_content().contains("blob.bin:"),
        "binary files are not searched: {}",
        grep.text_content()
    );
}
