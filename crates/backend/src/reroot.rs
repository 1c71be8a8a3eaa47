//! Moving what a backend returns from one root to another: the one piece of logic every backend
//! that shows another backend at a different place needs (a [`ScopedBackend`](crate::ScopedBackend)
//! shows `{prefix}/a` as `/a`; a mount of a [`CompositeBackend`](crate::CompositeBackend) shows `/a`
//! as `{mount}/a`).

use crate::backend::{Entry, GrepMatch, GrepOutput};
use crate::error::BackendError;
use crate::path::VirtualPath;

/// `entry` with its path moved by `keep` (say, `|p| p.rebase(from, to)`); `None` when `keep`
/// refuses it.
pub(crate) fn entry(entry: Entry, keep: impl Fn(&VirtualPath) -> Option<VirtualPath>) -> Option<Entry> {
    let path = keep(&entry.path)?;
    Some(Entry { path, ..entry })
}

/// Every entry moved by `keep`, those it refuses left out (order kept).
pub(crate) fn entries(list: Vec<Entry>, keep: impl Fn(&VirtualPath) -> Option<VirtualPath>) -> Vec<Entry> {
    list.into_iter().filter_map(|e| entry(e, &keep)).collect()
}

/// A grep's matches and skipped files moved by `keep`, those it refuses left out.
pub(crate) fn grep_output(out: GrepOutput, keep: impl Fn(&VirtualPath) -> Option<VirtualPath>) -> GrepOutput {
    let matches = out
        .matches
        .into_iter()
        .filter_map(|m| {
            Some(GrepMatch {
                path: keep(&m.path)?,
                ..m
            })
        })
        .collect();
    let skipped = out.skipped.iter().filter_map(keep).collect();
    GrepOutput {
        matches,
        skipped,
        truncated: out.truncated,
    }
}

impl BackendError {
    /// The same error (kind, source, details), naming `path` instead.
    pub(crate) fn renamed(mut self, path: impl ToString) -> Self {
        *self.path_mut() = path.to_string();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ConflictKind;

    #[test]
    fn renaming_keeps_the_kind_and_details() {
        let err = BackendError::TooLarge {
            path: "/inner/x".to_owned(),
            size: 9,
            limit: 4,
        }
        .renamed("/x");
        assert!(
            matches!(
                err,
                BackendError::TooLarge {
                    size: 9,
                    limit: 4,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(err.path(), "/x");
        let err = BackendError::Conflict {
            path: "/inner/y".to_owned(),
            kind: ConflictKind::VersionMismatch,
        }
        .renamed("/y");
        assert_eq!(
            err.to_string(),
            "conflict at /y: the file changed since it was read"
        );
    }
}
