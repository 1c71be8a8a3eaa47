//! The persisted catalog's bytes: one header line, then the catalog of one source.
//!
//! ```text
//! {"format":"trellis.skills.catalog","version":1,"origin":"s3://b/org/skills","digest":"sha256:…","bytes":N}\n
//! <N bytes: a SkillCatalog of one source, every path relative to the source (rooted at `/`)>
//! ```
//!
//! * **Versioned.** A reader accepts only `format` and `version` it knows; anything else is
//!   [`CacheError::Corrupt`] (ignored with a warning, the source is scanned).
//! * **Content-addressed.** `digest` is the SHA-256 of the body; a torn, truncated or edited file
//!   fails the check. Two encodings of the same catalog are byte-identical, so an unchanged catalog
//!   is never rewritten.
//! * **Relative.** Paths are stored relative to the source, so a catalog written while the source
//!   was mounted at `/skills/org` serves a process that mounts it at `/skills/org-2`. Decoding
//!   re-roots every path onto the live source and drops any entry that does not land on
//!   `<source>/<dir>/SKILL.md`, so a hostile file cannot name a path outside its source.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::backend::VirtualPath;

use super::CacheError;
use crate::skills::SKILL_FILE;
use crate::skills::catalog::{SkillCatalog, SkippedFile};
use crate::skills::discovery::source::{SkillSource, SourceInfo};
use crate::skills::parse::skill::{SkillIssue, SkillMetadata};

/// The `format` of the header line.
pub const FORMAT: &str = "trellis.skills.catalog";
/// The only format version this build reads and writes.
pub const FORMAT_VERSION: u32 = 1;
/// Largest persisted catalog accepted (a 61,000-skill registry encodes to about 60 MB).
pub const MAX_CATALOG_BYTES: usize = 512 * 1024 * 1024;

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    format: String,
    version: u32,
    origin: String,
    digest: String,
    bytes: usize,
}

/// The cache key of an origin: a file name that says nothing of the origin and cannot escape a
/// directory (64 hex digits).
pub fn cache_key(origin: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(FORMAT.as_bytes());
    hasher.update(FORMAT_VERSION.to_le_bytes());
    hasher.update(origin.as_bytes());
    hex(&hasher.finalize())
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// A persisted catalog, decoded.
#[derive(Debug, Clone)]
pub struct Decoded {
    /// The origin written in the header.
    pub origin: String,
    /// The body's digest (`sha256:…`).
    pub digest: String,
    /// The entries, re-rooted onto the live source (source index 0).
    pub catalog: SkillCatalog,
}

/// The part of `catalog` that belongs to source `index`, re-rooted at `/`, as one body.
fn body_of(catalog: &SkillCatalog, sources: &[SkillSource], index: usize) -> Option<Vec<u8>> {
    let source = sources.get(index)?;
    let from = source.path();
    let root = VirtualPath::root();
    let owner = |path: &VirtualPath| {
        sources
            .iter()
            .enumerate()
            .filter(|(_, s)| path.starts_with(s.path()))
            .max_by_key(|(_, s)| s.path().depth())
            .map(|(i, _)| i)
    };
    let skill = |s: &SkillMetadata| {
        Some(SkillMetadata {
            path: s.path.rebase(from, &root)?,
            source: 0,
            ..s.clone()
        })
    };
    let skills = catalog
        .skills()
        .iter()
        .filter(|s| s.source == index)
        .filter_map(skill)
        .collect();
    let shadowed = catalog
        .shadowed()
        .iter()
        .filter(|s| s.source == index)
        .filter_map(skill)
        .collect();
    let skipped = catalog
        .skipped()
        .iter()
        .filter(|s| s.source == index)
        .filter_map(|s| {
            Some(SkippedFile {
                path: s.path.rebase(from, &root)?,
                source: 0,
                version: s.version.clone(),
            })
        })
        .collect();
    let issues = catalog
        .issues()
        .iter()
        .filter(|i| owner(&i.path) == Some(index))
        .filter_map(|i| {
            Some(SkillIssue {
                path: i.path.rebase(from, &root)?,
                ..i.clone()
            })
        })
        .collect();
    let info = SourceInfo {
        path: root.clone(),
        label: source.label().to_owned(),
    };
    let part = SkillCatalog::from_parts(vec![info], skills, Vec::new(), issues, shadowed, skipped);
    serde_json::to_vec(&part).ok()
}

/// Encode what `catalog` holds of source `index` for `origin`; `None` when the index is out of range.
/// Returns the bytes and their digest.
pub fn encode(
    catalog: &SkillCatalog,
    sources: &[SkillSource],
    index: usize,
    origin: &str,
) -> Option<(Vec<u8>, String)> {
    let body = body_of(catalog, sources, index)?;
    let digest = format!("sha256:{}", hex(&Sha256::digest(&body)));
    let header = Header {
        format: FORMAT.to_owned(),
        version: FORMAT_VERSION,
        origin: origin.to_owned(),
        digest: digest.clone(),
        bytes: body.len(),
    };
    let mut out = serde_json::to_vec(&header).ok()?;
    out.push(b'\n');
    out.extend_from_slice(&body);
    Some((out, digest))
}

/// Decode a persisted catalog for `source`. `origin`, when given, must equal the header's (a local
/// cache file holds one origin; an index object in the bucket is the source's own and is not
/// checked).
pub fn decode(bytes: &[u8], source: &SkillSource, origin: Option<&str>) -> Result<Decoded, CacheError> {
    let corrupt = |reason: String| CacheError::Corrupt { reason };
    if bytes.len() > MAX_CATALOG_BYTES {
        return Err(corrupt(format!(
            "{} bytes, over the limit of {MAX_CATALOG_BYTES}",
            bytes.len()
        )));
    }
    let newline = bytes
        .iter()
        .position(|&b| b == b'\n')
        .ok_or_else(|| corrupt("no header line".to_owned()))?;
    let (head, body) = bytes.split_at(newline);
    let body = body.get(1..).unwrap_or_default();
    let header: Header = serde_json::from_slice(head).map_err(|e| corrupt(format!("bad header: {e}")))?;
    if header.format != FORMAT || header.version != FORMAT_VERSION {
        return Err(corrupt(format!(
            "format {:?} version {}, this build reads {FORMAT:?} version {FORMAT_VERSION}",
            header.format, header.version
        )));
    }
    if let Some(origin) = origin
        && header.origin != origin
    {
        return Err(corrupt(format!(
            "written for {:?}, not {origin:?}",
            header.origin
        )));
    }
    if header.bytes != body.len() {
        return Err(corrupt(format!(
            "the body is {} bytes, the header says {}",
            body.len(),
            header.bytes
        )));
    }
    let digest = format!("sha256:{}", hex(&Sha256::digest(body)));
    if digest != header.digest {
        return Err(corrupt("the digest does not match the body".to_owned()));
    }
    let part: SkillCatalog = serde_json::from_slice(body).map_err(|e| corrupt(format!("bad body: {e}")))?;
    Ok(Decoded {
        origin: header.origin,
        digest,
        catalog: reroot(part, source),
    })
}

/// Re-root a decoded part onto `source`, keeping only entries at `<source>/<dir>/SKILL.md`. Takes
/// the part by value: at 61,000 skills a copy of it was tens of MB of peak memory.
fn reroot(part: SkillCatalog, source: &SkillSource) -> SkillCatalog {
    let root = VirtualPath::root();
    let to = source.path();
    let place = |path: &VirtualPath| {
        let moved = path.rebase(&root, to)?;
        let rel = moved.relative_to(to)?;
        let mut parts = rel.split('/');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(dir), Some(SKILL_FILE), None) if !dir.is_empty() => Some(moved),
            _ => None,
        }
    };
    let skill = |mut s: SkillMetadata| {
        s.path = place(&s.path)?;
        s.source = 0;
        Some(s)
    };
    let (skills, issues, shadowed, skipped) = part.into_parts();
    SkillCatalog::from_parts(
        vec![source.info().clone()],
        skills.into_iter().filter_map(skill).collect(),
        Vec::new(),
        issues
            .into_iter()
            .filter_map(|mut i| {
                i.path = place(&i.path)?;
                Some(i)
            })
            .collect(),
        shadowed.into_iter().filter_map(skill).collect(),
        skipped
            .into_iter()
            .filter_map(|mut s| {
                s.path = place(&s.path)?;
                s.source = 0;
                Some(s)
            })
            .collect(),
    )
}
