//! Where a [`FilesystemBackend`](super::FilesystemBackend) operation runs: on the calling task, or
//! on tokio's blocking pool.
//!
//! A file system call blocks its thread, so async code usually hands it to the blocking pool. That
//! hand-off costs two thread wake-ups, the pool thread's and then the task's worker's, and on a
//! virtual machine each can take tens of microseconds. For the operations whose work is small and
//! bounded on a local file system it costs more than the operation. Those run on the calling task
//! instead:
//! - writes of at most [`INLINE_MAX`] bytes. They go to the page cache and are never `fsync`ed,
//!   so a few tens of microseconds;
//! - reads of files of at most [`INLINE_MAX`] bytes, and the open that finds their size;
//! - hard links;
//! - `stat`.
//!
//! Listings, batched reads and larger reads and writes stay on the pool, because their cost grows
//! with what they touch.
//!
//! Measured on the serve bench (2026-12-06, release, state dir on tmpfs, 2 cores), against
//! everything on the pool:
//! - 1,000 runs in flight on a model answering in 2–3 s: step latency p50 1.19 → 0.80 ms, p99
//!   3.29 → 2.42 ms;
//! - the server's CPU per step 1.62 → 1.20 ms;
//! - with every run stepping at once on an instant model, step p50 565 → 373 ms.
//!
//! A checkpoint is two of these operations (its log entry and its head), and a step saves two.
//!
//! This holds only where the file system keeps small operations in the page cache. On a network
//! file system (NFS, SMB, most FUSE mounts) even a small write may wait on the network, and
//! waiting on the calling task stalls every task of that worker. So operations run on the calling
//! task only when the root's file system is one of [`LOCAL`], read with `statfs` when the backend
//! is made. On any other file system everything goes to the pool, as it does with
//! [`FilesystemBackend::offload_all`](super::FilesystemBackend::offload_all).

use std::path::Path;

/// `statfs` type numbers of the local file systems whose small operations run on the calling
/// task, and their names.
pub(super) const LOCAL: &[(u32, &str)] = &[
    (0x0000_EF53, "ext4"), // ext2/3/4
    (0x5846_5342, "xfs"),
    (0x9123_683E, "btrfs"),
    (0x0102_1994, "tmpfs"),
    (0x8584_58F6, "ramfs"),
    (0x794C_7630, "overlayfs"), // containers' root
    (0x2FC1_2FC1, "zfs"),
    (0xF2F5_2010, "f2fs"),
    (0xCA45_1A4E, "bcachefs"),
];

/// The name of the [`LOCAL`] file system `root` is on; `None` on any other, or when `statfs`
/// fails.
pub(super) fn local_file_system(root: &Path) -> Option<&'static str> {
    rustix::fs::statfs(root)
        .ok()
        .and_then(|fs| local_type_name(fs.f_type as u64))
}

/// The name of a `statfs` type number that is one of [`LOCAL`]'s.
fn local_type_name(f_type: u64) -> Option<&'static str> {
    // `f_type` is a C long: a number past `i32::MAX` (btrfs) may come sign-extended.
    let magic = (f_type & 0xFFFF_FFFF) as u32;
    LOCAL.iter().find(|(m, _)| *m == magic).map(|(_, name)| *name)
}

/// The largest write, or file read, that runs on the calling task (64 KiB): a checkpoint of a
/// long thread, a thread record, a note. Larger ones go to the blocking pool.
pub(super) const INLINE_MAX: usize = 64 * 1024;

/// Run `op` on the calling task when `inline`, else on the blocking pool. `Err` only when the
/// pool's task panicked or was cancelled.
pub(super) async fn run<T: Send + 'static>(
    inline: bool,
    op: impl FnOnce() -> T + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    if inline {
        Ok(op())
    } else {
        tokio::task::spawn_blocking(op).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_file_systems_are_told_from_network_ones() {
        assert_eq!(local_type_name(0xEF53), Some("ext4"));
        assert_eq!(local_type_name(0x0102_1994), Some("tmpfs"));
        // btrfs, sign-extended as a C long holds it.
        assert_eq!(local_type_name(0xFFFF_FFFF_9123_683E), Some("btrfs"));
        // NFS, SMB2, CIFS, FUSE, 9p.
        for network in [0x6969, 0xFE53_4D42, 0xFF53_4D42, 0x6573_5546, 0x0102_1997] {
            assert_eq!(local_type_name(network), None, "{network:#x}");
        }
    }

    #[test]
    fn the_temporary_directories_here_are_local() {
        assert!(local_file_system(&std::env::temp_dir()).is_some());
        let shm = Path::new("/dev/shm");
        assert!(!shm.is_dir() || local_file_system(shm).is_some());
        assert_eq!(local_file_system(Path::new("/no/such/dir")), None);
    }
}
