//! Bubblewrap's per-thread cache of object-store files (S3 on moto): a second command of a thread
//! fetches only what changed, the cache never shows one thread's files to another, and a base
//! a crash left without a whole manifest is rebuilt, never trusted. The conformance suite also
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
    let uid = rustix::process::getuid().as_raw();
    let runs_as = bwrap("thread cache").unwrap().runs_as().uid;
    let hash: String = Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    std::env::temp_dir()
        .join(format!("trellis-thread-cache-{uid}-{runs_as}"))
        .join(hash)
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
