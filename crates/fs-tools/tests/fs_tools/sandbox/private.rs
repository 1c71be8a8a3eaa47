//! A command's copy of the view and the skill folder cache are private to the user Trellis runs
//! as (review F6): their directories are created mode 0700, so no other local user can list or
//! open anything below them, even while they are being filled. Checked on the mode bits, which
//! mean the same when the tests run as root.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use trellis_backend::sandbox::{ExecFiles, ExecRequest};
use trellis_fs_tools::sandbox::FolderCache;
use trellis_fs_tools::sandbox::workdir::{Owner, Workdir};

use super::{p, seed, state};

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

#[tokio::test]
async fn a_copy_of_the_view_is_private_to_its_user() {
    let backend = state();
    seed(
        backend.as_ref(),
        &[("/workspace/secret.txt", "mine"), ("/notes/a.md", "a")],
    )
    .await;
    let parent = tempfile::tempdir().unwrap();
    std::fs::set_permissions(parent.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let files = ExecFiles::new(Arc::clone(&backend));
    let workdir = Workdir::materialize(
        &files,
        &ExecRequest::new("true"),
        parent.path(),
        None,
        None,
        None,
        &[],
    )
    .await
    .unwrap();
    let root = workdir.root();
    assert_eq!(
        mode(root) & 0o077,
        0,
        "{} is mode {:o}",
        root.display(),
        mode(root)
    );
    assert!(workdir.host_path(&p("/workspace/secret.txt")).is_file());
}

#[test]
fn the_skill_folder_cache_is_private_to_its_user() {
    let parent = tempfile::tempdir().unwrap();
    let _cache = FolderCache::new(parent.path(), None).unwrap();
    let made: Vec<_> = std::fs::read_dir(parent.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(made.len(), 1, "{made:?}");
    assert_eq!(
        mode(&made[0]) & 0o077,
        0,
        "{} is mode {:o}",
        made[0].display(),
        mode(&made[0])
    );
}

/// Review F13: with commands running as a shared user (`nobody`, when Trellis runs as root), the
/// cache directory stays Trellis's (0711), so that user — or any host daemon running as it — can
/// reach a copy it is given but cannot add, rename or replace one.
#[test]
fn the_commands_user_cannot_swap_a_cached_skill() {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::process::CommandExt;
    if std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(1) != 0 {
        eprintln!("skipped: the_commands_user_cannot_swap_a_cached_skill (not root)");
        return;
    }
    let parent = tempfile::tempdir().unwrap();
    std::fs::set_permissions(parent.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let nobody = Owner {
        uid: 65534,
        gid: 65534,
    };
    let _cache = FolderCache::new(parent.path(), Some(nobody)).unwrap();
    let dir = std::fs::read_dir(parent.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .next()
        .unwrap();
    let meta = std::fs::metadata(&dir).unwrap();
    assert_eq!((meta.uid(), mode(&dir)), (0, 0o711), "{}", dir.display());
    let planted = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg("mkdir \"$0/0000planted\"")
        .arg(&dir)
        .uid(nobody.uid)
        .gid(nobody.gid)
        .status()
        .unwrap();
    assert!(!planted.success(), "uid 65534 made a directory in the cache");
    assert!(!dir.join("0000planted").exists());
}
