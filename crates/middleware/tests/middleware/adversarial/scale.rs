//! A skill library of 100,000 directories on local disk: discovery finishes, every valid skill is in
//! the catalog, the ten broken ones are skipped with their reason, the section stays within its token
//! budget, and search still reaches a skill that is not listed. Times are printed (run with
//! `--nocapture`), never asserted.
//!
//! The 100,000 directories are made in `/dev/shm` when the host has it: on the CI machine's virtual
//! disk, making and removing them took 52.7 s and 39.4 s of this test's 99 s, against 7 s for the
//! discovery, rendering and search it checks. The code under test reads through the same
//! `FilesystemBackend` either way; the disk-backed speed is `cargo xtask bench`'s business
//! (`skills_discovery`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use trellis_middleware::backend::{Backend, FilesystemBackend};
use trellis_middleware::runtime::context::RunContext;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::skills::SkillSource;
use trellis_middleware::skills::prompt::render::{self, RenderOptions};
use trellis_middleware::skills::{DiscoveryOptions, IssueCode, SearchSkillsTool, discover};
use trellis_middleware::*;

const SKILLS: usize = 100_000;
const BROKEN: usize = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_thousand_skill_directories_load_within_the_budget() {
    let dir = scratch_dir();
    let root = dir.path().join("skills");
    let started = Instant::now();
    let broken_every = SKILLS / BROKEN;
    for i in 0..SKILLS {
        let name = format!("skill-{i:06}");
        let skill_dir = root.join(&name);
        std::fs::create_dir_all(&skill_dir).unwrap();
        let text = if i % broken_every == 7 {
            format!("---\nname: {name}\ndescription: [unclosed\n---\n")
        } else {
            format!(
                "---\nname: {name}\ndescription: Handles request type {i} for the operations team, checks inputs and files a report.\n---\n# {name}\n"
            )
        };
        std::fs::write(skill_dir.join("SKILL.md"), text).unwrap();
    }
    let generated = started.elapsed();

    let backend: Arc<dyn Backend> = Arc::new(FilesystemBackend::new(&root).unwrap());
    let source = SkillSource::new(backend, "/").unwrap();
    let started = Instant::now();
    let found = discover(&[source], &DiscoveryOptions::default()).await;
    let discovered = started.elapsed();

    let catalog = &found.catalog;
    assert_eq!(found.stats.candidates, SKILLS);
    assert_eq!(
        catalog.len(),
        SKILLS - BROKEN,
        "every valid skill is in the catalog"
    );
    assert_eq!(catalog.skipped().len(), BROKEN);
    assert!(
        catalog.issues().iter().all(|i| i.code == IssueCode::InvalidYaml),
        "only the broken files have issues"
    );

    let started = Instant::now();
    let options = RenderOptions::default();
    let section = render::render(catalog, &options);
    let rendered = started.elapsed();
    assert!(
        section.tokens <= options.budget_tokens,
        "{} > {}",
        section.tokens,
        options.budget_tokens
    );
    assert_eq!(section.total, SKILLS - BROKEN);
    assert!(section.listed < section.total && section.needs_search());
    assert!(section.text.contains("skills are not listed above"));

    // A skill far down the list is still reachable by name through search.
    let target = "skill-077777";
    assert!(!section.text.contains(target), "not listed");
    let started = Instant::now();
    let search = SearchSkillsTool::new(Arc::new(catalog.clone()));
    let run = RunContext::detached(Arc::new(ScriptedModel::new()));
    let state = State::default();
    let out = search
        .call(json!({"query": target}), &ToolContext::new(&run, &state, "s"))
        .await
        .unwrap();
    let searched = started.elapsed();
    let text = out.text_content();
    assert!(text.starts_with(&format!("- {target}:")), "{text}");

    let started = Instant::now();
    dir.close().unwrap();
    let removed = started.elapsed();
    eprintln!(
        "100,000 skills: generated in {generated:.1?}, discovered in {discovered:.1?} ({} read, {} read on), \
         rendered in {rendered:.1?} ({} listed, {} tokens), index + search in {searched:.1?}, removed in \
         {removed:.1?}",
        found.stats.read, found.stats.read_on, section.listed, section.tokens
    );
}

/// A temporary directory in RAM (`/dev/shm`) when the host has a writable one, else in the default
/// temporary folder.
fn scratch_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("trellis-scale-")
        .tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap()
}
