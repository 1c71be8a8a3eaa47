//! The storage layer's one error type.

use crate::path::PathError;

/// Boxed source error.
pub type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Result alias for backend operations.
pub type Result<T, E = BackendError> = std::result::Result<T, E>;

/// Why a version-checked or create-only write was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConflictKind {
    /// Create-only write, but the file exists.
    AlreadyExists,
    /// Only-if-version write, but the file changed (or vanished) since that version was read.
    VersionMismatch,
}

/// Every failure of a [`Backend`](crate::Backend) operation. Each variant names the path it concerns
/// (as the caller wrote it, so an invalid path is still reported).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// No file or directory at the path.
    #[error("not found: {path}")]
    NotFound {
        /// The path.
        path: String,
    },
    /// A file operation was given a directory.
    #[error("is a directory: {path}")]
    IsADirectory {
        /// The path.
        path: String,
    },
    /// A directory operation was given a file, or a file stands where a directory is needed.
    #[error("not a directory: {path}")]
    NotADirectory {
        /// The path.
        path: String,
    },
    /// The store (or the host) refused access.
    #[error("permission denied: {path}")]
    PermissionDenied {
        /// The path.
        path: String,
        /// What the store said, when it said anything.
        #[source]
        source: Option<Source>,
    },
    /// The path string is not a valid virtual path, or it would leave the backend's root.
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath {
        /// The offending input.
        path: String,
        /// Why it was refused.
        reason: String,
    },
    /// A create-only or version-checked write lost a race.
    #[error("conflict at {path}: {}", match kind {
        ConflictKind::AlreadyExists => "the file already exists",
        ConflictKind::VersionMismatch => "the file changed since it was read",
    })]
    Conflict {
        /// The path.
        path: String,
        /// Which precondition failed.
        kind: ConflictKind,
    },
    /// The file is larger than the caller (or the backend) accepts.
    #[error("too large: {path} is {size} bytes, the limit is {limit}")]
    TooLarge {
        /// The path.
        path: String,
        /// The size found (at least this many bytes).
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// A streamed write's source (see [`Backend::write_stream`](crate::Backend::write_stream))
    /// held more or fewer bytes than the length it was announced with; nothing was written.
    #[error("length mismatch writing {path}: the source was announced as {expected} bytes, it held {}", match found {
        Some(found) => format!("{found}"),
        None => "more".to_owned(),
    })]
    LengthMismatch {
        /// The path.
        path: String,
        /// The announced length.
        expected: u64,
        /// How many bytes the source held when it held fewer; `None` when it held more (it is not
        /// read further than one byte past `expected`).
        found: Option<u64>,
    },
    /// A transient failure (network, throttling, timeout): the operation may succeed if retried.
    #[error("store unavailable for {path}: {source}")]
    Unavailable {
        /// The path.
        path: String,
        /// The underlying failure.
        #[source]
        source: Source,
    },
    /// The store did not answer in time (after the store client's own retries, where the request
    /// was safe to repeat). Transient, like [`BackendError::Unavailable`].
    #[error("store timed out for {path}: {source}")]
    Timeout {
        /// The path.
        path: String,
        /// The underlying failure.
        #[source]
        source: Source,
    },
    /// Anything else.
    #[error("storage error at {path}: {source}")]
    Other {
        /// The path.
        path: String,
        /// The underlying failure.
        #[source]
        source: Source,
    },
}

/// The `path` field of a [`BackendError`] (every variant has one), by reference or by mutable
/// reference as `$error` is: the one list of variants behind [`BackendError::path`] and
/// `BackendError::path_mut`.
macro_rules! path_field {
    ($error:expr) => {
        match $error {
            BackendError::NotFound { path }
            | BackendError::IsADirectory { path }
            | BackendError::NotADirectory { path }
            | BackendError::PermissionDenied { path, .. }
            | BackendError::InvalidPath { path, .. }
            | BackendError::Conflict { path, .. }
            | BackendError::TooLarge { path, .. }
            | BackendError::LengthMismatch { path, .. }
            | BackendError::Unavailable { path, .. }
            | BackendError::Timeout { path, .. }
            | BackendError::Other { path, .. } => path,
        }
    };
}

impl BackendError {
    /// The path this error concerns.
    pub fn path(&self) -> &str {
        path_field!(self)
    }

    /// The path this error concerns, to rename it (see `reroot.rs`).
    pub(crate) fn path_mut(&mut self) -> &mut String {
        path_field!(self)
    }

    /// True when retrying the same operation may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable { .. } | Self::Timeout { .. })
    }

    /// True for [`BackendError::Timeout`].
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::Timeout { .. })
    }

    /// True for [`BackendError::NotFound`].
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound { .. })
    }

    /// True for [`BackendError::Conflict`].
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Conflict { .. })
    }

    /// An [`BackendError::InvalidPath`] from a parse failure.
    pub fn invalid_path(path: impl Into<String>, reason: PathError) -> Self {
        Self::InvalidPath {
            path: path.into(),
            reason: reason.to_string(),
        }
    }

    pub(crate) fn not_found(path: impl ToString) -> Self {
        Self::NotFound {
            path: path.to_string(),
        }
    }

    pub(crate) fn other(path: impl ToString, source: impl Into<Source>) -> Self {
        Self::Other {
            path: path.to_string(),
            source: source.into(),
        }
    }

    /// Map an I/O error at `path` to the matching variant.
    pub fn from_io(path: impl ToString, err: std::io::Error) -> Self {
        use std::io::ErrorKind as K;
        let path = path.to_string();
        match err.kind() {
            K::NotFound => Self::NotFound { path },
            K::IsADirectory => Self::IsADirectory { path },
            K::NotADirectory => Self::NotADirectory { path },
            K::PermissionDenied => Self::PermissionDenied {
                path,
                source: Some(Box::new(err)),
            },
            K::AlreadyExists => Self::Conflict {
                path,
                kind: ConflictKind::AlreadyExists,
            },
            K::TimedOut => Self::Timeout {
                path,
                source: Box::new(err),
            },
            K::Interrupted | K::WouldBlock | K::ConnectionReset | K::ConnectionAborted => Self::Unavailable {
                path,
                source: Box::new(err),
            },
            _ if err.raw_os_error() == Some(40) => Self::InvalidPath {
                // ELOOP: a symlink loop, or O_NOFOLLOW met a symlink.
                path,
                reason: "too many levels of symbolic links".to_owned(),
            },
            _ => Self::Other {
                path,
                source: Box::new(err),
            },
        }
    }
}
