//! `trellis skills list` and `trellis run` with their persisted catalog, and `trellis skills index URL` publishing one
//! into an S3 source (the emulator) that a worker with no local cache then reads.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Output;

use super::harness::{TrellisRun, trellis};
use std::sync::Arc;

use trellis_agent::backend::{Backend, ObjectStoreBackend, StoreOptions, VirtualPath, WriteMode};

fn skill(dir: &Path, name: &str, description: &str) {
    std::fs::create_dir_all(dir.join(name)).unwrap();
    std::fs::write(
        dir.join(name).join("SKILL.md"),
        format!("---\nname: {name}\ndescription: {description}\n---\n\n# {name}\n"),
    )
    .unwrap();
}

fn list_json(cache: &Path, sources: &[&str], env: &[(String, String)]) -> (serde_json::Value, Output) {
    let out = trellis()
        .args(["skills", "list", "--json", "--cache-dir"])
        .arg(cache)
        .args(sources)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (serde_json::from_slice(&out.stdout).unwrap(), out)
}

fn descriptions(value: &serde_json::Value) -> Vec<(String, String)> {
    value["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_owned(),
                s["description"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn local_cache_is_written_once_and_follows_every_change() {
    let lib = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    for i in 0..5 {
        skill(lib.path(), &format!("s{i}"), &format!("Skill {i}"));
    }
    let src = lib.path().to_str().unwrap();
    let (first, _) = list_json(cache.path(), &[src], &[]);
    let files: Vec<_> = std::fs::read_dir(cache.path()).unwrap().collect();
    assert_eq!(files.len(), 1, "one cache file per source");
    let (second, _) = list_json(cache.path(), &[src], &[]);
    assert_eq!(first, second, "a warm cache lists the same");

    skill(lib.path(), "s1", "Skill one, changed");
    skill(lib.path(), "added", "A new skill");
    std::fs::remove_dir_all(lib.path().join("s4")).unwrap();
    let (third, _) = list_json(cache.path(), &[src], &[]);
    let got = descriptions(&third);
    assert!(
        got.contains(&("s1".into(), "Skill one, changed".into())),
        "{got:?}"
    );
    assert!(got.iter().any(|(n, _)| n == "added"), "{got:?}");
    assert!(!got.iter().any(|(n, _)| n == "s4"), "{got:?}");

    // A corrupt cache file is ignored with a warning, and the listing is still right.
    let file = std::fs::read_dir(cache.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::write(&file, b"garbage").unwrap();
    let (fourth, out) = list_json(cache.path(), &[src], &[]);
    assert_eq!(fourth, third);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("corrupt catalog cache"), "{log}");

    // --no-cache writes nothing.
    let empty = tempfile::tempdir().unwrap();
    let out = trellis()
        .args(["skills", "list", "--no-cache", "--cache-dir"])
        .arg(empty.path())
        .arg(src)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(std::fs::read_dir(empty.path()).unwrap().count(), 0);
}

#[test]
fn skills_index_then_list_reads_the_index() {
    let [endpoint, bucket] = crate::support::require_env!("TRELLIS_S3_ENDPOINT", "TRELLIS_TEST_BUCKET");
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let prefix = format!("cli-skills-index-{}-{nanos}/skills", std::process::id());
    let url = format!("s3://{bucket}/{prefix}");
    let options = StoreOptions::s3_compatible(&endpoint, "test", "test");
    let store: Arc<dyn Backend> = Arc::new(ObjectStoreBackend::from_url(&url, &options).unwrap());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let put = |name: &str, description: &str| {
        let path = VirtualPath::parse(&format!("/{name}/SKILL.md")).unwrap();
        let text = format!("---\nname: {name}\ndescription: {description}\n---\n");
        rt.block_on(store.write(&path, text.into(), WriteMode::Overwrite))
            .unwrap();
    };
    for i in 0..6 {
        put(&format!("s{i}"), &format!("Skill {i}"));
    }
    let env: Vec<(String, String)> = [
        ("AWS_ENDPOINT", endpoint.as_str()),
        ("AWS_ALLOW_HTTP", "true"),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_REGION", "us-east-1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let index = |env: &[(String, String)]| {
        trellis()
            .args(["skills", "index", &url])
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap()
    };
    let out = index(&env);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("published 6 skills (6 files read, 0 reused) to "),
        "{text}"
    );
    assert!(
        rt.block_on(store.stat(&VirtualPath::parse("/.trellis-skills-index").unwrap()))
            .is_ok()
    );
    let again = index(&env);
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(
        text.starts_with("unchanged: 6 skills (0 files read, 6 reused)"),
        "{text}"
    );

    // A worker with an empty local cache reads the index (only the file changed since is read),
    // the list is the same as a scan from scratch, and the change after publishing is seen.
    put("s2", "Skill two, changed after the index");
    let cache = tempfile::tempdir().unwrap();
    let mut verbose = env.clone();
    verbose.push(("RUST_LOG".into(), "info".into()));
    let (value, out) = list_json(cache.path(), &[&url], &verbose);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("1 SKILL.md file(s) read, 5 reused from the catalog cache"),
        "{log}"
    );
    let got = descriptions(&value);
    assert_eq!(got.len(), 6);
    assert!(
        got.contains(&("s2".into(), "Skill two, changed after the index".into())),
        "{got:?}"
    );
    let fresh = trellis()
        .args(["skills", "list", "--json", "--no-cache", &url])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let fresh: serde_json::Value = serde_json::from_slice(&fresh.stdout).unwrap();
    assert_eq!(value, fresh, "index-seeded listing equals a scan from scratch");

    // A local directory is not an object store.
    let out = trellis().args(["skills", "index", "/tmp"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("give a URL"));
}

/// One `trellis run --json` of a new thread; the `read` and `reused` counts of its skills
/// `loaded` event.
fn run_counting(skills: &Path, state: &Path, cache: &Path, uri: &str, extra: &[&str]) -> (u64, u64) {
    let output = TrellisRun::new()
        .args(["--json", "--sandbox", "none"])
        .skills(skills)
        .state_dir(state)
        .arg("--cache-dir")
        .arg(cache)
        .args(extra)
        .arg("hello")
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("ANTHROPIC_BASE_URL", uri)
        .command()
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let loaded = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| e["event"] == "middleware" && e["middleware"] == "skills" && e["kind"] == "loaded")
        .expect("a skills loaded event");
    (
        loaded["data"]["read"].as_u64().unwrap(),
        loaded["data"]["reused"].as_u64().unwrap(),
    )
}

/// `trellis run` keeps each skills source's catalog in the cache directory, so the next process
/// reads only what changed: the second run reads no `SKILL.md`, a run after an edit reads just
/// that one, and `--no-cache` reads them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trellis_run_reuses_the_persisted_catalog_and_sees_every_change() {
    use super::harness::{messages, reply};
    let server = wiremock::MockServer::start().await;
    messages()
        .respond_with(reply(
            serde_json::json!([{"type": "text", "text": "ok"}]),
            "end_turn",
        ))
        .mount(&server)
        .await;
    let skills = tempfile::tempdir().unwrap();
    for i in 0..5 {
        let dir = skills.path().join(format!("skill-{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("SKILL.md"),
            format!("---\nname: skill-{i}\ndescription: Does thing {i}.\n---\nBody {i}.\n"),
        )
        .unwrap();
    }
    let cache = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let uri = server.uri();
    let runs = tokio::task::spawn_blocking(move || {
        let run = |extra: &[&str]| run_counting(skills.path(), state.path(), cache.path(), &uri, extra);
        let first = run(&[]);
        let written = std::fs::read_dir(cache.path()).unwrap().count();
        let second = run(&[]);
        // A changed description (a different size, so any file system sees the change).
        std::fs::write(
            skills.path().join("skill-2").join("SKILL.md"),
            "---\nname: skill-2\ndescription: Does a changed thing, now.\n---\nBody.\n",
        )
        .unwrap();
        let after_edit = run(&[]);
        let uncached = run(&["--no-cache"]);
        (first, written, second, after_edit, uncached)
    })
    .await
    .unwrap();
    let (first, written, second, after_edit, uncached) = runs;
    assert_eq!(first, (5, 0), "the first process reads every SKILL.md");
    assert!(written >= 1, "the catalog is persisted in the cache directory");
    assert_eq!(second, (0, 5), "the next process reads none");
    assert_eq!(
        after_edit,
        (1, 4),
        "an edit is seen at once, and only that file is read"
    );
    assert_eq!(uncached, (5, 0), "--no-cache scans from scratch");
}
