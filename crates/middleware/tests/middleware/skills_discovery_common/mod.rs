//! Helpers shared by the discovery tests (`skills_discovery_*.rs`): a store, a skill file, a scan.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use bytes::Bytes;
use trellis_middleware::backend::{Backend, StateBackend, VirtualPath, WriteMode};
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
