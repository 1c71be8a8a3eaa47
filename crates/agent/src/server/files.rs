//! A thread's own files over the API: what a `ThreadState`'s `values.files` shows
//! ([`state_files`]), what `update_state` writes ([`plan`], [`apply`]), and the copy of a
//! thread's files ([`copy_all`]). Uploads and downloads: [`crate::server::transfer`].
//!
//! "The thread's own files" are the thread space the agent sees at `/` (the
//! [`Checkpointer`](trellis_middleware::Checkpointer)'s thread files: `STATE_DIR/threads/<id>/files`
//! under `trellis serve`), not the shared mounts (`/skills/…`, `/memory/…`) nor the user's
//! `/workspace`. A checkpointer that keeps no thread files gives an empty `files` and a 422 on
//! every file route.
//!
//! `values.files` is `{path: FileData}` in Deep Agents' shape, `{content, encoding, created_at,
//! modified_at}` (`created_at` is the modification time: stores keep no creation time), plus
//! Trellis's `size` and `version`. A UTF-8 text file of at most [`MAX_TEXT_BYTES`] is inline while
//! the state's inline text stays under [`MAX_STATE_TEXT_BYTES`]; any other file has empty
//! `content`, `omitted` (`"binary"` or `"too_large"`) and a `download_url` (relative to the API's
//! base). At most [`MAX_STATE_FILES`] files are listed (sorted by path).
//!
//! A file in an `update_state` is `FileData` (`content` a string or, as older Deep Agents wrote,
//! a list of lines; `encoding` `utf-8` or `base64`) or `null` (delete). With Trellis's `version`
//! it is written only if the file is still at that version (else 409); without, only if it has not
//! changed since the update began. An entry with `omitted` (an unchanged listing sent back) is left
//! alone.

use std::sync::Arc;

use axum::body::Bytes;
use base64::Engine as _;
use serde_json::{Map, Value, json};
use trellis_middleware::backend::{Backend, BackendError, ConflictKind, Version, VirtualPath, WriteMode};

use crate::server::Shared;
use crate::server::error::{ApiError, ApiResult};
use crate::server::threads::ThreadRecord;

/// Largest text file shown inline in `values.files`.
pub const MAX_TEXT_BYTES: u64 = 256 * 1024;
/// Inline text of all files of one state together; past it files are listed with a link.
pub const MAX_STATE_TEXT_BYTES: u64 = 4 * 1024 * 1024;
/// Files listed in `values.files`.
pub const MAX_STATE_FILES: usize = 1000;
/// Files one `update_state` may write.
const MAX_WRITES: usize = 1000;

/// The thread's own file space; 422 when the checkpointer keeps none.
pub(crate) fn space(server: &Shared, record: &ThreadRecord) -> ApiResult<Arc<dyn Backend>> {
    server
        .checkpointer
        .thread_files(&record.runtime_id())
        .ok_or_else(|| ApiError::unprocessable("this server keeps no thread files"))
}

pub(crate) fn storage(e: impl std::fmt::Display) -> ApiError {
    ApiError::internal("a thread's files", e)
}

/// A storage error on a path the client named, as the client's error where it is one: a missing
/// file 404; a path through a file, onto a directory or invalid 422; a conflict 409; too large 413;
/// a refusal 403. Anything else is the server's (500).
pub(crate) fn on_path(e: BackendError) -> ApiError {
    use axum::http::StatusCode;
    match e {
        BackendError::NotFound { .. } => ApiError::not_found(e.to_string()),
        BackendError::IsADirectory { .. }
        | BackendError::NotADirectory { .. }
        | BackendError::InvalidPath { .. } => ApiError::unprocessable(e.to_string()),
        BackendError::Conflict { .. } => ApiError::conflict(e.to_string()),
        BackendError::TooLarge { .. } => ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, e.to_string()),
        BackendError::PermissionDenied { .. } => ApiError::new(StatusCode::FORBIDDEN, e.to_string()),
        e => storage(e),
    }
}

/// `path` percent-encoded for a query string.
fn encode(path: &str) -> String {
    url::form_urlencoded::byte_serialize(path.as_bytes()).collect()
}

/// The thread's files as `values.files` (see the module docs).
pub async fn state_files(server: &Shared, record: &ThreadRecord) -> ApiResult<Value> {
    let Some(space) = server.checkpointer.thread_files(&record.runtime_id()) else {
        return Ok(json!({}));
    };
    let listing = match space.list_files(&VirtualPath::root(), MAX_STATE_FILES).await {
        Ok(listing) => listing,
        Err(e) if e.is_not_found() => return Ok(json!({})),
        Err(e) => return Err(storage(e)),
    };
    let mut budget = MAX_STATE_TEXT_BYTES;
    let inline: Vec<VirtualPath> = listing
        .files
        .iter()
        .filter(|e| {
            let fits = e.size <= MAX_TEXT_BYTES && e.size <= budget;
            if fits {
                budget -= e.size;
            }
            fits
        })
        .map(|e| e.path.clone())
        .collect();
    let reads = space.read_many(&inline, None).await;
    let mut texts = std::collections::HashMap::new();
    let mut gone = std::collections::HashSet::new();
    for (path, read) in inline.iter().zip(reads) {
        match read {
            Ok(read) => {
                texts.insert(path.clone(), read.bytes);
            }
            // Deleted since the listing: not shown.
            Err(e) if e.is_not_found() => {
                gone.insert(path.clone());
            }
            Err(e) => return Err(storage(e)),
        }
    }
    let mut out = Map::new();
    for entry in listing.files.iter().filter(|e| !gone.contains(&e.path)) {
        let modified = entry.modified.as_ref().map(crate::server::threads::time);
        let mut data = json!({
            "content": "", "encoding": "utf-8", "created_at": modified, "modified_at": modified,
            "size": entry.size, "version": entry.version.as_ref().map(Version::as_str),
        });
        let omitted = match texts.get(&entry.path) {
            Some(bytes) => match std::str::from_utf8(bytes) {
                Ok(text) if !text.contains('\0') => {
                    data["content"] = json!(text);
                    None
                }
                _ => Some("binary"),
            },
            // Over MAX_TEXT_BYTES, or past the state's inline budget.
            None => Some("too_large"),
        };
        if let Some(why) = omitted {
            data["omitted"] = json!(why);
            data["download_url"] = json!(format!(
                "/threads/{}/files?path={}",
                record.thread_id,
                encode(entry.path.as_str())
            ));
        }
        out.insert(entry.path.to_string(), data);
    }
    Ok(Value::Object(out))
}

/// What one file of an update must find before it is written.
#[derive(Debug, Clone)]
enum Expect {
    /// This version.
    Version(Version),
    /// No file.
    Absent,
}

/// One file write of an update: the bytes (`None`: delete) and what it must find.
#[derive(Debug)]
pub struct FileWrite {
    path: VirtualPath,
    bytes: Option<Bytes>,
    expect: Expect,
}

/// The writes of an update's `files`, checked: paths, shapes and versions (see the module docs).
/// 422 for a bad path or shape, 409 for a file not at the version given.
pub async fn plan(server: &Shared, record: &ThreadRecord, update: &Value) -> ApiResult<Vec<FileWrite>> {
    let Value::Object(files) = update else {
        return Err(ApiError::unprocessable(
            "values.files must be an object {path: FileData | null}",
        ));
    };
    if files.len() > MAX_WRITES {
        return Err(ApiError::unprocessable(format!(
            "at most {MAX_WRITES} files per update"
        )));
    }
    let space = space(server, record)?;
    let mut writes = Vec::new();
    for (path, data) in files {
        let vpath = view_path(path)?;
        let bytes = match data {
            Value::Null => None,
            Value::Object(data) if data.contains_key("omitted") => continue,
            Value::Object(data) => Some(file_bytes(path, data)?),
            _ => {
                return Err(ApiError::unprocessable(format!(
                    "values.files[{path:?}] must be FileData or null"
                )));
            }
        };
        let current = match space.stat(&vpath).await {
            Ok(entry) if entry.is_dir() => {
                return Err(ApiError::unprocessable(format!("{path} is a directory")));
            }
            Ok(entry) => entry.version,
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(on_path(e)),
        };
        let given = match data.get("version") {
            None | Some(Value::Null) => None,
            Some(Value::String(v)) => Some(Version::new(v.as_str())),
            Some(_) => {
                return Err(ApiError::unprocessable(format!(
                    "values.files[{path:?}].version must be a string"
                )));
            }
        };
        if let Some(given) = &given
            && current.as_ref() != Some(given)
        {
            return Err(ApiError::conflict(format!(
                "{path} changed since version {}: read the state again",
                given.as_str()
            )));
        }
        let expect = match current {
            Some(v) => Expect::Version(v),
            None => Expect::Absent,
        };
        writes.push(FileWrite {
            path: vpath,
            bytes,
            expect,
        });
    }
    Ok(writes)
}

/// The bytes of one `FileData`.
fn file_bytes(path: &str, data: &Map<String, Value>) -> ApiResult<Bytes> {
    let text = match data.get("content") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(lines)) => lines
            .iter()
            .map(|l| {
                l.as_str()
                    .ok_or_else(|| ApiError::unprocessable(format!("{path}: content lines must be strings")))
            })
            .collect::<ApiResult<Vec<_>>>()?
            .join("\n"),
        _ => {
            return Err(ApiError::unprocessable(format!(
                "{path}: FileData needs content (a string)"
            )));
        }
    };
    match data.get("encoding").and_then(Value::as_str) {
        None | Some("utf-8" | "utf8") => Ok(Bytes::from(text)),
        Some("base64") => base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map(Bytes::from)
            .map_err(|e| ApiError::unprocessable(format!("{path}: content is not base64: {e}"))),
        Some(other) => Err(ApiError::unprocessable(format!(
            "{path}: encoding must be utf-8 or base64, not {other:?}"
        ))),
    }
}

/// A path of the thread's view: absolute, no `..`, no control characters (422 otherwise).
pub(crate) fn view_path(path: &str) -> ApiResult<VirtualPath> {
    if !path.starts_with('/') {
        return Err(ApiError::unprocessable(format!(
            "{path:?} is not an absolute path"
        )));
    }
    let parsed = VirtualPath::parse(path)
        .map_err(|e| ApiError::unprocessable(format!("invalid path {:?}: {e}", shown(path))))?;
    if parsed.is_root() {
        return Err(ApiError::unprocessable("a file path is needed, not /"));
    }
    Ok(parsed)
}

pub(crate) fn shown(path: &str) -> String {
    path.chars().take(200).collect()
}

/// Write `writes` in order, each only if its file is still as [`plan`] found it. A file changed
/// in between is a 409 naming it and the files already written (those stay written; the others
/// are untouched). A delete checks the version and then deletes: a write landing between the two
/// is lost (the store has no version-checked delete).
pub async fn apply(server: &Shared, record: &ThreadRecord, writes: Vec<FileWrite>) -> ApiResult<()> {
    let space = space(server, record)?;
    let mut done: Vec<String> = Vec::new();
    for write in writes {
        let conflict = |done: &[String]| {
            ApiError::conflict(format!(
                "{} changed while the update was written (written before it: {done:?})",
                write.path
            ))
        };
        match write.bytes {
            Some(bytes) => {
                let mode = match &write.expect {
                    Expect::Version(v) => WriteMode::IfVersion(v.clone()),
                    Expect::Absent => WriteMode::CreateNew,
                };
                match space.write(&write.path, bytes, mode).await {
                    Ok(_) => {}
                    Err(BackendError::Conflict {
                        kind: ConflictKind::AlreadyExists | ConflictKind::VersionMismatch,
                        ..
                    }) => return Err(conflict(&done)),
                    Err(e) => return Err(on_path(e)),
                }
            }
            None => {
                let now = match space.stat(&write.path).await {
                    Ok(entry) => entry.version,
                    Err(e) if e.is_not_found() => None,
                    Err(e) => return Err(storage(e)),
                };
                match (&write.expect, now) {
                    (Expect::Absent, None) => {}
                    (Expect::Version(v), Some(now)) if *v == now => match space.delete(&write.path).await {
                        Ok(()) => {}
                        Err(e) if e.is_not_found() => {}
                        Err(e) => return Err(storage(e)),
                    },
                    _ => return Err(conflict(&done)),
                }
            }
        }
        done.push(write.path.to_string());
    }
    Ok(())
}

/// Most files a thread copy carries.
pub const MAX_COPY_FILES: usize = 100_000;

/// Copy every file of `src` to the same path in `dst` (a thread copy's files); 422 over
/// [`MAX_COPY_FILES`].
pub async fn copy_all(src: &dyn Backend, dst: &dyn Backend) -> ApiResult<()> {
    let listing = match src.list_files(&VirtualPath::root(), MAX_COPY_FILES).await {
        Ok(listing) => listing,
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(storage(e)),
    };
    if listing.truncated {
        return Err(ApiError::unprocessable(format!(
            "the thread has more than {MAX_COPY_FILES} files: too many to copy"
        )));
    }
    for chunk in listing.files.chunks(64) {
        let paths: Vec<VirtualPath> = chunk.iter().map(|e| e.path.clone()).collect();
        for (path, read) in paths.iter().zip(src.read_many(&paths, None).await) {
            let bytes = match read {
                Ok(read) => read.bytes,
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(storage(e)),
            };
            dst.write(path, bytes, WriteMode::Overwrite)
                .await
                .map_err(storage)?;
        }
    }
    Ok(())
}
