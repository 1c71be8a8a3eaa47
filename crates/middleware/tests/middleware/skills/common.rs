//! Helpers shared by the discovery tests (`skills/discovery_*.rs`, `skills/catalog_cache.rs`): a
//! store, a skill file, a scan, the S3 emulator.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use bytes::Bytes;
use trellis_middleware::backend::{
    Backend, ObjectStoreBackend, StateBackend, StoreOptions, VirtualPath, WriteMode,
};
use trellis_middleware::skills::{DiscoveryOptions, SkillCatalog, SkillSource, discover};

pub type Shared = Arc<dyn Backend>;

pub fn vp(p: &str) -> VirtualPath {
    VirtualPath::parse(p).unwrap()
}

pub async fn put(backend: &Shared, path: &str, body: impl Into<Bytes>) {
    backend
        .write(&vp(path), body.into(), WriteMode::Overwrite)
        .await
        .unwrap();
}

pub fn skill_md(name: &str, description: &str) -> String {
    format!("---\nname: {name}\ndescription: {description}\n---\n\n# {name}\n\nDo the thing.\n")
}

pub fn source(backend: &Shared, path: &str) -> SkillSource {
    SkillSource::new(backend.clone(), path).unwrap()
}

pub async fn scan(backend: &Shared, paths: &[&str]) -> SkillCatalog {
    let sources: Vec<SkillSource> = paths.iter().map(|p| source(backend, p)).collect();
    discover(&sources, &DiscoveryOptions::default()).await.catalog
}

pub fn names(catalog: &SkillCatalog) -> Vec<&str> {
    catalog.skills().iter().map(|s| s.name.as_str()).collect()
}

pub fn state() -> Shared {
    Arc::new(StateBackend::new())
}

/// The S3 emulator's endpoint and bucket, or `None` (skipped) when unset; a panic when
/// `TRELLIS_EMULATORS=required`.
pub fn s3_or_skip() -> Option<(String, String)> {
    crate::common::s3_emulator("skills S3 suite")
}

/// A fresh prefix of the test bucket on the emulator.
pub fn s3(endpoint: &str, bucket: &str, tag: &str) -> Shared {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let prefix = format!("skills-{tag}-{}-{nanos}", std::process::id());
    let options = StoreOptions::s3_compatible(endpoint, "test", "test");
    Arc::new(ObjectStoreBackend::from_url(&format!("s3://{bucket}/{prefix}"), &options).unwrap())
}
