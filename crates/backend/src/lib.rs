//! # trellis-backend
//!
//! The storage layer of Trellis. Everything an agent reads or writes — skills, memory, its own work,
//! checkpoints — goes through one object-safe [`Backend`] trait:
//!
//! * [`StateBackend`]: in process memory (serializable to JSON), shared by its handles;
//! * [`FilesystemBackend`]: a directory on local disk, with every escape refused;
//! * [`ObjectStoreBackend`]: any `object_store` store (S3, GCS, Azure, local, memory) under a prefix;
//! * [`CompositeBackend`]: routes paths to other backends by longest prefix;
//! * [`ScopedBackend`]: a view of another backend below a prefix, with nothing outside it in reach:
//!   the file space of one thread or one user, placed by a checked [`ScopeId`] (a [`ScopeKind`] and
//!   an id that is always exactly one path segment, or an [`InvalidScopeId`] naming it).
//!
//! A backend may also run commands over its files: the [`Sandbox`] capability ([`sandbox`]). This
//! crate holds the contract; the implementations (bubblewrap, the default on Linux, and the
//! unsandboxed shell) are in trellis-fs-tools, beside the `execute` tool.
//!
//! Paths are parsed once into [`VirtualPath`]; failures are one error enum, [`BackendError`], that
//! always names the path. Conveniences (read as string, read-modify-write with retries, …) are on
//! [`BackendExt`]. One conformance suite (`tests/backend/conformance`) checks every implementation against the
//! same contract, the cloud ones against emulators.
//!
//! ```
//! use trellis_backend::{Backend, BackendExt, StateBackend, VirtualPath, WriteMode};
//! # tokio_test_block_on(async {
//! let backend = StateBackend::new();
//! let path = VirtualPath::parse("/notes/todo.md").unwrap();
//! backend.write(&path, "buy milk".into(), WriteMode::CreateNew).await.unwrap();
//! assert_eq!(backend.read_to_string(&path).await.unwrap(), "buy milk");
//! # });
//! # fn tokio_test_block_on(f: impl std::future::Future<Output = ()>) {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```

#![warn(missing_docs)]

mod backend;
mod composite;
mod error;
mod ext;
pub mod glob;
mod local;
mod object;
mod object_config;
pub mod path;
mod reroot;
pub mod sandbox;
mod scope;
mod scoped;
mod search;
mod state;
mod stream;
#[doc(hidden)]
pub mod testing;

pub use backend::{
    AppendMode, Backend, ByteRange, Capabilities, DEFAULT_GLOB_LIMIT, DEFAULT_LIST_LIMIT,
    DEFAULT_READ_CONCURRENCY, Entry, EntryKind, FileListing, GlobOutput, GrepMatch, GrepOutput, GrepQuery,
    LocalDir, PathFilter, ReadOutput, Version, WriteMode, WriteOutcome,
};
pub use composite::CompositeBackend;
pub use error::{BackendError, ConflictKind, Result};
pub use ext::BackendExt;
pub use local::FilesystemBackend;
pub use object::{MULTIPART_THRESHOLD, ObjectStoreBackend};
pub use object_config::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT, RetryOptions, StoreOptions};
pub use path::{PathError, VirtualPath};
pub use sandbox::{ExecFiles, ExecOutput, ExecRequest, Sandbox, SandboxError, SandboxedBackend};
pub use scope::{InvalidScopeId, ScopeId, ScopeKind};
pub use scoped::ScopedBackend;
pub use state::StateBackend;
pub use stream::{WRITE_CHUNK, WriteSource, read_source};

/// This crate's README, compiled: its examples are doctests, so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
