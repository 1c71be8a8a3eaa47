//! Attachments: files a user uploads with a request, stored on the backend and listed in the prompt
//! by name and path — never by content. The model reads the ones it needs with `read_file`.
//!
//! * [`AttachmentStore::attach`] writes uploads under `/attachments/` (create-only: an existing file
//!   is never replaced; a clashing name gets a `-2`, `-3`, … suffix) and hands their records to the
//!   run in the [`NEW_ATTACHMENTS`] slot. Files uploaded some other way can be handed over the same
//!   way ([`with_attachments`], or the `new_attachments` slot as JSON).
//! * [`AttachmentsMiddleware`] moves new records into the thread's public [`ATTACHMENTS`] slot once
//!   per run (a record with the same path replaces the older one) and adds the list to every request
//!   as one system block, byte-identical until the list changes. Register it after the prompt-caching
//!   middleware: the list changes when files are added, so it belongs after the cached prefix.

use std::fmt::Write as _;
use std::sync::Arc;

use crate::backend::{Backend, BackendError, ConflictKind, VirtualPath, WriteMode};
use crate::runtime::agent::Agent;
use crate::runtime::context::ThreadId;
use async_trait::async_trait;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::runtime::context::RunContext;
use crate::runtime::error::AgentError;
use crate::runtime::message::SystemBlock;
use crate::runtime::middleware::{Middleware, Next};
use crate::runtime::model::{ModelRequest, ModelResponse};
use crate::runtime::run::RunInput;
use crate::runtime::state::{Slot, State};

/// The thread's attached files (public: callers and UIs show them).
pub static ATTACHMENTS: Slot<Vec<Attachment>> = Slot::public("attachments");
/// Files attached by the caller for this run; moved into [`ATTACHMENTS`] when the run starts.
pub static NEW_ATTACHMENTS: Slot<Vec<Attachment>> = Slot::public("new_attachments");

/// Directory uploads are written to by default.
pub const DEFAULT_ATTACHMENTS_DIR: &str = "/attachments";
/// Largest upload accepted by default (25 MiB).
pub const DEFAULT_MAX_ATTACHMENT_BYTES: u64 = 25 * 1024 * 1024;
/// Longest file name shown in the prompt, in characters.
const MAX_NAME_CHARS: usize = 200;
/// Name suffixes tried when a file name is taken.
const MAX_NAME_ATTEMPTS: u32 = 100;

/// One attached file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    /// The name the user gave the file.
    pub name: String,
    /// Where the model can read it.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// MIME type, e.g. `text/csv`.
    pub media_type: String,
}

/// A file to attach.
#[derive(Debug, Clone)]
pub struct Upload {
    /// The user's file name.
    pub name: String,
    /// The content.
    pub bytes: Bytes,
    /// MIME type; guessed from the name's extension when `None`.
    pub media_type: Option<String>,
}

impl Upload {
    /// An upload named `name`.
    pub fn new(name: impl Into<String>, bytes: impl Into<Bytes>) -> Self {
        Self {
            name: name.into(),
            bytes: bytes.into(),
            media_type: None,
        }
    }

    /// Set the MIME type.
    pub fn with_media_type(mut self, media_type: impl Into<String>) -> Self {
        self.media_type = Some(media_type.into());
        self
    }
}

/// Why a file could not be attached.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AttachmentError {
    /// The upload is over the store's limit.
    #[error("attachment {name:?} is {size} bytes, the limit is {limit}")]
    TooLarge {
        /// The file name.
        name: String,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// Every candidate name was taken.
    #[error("no free name for attachment {0:?}")]
    NoFreeName(String),
    /// The backend failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// Writes uploads to a backend and records them for a run.
#[derive(Debug, Clone)]
pub struct AttachmentStore {
    backend: Arc<dyn Backend>,
    root: VirtualPath,
    max_bytes: u64,
}

impl AttachmentStore {
    /// Uploads go to [`DEFAULT_ATTACHMENTS_DIR`] on `backend`.
    pub fn new(backend: Arc<dyn Backend>) -> Self {
        Self {
            backend,
            root: VirtualPath::parse(DEFAULT_ATTACHMENTS_DIR).unwrap_or_else(|_| VirtualPath::root()),
            max_bytes: DEFAULT_MAX_ATTACHMENT_BYTES,
        }
    }

    /// Uploads into `thread`'s own files, where a per-thread file layout shows them to that
    /// thread (and, under [`DEFAULT_ATTACHMENTS_DIR`], to its subagents) and nowhere else. `None`
    /// when the agent's checkpointer keeps no thread files.
    pub fn for_thread(agent: &Agent, thread: &ThreadId) -> Option<Self> {
        agent.thread_files(thread).map(Self::new)
    }

    /// Write uploads under `root` instead.
    pub fn with_root(mut self, root: VirtualPath) -> Self {
        self.root = root;
        self
    }

    /// Refuse uploads larger than `max_bytes`.
    pub fn with_max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// Write one upload (never replacing an existing file) and return its record.
    pub async fn store(&self, upload: Upload) -> Result<Attachment, AttachmentError> {
        let size = upload.bytes.len() as u64;
        if size > self.max_bytes {
            return Err(AttachmentError::TooLarge {
                name: upload.name,
                size,
                limit: self.max_bytes,
            });
        }
        let media_type = upload
            .media_type
            .clone()
            .unwrap_or_else(|| guess_media_type(&upload.name).to_owned());
        let (stem, ext) = file_name_parts(&upload.name);
        for attempt in 1..=MAX_NAME_ATTEMPTS {
            let file = match attempt {
                1 => format!("{stem}{ext}"),
                n => format!("{stem}-{n}{ext}"),
            };
            let path = self.root.join(&file).map_err(|e| BackendError::InvalidPath {
                path: file.clone(),
                reason: e.to_string(),
            })?;
            match self
                .backend
                .write(&path, upload.bytes.clone(), WriteMode::CreateNew)
                .await
            {
                Ok(_) => {
                    return Ok(Attachment {
                        name: display_name(&upload.name),
                        path: path.to_string(),
                        size,
                        media_type,
                    });
                }
                Err(BackendError::Conflict {
                    kind: ConflictKind::AlreadyExists,
                    ..
                }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(AttachmentError::NoFreeName(upload.name))
    }

    /// Store every upload and hand the records to `input`'s run (see [`with_attachments`]).
    pub async fn attach(
        &self,
        input: RunInput,
        uploads: impl IntoIterator<Item = Upload>,
    ) -> Result<RunInput, AttachmentError> {
        let mut records = Vec::new();
        for upload in uploads {
            records.push(self.store(upload).await?);
        }
        Ok(with_attachments(input, records))
    }
}

/// Hand already stored files to the run: they are added to the thread's [`ATTACHMENTS`] when it
/// starts. Call it once per run with every file (a second call replaces the first's list).
pub fn with_attachments(input: RunInput, attachments: Vec<Attachment>) -> RunInput {
    input.slot(&NEW_ATTACHMENTS, attachments)
}

/// A safe file name for an upload, as (stem, extension with its dot): letters and digits of any
/// script, `-`, `_` and `.` kept, anything else `_`; no leading dot; at most 100 characters.
fn file_name_parts(name: &str) -> (String, String) {
    let base = name.rsplit(['/', '\\']).next().unwrap_or(name);
    let clean: String = base
        .chars()
        .map(|c| {
            if c.is_alphanumeric() && !c.is_control() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let clean = clean.trim_start_matches('.');
    let (stem, ext) = match clean.rfind('.') {
        Some(dot) if dot > 0 && clean.len() - dot <= 12 => (&clean[..dot], &clean[dot..]),
        _ => (clean, ""),
    };
    let stem: String = stem.chars().take(100).collect();
    let stem = if stem.is_empty() { "file".to_owned() } else { stem };
    // Keep only ASCII alphanumerics in the extension, so it cannot hide a look-alike character.
    let ext = if ext.chars().skip(1).all(|c| c.is_ascii_alphanumeric()) {
        ext.to_ascii_lowercase()
    } else {
        String::new()
    };
    (stem, ext)
}

/// The user's file name as shown in the prompt: one line, at most [`MAX_NAME_CHARS`] characters.
fn display_name(name: &str) -> String {
    let one_line: String = name
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_NAME_CHARS)
        .collect();
    let trimmed = one_line.trim();
    if trimmed.is_empty() {
        "(unnamed file)".to_owned()
    } else {
        trimmed.to_owned()
    }
}

/// A MIME type from a file name's extension (`application/octet-stream` when unknown).
pub fn guess_media_type(name: &str) -> &'static str {
    let ext = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "txt" | "log" => "text/plain",
        "md" | "markdown" => "text/markdown",
        "csv" => "text/csv",
        "tsv" => "text/tab-separated-values",
        "html" | "htm" => "text/html",
        "json" => "application/json",
        "jsonl" | "ndjson" => "application/x-ndjson",
        "xml" => "application/xml",
        "yaml" | "yml" => "application/yaml",
        "pdf" => "application/pdf",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "svg" => "image/svg+xml",
        "zip" => "application/zip",
        "docx" => "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "xlsx" => "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "pptx" => "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        "py" => "text/x-python",
        "rs" => "text/x-rust",
        "js" => "text/javascript",
        "ts" => "text/x-typescript",
        _ => "application/octet-stream",
    }
}

fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 3] = ["KB", "MB", "GB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut size = bytes as f64 / 1024.0;
    let mut unit = 0;
    while size >= 1024.0 && unit < UNITS.len() - 1 {
        size /= 1024.0;
        unit += 1;
    }
    format!("{size:.1} {}", UNITS[unit])
}

/// The system section listing `attachments` (name, path, type and size; no content).
pub fn render(attachments: &[Attachment]) -> String {
    let mut out = String::from(
        "## Attached files\n\nThe user attached these files. Their content is not shown here: read a file \
         with `read_file` when the request needs it.\n",
    );
    for a in attachments {
        let _ = write!(
            out,
            "\n- {}: `{}` ({}, {})",
            display_name(&a.name),
            a.path,
            display_name(&a.media_type),
            human_size(a.size)
        );
    }
    out
}

/// Lists the thread's attachments in every request; see the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct AttachmentsMiddleware;

impl AttachmentsMiddleware {
    /// The middleware.
    pub fn new() -> Self {
        Self
    }
}

#[async_trait]
impl Middleware for AttachmentsMiddleware {
    fn name(&self) -> &str {
        "attachments"
    }

    async fn before_agent(&self, state: &mut State, _cx: &RunContext) -> Result<(), AgentError> {
        let Some(new) = state.get(&NEW_ATTACHMENTS)?.cloned() else {
            return Ok(());
        };
        state.remove(&NEW_ATTACHMENTS);
        state.update(&ATTACHMENTS, |list| {
            for a in new {
                list.retain(|old| old.path != a.path);
                list.push(a);
            }
        })?;
        Ok(())
    }

    async fn wrap_model_call(
        &self,
        mut request: ModelRequest,
        state: &mut State,
        cx: &RunContext,
        next: Next<'_>,
    ) -> Result<ModelResponse, AgentError> {
        if let Some(list) = state.get(&ATTACHMENTS)?
            && !list.is_empty()
        {
            request.push_system(SystemBlock::new(render(list)).with_source("attachments"));
        }
        next.run(request, state, cx).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_made_safe() {
        assert_eq!(
            file_name_parts("Report Q3.PDF"),
            ("Report_Q3".into(), ".pdf".into())
        );
        assert_eq!(
            file_name_parts("../../etc/passwd"),
            ("passwd".into(), String::new())
        );
        assert_eq!(file_name_parts(".env"), ("env".into(), String::new()));
        assert_eq!(
            file_name_parts("销售报告.xlsx"),
            ("销售报告".into(), ".xlsx".into())
        );
        assert_eq!(file_name_parts("a\nb.txt"), ("a_b".into(), ".txt".into()));
        assert_eq!(file_name_parts(""), ("file".into(), String::new()));
    }

    #[test]
    fn sizes_and_types() {
        assert_eq!(human_size(812), "812 bytes");
        assert_eq!(human_size(2_500), "2.4 KB");
        assert_eq!(human_size(3 * 1024 * 1024), "3.0 MB");
        assert_eq!(guess_media_type("x.CSV"), "text/csv");
        assert_eq!(guess_media_type("noext"), "application/octet-stream");
    }
}
