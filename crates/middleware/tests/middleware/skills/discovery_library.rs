//! Discovery from backends, part two: a fixture library with every broken input, asserting its
//! tier; rescans that re-read only what changed; and the same library on the S3 emulator behaving
//! like the local one. Listing, sources, labels and the read pattern are in
//! `skills/discovery_listing.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use trellis_middleware::backend::{FilesystemBackend, VirtualPath};
use trellis_middleware::skills::{DiscoveryOptions, IssueCode, Severity, SkillCatalog, discover, rescan};

use crate::skills::common::*;

// ---- every broken input, with its tier ----

/// Writes the fixture library under `/lib`: good skills, each class of broken input, and a file
/// that stands where a source directory should be.
async fn fixture_library(b: &Shared) {
    put(b, "/lib/good-one/SKILL.md", skill_md("good-one", "A good skill")).await;
    put(b, "/lib/good-two/SKILL.md", "---\nname: good-two\ndescription: Another\nlicense: MIT\nallowed-tools: Read Write\nmetadata:\n  include_tools: crm_read crm_write\n---\n").await;
    put(
        b,
        "/lib/bom/SKILL.md",
        format!(
            "\u{feff}{}",
            skill_md("bom", "Starts with a BOM").replace('\n', "\r\n")
        ),
    )
    .await;
    // Tier 1: silently not a skill.
    put(b, "/lib/no-skill-md/README.md", "no skill here").await;
    put(b, "/lib/stray-file.md", "a file at the source root").await;
    // Tier 2: skipped with a logged warning.
    put(
        b,
        "/lib/bad-yaml/SKILL.md",
        "---\nname: bad-yaml\ndescription: [unclosed\n---\n",
    )
    .await;
    put(
        b,
        "/lib/missing-description/SKILL.md",
        "---\nname: missing-description\n---\n",
    )
    .await;
    put(
        b,
        "/lib/missing-name/SKILL.md",
        "---\ndescription: nameless\n---\n",
    )
    .await;
    put(b, "/lib/frontmatter-list/SKILL.md", "---\n- a\n- b\n---\n").await;
    put(b, "/lib/no-frontmatter/SKILL.md", "# Just a title\n").await;
    put(
        b,
        "/lib/unclosed/SKILL.md",
        "---\nname: unclosed\ndescription: never closed\n",
    )
    .await;
    put(
        b,
        "/lib/non-utf8/SKILL.md",
        Bytes::from_static(b"---\nname: non-utf8\ndescription: caf\xe9\n---\n"),
    )
    .await;
    let mut big = skill_md("oversized", "too big").into_bytes();
    big.resize(10 * 1024 * 1024 + 1, b'x');
    put(b, "/lib/oversized/SKILL.md", big).await;
    put(
        b,
        "/lib/skill-md-dir/SKILL.md/inner.txt",
        "SKILL.md is a directory",
    )
    .await;
    put(
        b,
        "/lib/huge-frontmatter/SKILL.md",
        format!(
            "---\nname: huge\ndescription: d\nmetadata:\n  blob: {}\n---\n",
            "y".repeat(70 * 1024)
        ),
    )
    .await;
    // Loads, with a warning.
    put(
        b,
        "/lib/name-mismatch/SKILL.md",
        skill_md("other-name", "Named differently"),
    )
    .await;
    put(
        b,
        "/lib/invalid-name/SKILL.md",
        skill_md("Invalid_Name", "Bad characters"),
    )
    .await;
    put(
        b,
        "/lib/long-description/SKILL.md",
        skill_md("long-description", &"w".repeat(1500)),
    )
    .await;
    put(
        b,
        "/lib/long-frontmatter/SKILL.md",
        format!(
            "---\nname: long-frontmatter\ndescription: d\nmetadata:\n{}---\n",
            (0..150)
                .map(|i| format!("  key{i}: a value long enough to pass four KiB {i}\n"))
                .collect::<String>()
        ),
    )
    .await;
    // Tier 3: a source that cannot be listed.
    put(b, "/not-a-dir", "a file").await;
}

/// What a scan of the fixture library gives, without version tags (they differ between stores).
#[derive(Debug, PartialEq)]
struct Summary {
    loaded: Vec<String>,
    skipped: BTreeMap<String, IssueCode>,
    warned: BTreeMap<String, Vec<IssueCode>>,
    warnings: usize,
    read: usize,
    read_on: usize,
}

fn summarize(found: &trellis_middleware::skills::Discovery) -> Summary {
    let c = &found.catalog;
    let dir = |p: &VirtualPath| p.segments().nth(1).unwrap_or_default().to_owned();
    let mut warned: BTreeMap<String, Vec<IssueCode>> = BTreeMap::new();
    let mut skipped = BTreeMap::new();
    for issue in c.issues() {
        match issue.severity() {
            Severity::Skipped => {
                skipped.insert(dir(&issue.path), issue.code);
            }
            Severity::Warning => warned.entry(dir(&issue.path)).or_default().push(issue.code),
            Severity::Spec => {}
        }
    }
    assert_eq!(
        skipped.len(),
        c.skipped().len(),
        "every skipped file has its reason"
    );
    Summary {
        loaded: c.skills().iter().map(|s| s.name.clone()).collect(),
        skipped,
        warned,
        warnings: c.warnings().len(),
        read: found.stats.read,
        read_on: found.stats.read_on,
    }
}

fn expected_summary() -> Summary {
    let skipped = [
        ("bad-yaml", IssueCode::InvalidYaml),
        ("frontmatter-list", IssueCode::NotAMapping),
        ("huge-frontmatter", IssueCode::FrontmatterMissing),
        ("missing-description", IssueCode::DescriptionMissing),
        ("missing-name", IssueCode::NameMissing),
        ("no-frontmatter", IssueCode::FrontmatterMissing),
        ("non-utf8", IssueCode::NotUtf8),
        ("oversized", IssueCode::FileTooLarge),
        ("skill-md-dir", IssueCode::SkillMdIsDirectory),
        ("unclosed", IssueCode::FrontmatterMissing),
    ];
    let warned = [
        (
            "invalid-name",
            vec![IssueCode::NameCharset, IssueCode::NameDirectoryMismatch],
        ),
        ("long-description", vec![IssueCode::DescriptionTruncated]),
        ("name-mismatch", vec![IssueCode::NameDirectoryMismatch]),
    ];
    Summary {
        loaded: [
            "Invalid_Name",
            "bom",
            "good-one",
            "good-two",
            "long-description",
            "long-frontmatter",
            "other-name",
        ]
        .map(String::from)
        .to_vec(),
        skipped: skipped.into_iter().map(|(d, c)| (d.to_owned(), c)).collect(),
        warned: warned.into_iter().map(|(d, c)| (d.to_owned(), c)).collect(),
        warnings: 1,
        read: 18,
        read_on: 2,
    }
}

async fn fixture_scan(b: &Shared) -> trellis_middleware::skills::Discovery {
    let sources = [source(b, "/lib"), source(b, "/not-a-dir")];
    discover(&sources, &DiscoveryOptions::default()).await
}

#[tokio::test]
async fn every_broken_input_lands_in_its_tier_on_state() {
    let b = state();
    fixture_library(&b).await;
    let found = fixture_scan(&b).await;
    assert_eq!(summarize(&found), expected_summary());
    assert!(
        found.catalog.warnings()[0].contains("not a directory"),
        "{:?}",
        found.catalog.warnings()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_broken_input_lands_in_its_tier_on_local_disk() {
    let dir = tempfile::tempdir().unwrap();
    let b: Shared = Arc::new(FilesystemBackend::new(dir.path()).unwrap());
    fixture_library(&b).await;
    let found = fixture_scan(&b).await;
    assert_eq!(summarize(&found), expected_summary());
    let good = found.catalog.get("good-two").unwrap();
    assert_eq!(good.include_tools, ["crm_read", "crm_write"]);
    assert_eq!(good.allowed_tools, ["Read", "Write"]);
}

// ---- rescans ----

/// Runs the rescan scenario on any backend: nothing changed, one edit, one new skill, one removal.
async fn rescan_scenario(b: &Shared) {
    fixture_library(b).await;
    let sources = [source(b, "/lib"), source(b, "/not-a-dir")];
    let options = DiscoveryOptions::default();
    let first = discover(&sources, &options).await;

    // Only files without a version tag are read again: here, the SKILL.md that is a directory. The
    // 16 others that were read (7 loaded, 9 skipped) are reused; `no-skill-md` is no longer a
    // candidate at all.
    let same = rescan(&sources, &first.catalog, &options).await;
    assert_eq!(same.stats.read, 1, "{:?}", same.stats);
    assert_eq!(same.stats.reused, 16);
    assert_eq!(same.catalog.warnings(), first.catalog.warnings());
    assert_eq!(summarize(&same).loaded, summarize(&first).loaded);
    assert_eq!(same.catalog.issues(), first.catalog.issues());
    assert_eq!(same.catalog.skills(), first.catalog.skills());

    put(
        b,
        "/lib/good-one/SKILL.md",
        skill_md("good-one", "Edited description"),
    )
    .await;
    put(b, "/lib/brand-new/SKILL.md", skill_md("brand-new", "Just added")).await;
    b.delete(&vp("/lib/good-two/SKILL.md")).await.unwrap();
    let after = rescan(&sources, &same.catalog, &options).await;
    assert_eq!(
        after.stats.read, 3,
        "edited + new + the directory SKILL.md: {:?}",
        after.stats
    );
    assert_eq!(
        after.catalog.get("good-one").unwrap().description,
        "Edited description"
    );
    assert!(after.catalog.get("brand-new").is_some());
    assert!(after.catalog.get("good-two").is_none());
    // A rescan gives what a fresh scan gives.
    let fresh = discover(&sources, &options).await;
    assert_eq!(after.catalog, fresh.catalog);
}

#[tokio::test]
async fn rescan_rereads_only_changed_files_on_state() {
    rescan_scenario(&state()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rescan_rereads_only_changed_files_on_local_disk() {
    let dir = tempfile::tempdir().unwrap();
    rescan_scenario(&(Arc::new(FilesystemBackend::new(dir.path()).unwrap()) as Shared)).await;
}

// ---- the S3 emulator behaves like local disk ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_library_behaves_like_local_disk() {
    let Some((endpoint, bucket)) = s3_or_skip() else {
        return;
    };
    let remote = s3(&endpoint, &bucket, "fixtures");
    fixture_library(&remote).await;
    let dir = tempfile::tempdir().unwrap();
    let local: Shared = Arc::new(FilesystemBackend::new(dir.path()).unwrap());
    fixture_library(&local).await;
    let (on_s3, on_disk) = (fixture_scan(&remote).await, fixture_scan(&local).await);
    assert_eq!(summarize(&on_s3), summarize(&on_disk));
    assert_eq!(summarize(&on_s3), expected_summary());
    let strip = |c: &SkillCatalog| {
        c.skills()
            .iter()
            .map(|s| trellis_middleware::skills::SkillMetadata {
                version: None,
                ..s.clone()
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(&on_s3.catalog), strip(&on_disk.catalog));
    assert_eq!(on_s3.catalog.issues(), on_disk.catalog.issues());
    assert!(
        on_s3.catalog.skills().iter().all(|s| s.version.is_some()),
        "ETags are kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_rescan_rereads_only_changed_files() {
    let Some((endpoint, bucket)) = s3_or_skip() else {
        return;
    };
    rescan_scenario(&s3(&endpoint, &bucket, "rescan")).await;
}
