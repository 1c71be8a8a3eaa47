//! The temporary files of writes beside their targets: their names ([`temp_for`],
//! [`is_temp_name`]), and the removal of those a killed write left ([`remove_if_abandoned`]).

use std::os::fd::OwnedFd;
use std::time::{Duration, SystemTime};

use rustix::fs::{AtFlags, FileType};

use super::kind;

/// A name for the temporary file that a write of `name` renames into place.
pub(in crate::local) fn temp_for(name: &str) -> String {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!(".{name}.trellis-tmp-{}-{n}", std::process::id())
}

/// A temporary file untouched this long is a leftover of a write that was killed, not one in
/// progress (a write appends to its file as its source delivers, and the sandbox's write-back, the
/// longest writer, stops after minutes): a listing that meets one removes it.
pub(super) const ABANDONED_TEMP: Duration = Duration::from_secs(24 * 3600);

/// Whether `name` is one [`temp_for`] makes: `.NAME.trellis-tmp-PID-N`. A write in progress (a
/// streamed one lasts as long as its source) or one a `kill -9` cut short leaves such a file
/// beside its target; it is not a file of the store's, so listings leave it out, and remove it
/// once it is [`ABANDONED_TEMP`] old. A file of the user's own that happens to be named this way
/// is hidden (and, once that old, removed) too.
pub(super) fn is_temp_name(name: &str) -> bool {
    let Some((head, tail)) = name.rsplit_once(".trellis-tmp-") else {
        return false;
    };
    let Some((pid, n)) = tail.split_once('-') else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    head.len() > 1 && head.starts_with('.') && digits(pid) && digits(n)
}

/// Remove the temporary file `name` of `dir` when it is a regular file last modified
/// [`ABANDONED_TEMP`] ago or more; best effort: any failure leaves it.
pub(super) fn remove_if_abandoned(dir: &OwnedFd, name: &std::ffi::CStr) {
    let Ok(st) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
        return;
    };
    let modified = SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(st.st_mtime).unwrap_or(0));
    let abandoned = SystemTime::now()
        .duration_since(modified)
        .is_ok_and(|age| age >= ABANDONED_TEMP);
    if kind(&st) == FileType::RegularFile && abandoned {
        let _ = rustix::fs::unlinkat(dir, name, AtFlags::empty());
    }
}

#[cfg(test)]
mod tests {
    use super::{is_temp_name, temp_for};

    #[test]
    fn the_names_of_temporary_files_are_recognised_and_nothing_else() {
        assert!(is_temp_name(&temp_for("notes.md")));
        assert!(is_temp_name(".a.trellis-tmp-1-0"));
        for name in [
            "notes.md",
            ".hidden",
            ".trellis-tmp-1-0",
            "a.trellis-tmp-1-0",
            ".a.trellis-tmp-1",
            ".a.trellis-tmp-x-0",
            ".a.trellis-tmp-1-",
            ".a.trellis-tmp-1-0.bak",
        ] {
            assert!(!is_temp_name(name), "{name}");
        }
    }
}
