//! Listing one directory of a [`FilesystemBackend`](super::FilesystemBackend), keeping only what
//! a listing may show.

use std::path::Path;

use crate::error::{BackendError, Result};
use crate::path::VirtualPath;

/// The children of `real` (a canonical directory inside `root`), sorted; links that lead out of the
/// root, broken links, names that are not valid paths and special files are left out.
pub(super) fn list_dir(
    real: &Path,
    root: &Path,
    dir: &VirtualPath,
) -> Result<Vec<(VirtualPath, std::fs::Metadata)>> {
    let reader = std::fs::read_dir(real).map_err(|e| BackendError::from_io(dir, e))?;
    let mut out = Vec::new();
    for item in reader {
        let item = item.map_err(|e| BackendError::from_io(dir, e))?;
        let name = item.file_name();
        let Some(name) = name.to_str() else {
            tracing::warn!(dir = %dir, name = ?item.file_name(), "skipping a name that is not UTF-8");
            continue;
        };
        let Ok(child) = dir.join(name) else {
            tracing::warn!(dir = %dir, name, "skipping a name that is not a valid virtual path");
            continue;
        };
        let Ok(kind) = item.file_type() else { continue };
        let meta = if kind.is_symlink() {
            match std::fs::canonicalize(item.path()) {
                Ok(target) if target.starts_with(root) => match std::fs::metadata(&target) {
                    Ok(m) => m,
                    Err(_) => continue,
                },
                _ => continue,
            }
        } else {
            match item.metadata() {
                Ok(m) => m,
                Err(_) => continue,
            }
        };
        if meta.is_dir() || meta.is_file() {
            out.push((child, meta));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}
