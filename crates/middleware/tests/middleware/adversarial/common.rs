//! Helpers shared by the hostile-library tests (`adversarial_skills_*.rs`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use trellis_middleware::backend::{Backend, VirtualPath, WriteMode};
use trellis_middleware::skills::SkillSource;
use trellis_middleware::skills::{DiscoveryOptions, IssueCode, SkillCatalog, discover};

pub fn vp(path: &str) -> VirtualPath {
    VirtualPath::parse(path).unwrap()
}

pub async fn put(backend: &dyn Backend, path: &str, body: impl Into<Bytes>) {
    backend
        .write(&vp(path), body.into(), WriteMode::Overwrite)
        .await
        .unwrap();
}

pub fn write(root: &Path, rel: &str, body: impl AsRef<[u8]>) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, body).unwrap();
}

pub fn skill_md(name: &str, description: &str) -> String {
    format!("---\nname: {name}\ndescription: {description}\n---\n# {name}\n")
}

pub async fn scan(backend: Arc<dyn Backend>, dir: &str) -> SkillCatalog {
    let source = SkillSource::new(backend, dir).unwrap();
    discover(&[source], &DiscoveryOptions::default()).await.catalog
}

pub fn names(catalog: &SkillCatalog) -> Vec<&str> {
    catalog.skills().iter().map(|s| s.name.as_str()).collect()
}

pub fn issue(catalog: &SkillCatalog, dir: &str) -> (IssueCode, String) {
    let i = catalog
        .issues()
        .iter()
        .find(|i| i.path.segments().rev().nth(1) == Some(dir))
        .unwrap_or_else(|| panic!("no issue for {dir}: {:?}", catalog.issues()));
    (i.code, i.message.clone())
}
