//! Bubblewrap's per-thread cache of object-store files (S3 on moto): a second command of a thread
//! fetches only what changed, the cache never shows one thread's files to another, and a base
//! a crash left without a whole manifest is rebuilt, never trusted, and past the bound on all bases
//! the least recently used base no command holds is evicted. The conformance suite also
//! runs with a thread cache (`suites::bubblewrap_over_s3_with_a_thread_cache`).

use std::sync::Arc;

use async_trait::async_trait;
use sha2::{Digest, Sha256};
use trellis_backend::sandbox::{ExecFiles, ExecOutput, ExecRequest, SandboxError, SandboxReport};
use trellis_backend::testing::{RecordingBackend, emulator, s3_backend};
use trellis_backend::{Backend, Sandbox, WriteMode};

use trellis_fs_tools::sandbox::{BubblewrapConfig, BubblewrapSandbox, THREAD_CACHE_MIN_FILES};

use super::{bwrap, p, seed, text};

/// A bubblewrap sandbox that serves every keyed view from the thread's base, however small, or
/// `None` as [`bwrap`] says.
pub fn cached_bwrap(test: &str) -> Option<Arc<BubblewrapSandbox>> {
    static SANDBOX: std::sync::OnceLock<Arc<BubblewrapSandbox>> = std::sync::OnceLock::new();
    bwrap(test)?;
    Some(Arc::clone(SANDBOX.get_or_init(|| {
        Arc::new(BubblewrapSandbox::new(BubblewrapConfig::default().thread_cache_min_files(0)).unwrap())
    })))
}

/// A fresh S3 prefix on the emulator, or `None` after saying the test was skipped.
pub fn s3(test: &str) -> Option<Arc<dyn Backend>> {
    let endpoint = emulator("TRELLIS_S3_ENDPOINT", test)?;
    Some(Arc::new(s3_backend(&endpoint, &unique(test))))
}

pub fn unique(tag: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let tag: String = tag
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "thread-cache-{tag}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A sandbox whose every call carries the cache key `key`, as the `execute` tool's calls carry
/// their thread's id.
#[derive(Debug)]
pub struct Keyed(pub Arc<dyn Sandbox>, pub String);

#[async_trait]
impl Sandbox for Keyed {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn report(&self) -> SandboxReport {
        self.0.report()
    }
    async fn execute(&self, files: &ExecFiles, request: &ExecRequest) -> Result<ExecOutput, SandboxError> {
        self.0
            .execute(&files.clone().cache_key(self.1.clone()), request)
            .await
    }
}

/// Where the base of `key` is kept (the sandbox's work root is the temporary directory).
fn key_dir(key: &str) -> std::path::PathBuf {
    key_dir_in(&std::env::temp_dir(), key)
}

/// Where the base of `key` is kept by a sandbox whose work root is `work_root`.
fn key_dir_in(work_root: &std::path::Path, key: &str) -> std::path::PathBuf {
    let hash: String = Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    cache_root(work_root).join(hash)
}

/// The thread cache of a sandbox whose work root is `work_root`.
fn cache_root(work_root: &std::path::Path) -> std::path::PathBuf {
    let uid = rustix::process::getuid().as_raw();
    let runs_as = bwrap("thread cache").unwrap().runs_as().uid;
    work_root.join(format!("trellis-thread-cache-{uid}-{runs_as}"))
}

async fn seed_many(backend: &dyn Backend, n: usize) {
    let files: Vec<(String, String)> = (0..n)
        .map(|i| (format!("/src/f{i}.txt"), format!("file {i}\n")))
        .collect();
    let refs: Vec<(&str, &str)> = files.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    seed(backend, &refs).await;
}

async fn run(s: &dyn Sandbox, files: &ExecFiles, command: &str) -> ExecOutput {
    s.execute(files, &ExecRequest::new(command))
        .await
        .unwrap_or_else(|e| panic!("{command}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_command_fetches_only_what_changed() {
    let (Some(sandbox), Some(store)) = (cached_bwrap("thread cache"), s3("thread cache refresh")) else {
        return;
    };
    seed_many(store.as_ref(), 40).await;
    let recording = Arc::new(RecordingBackend::new(store.clone()));
    let files = ExecFiles::new(recording.clone()).cache_key(unique("refresh"));
    let first = run(sandbox.as_ref(), &files, "cat /src/f0.txt; ls /src | wc -l").await;
    assert_eq!(first.output, "file 0\n40\n", "{first:?}");
    assert_eq!(recording.read_count(), 40, "the first command fetches every file");
    recording.clear();
    let again = run(sandbox.as_ref(), &files, "cat /src/f1.txt").await;
    assert_eq!(again.output, "file 1\n");
    assert_eq!(
        recording.read_count(),
        0,
        "nothing changed, nothing fetched: {:?}",
        recording.reads()
    );
    // Outside changes: one file changed, one deleted, one added.
    store
        .write(&p("/src/f1.txt"), "changed\n".into(), WriteMode::Overwrite)
        .await
        .unwrap();
    store.delete(&p("/src/f2.txt")).await.unwrap();
    store
        .write(&p("/src/new.txt"), "new\n".into(), WriteMode::CreateNew)
        .await
        .unwrap();
    recording.clear();
    let second = run(
        sandbox.as_ref(),
        &files,
        "cat /src/f1.txt /src/new.txt; test -e /src/f2.txt || echo gone; ls /src | wc -l",
    )
    .await;
    assert_eq!(second.output, "changed\nnew\ngone\n40\n", "{second:?}");
    let mut reads = recording.reads();
    reads.sort();
    assert_eq!(
        reads,
        ["/src/f1.txt", "/src/new.txt"],
        "only what changed is fetched"
    );
    // Writes and deletions still come back, checked against the base's versions.
    let out = run(
        sandbox.as_ref(),
        &files,
        "echo mine > /src/f3.txt; rm /src/f4.txt; echo x > /src/made.txt",
    )
    .await;
    assert!(out.not_written.is_empty(), "{out:?}");
    assert_eq!(
        text(store.as_ref(), "/src/f3.txt").await.as_deref(),
        Some("mine\n")
    );
    assert_eq!(
        text(store.as_ref(), "/src/f4.txt").await,
        None,
        "deleted: {out:?}"
    );
    assert_eq!(
        text(store.as_ref(), "/src/made.txt").await.as_deref(),
        Some("x\n")
    );
    // The base itself is never changed by a command.
    let base = key_dir(files.cache_key.as_deref().unwrap()).join("base/src");
    assert_eq!(std::fs::read_to_string(base.join("f4.txt")).unwrap(), "file 4\n");
    let after = run(
        sandbox.as_ref(),
        &files,
        "cat /src/f3.txt; test -e /src/f4.txt || echo gone",
    )
    .await;
    assert_eq!(after.output, "mine\ngone\n", "{after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_thread_never_sees_the_cache() {
    let (Some(sandbox), Some(a), Some(b)) = (
        cached_bwrap("thread cache"),
        s3("thread cache a"),
        s3("thread cache b"),
    ) else {
        return;
    };
    seed(a.as_ref(), &[("/secret.txt", "thread A's\n")]).await;
    seed(b.as_ref(), &[("/mine.txt", "thread B's\n")]).await;
    let key_a = unique("a");
    let files_a = ExecFiles::new(a.clone()).cache_key(key_a.clone());
    let out = run(sandbox.as_ref(), &files_a, "cat /secret.txt").await;
    assert_eq!(out.output, "thread A's\n");
    let files_b = ExecFiles::new(b.clone()).cache_key(unique("b"));
    let out = run(sandbox.as_ref(), &files_b, "ls -a /; cat /secret.txt").await;
    assert!(
        !out.output.contains("thread A's") && !out.output.contains("\nsecret.txt\n"),
        "{out:?}"
    );
    assert_ne!(key_dir(&key_a), key_dir(files_b.cache_key.as_deref().unwrap()));
    // Even a key given by mistake to another view shows that view alone.
    let mistaken = ExecFiles::new(b.clone()).cache_key(key_a.clone());
    let out = run(sandbox.as_ref(), &mistaken, "ls /; cat /secret.txt").await;
    assert!(
        !out.output.contains("thread A's") && out.output.contains("mine.txt"),
        "{out:?}"
    );
    // No other user may list the caches or a key's directory, nor write a base.
    use std::os::unix::fs::PermissionsExt;
    for dir in [key_dir(&key_a).parent().unwrap().to_path_buf(), key_dir(&key_a)] {
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o066, 0, "{} has mode {mode:o}", dir.display());
    }
    let base = std::fs::metadata(key_dir(&key_a).join("base"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(base & 0o077, 0, "base mode {base:o}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_without_a_whole_manifest_is_rebuilt() {
    let (Some(sandbox), Some(store)) = (cached_bwrap("thread cache"), s3("thread cache torn")) else {
        return;
    };
    seed_many(store.as_ref(), 10).await;
    let recording = Arc::new(RecordingBackend::new(store.clone()));
    let key = unique("torn");
    let files = ExecFiles::new(recording.clone()).cache_key(key.clone());
    run(sandbox.as_ref(), &files, "true").await;
    let dir = key_dir(&key);
    let manifest = dir.join("manifest");
    let whole = std::fs::read(&manifest).unwrap();
    // A torn manifest (cut short), and a cached file a crash left half written.
    for (case, torn) in [("torn", Some(&whole[..whole.len() - 7])), ("missing", None)] {
        match torn {
            Some(bytes) => std::fs::write(&manifest, bytes).unwrap(),
            None => std::fs::remove_file(&manifest).unwrap(),
        }
        std::fs::write(dir.join("base/src/f0.txt"), "fil").unwrap();
        recording.clear();
        let out = run(sandbox.as_ref(), &files, "cat /src/f0.txt").await;
        assert_eq!(out.output, "file 0\n", "{case}: {out:?}");
        assert_eq!(recording.read_count(), 10, "{case}: the base is fetched again");
        assert_eq!(
            std::fs::read_to_string(dir.join("base/src/f0.txt")).unwrap(),
            "file 0\n"
        );
    }
    // A manifest whose body lists nothing but kept the old checksum is not trusted either.
    let text = std::fs::read_to_string(&manifest).unwrap();
    let (first, _) = text.split_once('\n').unwrap();
    std::fs::write(&manifest, format!("{first}\n{{}}")).unwrap();
    std::fs::write(dir.join("base/src/f0.txt"), "fil").unwrap();
    recording.clear();
    let out = run(sandbox.as_ref(), &files, "cat /src/f0.txt").await;
    assert_eq!(out.output, "file 0\n", "{out:?}");
    assert_eq!(recording.read_count(), 10, "the base is fetched again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_view_is_copied_not_cached() {
    let (Some(sandbox), Some(store)) = (bwrap("thread cache"), s3("thread cache small")) else {
        return;
    };
    seed_many(store.as_ref(), THREAD_CACHE_MIN_FILES - 1).await;
    let recording = Arc::new(RecordingBackend::new(store.clone()));
    let files = ExecFiles::new(recording.clone()).cache_key(unique("small"));
    for _ in 0..2 {
        recording.clear();
        let out = run(sandbox.as_ref(), &files, "cat /src/f0.txt").await;
        assert_eq!(out.output, "file 0\n");
        assert_eq!(
            recording.read_count(),
            THREAD_CACHE_MIN_FILES - 1,
            "copied each time"
        );
    }
    assert!(!key_dir(files.cache_key.as_deref().unwrap()).exists());
    seed(store.as_ref(), &[("/src/one-more.txt", "x")]).await;
    run(sandbox.as_ref(), &files, "true").await;
    recording.clear();
    run(sandbox.as_ref(), &files, "true").await;
    assert_eq!(recording.read_count(), 0, "at the threshold the base is used");
}

/// The bytes of each file [`seed_sized`] writes.
const FILE_BYTES: usize = 1000;

/// Seed `n` files of [`FILE_BYTES`] each, the first line of each `<tag> <i>`.
async fn seed_sized(backend: &dyn Backend, tag: &str, n: usize) {
    let files: Vec<(String, String)> = (0..n)
        .map(|i| {
            let mut body = format!("{tag} {i}\n");
            body.push_str(&".".repeat(FILE_BYTES - body.len()));
            (format!("/src/f{i}.txt"), body)
        })
        .collect();
    let refs: Vec<(&str, &str)> = files.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    seed(backend, &refs).await;
}

/// A bubblewrap sandbox of its own work root (so that other tests' bases are not counted), whose
/// bases together may hold `max_bytes`, or `None` as [`bwrap`] says.
fn bounded_bwrap(test: &str, max_bytes: u64) -> Option<(Arc<BubblewrapSandbox>, tempfile::TempDir)> {
    use std::os::unix::fs::PermissionsExt;
    bwrap(test)?;
    let root = tempfile::tempdir().unwrap();
    // The commands' user (another, when the tests run as root) passes through, as through /tmp.
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    Some((bounded_at(root.path(), max_bytes), root))
}

/// A bubblewrap sandbox whose work root is `work_root` and whose bases together may hold
/// `max_bytes`.
fn bounded_at(work_root: &std::path::Path, max_bytes: u64) -> Arc<BubblewrapSandbox> {
    let config = BubblewrapConfig::default()
        .thread_cache_min_files(0)
        .thread_cache_max_bytes(max_bytes)
        .work_root(work_root);
    Arc::new(BubblewrapSandbox::new(config).unwrap())
}

/// A thread of its own S3 prefix holding `n` files of [`FILE_BYTES`], recorded.
struct Thread {
    store: Arc<RecordingBackend>,
    files: ExecFiles,
    key: String,
}

async fn thread(tag: &str, n: usize) -> Option<Thread> {
    let store = s3(&format!("thread cache bound {tag}"))?;
    seed_sized(store.as_ref(), tag, n).await;
    let store = Arc::new(RecordingBackend::new(store));
    let key = unique(tag);
    let files = ExecFiles::new(store.clone()).cache_key(key.clone());
    Some(Thread { store, files, key })
}

/// The names in the cache at `work_root` that are not keys (leftovers of evictions).
fn leftovers(work_root: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(cache_root(work_root))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.len() != 64)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_bound_the_least_recently_used_base_is_evicted() {
    // Two bases of four 1000-byte files fit, three do not.
    let Some((sandbox, root)) = bounded_bwrap("thread cache bound", 10_000) else {
        return;
    };
    let (Some(a), Some(b), Some(c), Some(d)) = (
        thread("a", 4).await,
        thread("b", 4).await,
        thread("c", 4).await,
        thread("d", 4).await,
    ) else {
        return;
    };
    let dir = |t: &Thread| key_dir_in(root.path(), &t.key);
    for t in [&a, &b] {
        run(sandbox.as_ref(), &t.files, "true").await;
    }
    assert!(dir(&a).join("base").is_dir() && dir(&b).join("base").is_dir());
    run(sandbox.as_ref(), &c.files, "true").await;
    assert!(!dir(&a).exists(), "a, used least recently, is evicted");
    assert!(dir(&b).join("base/src/f0.txt").is_file(), "b stays");
    assert!(dir(&c).join("base/src/f0.txt").is_file(), "c, used last, stays");
    // Using b makes c the least recently used: order of use, not of creation.
    b.store.clear();
    let out = run(sandbox.as_ref(), &b.files, "head -n1 /src/f3.txt").await;
    assert_eq!(out.output, "b 3\n");
    assert_eq!(b.store.read_count(), 0, "b's base was kept and used");
    run(sandbox.as_ref(), &d.files, "true").await;
    assert!(!dir(&c).exists(), "c is now the least recently used");
    assert!(dir(&b).is_dir() && dir(&d).is_dir());
    // An evicted thread's next command sees its files, fetched again.
    a.store.clear();
    let out = run(sandbox.as_ref(), &a.files, "head -qn1 /src/*.txt").await;
    assert_eq!(out.output, "a 0\na 1\na 2\na 3\n", "{out:?}");
    assert_eq!(a.store.read_count(), 4, "a's files are fetched again");
    assert!(dir(&a).join("base/src/f3.txt").is_file(), "a has a base again");
    assert_eq!(leftovers(root.path()), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_in_use_is_not_evicted() {
    // One base of four 1000-byte files fits, two do not.
    let Some((sandbox, root)) = bounded_bwrap("thread cache busy", 6_000) else {
        return;
    };
    let (Some(a), Some(b), Some(c)) = (thread("a", 4).await, thread("b", 4).await, thread("c", 4).await)
    else {
        return;
    };
    let dir = |t: &Thread| key_dir_in(root.path(), &t.key);
    // a's command holds its base while b's runs and pushes the total past the bound.
    let running = {
        let (sandbox, files) = (sandbox.clone(), a.files.clone());
        tokio::spawn(async move { run(sandbox.as_ref(), &files, "sleep 20; head -n1 /src/f0.txt").await })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !dir(&a).join("manifest").exists() {
        assert!(std::time::Instant::now() < deadline, "a's base never refreshed");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    run(sandbox.as_ref(), &b.files, "true").await;
    assert!(
        !running.is_finished(),
        "a's command ended before b's: the host is too slow for this test"
    );
    assert!(
        dir(&a).join("base/src/f0.txt").is_file(),
        "a's base is in use: not evicted"
    );
    assert!(
        dir(&b).join("base/src/f0.txt").is_file(),
        "b's own refresh keeps it"
    );
    let out = running.await.unwrap();
    assert_eq!(out.output, "a 0\n", "{out:?}");
    // Once free, a is evicted by the next pass, then b, both less recently used than c.
    run(sandbox.as_ref(), &c.files, "true").await;
    assert!(!dir(&a).exists(), "a, free now, is evicted");
    assert!(
        !dir(&b).exists(),
        "b is evicted too: a and c alone would still be over"
    );
    assert!(dir(&c).join("base/src/f0.txt").is_file());
    assert_eq!(leftovers(root.path()), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_crash_left_in_the_cache_is_removed_when_a_sandbox_starts() {
    let Some((sandbox, root)) = bounded_bwrap("thread cache leftovers", 1 << 20) else {
        return;
    };
    let Some(a) = thread("a", 4).await else {
        return;
    };
    run(sandbox.as_ref(), &a.files, "true").await;
    let cache = cache_root(root.path());
    // An eviction killed after its rename, mid-removal; a key killed mid-refresh (its manifest
    // removed, its lock released by the kernel).
    let half_evicted = cache.join(format!("evicted-{}-1-2", "0".repeat(64)));
    let torn = cache.join("f".repeat(64));
    for dir in [&half_evicted, &torn] {
        std::fs::create_dir_all(dir.join("base/src")).unwrap();
        std::fs::write(dir.join("base/src/f0.txt"), "half").unwrap();
        std::fs::write(dir.join("lock"), "").unwrap();
    }
    let again = bounded_at(root.path(), 1 << 20);
    assert!(
        !half_evicted.exists(),
        "an interrupted eviction's leftovers are removed"
    );
    assert!(
        !torn.exists(),
        "a base without a manifest that no command holds is removed"
    );
    // Within the bound, a whole base stays and is used.
    a.store.clear();
    let out = run(again.as_ref(), &a.files, "head -n1 /src/f0.txt").await;
    assert_eq!(out.output, "a 0\n", "{out:?}");
    assert_eq!(a.store.read_count(), 0, "a's base was kept");
    assert_eq!(leftovers(root.path()), Vec::<String>::new());
}
