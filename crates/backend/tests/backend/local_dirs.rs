//! [`Backend::local_dirs`] through the wrappers: a composite moves its mounts' directories below
//! their mount points and leaves out what a mount shadows or splits; a scoped view follows its
//! prefix into the directory.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use trellis_backend::{
    Backend, CompositeBackend, FilesystemBackend, LocalDir, ScopedBackend, StateBackend, VirtualPath,
};

fn p(s: &str) -> VirtualPath {
    VirtualPath::parse(s).unwrap()
}

fn local(dir: &tempfile::TempDir) -> Arc<dyn Backend> {
    Arc::new(FilesystemBackend::new(dir.path()).unwrap())
}

fn canonical(dir: &tempfile::TempDir) -> std::path::PathBuf {
    std::fs::canonicalize(dir.path()).unwrap()
}

#[test]
fn a_filesystem_backend_is_its_root_and_memory_is_nothing() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        local(&dir).local_dirs(),
        vec![LocalDir {
            at: VirtualPath::root(),
            host: canonical(&dir)
        }]
    );
    assert!(StateBackend::new().local_dirs().is_empty());
}

#[test]
fn a_composite_moves_mounts_and_drops_shadowed_or_split_directories() {
    let (root, work, inner) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    // The default is local at `/`, but mounts lie below it: a mount of it would hide them.
    let view = CompositeBackend::new(local(&root))
        .mount("/workspace", local(&work))
        .unwrap()
        .mount("/memory", Arc::new(StateBackend::new()))
        .unwrap();
    assert_eq!(
        view.local_dirs(),
        vec![LocalDir {
            at: p("/workspace"),
            host: canonical(&work)
        }]
    );
    // A mount inside a local mount splits it: neither the outer directory nor anything is offered
    // for it, only the inner one.
    let split = CompositeBackend::new(Arc::new(StateBackend::new()))
        .mount("/workspace", local(&work))
        .unwrap()
        .mount("/workspace/vendor", local(&inner))
        .unwrap();
    assert_eq!(
        split.local_dirs(),
        vec![LocalDir {
            at: p("/workspace/vendor"),
            host: canonical(&inner)
        }]
    );
}

#[test]
fn a_scoped_view_follows_its_prefix_into_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let scoped = ScopedBackend::new(local(&dir), p("/threads/t1"));
    assert_eq!(
        scoped.local_dirs(),
        vec![LocalDir {
            at: VirtualPath::root(),
            host: canonical(&dir).join("threads").join("t1")
        }]
    );
    // A directory below the prefix moves up with it; one beside it is out of the view.
    let composite = CompositeBackend::new(Arc::new(StateBackend::new()))
        .mount("/threads/t1/work", local(&dir))
        .unwrap()
        .mount("/threads/t2", local(&dir))
        .unwrap();
    let scoped = ScopedBackend::new(Arc::new(composite), p("/threads/t1"));
    assert_eq!(
        scoped.local_dirs(),
        vec![LocalDir {
            at: p("/work"),
            host: canonical(&dir)
        }]
    );
}
