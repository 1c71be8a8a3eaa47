//! Skill discovery, rendering and search at 100 / 1,000 / 5,000 / 20,000 skills.
//!
//! Libraries are generated deterministically (skill `i` has the same bytes whatever the size), shaped
//! like the reference's synthetic library: ~8.6 KB, ~205 lines per `SKILL.md`, descriptions up to
//! 150 characters in plain / double-quoted / single-quoted / folded styles, optional `license` (50%),
//! `compatibility` (20%), `metadata` (40%) and `allowed-tools` (30%), 5% non-ASCII descriptions.
//!
//! Local disk: `FilesystemBackend` on a temporary directory. The floor is one thread that lists the
//! source directory and reads the first 4 KiB of every `SKILL.md` with plain blocking I/O, measured
//! in the same run; `ratio` = discovery / floor (target at 5,000: at most 1.5). `backend_io_ms` is
//! the same backend's `ls` plus one `read_many` of all 4 KiB prefixes, without parsing, and
//! `ratio_to_backend_io` what discovery adds to it. Peak RSS is `VmHWM` of a fresh child process
//! that only discovers, renders and indexes the library (target at 20,000: under 50 MB).
//!
//! S3 (when `TRELLIS_S3_ENDPOINT` is set, as `cargo xtask bench` does): the same libraries up to
//! 5,000 skills (writing 20,000 objects to moto takes minutes), each under a fresh prefix of
//! `TRELLIS_TEST_BUCKET` (default `trellis-test`); the floor there is `ls` plus one `read_many` of
//! 4 KiB ranges through the same backend. Set `TRELLIS_BENCH_SIZES=100,1000` to pick sizes.
//!
//! Persisted catalog (`case: persisted_catalog`, at the largest size of each store): a warm
//! `LocalCatalogDir` and a new backend per run, as a new `trellis skills list` process has:
//! `unchanged_ms` (target ≤ 1,000 ms at 5,000 skills on S3, was the cold 12.5 s) and
//! `one_percent_changed_ms` against `read_changed_ms`, one `read_many` of just the changed files
//! (target: ≤ 1,000 ms plus that).
//!
//! Prints one JSON object per line.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "bench_util/mod.rs"]
mod bench_util;
#[path = "bench_util/library.rs"]
mod library;

use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bench_util::{child_spec, median, ms, peak_rss_mb, peak_rss_of_child, runtime};
use futures::StreamExt;
use library::{generate_local, skill};
use trellis_middleware::backend::{
    Backend, ByteRange, FilesystemBackend, ObjectStoreBackend, StoreOptions, VirtualPath, WriteMode,
};
use trellis_middleware::skills::{
    CatalogStore, DiscoveryOptions, LocalCatalogDir, Persisted, RenderOptions, SkillIndex, SkillSource,
    discover, discover_persisted, render, rescan,
};

fn floor_local(root: &Path) -> (Duration, usize) {
    let started = Instant::now();
    let mut buf = vec![0u8; 4096];
    let mut bytes = 0;
    for entry in std::fs::read_dir(root.join("skills")).unwrap() {
        let path = entry.unwrap().path().join("SKILL.md");
        let mut file = std::fs::File::open(path).unwrap();
        let mut filled = 0;
        while filled < buf.len() {
            let got = file.read(&mut buf[filled..]).unwrap();
            if got == 0 {
                break;
            }
            filled += got;
        }
        bytes += filled;
    }
    (started.elapsed(), bytes)
}

/// The backend's own cost for the same I/O as discovery (ls + one read_many of 4 KiB prefixes, no
/// parsing): median of `runs` after one warm-up.
async fn backend_io(backend: &Arc<dyn Backend>, runs: usize) -> Duration {
    floor_backend(backend).await;
    let mut times = Vec::new();
    for _ in 0..runs {
        times.push(floor_backend(backend).await);
    }
    median(times)
}

/// Measure discovery, rendering, search and an unchanged rescan; peak RSS comes from a fresh child
/// process doing discovery, rendering and indexing only.
async fn measure(
    store: &str,
    location: &str,
    backend: Arc<dyn Backend>,
    n: usize,
    floor: Duration,
    backend_floor: Duration,
    runs: usize,
) {
    let sources = vec![SkillSource::new(backend.clone(), "/skills").unwrap()];
    let options = DiscoveryOptions::default();
    let mut times = Vec::new();
    let mut found = None;
    for _ in 0..runs {
        let started = Instant::now();
        let d = discover(&sources, &options).await;
        times.push(started.elapsed());
        found = Some(d);
    }
    let found = found.unwrap();
    let discovery = median(times);
    assert_eq!(found.catalog.len(), n, "every generated skill loads");

    let render_options = RenderOptions::default();
    let mut render_times = Vec::new();
    let mut section = None;
    for _ in 0..5 {
        let started = Instant::now();
        section = Some(render(&found.catalog, &render_options));
        render_times.push(started.elapsed());
    }
    let section = section.unwrap();

    let started = Instant::now();
    let index = SkillIndex::new(&found.catalog);
    let index_time = started.elapsed();
    let started = Instant::now();
    let hits = index.search(&found.catalog, "convert invoice pdf", 8);
    let search_time = started.elapsed();
    assert!(!hits.is_empty());
    let last = &found.catalog.skills()[n - 1].name;
    assert_eq!(
        index.search(&found.catalog, last, 1)[0].name,
        *last,
        "exact names are findable"
    );

    let started = Instant::now();
    let again = rescan(&sources, &found.catalog, &options).await;
    let rescan_time = started.elapsed();
    assert_eq!(again.stats.read, 0, "nothing changed, nothing re-read");

    println!(
        "{}",
        serde_json::json!({
            "bench": "skills_discovery",
            "store": store,
            "skills": n,
            "discovery_ms": ms(discovery),
            "floor_ms": ms(floor),
            "ratio": (discovery.as_secs_f64() / floor.as_secs_f64() * 100.0).round() / 100.0,
            "backend_io_ms": ms(backend_floor),
            "ratio_to_backend_io": (discovery.as_secs_f64() / backend_floor.as_secs_f64() * 100.0).round() / 100.0,
            "read_on": found.stats.read_on,
            "render_ms": ms(median(render_times)),
            "section_tokens": section.tokens,
            "budget_tokens": render_options.budget_tokens,
            "within_budget": section.tokens <= render_options.budget_tokens,
            "listed": section.listed,
            "shortened": section.shortened,
            "index_ms": ms(index_time),
            "search_ms": ms(search_time),
            "rescan_unchanged_ms": ms(rescan_time),
            "rescan_reread": again.stats.read,
            "peak_rss_mb": peak_rss_in_child(store, location, n),
            "runs": runs,
        })
    );
}

/// A new process with a warm persisted catalog: each run builds its backend with `fresh` and
/// loads the catalog from disk; see the module docs.
async fn persisted_catalog(store: &str, fresh: impl Fn() -> Arc<dyn Backend>, n: usize) {
    let cache = tempfile::tempdir().unwrap();
    let persisted = || {
        let local: Arc<dyn CatalogStore> = Arc::new(LocalCatalogDir::new(cache.path()));
        vec![Some(Persisted::new(format!("bench:{store}"), local))]
    };
    let sources = |b: Arc<dyn Backend>| vec![SkillSource::new(b, "/skills").unwrap()];
    let options = DiscoveryOptions::default();
    let started = Instant::now();
    let cold = discover_persisted(&sources(fresh()), &persisted(), &options).await;
    let cold_time = started.elapsed();
    assert_eq!(cold.discovery.catalog.len(), n);
    let cache_bytes: u64 = std::fs::read_dir(cache.path())
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    let mut unchanged = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        let d = discover_persisted(&sources(fresh()), &persisted(), &options).await;
        unchanged.push(started.elapsed());
        assert_eq!(
            (d.discovery.stats.read, d.discovery.catalog.len()),
            (0, n),
            "warm: nothing read"
        );
    }
    let mut changed_times = Vec::new();
    let mut read_times = Vec::new();
    let mut changed_files = 0;
    for round in 0..3 {
        let writer = fresh();
        let paths: Vec<VirtualPath> = (round..n)
            .step_by(100)
            .map(|i| {
                let (name, _) = skill(i);
                VirtualPath::parse(&format!("/skills/{name}/SKILL.md")).unwrap()
            })
            .collect();
        changed_files = paths.len();
        futures::stream::iter((round..n).step_by(100).zip(paths.clone()))
            .map(|(i, path)| {
                let writer = writer.clone();
                async move {
                    let text = format!("{}\nchanged in round {round}\n", skill(i).1);
                    writer
                        .write(&path, text.into(), WriteMode::Overwrite)
                        .await
                        .unwrap();
                }
            })
            .buffer_unordered(16)
            .collect::<Vec<()>>()
            .await;
        let started = Instant::now();
        let d = discover_persisted(&sources(fresh()), &persisted(), &options).await;
        changed_times.push(started.elapsed());
        assert_eq!(
            d.discovery.stats.read, changed_files,
            "only the changed files are read"
        );
        let reader = fresh();
        let started = Instant::now();
        let read = reader.read_many(&paths, Some(ByteRange::prefix(4096))).await;
        read_times.push(started.elapsed());
        assert!(read.iter().all(Result::is_ok));
    }
    let unchanged = median(unchanged);
    let changed = median(changed_times);
    let read_changed = median(read_times);
    println!(
        "{}",
        serde_json::json!({
            "bench": "skills_discovery",
            "case": "persisted_catalog",
            "store": store,
            "skills": n,
            "cold_and_save_ms": ms(cold_time),
            "cache_bytes": cache_bytes,
            "unchanged_ms": ms(unchanged),
            "changed_files": changed_files,
            "one_percent_changed_ms": ms(changed),
            "read_changed_ms": ms(read_changed),
            "unchanged_within_target": unchanged.as_secs_f64() <= 1.0,
            "changed_within_target": changed.as_secs_f64() <= 1.0 + read_changed.as_secs_f64(),
        })
    );
}

/// `cargo bench` passes `--bench`; under `cargo test --all-targets` the binary runs without it and
/// does a quick smoke run instead (small sizes), so CI checks it works without paying for it.
fn smoke() -> bool {
    !std::env::args().any(|a| a == "--bench")
}

fn sizes(default: &[usize]) -> Vec<usize> {
    if smoke() {
        return vec![100];
    }
    match std::env::var("TRELLIS_BENCH_SIZES") {
        Ok(v) => v.split(',').filter_map(|s| s.trim().parse().ok()).collect(),
        Err(_) => default.to_vec(),
    }
}

fn s3_backend(endpoint: &str, prefix: &str) -> Arc<dyn Backend> {
    let bucket = std::env::var("TRELLIS_TEST_BUCKET").unwrap_or_else(|_| "trellis-test".into());
    let options = StoreOptions::s3_compatible(endpoint, "test", "test");
    Arc::new(ObjectStoreBackend::from_url(&format!("s3://{bucket}/{prefix}"), &options).unwrap())
}

async fn floor_backend(backend: &Arc<dyn Backend>) -> Duration {
    let started = Instant::now();
    let dir = VirtualPath::parse("/skills").unwrap();
    let paths: Vec<VirtualPath> = backend
        .ls(&dir)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.path.join("SKILL.md").unwrap())
        .collect();
    let results = backend.read_many(&paths, Some(ByteRange::prefix(4096))).await;
    assert!(results.iter().all(Result::is_ok));
    started.elapsed()
}

/// Peak RSS of a fresh process that discovers, renders and indexes the library at `location` (a
/// child of this bench, so earlier sizes and the floors' buffers do not count).
fn peak_rss_in_child(store: &str, location: &str, n: usize) -> f64 {
    peak_rss_of_child(&format!("{store}|{location}|{n}"))
}

async fn child(spec: &str) {
    let mut parts = spec.split('|');
    let (store, location, n) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    let n: usize = n.parse().unwrap();
    let backend: Arc<dyn Backend> = match store {
        "local" => Arc::new(FilesystemBackend::new(location).unwrap()),
        _ => s3_backend(&std::env::var("TRELLIS_S3_ENDPOINT").unwrap(), location),
    };
    let sources = vec![SkillSource::new(backend, "/skills").unwrap()];
    let found = discover(&sources, &DiscoveryOptions::default()).await;
    assert_eq!(found.catalog.len(), n);
    let section = render(&found.catalog, &RenderOptions::default());
    let index = SkillIndex::new(&found.catalog);
    assert!(
        !index
            .search(&found.catalog, &found.catalog.skills()[0].name, 8)
            .is_empty()
    );
    assert!(section.tokens > 0);
    println!("{}", peak_rss_mb());
}

fn main() {
    let rt = runtime();
    if let Some(spec) = child_spec() {
        rt.block_on(child(&spec));
        return;
    }
    rt.block_on(async {
        for n in sizes(&[100, 1_000, 5_000, 20_000]) {
            let dir = tempfile::tempdir().unwrap();
            generate_local(dir.path(), n);
            let backend: Arc<dyn Backend> = Arc::new(FilesystemBackend::new(dir.path()).unwrap());
            // Warm the page cache, then take the floor's median.
            floor_local(dir.path());
            let floor = median((0..5).map(|_| floor_local(dir.path()).0).collect());
            let runs = if n >= 20_000 { 3 } else { 5 };
            let backend_floor = backend_io(&backend, runs).await;
            let location = dir.path().to_str().unwrap().to_owned();
            measure("local", &location, backend, n, floor, backend_floor, runs).await;
            if n == 5_000 || smoke() {
                let root = dir.path().to_owned();
                let fresh = move || -> Arc<dyn Backend> { Arc::new(FilesystemBackend::new(&root).unwrap()) };
                persisted_catalog("local", fresh, n).await;
            }
        }

        let Ok(endpoint) = std::env::var("TRELLIS_S3_ENDPOINT") else {
            if std::env::var("TRELLIS_EMULATORS").as_deref() == Ok("required") {
                panic!("TRELLIS_S3_ENDPOINT is not set but emulators are required");
            }
            eprintln!(
                "skipped: S3 skills discovery bench (set TRELLIS_S3_ENDPOINT or run `cargo xtask bench`)"
            );
            return;
        };
        for n in sizes(&[100, 1_000, 5_000]).into_iter().filter(|&n| n <= 5_000) {
            let prefix = format!("bench-skills-{}-{n}", std::process::id());
            let backend = s3_backend(&endpoint, &prefix);
            let started = Instant::now();
            library::upload(&backend, n).await;
            eprintln!(
                "generated {n} skills on S3 in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            // On S3 the floor is the backend's own ls + read_many.
            let floor = backend_io(&backend, 3).await;
            measure("s3-emulator", &prefix, backend, n, floor, floor, 3).await;
            if n == 5_000 || smoke() {
                let endpoint = endpoint.clone();
                let fresh = move || s3_backend(&endpoint, &prefix);
                persisted_catalog("s3-emulator", fresh, n).await;
            }
        }
    });
}
