//! Files in and out of a thread (a Trellis extension): `POST /threads/{id}/files` uploads into the
//! thread's `/uploads` (multipart or raw body) and lists the files in its `attachments`, so the
//! attachments middleware names them to the model on the next run; `GET /threads/{id}/files`
//! downloads a file of the thread's view: its own files ([`crate::server::files`]), the user's
//! `/workspace` and the shared mounts ([`crate::server::view`]).

use axum::body::Bytes;
use axum::extract::{Extension, FromRequest, Multipart, Path, RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use trellis_middleware::State as AgentState;
use trellis_middleware::attachments::{
    ATTACHMENTS, AttachmentError, AttachmentStore, Upload, guess_media_type,
};
use trellis_middleware::backend::{ByteRange, VirtualPath};
use trellis_middleware::runtime::checkpoint::{Checkpoint, CheckpointError};

use crate::server::Shared;
use crate::server::checkpoints::{UPDATE_SLOT, checkpoint_config};
use crate::server::error::{ApiError, ApiResult};
use crate::server::extract::{User, parse_uuid};
use crate::server::files::{on_path, shown, space, storage, view_path};

/// Where uploads go.
pub const UPLOADS_DIR: &str = "/uploads";

/// Largest download (the file is read whole).
pub const MAX_DOWNLOAD_BYTES: u64 = 64 * 1024 * 1024;

/// Largest upload (`POST /threads/{id}/files`), the attachments' default.
pub const MAX_UPLOAD_BYTES: usize = 25 * 1024 * 1024;

/// The `path` query parameter of a file route (decoded), 422 when missing.
fn path_param(query: Option<&str>) -> ApiResult<String> {
    url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .find(|(k, _)| k == "path")
        .map(|(_, v)| v.into_owned())
        .ok_or_else(|| ApiError::unprocessable("the path query parameter is required"))
}

/// `GET /threads/{thread_id}/files?path=/a.md` (Trellis extension): the bytes of a file of the
/// thread's view — its own files, the owner's `/workspace`, the shared skill and memory mounts
/// ([`crate::server::view`]) — as an attachment. 404 when it does not exist, 422 for a bad path
/// or a directory, 413 over [`MAX_DOWNLOAD_BYTES`].
pub async fn download(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    let record = server.threads.get(&user, &parse_uuid("thread_id", &id)?)?;
    let path = view_path(&path_param(query.as_deref())?)?;
    let space = crate::server::view::storage_of(&server, &user, &record, &path).await?;
    let entry = match space.stat(&path).await {
        Ok(entry) => entry,
        Err(e) if e.is_not_found() => return Err(ApiError::not_found(format!("file {path}"))),
        Err(e) => return Err(on_path(e)),
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
    // At most the bound is read, even if the file grew since the stat.
    let read = match space
        .read(&path, Some(ByteRange::prefix(MAX_DOWNLOAD_BYTES)))
        .await
    {
        Ok(read) if !read.is_complete() => {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("{path} grew past {MAX_DOWNLOAD_BYTES} bytes"),
            ));
        }
        Ok(read) => read,
        Err(e) if e.is_not_found() => return Err(ApiError::not_found(format!("file {path}"))),
        Err(e) => return Err(on_path(e)),
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

/// Files one multipart upload may carry.
pub const MAX_UPLOAD_FILES: usize = 100;

/// 422 unless `name` is one file name: no `/`, `\`, `..`, control character, not empty, at most
/// 255 bytes.
fn check_name(name: &str) -> ApiResult<()> {
    if name.is_empty()
        || name.len() > 255
        || name == "."
        || name.contains(['/', '\\'])
        || name.contains("..")
        || name.chars().any(char::is_control)
    {
        return Err(ApiError::unprocessable(format!(
            "invalid upload name {:?}: one file name, no '/', '\\', '..' or control characters",
            shown(name)
        )));
    }
    Ok(())
}

fn rejected(status: StatusCode, text: String) -> ApiError {
    ApiError::new(
        if status.is_client_error() {
            status
        } else {
            StatusCode::BAD_REQUEST
        },
        text,
    )
}

/// The files of an upload request: a `multipart/form-data` form (every part a file, named by its
/// `filename`; at most [`MAX_UPLOAD_FILES`]) or the raw body named by the `path` query parameter.
async fn uploads_of(query: Option<&str>, request: Request) -> ApiResult<Vec<Upload>> {
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let media = |t: Option<&str>| {
        t.filter(|t| !t.is_empty() && *t != "application/octet-stream" && t.len() <= 200)
            .map(str::to_owned)
    };
    if content_type.starts_with("multipart/form-data") {
        let mut form = Multipart::from_request(request, &())
            .await
            .map_err(|r| rejected(r.status(), r.body_text()))?;
        let mut uploads = Vec::new();
        while let Some(field) = form
            .next_field()
            .await
            .map_err(|e| rejected(e.status(), e.body_text()))?
        {
            let Some(name) = field.file_name().map(str::to_owned) else {
                return Err(ApiError::unprocessable(
                    "every part of an upload form must be a file (a filename in its Content-Disposition)",
                ));
            };
            check_name(&name)?;
            if uploads.len() == MAX_UPLOAD_FILES {
                return Err(ApiError::unprocessable(format!(
                    "at most {MAX_UPLOAD_FILES} files per upload"
                )));
            }
            let media_type = media(field.content_type());
            let bytes = field
                .bytes()
                .await
                .map_err(|e| rejected(e.status(), e.body_text()))?;
            let mut upload = Upload::new(name, bytes);
            if let Some(media_type) = media_type {
                upload = upload.with_media_type(media_type);
            }
            uploads.push(upload);
        }
        if uploads.is_empty() {
            return Err(ApiError::unprocessable("the upload form has no file"));
        }
        return Ok(uploads);
    }
    let name = path_param(query)?;
    check_name(&name)?;
    let bytes = Bytes::from_request(request, &())
        .await
        .map_err(|r| rejected(r.status(), r.body_text()))?;
    let mut upload = Upload::new(name, bytes);
    if let Some(media_type) = media(Some(&content_type)) {
        upload = upload.with_media_type(media_type);
    }
    Ok(vec![upload])
}

/// `POST /threads/{thread_id}/files` (Trellis extension): upload files into `/uploads` of the
/// thread's own files — a `multipart/form-data` form (each part a file, named by its `filename`),
/// or the raw body with `?path=NAME`. Each is written as `/uploads/NAME` (a taken name gets `-2`,
/// `-3`, …; never replaced), and the thread's `attachments` list gains them, so the attachments
/// middleware names them to the model on the next run. `NAME` is one file name: a path (`/`, `\`,
/// `..`), an empty name or a control character is 422. The request is at most
/// [`MAX_UPLOAD_BYTES`] (413). 409 while a run is in flight, or when the thread changed during the
/// upload (the files are then written but not listed: upload them again). Answers
/// `{"uploads": [{"path", "name", "size", "media_type"}], "checkpoint"}`.
pub async fn upload(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    request: Request,
) -> ApiResult<Response> {
    let record = server.threads.get(&user, &parse_uuid("thread_id", &id)?)?;
    let uploads = uploads_of(query.as_deref(), request).await?;
    if server.busy(&record.thread_id).await? {
        return Err(ApiError::conflict(
            "the thread is running a task: wait for it to finish",
        ));
    }
    let uploads_dir = VirtualPath::parse(UPLOADS_DIR).map_err(storage)?;
    let store = AttachmentStore::new(space(&server, &record)?)
        .with_root(uploads_dir)
        .with_max_bytes(MAX_UPLOAD_BYTES as u64);
    let mut stored = Vec::new();
    for upload in uploads {
        stored.push(store.store(upload).await.map_err(|e| match e {
            AttachmentError::TooLarge { .. } => ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, e.to_string()),
            AttachmentError::NoFreeName(_) => ApiError::conflict(e.to_string()),
            AttachmentError::Backend(e) => on_path(e),
            e => storage(e),
        })?);
    }
    // List them in the thread's state: a checkpoint after the latest, version-checked.
    let tid = record.runtime_id();
    let latest = server
        .checkpointer
        .peek(&tid)
        .await
        .map_err(|e| ApiError::internal("reading a thread", e))?;
    let (mut state, version, seq) = match latest {
        Some(s) => (s.checkpoint.state, Some(s.version), s.checkpoint.seq + 1),
        None => (AgentState::default(), None, 0),
    };
    state
        .update(&ATTACHMENTS, |list| {
            for attachment in &stored {
                list.retain(|a| a.path != attachment.path);
                list.push(attachment.clone());
            }
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
            let paths: Vec<&str> = stored.iter().map(|a| a.path.as_str()).collect();
            return Err(ApiError::conflict(format!(
                "the thread changed during the upload: {paths:?} are stored but not listed; upload them again"
            )));
        }
        Err(e) => return Err(ApiError::internal("saving a thread's upload", e)),
    }
    server.threads.update(&record.thread_id, |_| {}).await?;
    let uploads: Vec<Value> = stored
        .iter()
        .map(|a| json!({"path": a.path, "name": a.name, "size": a.size, "media_type": a.media_type}))
        .collect();
    Ok(axum::Json(json!({
        "uploads": uploads, "checkpoint": checkpoint_config(&record.thread_id, seq),
    }))
    .into_response())
}
