//! [`StateBackend`]: files kept in process memory, serializable to JSON.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use async_trait::async_trait;
use base64::Engine as _;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::backend::{
    Backend, ByteRange, Capabilities, Entry, EntryKind, FileListing, ReadOutput, Version, WriteMode,
    WriteOutcome,
};
use crate::error::{BackendError, ConflictKind, Result};
use crate::path::VirtualPath;

#[derive(Debug, Clone)]
struct StoredFile {
    data: Bytes,
    modified: DateTime<Utc>,
    revision: u64,
}

#[derive(Debug, Default)]
struct Files {
    map: BTreeMap<VirtualPath, StoredFile>,
    /// Last revision handed out; versions never repeat, even across delete and re-create.
    revision: u64,
}

/// Files in process memory: shared by every holder of the handle, lost when the process exits.
///
/// Cloning shares the same files (it is a handle). Directories are implicit: a directory exists while
/// a file below it exists. Serializes as a map from path to `{content, encoding, modified, revision}`,
/// where `encoding` is `utf-8` for text and `base64` for anything else, so bytes that are not UTF-8
/// round-trip exactly.
#[derive(Debug, Clone, Default)]
pub struct StateBackend {
    files: Arc<RwLock<Files>>,
}

impl StateBackend {
    /// An empty backend.
    pub fn new() -> Self {
        Self::default()
    }

    fn read_lock(&self) -> RwLockReadGuard<'_, Files> {
        self.files.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write_lock(&self) -> RwLockWriteGuard<'_, Files> {
        self.files
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Number of files.
    pub fn len(&self) -> usize {
        self.read_lock().map.len()
    }

    /// True when there are no files.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn entry(path: &VirtualPath, file: &StoredFile) -> Entry {
    Entry {
        path: path.clone(),
        kind: EntryKind::File,
        size: file.data.len() as u64,
        modified: Some(file.modified),
        version: Some(version_of(file.revision)),
    }
}

fn version_of(revision: u64) -> Version {
    Version::new(format!("r{revision}"))
}

/// Files strictly below `dir`, in path order.
fn below<'a>(
    map: &'a BTreeMap<VirtualPath, StoredFile>,
    dir: &VirtualPath,
) -> impl Iterator<Item = (&'a VirtualPath, &'a StoredFile)> + 'a {
    // Keys below `/a` all start with `/a/`; byte order keeps them contiguous from there (while `/a b`
    // or `/a-x`, which sort between `/a` and `/a/`, are skipped).
    let prefix = if dir.is_root() {
        "/".to_owned()
    } else {
        format!("{dir}/")
    };
    let start = prefix.clone();
    map.range::<str, _>((Bound::Included(start.as_str()), Bound::Unbounded))
        .take_while(move |(p, _)| p.as_str().starts_with(prefix.as_str()))
}

fn is_dir(map: &BTreeMap<VirtualPath, StoredFile>, path: &VirtualPath) -> bool {
    path.is_root() || below(map, path).next().is_some()
}

#[async_trait]
impl Backend for StateBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            ranged_reads: true,
            versioned_writes: true,
            strict_hierarchy: true,
        }
    }

    async fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>> {
        let files = self.read_lock();
        if files.map.contains_key(dir) {
            return Err(BackendError::NotADirectory {
                path: dir.to_string(),
            });
        }
        let mut out: Vec<Entry> = Vec::new();
        for (path, file) in below(&files.map, dir) {
            let rel = path.relative_to(dir).unwrap_or_default();
            match rel.split_once('/') {
                None => out.push(entry(path, file)),
                Some((child, _)) => {
                    if out
                        .last()
                        .is_some_and(|e| e.is_dir() && e.path.file_name() == Some(child))
                    {
                        continue;
                    }
                    let child_path = dir
                        .join(child)
                        .map_err(|e| BackendError::invalid_path(child, e))?;
                    out.push(Entry::directory(child_path));
                }
            }
        }
        if out.is_empty() && !dir.is_root() {
            return Err(BackendError::not_found(dir));
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        out.dedup_by(|a, b| a.path == b.path);
        Ok(out)
    }

    async fn stat(&self, path: &VirtualPath) -> Result<Entry> {
        let files = self.read_lock();
        if let Some(file) = files.map.get(path) {
            return Ok(entry(path, file));
        }
        if is_dir(&files.map, path) {
            return Ok(Entry::directory(path.clone()));
        }
        Err(BackendError::not_found(path))
    }

    async fn read(&self, path: &VirtualPath, range: Option<ByteRange>) -> Result<ReadOutput> {
        let files = self.read_lock();
        let Some(file) = files.map.get(path) else {
            if is_dir(&files.map, path) {
                return Err(BackendError::IsADirectory {
                    path: path.to_string(),
                });
            }
            return Err(BackendError::not_found(path));
        };
        let size = file.data.len() as u64;
        let bytes = match range {
            None => file.data.clone(),
            Some(r) => {
                let span = r.clamp(size);
                file.data.slice(span.start as usize..span.end as usize)
            }
        };
        Ok(ReadOutput {
            bytes,
            size,
            version: Some(version_of(file.revision)),
            modified: Some(file.modified),
        })
    }

    async fn write(&self, path: &VirtualPath, data: Bytes, mode: WriteMode) -> Result<WriteOutcome> {
        if path.is_root() {
            return Err(BackendError::IsADirectory {
                path: path.to_string(),
            });
        }
        let mut files = self.write_lock();
        if below(&files.map, path).next().is_some() {
            return Err(BackendError::IsADirectory {
                path: path.to_string(),
            });
        }
        let mut ancestor = path.parent();
        while let Some(a) = ancestor {
            if files.map.contains_key(&a) {
                return Err(BackendError::NotADirectory {
                    path: path.to_string(),
                });
            }
            ancestor = a.parent();
        }
        let current = files.map.get(path).map(|f| f.revision);
        match (&mode, current) {
            (WriteMode::CreateNew, Some(_)) => {
                return Err(BackendError::Conflict {
                    path: path.to_string(),
                    kind: ConflictKind::AlreadyExists,
                });
            }
            (WriteMode::IfVersion(want), found) if found.map(version_of).as_ref() != Some(want) => {
                return Err(BackendError::Conflict {
                    path: path.to_string(),
                    kind: ConflictKind::VersionMismatch,
                });
            }
            _ => {}
        }
        files.revision += 1;
        let revision = files.revision;
        files.map.insert(
            path.clone(),
            StoredFile {
                data,
                modified: Utc::now(),
                revision,
            },
        );
        Ok(WriteOutcome {
            version: Some(version_of(revision)),
        })
    }

    async fn delete(&self, path: &VirtualPath) -> Result<()> {
        let mut files = self.write_lock();
        if files.map.remove(path).is_some() {
            return Ok(());
        }
        if is_dir(&files.map, path) {
            return Err(BackendError::IsADirectory {
                path: path.to_string(),
            });
        }
        Err(BackendError::not_found(path))
    }

    async fn list_files(&self, base: &VirtualPath, limit: usize) -> Result<FileListing> {
        let files = self.read_lock();
        if let Some(file) = files.map.get(base) {
            return Ok(FileListing {
                files: vec![entry(base, file)],
                truncated: false,
            });
        }
        let mut out: Vec<Entry> = below(&files.map, base)
            .take(limit.saturating_add(1))
            .map(|(p, f)| entry(p, f))
            .collect();
        let truncated = out.len() > limit;
        out.truncate(limit);
        Ok(FileListing {
            files: out,
            truncated,
        })
    }
}

/// One file as serialized.
#[derive(Serialize, Deserialize)]
struct SerializedFile {
    content: String,
    encoding: Encoding,
    modified: DateTime<Utc>,
    revision: u64,
}

#[derive(Serialize, Deserialize, PartialEq, Eq)]
enum Encoding {
    #[serde(rename = "utf-8")]
    Utf8,
    #[serde(rename = "base64")]
    Base64,
}

impl Serialize for StateBackend {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let files = self.read_lock();
        let out: BTreeMap<&VirtualPath, SerializedFile> = files
            .map
            .iter()
            .map(|(path, f)| {
                let (content, encoding) = match std::str::from_utf8(&f.data) {
                    Ok(text) => (text.to_owned(), Encoding::Utf8),
                    Err(_) => (
                        base64::engine::general_purpose::STANDARD.encode(&f.data),
                        Encoding::Base64,
                    ),
                };
                (
                    path,
                    SerializedFile {
                        content,
                        encoding,
                        modified: f.modified,
                        revision: f.revision,
                    },
                )
            })
            .collect();
        out.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for StateBackend {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = BTreeMap::<VirtualPath, SerializedFile>::deserialize(deserializer)?;
        let mut files = Files::default();
        for (path, f) in raw {
            let data = match f.encoding {
                Encoding::Utf8 => Bytes::from(f.content),
                Encoding::Base64 => Bytes::from(
                    base64::engine::general_purpose::STANDARD
                        .decode(f.content.as_bytes())
                        .map_err(serde::de::Error::custom)?,
                ),
            };
            files.revision = files.revision.max(f.revision);
            files.map.insert(
                path,
                StoredFile {
                    data,
                    modified: f.modified,
                    revision: f.revision,
                },
            );
        }
        Ok(Self {
            files: Arc::new(RwLock::new(files)),
        })
    }
}
