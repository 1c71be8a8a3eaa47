//! A thread's own files over the API: what a `ThreadState`'s `values.files` shows
//! ([`state_files`]), what `update_state` writes ([`plan`], [`apply`]), and Trellis's extension
//! routes `POST /threads/{id}/files` (upload into `/uploads`) and `GET /threads/{id}/files`
//! (download).
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
use axum::extract::{Extension, FromRequest, Path, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::{Map, Value, json};
use trellis_middleware::State as AgentState;
use trellis_middleware::attachments::{ATTACHMENTS, AttachmentStore, Upload, guess_media_type};
use trellis_middleware::backend::{Backend, BackendError, ConflictKind, Version, VirtualPath, WriteMode};
use trellis_middleware::runtime::checkpoint::{Checkpoint, CheckpointError};

use crate::server::Shared;
use crate::server::checkpoints::{UPDATE_SLOT, checkpoint_config};
use crate::server::error::{ApiError, ApiResult};
use crate::server::extract::{User, parse_uuid};
use crate::server::threads::ThreadRecord;

/// Largest text file shown inline in `values.files`.
pub const MAX_TEXT_BYTES: u64 = 256 * 1024;
/// Inline text of all files of one state together; past it files are listed with a link.
pub const MAX_STATE_TEXT_BYTES: u64 = 4 * 1024 * 1024;
/// Files listed in `values.files`.
pub const MAX_STATE_FILES: usize = 1000;
/// Files one `update_state` may write.
const MAX_WRITES: usize = 1000;
/// Largest upload (`POST /threads/{id}/files`), the attachments' default.
pub const MAX_UPLOAD_BYTES: usize = 25 * 1024 * 1024;
/// Largest download (the file is read whole).
pub const MAX_DOWNLOAD_BYTES: u64 = 64 * 1024 * 1024;
/// Where uploads go.
pub const UPLOADS_DIR: &str = "/uploads";

/// The thread's own file space; 422 when the checkpointer keeps none.
fn space(server: &Shared, record: &ThreadRecord) -> ApiResult<Arc<dyn Backend>> {
    server
        .checkpointer
        .thread_files(&record.runtime_id())
        .ok_or_else(|| ApiError::unprocessable("this server keeps no thread files"))
}

fn storage(e: impl std::fmt::Display) -> ApiError {
    ApiError::internal("a thread's files", e)
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
            Err(e) => return Err(storage(e)),
        };
        let given = data.get("version").and_then(Value::as_str).map(Version::new);
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
fn view_path(path: &str) -> ApiResult<VirtualPath> {
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

fn shown(path: &str) -> String {
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
                    Err(e) => return Err(storage(e)),
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

/// The `path` query parameter of a file route (decoded), 422 when missing.
fn path_param(query: Option<&str>) -> ApiResult<String> {
    url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .find(|(k, _)| k == "path")
        .map(|(_, v)| v.into_owned())
        .ok_or_else(|| ApiError::unprocessable("the path query parameter is required"))
}

/// `GET /threads/{thread_id}/files?path=/a.md` (Trellis extension): the bytes of a file of the
/// thread's own files, as an attachment. 404 when it does not exist, 422 for a bad path or a
/// directory, 413 over [`MAX_DOWNLOAD_BYTES`].
pub async fn download(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    let record = server.threads.get(&user, &parse_uuid("thread_id", &id)?)?;
    let path = view_path(&path_param(query.as_deref())?)?;
    let space = space(&server, &record)?;
    let entry = match space.stat(&path).await {
        Ok(entry) => entry,
        Err(e) if e.is_not_found() => return Err(ApiError::not_found(format!("file {path}"))),
        Err(e) => return Err(storage(e)),
    };
    if entry.is_dir() {
        return Err(ApiError::unprocessable(format!("{path} is a directory")));
    }
    if entry.size > MAX_DOWNLOAD_BYTES {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "{path} is {} bytes; downloads stop at {MAX_DOWNLOAD_BYTES}",
                entry.size
            ),
        ));
    }
    let read = match space.read(&path, None).await {
        Ok(read) => read,
        Err(e) if e.is_not_found() => return Err(ApiError::not_found(format!("file {path}"))),
        Err(e) => return Err(storage(e)),
    };
    let name = path.file_name().unwrap_or("file");
    // Shown as text at most, never rendered: no HTML or SVG from the API's origin.
    let media = match guess_media_type(name) {
        "text/html" | "image/svg+xml" | "application/xml" => "text/plain",
        other => other,
    };
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(media));
    headers.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    let ascii: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if let Ok(value) = HeaderValue::from_str(&format!("attachment; filename=\"{ascii}\"")) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    if let Some(version) = &read.version
        && let Ok(value) = HeaderValue::from_str(&format!("\"{}\"", version.as_str()))
    {
        headers.insert(header::ETAG, value);
    }
    Ok((headers, read.bytes).into_response())
}

/// `POST /threads/{thread_id}/files?path=NAME` (Trellis extension): the raw body becomes
/// `/uploads/NAME` in the thread's own files (a taken name gets `-2`, `-3`, …; never replaced),
/// and the thread's `attachments` list gains it, so the attachments middleware names it to the
/// model on the next run. `NAME` is one file name: a path (`/`, `\`, `..`), an empty name or a
/// control character is 422. The body is at most [`MAX_UPLOAD_BYTES`] (413). 409 while a run is
/// in flight, or when the thread changed during the upload (the file is then written but not
/// listed: upload it again). Answers `{"path", "name", "size", "media_type", "checkpoint"}`.
pub async fn upload(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    request: Request,
) -> ApiResult<Response> {
    let record = server.threads.get(&user, &parse_uuid("thread_id", &id)?)?;
    let name = path_param(query.as_deref())?;
    if name.is_empty()
        || name.len() > 255
        || name == "."
        || name.contains(['/', '\\'])
        || name.contains("..")
        || name.chars().any(char::is_control)
    {
        return Err(ApiError::unprocessable(format!(
            "invalid upload name {:?}: one file name, no '/', '\\', '..' or control characters",
            shown(&name)
        )));
    }
    let media_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .filter(|t| !t.is_empty() && *t != "application/octet-stream" && t.len() <= 200)
        .map(str::to_owned);
    let bytes = Bytes::from_request(request, &()).await.map_err(|rejection| {
        let status = rejection.status();
        ApiError::new(
            if status.is_client_error() {
                status
            } else {
                StatusCode::BAD_REQUEST
            },
            rejection.body_text(),
        )
    })?;
    if server.runs.active_run(&record.thread_id).is_some() {
        return Err(ApiError::conflict(
            "the thread is running a task: wait for it to finish",
        ));
    }
    let uploads = VirtualPath::parse(UPLOADS_DIR).map_err(storage)?;
    let mut upload = Upload::new(name, bytes);
    if let Some(media_type) = media_type {
        upload = upload.with_media_type(media_type);
    }
    let store = AttachmentStore::new(space(&server, &record)?)
        .with_root(uploads)
        .with_max_bytes(MAX_UPLOAD_BYTES as u64);
    let attachment = store.store(upload).await.map_err(|e| match e {
        trellis_middleware::attachments::AttachmentError::TooLarge { .. } => {
            ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, e.to_string())
        }
        trellis_middleware::attachments::AttachmentError::NoFreeName(_) => ApiError::conflict(e.to_string()),
        e => storage(e),
    })?;
    // List it in the thread's state: a checkpoint after the latest, version-checked.
    let tid = record.runtime_id();
    let stored = server
        .checkpointer
        .peek(&tid)
        .await
        .map_err(|e| ApiError::internal("reading a thread", e))?;
    let (mut state, version, seq) = match stored {
        Some(s) => (s.checkpoint.state, Some(s.version), s.checkpoint.seq + 1),
        None => (AgentState::default(), None, 0),
    };
    state
        .update(&ATTACHMENTS, |list| {
            list.retain(|a| a.path != attachment.path);
            list.push(attachment.clone());
        })
        .map_err(|e| ApiError::internal("the thread's attachments", e))?;
    state.set_json(
        UPDATE_SLOT,
        true,
        json!({"seq": seq, "as_node": "__start__", "keys": ["attachments"]}),
    );
    match server
        .checkpointer
        .save(Checkpoint::new(tid, seq, state), version.as_ref())
        .await
    {
        Ok(_) => {}
        Err(CheckpointError::Conflict { .. }) => {
            return Err(ApiError::conflict(format!(
                "the thread changed during the upload: {} is stored but not listed; upload it again",
                attachment.path
            )));
        }
        Err(e) => return Err(ApiError::internal("saving a thread's upload", e)),
    }
    server.threads.update(&record.thread_id, |_| {}).await?;
    Ok(axum::Json(json!({
        "path": attachment.path, "name": attachment.name, "size": attachment.size,
        "media_type": attachment.media_type, "checkpoint": checkpoint_config(&record.thread_id, seq),
    }))
    .into_response())
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
