//! Hostile names already in storage, where a backend lists them: keys and file names holding
//! percent-escapes, backslashes, `..` segments, control characters or bytes that are not UTF-8;
//! prefix siblings (`skills-evil/` next to `skills/`); symlink chains, relative links and loops.
//! Nothing outside a backend's root or prefix is listed, read, written or deleted, and nothing
//! panics. `escapes.rs` covers the strings a caller passes in; this file covers what the store holds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use trellis_backend::testing::{bucket, emulator};
use trellis_backend::{
    Backend, BackendError, BackendExt, FilesystemBackend, GrepQuery, ObjectStoreBackend, StoreOptions,
    VirtualPath, WriteMode,
};

fn vp(s: &str) -> VirtualPath {
    VirtualPath::parse(s).unwrap()
}

/// Strings that try to climb out of a root. None of them may become a path.
const TRAVERSALS: [&str; 10] = [
    "../secret.txt",
    "/ok/../../secret.txt",
    "..%2fsecret.txt",
    "%2e%2e/secret.txt",
    "%2E%2E%2Fsecret.txt",
    "..%5csecret.txt",
    "..\\secret.txt",
    "ok\0/../secret.txt",
    "\u{FF0E}\u{FF0E}/secret.txt",
    "/ok/..%252f..%252fsecret.txt",
];

fn paths(entries: &[trellis_backend::Entry]) -> Vec<String> {
    entries.iter().map(|e| e.path.to_string()).collect()
}

/// Everything a backend shows from its root: `ls`, the recursive listing, `glob` and `grep`.
async fn everything_visible(backend: &dyn Backend) -> Vec<String> {
    let root = VirtualPath::root();
    let mut seen = paths(&backend.ls(&root).await.unwrap());
    seen.extend(paths(&backend.list_files(&root, 1_000).await.unwrap().files));
    seen.extend(paths(&backend.glob("**", &root).await.unwrap().matches));
    let grep = backend.grep(&GrepQuery::new("e", root)).await.unwrap();
    seen.extend(grep.matches.iter().map(|m| m.path.to_string()));
    seen.sort();
    seen.dedup();
    seen
}

/// On `memory://`, a backend rooted at `skills` reaches only `skills/…`: not the prefix sibling
/// `skills-evil/`, not `skillsx`, not a key above it, and keys holding percent-escapes or backslashes
/// are skipped from listings rather than decoded.
#[tokio::test]
async fn object_store_prefix_siblings_and_encoded_keys_are_unreachable_on_memory() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let whole = ObjectStoreBackend::new(store.clone(), "").unwrap();
    for key in [
        "/skills/ok/SKILL.md",
        "/skills-evil/SKILL.md",
        "/skillsx/SKILL.md",
        "/secret.txt",
    ] {
        whole
            .write(&vp(key), "secret e".into(), WriteMode::Overwrite)
            .await
            .unwrap();
    }
    // Keys another client wrote; object_store accepts them, Trellis must not decode them.
    for key in [
        "skills/%2E%2E/secret.txt",
        "skills/..%2f..%2fsecret.txt",
        "skills/a%5cb/SKILL.md",
        "skills/back\\slash/SKILL.md",
        "skills/ok/%2e%2e",
    ] {
        store
            .put(&StorePath::parse(key).unwrap(), "secret e".into())
            .await
            .unwrap();
    }
    let rooted = ObjectStoreBackend::new(store.clone(), "skills").unwrap();
    assert_eq!(everything_visible(&rooted).await, ["/ok", "/ok/SKILL.md"]);
    for attempt in TRAVERSALS {
        assert!(VirtualPath::parse(attempt).is_err(), "{attempt:?} parsed");
    }
    for sibling in ["/-evil/SKILL.md", "/x/SKILL.md", "/secret.txt", "/ok"] {
        assert!(
            matches!(
                rooted.read(&vp(sibling), None).await,
                Err(BackendError::NotFound { .. } | BackendError::IsADirectory { .. })
            ),
            "{sibling}"
        );
    }
    // A write through the rooted backend lands under the prefix, whatever the name looks like.
    rooted
        .write(&vp("/-evil/SKILL.md"), "mine".into(), WriteMode::Overwrite)
        .await
        .unwrap();
    assert_eq!(
        whole.read_to_string(&vp("/skills/-evil/SKILL.md")).await.unwrap(),
        "mine"
    );
    assert_eq!(
        whole.read_to_string(&vp("/skills-evil/SKILL.md")).await.unwrap(),
        "secret e"
    );
}

/// One raw HTTP/1.1 request to the emulator: the only way to store a key with a literal `..`
/// segment, which every URL library (and object_store) normalizes or refuses. The emulator does not
/// check signatures.
async fn raw_request(endpoint: &str, method: &str, target: &str, body: &[u8]) -> String {
    let url = url::Url::parse(endpoint).unwrap();
    let host = url.host_str().unwrap().to_owned();
    let port = url.port_or_known_default().unwrap();
    let mut stream = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .unwrap();
    let head = format!(
        "{method} {target} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).await.unwrap();
    String::from_utf8_lossy(&reply).into_owned()
}

/// On S3 (moto): a prefix sibling and keys above the prefix are never listed or read through a
/// backend rooted at `<run>/skills`. A key holding a literal `..` segment, which another S3 client
/// can write, makes listings of that prefix fail with a typed error (object_store refuses the key):
/// a denial of service for that prefix, never an escape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_prefix_siblings_and_traversal_keys_are_unreachable() {
    let Some(endpoint) = emulator("TRELLIS_S3_ENDPOINT", "S3 adversarial keys") else {
        return;
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let run = format!("adversarial-{}-{nanos}", std::process::id());
    let options = StoreOptions::s3_compatible(&endpoint, "test", "test");
    let whole = ObjectStoreBackend::from_url(&format!("s3://{}/{run}", bucket()), &options).unwrap();
    for key in [
        "/skills/ok/SKILL.md",
        "/skills-evil/SKILL.md",
        "/skillsx/SKILL.md",
        "/secret.txt",
        "/clean/ok/SKILL.md",
        "/clean-evil/SKILL.md",
    ] {
        whole
            .write(&vp(key), "secret e".into(), WriteMode::Overwrite)
            .await
            .unwrap();
    }

    // Without hostile keys: the prefix sibling is never visible.
    let clean = ObjectStoreBackend::from_url(&format!("s3://{}/{run}/clean", bucket()), &options).unwrap();
    assert_eq!(everything_visible(&clean).await, ["/ok", "/ok/SKILL.md"]);
    assert!(matches!(
        clean.read(&vp("/-evil/SKILL.md"), None).await,
        Err(BackendError::NotFound { .. })
    ));

    // A literal `..` key inside the prefix.
    let key = format!("{run}/skills/../../secret.txt");
    let reply = raw_request(&endpoint, "PUT", &format!("/{}/{key}", bucket()), b"planted").await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    let rooted = ObjectStoreBackend::from_url(&format!("s3://{}/{run}/skills", bucket()), &options).unwrap();
    let listed = rooted.list_files(&VirtualPath::root(), 1_000).await;
    assert!(listed.is_err(), "object_store refuses the key: {listed:?}");
    let ls = rooted.ls(&VirtualPath::root()).await;
    assert!(ls.is_err(), "{ls:?}");
    // Reads by name still work, and still cannot climb.
    assert_eq!(
        rooted.read_to_string(&vp("/ok/SKILL.md")).await.unwrap(),
        "secret e"
    );
    for attempt in TRAVERSALS {
        assert!(VirtualPath::parse(attempt).is_err(), "{attempt:?} parsed");
    }
    assert!(matches!(
        rooted.read(&vp("/-evil/SKILL.md"), None).await,
        Err(BackendError::NotFound { .. })
    ));

    let delete = format!("<Delete><Object><Key>{key}</Key></Object></Delete>");
    let reply = raw_request(
        &endpoint,
        "POST",
        &format!("/{}?delete", bucket()),
        delete.as_bytes(),
    )
    .await;
    assert!(reply.contains("<Deleted>"), "cleanup: {reply}");
    assert_eq!(everything_visible(&rooted).await, ["/ok", "/ok/SKILL.md"]);
}

fn write(root: &Path, rel: impl AsRef<Path>, body: &[u8]) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, body).unwrap();
}

/// On local disk, names that are not valid paths (percent-escapes, backslashes, control
/// characters, bidirectional overrides, bytes that are not UTF-8) are left out of `ls`, listings,
/// `glob` and `grep`, never decoded into a path that could climb.
#[tokio::test]
async fn local_disk_names_that_are_not_paths_are_never_listed_or_decoded() {
    let outer = tempfile::tempdir().unwrap();
    let root = outer.path().join("skills");
    write(outer.path(), "secret.txt", b"secret e");
    write(outer.path(), "skills-evil/SKILL.md", b"secret e");
    write(&root, "ok/SKILL.md", b"fine e");
    for name in [
        "..%2fsecret.txt",
        "%2e%2e",
        "a%5cb",
        "back\\slash",
        "new\nline",
        "x\u{202e}txt.exe",
    ] {
        write(&root, name, b"secret e");
    }
    write(&root, std::ffi::OsStr::from_bytes(b"not-\xff-utf8"), b"secret e");
    std::fs::create_dir_all(root.join(std::ffi::OsStr::from_bytes(b"dir-\xfe"))).unwrap();
    write(
        &root,
        Path::new(std::ffi::OsStr::from_bytes(b"dir-\xfe")).join("SKILL.md"),
        b"secret e",
    );

    let backend = FilesystemBackend::new(&root).unwrap();
    assert_eq!(everything_visible(&backend).await, ["/ok", "/ok/SKILL.md"]);
}

/// Symlinks on local disk, beyond `escapes.rs`: a relative link to the root's prefix sibling
/// (`../skills-evil`), a chain of links that ends outside, a link loop and a directory loop. Each
/// is refused or left out, the loops end with an error instead of hanging, nothing is written
/// through them, and a link that stays inside still works.
#[tokio::test]
async fn symlink_chains_relative_links_and_loops_stay_inside() {
    let outer = tempfile::tempdir().unwrap();
    let root = outer.path().join("skills");
    write(outer.path(), "skills-evil/secret.txt", b"secret e");
    write(&root, "ok/SKILL.md", b"fine e");
    let link = |target: &str, name: &str| std::os::unix::fs::symlink(target, root.join(name)).unwrap();
    link("../skills-evil", "sibling");
    link("chain-2", "chain-1");
    link("../skills-evil/secret.txt", "chain-2");
    link("self-loop", "self-loop");
    link("loop-b", "loop-a");
    link("loop-a", "loop-b");
    link("ok", "inside");
    let backend = FilesystemBackend::new(&root).unwrap();

    for path in [
        "/sibling/secret.txt",
        "/chain-1",
        "/chain-2",
        "/self-loop",
        "/loop-a/x",
    ] {
        let read = backend.read(&vp(path), None).await;
        assert!(read.is_err(), "{path} was read: {read:?}");
        assert!(backend.stat(&vp(path)).await.is_err(), "{path}");
    }
    assert!(backend.ls(&vp("/sibling")).await.is_err());
    assert!(
        backend.ls(&vp("/loop-a")).await.is_err(),
        "a loop ends in an error"
    );
    for path in [
        "/sibling/new.txt",
        "/chain-1",
        "/chain-2",
        "/self-loop",
        "/loop-a/x",
    ] {
        let wrote = backend.write(&vp(path), "x".into(), WriteMode::Overwrite).await;
        assert!(wrote.is_err(), "{path} was written through: {wrote:?}");
    }
    assert!(
        backend.delete(&vp("/chain-1")).await.is_err(),
        "a link out is not deleted"
    );
    assert!(backend.delete(&vp("/sibling/secret.txt")).await.is_err());
    let visible = everything_visible(&backend).await;
    assert!(
        visible
            .iter()
            .all(|p| !p.contains("secret") && !p.contains("sibling")),
        "{visible:?}"
    );
    assert!(visible.contains(&"/inside/SKILL.md".to_owned()), "{visible:?}");
    assert_eq!(
        backend.read_to_string(&vp("/inside/SKILL.md")).await.unwrap(),
        "fine e"
    );
    assert_eq!(
        std::fs::read(outer.path().join("skills-evil/secret.txt")).unwrap(),
        b"secret e"
    );
    assert_eq!(
        std::fs::read_dir(outer.path().join("skills-evil"))
            .unwrap()
            .count(),
        1
    );
}

/// `grep` over binary files and files that are not UTF-8: the text file matches; a file that is not
/// UTF-8 and one holding a NUL byte (text by encoding, binary by content) are reported as not
/// searched, never matched with raw control bytes in the line.
#[tokio::test]
async fn grep_over_binary_and_non_utf8_files_reports_them_as_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "text.md", b"a needle here\n");
    write(root, "latin1.md", b"needle caf\xe9\n");
    write(root, "nul.bin", b"needle\x00\x01\x02");
    let backend = FilesystemBackend::new(root).unwrap();
    let out = backend
        .grep(&GrepQuery::new("needle", VirtualPath::root()))
        .await
        .unwrap();
    let matched: Vec<String> = out.matches.iter().map(|m| m.path.to_string()).collect();
    assert!(matched.contains(&"/text.md".to_owned()), "{out:?}");
    assert!(!matched.contains(&"/nul.bin".to_owned()), "{out:?}");
    let skipped: Vec<String> = out.skipped.iter().map(ToString::to_string).collect();
    assert_eq!(matched, ["/text.md"], "{out:?}");
    assert_eq!(skipped, ["/latin1.md", "/nul.bin"], "{out:?}");
}
