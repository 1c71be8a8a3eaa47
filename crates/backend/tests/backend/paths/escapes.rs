//! No input string — `..`, `%2e%2e`, `//`, NUL, backslashes, host paths, Unicode look-alikes — and no
//! symlink addresses anything outside a backend's root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use proptest::prelude::*;
use trellis_backend::{
    Backend, BackendError, BackendExt, FilesystemBackend, ObjectStoreBackend, StateBackend, StoreOptions,
    VirtualPath, WriteMode,
};

fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("..".to_owned()),
        Just(".".to_owned()),
        Just("".to_owned()),
        Just("%2e%2e".to_owned()),
        Just("%2E%2e".to_owned()),
        Just("%2f".to_owned()),
        Just("..%2f..".to_owned()),
        Just("\0".to_owned()),
        Just("a\\..\\b".to_owned()),
        Just("\\".to_owned()),
        Just("C:".to_owned()),
        Just("~".to_owned()),
        Just("/etc/passwd".to_owned()),
        Just("\u{FF0E}\u{FF0E}".to_owned()),
        Just("\u{2024}\u{2024}".to_owned()),
        Just("a\u{2215}b".to_owned()),
        Just("\u{202E}gnp.exe".to_owned()),
        Just("...".to_owned()),
        Just("ok".to_owned()),
        Just("ünï".to_owned()),
        "[a-z.%~ ]{1,6}",
        any::<String>(),
    ]
}

fn input() -> impl Strategy<Value = String> {
    (any::<bool>(), prop::collection::vec(piece(), 1..6)).prop_map(|(lead, parts)| {
        let joined = parts.join("/");
        if lead { format!("/{joined}") } else { joined }
    })
}

/// Every file below `dir`, canonical.
fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn parsing_is_idempotent_and_never_climbs(s in input()) {
        if let Ok(p) = VirtualPath::parse(&s) {
            let again = VirtualPath::parse(p.as_str()).unwrap();
            prop_assert_eq!(&again, &p);
            prop_assert!(p.as_str().starts_with('/'));
            prop_assert!(!p.as_str().contains('\\') && !p.as_str().contains('\0'));
            prop_assert!(p.segments().all(|seg| seg != ".." && seg != "." && !seg.is_empty()));
            prop_assert!(!p.as_str().to_ascii_lowercase().contains("%2e"));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Whatever parses lands inside the root of the local-disk and `file://` backends.
    #[test]
    fn parsed_paths_stay_inside_every_root(s in input()) {
        let Ok(path) = VirtualPath::parse(&s) else { return Ok(()) };
        if path.is_root() { return Ok(()) }
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let outer = tempfile::tempdir().unwrap();
        let root = outer.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let local = FilesystemBackend::new(&root).unwrap();
        let file_url = format!("file://{}/objects", outer.path().display());
        let object = ObjectStoreBackend::from_url(&file_url, &StoreOptions::default()).unwrap();
        let backends: [(&dyn Backend, PathBuf); 2] = [(&local, root.canonicalize().unwrap()), (&object, outer.path().join("objects").canonicalize().unwrap())];
        for (backend, dir) in backends {
            let wrote = rt.block_on(backend.write(&path, "x".into(), WriteMode::Overwrite));
            for file in files_below(outer.path()) {
                let real = file.canonicalize().unwrap();
                prop_assert!(real.starts_with(&dir) || real.starts_with(root.canonicalize().unwrap()) || real.starts_with(outer.path().join("objects").canonicalize().unwrap()),
                    "{} escaped to {}", path, real.display());
            }
            if wrote.is_ok() {
                let back = rt.block_on(backend.read_to_string(&path)).unwrap();
                prop_assert_eq!(back, "x");
                let listed = rt.block_on(backend.list_files(&VirtualPath::root(), 100)).unwrap();
                prop_assert!(listed.files.iter().any(|e| e.path == path), "{} not listed back", path);
            }
        }
    }
}

#[tokio::test]
async fn symlinks_out_of_the_root_are_refused_everywhere() {
    let outer = tempfile::tempdir().unwrap();
    let root = outer.path().join("root");
    let outside = outer.path().join("outside");
    std::fs::create_dir_all(root.join("inner")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "top secret").unwrap();
    std::fs::write(root.join("inner/ok.txt"), "fine").unwrap();
    std::os::unix::fs::symlink(&outside, root.join("escape-dir")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("escape-file")).unwrap();
    std::os::unix::fs::symlink(root.join("inner"), root.join("inside-link")).unwrap();
    let backend = FilesystemBackend::new(&root).unwrap();
    let p = |s: &str| VirtualPath::parse(s).unwrap();

    let refused = |r: Result<(), BackendError>| matches!(r, Err(BackendError::InvalidPath { .. }));
    assert!(refused(
        backend.read(&p("/escape-dir/secret.txt"), None).await.map(drop)
    ));
    assert!(refused(backend.read(&p("/escape-file"), None).await.map(drop)));
    assert!(refused(backend.stat(&p("/escape-file")).await.map(drop)));
    assert!(refused(backend.ls(&p("/escape-dir")).await.map(drop)));
    assert!(refused(
        backend
            .write(&p("/escape-dir/new.txt"), "x".into(), WriteMode::Overwrite)
            .await
            .map(drop)
    ));
    assert!(refused(
        backend
            .write(&p("/escape-dir/sub/new.txt"), "x".into(), WriteMode::Overwrite)
            .await
            .map(drop)
    ));
    assert!(refused(
        backend.delete(&p("/escape-dir/secret.txt")).await.map(drop)
    ));
    assert!(
        !outside.join("new.txt").exists() && !outside.join("sub").exists(),
        "nothing written outside"
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "top secret"
    );

    let names: Vec<String> = backend
        .ls(&VirtualPath::root())
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.path.to_string())
        .collect();
    assert_eq!(
        names,
        vec!["/inner", "/inside-link"],
        "escaping links are not listed"
    );
    let all = backend.list_files(&VirtualPath::root(), 100).await.unwrap();
    assert!(all.files.iter().all(|e| !e.path.as_str().contains("escape")));
    let grep = backend
        .grep(&trellis_backend::GrepQuery::new("secret", VirtualPath::root()))
        .await
        .unwrap();
    assert!(
        grep.matches.is_empty(),
        "grep does not follow links out: {:?}",
        grep.matches
    );
    assert_eq!(
        backend.read_to_string(&p("/inside-link/ok.txt")).await.unwrap(),
        "fine"
    );

    // Deleting a link removes the link, never its target.
    backend.delete(&p("/escape-file")).await.unwrap_err();
    std::os::unix::fs::symlink(root.join("inner/ok.txt"), root.join("alias.txt")).unwrap();
    backend.delete(&p("/alias.txt")).await.unwrap();
    assert!(root.join("inner/ok.txt").exists());
}

#[tokio::test]
async fn state_backend_round_trips_through_serde_with_odd_bytes() {
    let backend = StateBackend::new();
    let p = |s: &str| VirtualPath::parse(s).unwrap();
    backend
        .write(&p("/text.md"), "héllo".into(), WriteMode::CreateNew)
        .await
        .unwrap();
    backend
        .write(
            &p("/bin/blob"),
            bytes::Bytes::from_static(&[0xff, 0x00, 0xfe, 0x80]),
            WriteMode::CreateNew,
        )
        .await
        .unwrap();
    let json = serde_json::to_string(&backend).unwrap();
    assert!(json.contains("\"encoding\":\"base64\""), "{json}");
    let restored: StateBackend = serde_json::from_str(&json).unwrap();
    assert_eq!(
        restored.read_bytes(&p("/bin/blob")).await.unwrap().as_ref(),
        &[0xff, 0x00, 0xfe, 0x80]
    );
    assert_eq!(restored.read_to_string(&p("/text.md")).await.unwrap(), "héllo");
    // Versions continue past the restored ones: an old version never matches a new write.
    let old = restored
        .read(&p("/text.md"), None)
        .await
        .unwrap()
        .version
        .unwrap();
    let new = restored
        .write(&p("/text.md"), "x".into(), WriteMode::IfVersion(old.clone()))
        .await
        .unwrap();
    assert_ne!(new.version, Some(old));
    let _shared: Arc<dyn Backend> = Arc::new(restored);
}

#[tokio::test]
async fn composite_routes_and_rewrites_paths() {
    let p = |s: &str| VirtualPath::parse(s).unwrap();
    let default = Arc::new(StateBackend::new());
    let memories = Arc::new(StateBackend::new());
    let deep = Arc::new(StateBackend::new());
    default
        .write(&p("/a.md"), "root file".into(), WriteMode::CreateNew)
        .await
        .unwrap();
    default
        .write(&p("/memories/shadowed.md"), "hidden".into(), WriteMode::CreateNew)
        .await
        .unwrap();
    memories
        .write(&p("/AGENTS.md"), "remember".into(), WriteMode::CreateNew)
        .await
        .unwrap();
    deep.write(&p("/x.md"), "deep".into(), WriteMode::CreateNew)
        .await
        .unwrap();
    let composite = trellis_backend::CompositeBackend::new(default.clone())
        .mount("/memories/", memories.clone())
        .unwrap()
        .mount("/skills/team", deep.clone())
        .unwrap();

    let root: Vec<(String, bool)> = composite
        .ls(&VirtualPath::root())
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.path.to_string(), e.is_dir()))
        .collect();
    assert_eq!(
        root,
        vec![
            ("/a.md".into(), false),
            ("/memories".into(), true),
            ("/skills".into(), true)
        ]
    );
    let skills: Vec<String> = composite
        .ls(&p("/skills"))
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.path.to_string())
        .collect();
    assert_eq!(skills, vec!["/skills/team"]);
    let mem: Vec<String> = composite
        .ls(&p("/memories"))
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.path.to_string())
        .collect();
    assert_eq!(
        mem,
        vec!["/memories/AGENTS.md"],
        "the mount shadows the default's files"
    );
    assert_eq!(
        composite.read_to_string(&p("/memories/AGENTS.md")).await.unwrap(),
        "remember"
    );
    composite
        .write(&p("/memories/new.md"), "n".into(), WriteMode::CreateNew)
        .await
        .unwrap();
    assert!(
        memories.exists(&p("/new.md")).await.unwrap(),
        "writes land in the mounted backend"
    );
    let err = composite.read(&p("/memories/none.md"), None).await.unwrap_err();
    assert_eq!(err.path(), "/memories/none.md", "errors name the caller's path");

    let glob: Vec<String> = composite
        .glob("*.md", &VirtualPath::root())
        .await
        .unwrap()
        .matches
        .into_iter()
        .map(|e| e.path.to_string())
        .collect();
    assert_eq!(
        glob,
        vec![
            "/a.md",
            "/memories/AGENTS.md",
            "/memories/new.md",
            "/skills/team/x.md"
        ]
    );
    let anchored: Vec<String> = composite
        .glob("memories/*.md", &VirtualPath::root())
        .await
        .unwrap()
        .matches
        .into_iter()
        .map(|e| e.path.to_string())
        .collect();
    assert_eq!(anchored, vec!["/memories/AGENTS.md", "/memories/new.md"]);
    let grep = composite
        .grep(&trellis_backend::GrepQuery::new("e", VirtualPath::root()))
        .await
        .unwrap();
    let paths: Vec<String> = grep.matches.iter().map(|m| m.path.to_string()).collect();
    assert_eq!(paths, vec!["/a.md", "/memories/AGENTS.md", "/skills/team/x.md"]);
    let many = composite
        .read_many(
            &[
                p("/skills/team/x.md"),
                p("/a.md"),
                p("/memories/AGENTS.md"),
                p("/nope"),
            ],
            None,
        )
        .await;
    let texts: Vec<String> = many
        .iter()
        .map(|r| {
            r.as_ref()
                .map(|o| String::from_utf8_lossy(&o.bytes).into_owned())
                .unwrap_or_else(|e| e.to_string())
        })
        .collect();
    assert_eq!(texts, vec!["deep", "root file", "remember", "not found: /nope"]);
    assert!(composite.read(&p("/skills"), None).await.is_err());
    assert!(composite.stat(&p("/skills")).await.unwrap().is_dir());
}
