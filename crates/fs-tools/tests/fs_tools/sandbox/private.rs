//! A command's copy of the view and the skill folder cache are private to the user Trellis runs
//! as (review F6): their directories are created mode 0700, so no other local user can list or
//! open anything below them, even while they are being filled. Checked on the mode bits, which
//! mean the same when the tests run as root.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use trellis_backend::sandbox::{ExecFiles, ExecRequest};
use trellis_fs_tools::sandbox::FolderCache;
use trellis_fs_tools::sandbox::workdir::Workdir;

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
    let workdir = Workdir::materialize(&files, &ExecRequest::new("true"), parent.path(), None, None)
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
