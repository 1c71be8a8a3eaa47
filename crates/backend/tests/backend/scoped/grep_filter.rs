//! A grep's `path_filter` through a scope: the filter is asked about the view's paths, and what it
//! refuses is never read, matched or counted.

use std::sync::{Arc, Mutex};

use trellis_backend::{Backend, GrepQuery, PathFilter, ScopedBackend, StateBackend, VirtualPath, WriteMode};

use super::{disk, p, plant, thread};

async fn filter_sees_view_paths(inner: Arc<dyn Backend>) {
    plant(inner.as_ref()).await;
    let scoped = ScopedBackend::new(inner, thread("a"));
    let many: String = (1..=10).map(|i| format!("needle {i}\n")).collect();
    for (path, text) in [
        ("/deny/many.txt", many.as_str()),
        ("/keep/one.txt", "one needle\n"),
    ] {
        let data = text.to_owned().into();
        scoped.write(&p(path), data, WriteMode::CreateNew).await.unwrap();
    }
    let asked = Arc::new(Mutex::new(Vec::new()));
    let mut query = GrepQuery::new("needle", VirtualPath::root());
    query.max_matches = 1;
    query.path_filter = Some(PathFilter::new({
        let asked = asked.clone();
        move |path| {
            asked.lock().unwrap().push(path.to_string());
            !path.starts_with(&p("/deny"))
        }
    }));
    let out = scoped.grep(&query).await.unwrap();
    let found: Vec<(String, String)> = out
        .matches
        .into_iter()
        .map(|m| (m.path.to_string(), m.text))
        .collect();
    assert_eq!(found, [("/keep/one.txt".to_owned(), "one needle".to_owned())]);
    assert!(!out.truncated, "the refused file's ten matches do not count");
    assert!(out.skipped.is_empty());
    let mut asked = asked.lock().unwrap().clone();
    asked.sort();
    assert_eq!(
        asked,
        ["/deny/many.txt", "/keep/one.txt"],
        "asked about view paths only"
    );
}

#[tokio::test]
async fn a_grep_filter_through_a_scope_of_state_judges_view_paths() {
    filter_sees_view_paths(Arc::new(StateBackend::new())).await;
}

#[tokio::test]
async fn a_grep_filter_through_a_scope_of_local_disk_judges_view_paths() {
    let (inner, _dir) = disk();
    filter_sees_view_paths(inner).await;
}
