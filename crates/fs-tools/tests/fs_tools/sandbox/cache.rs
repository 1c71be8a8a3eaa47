//! Bubblewrap's skill folder cache: a second command naming the same skill reads nothing again, a
//! changed file is seen at once, and two stores with the same paths and versions but different
//! content never share a copy.

use std::sync::Arc;

use trellis_backend::sandbox::{ExecFiles, ExecRequest};
use trellis_backend::testing::RecordingBackend;
use trellis_backend::{Backend, CompositeBackend, Sandbox, StateBackend, WriteMode};

use super::{bwrap, p, seed};

fn view(skills: Arc<dyn Backend>) -> ExecFiles {
    let view = CompositeBackend::new(Arc::new(StateBackend::new()))
        .mount("/skills/team", skills)
        .unwrap();
    ExecFiles::new(Arc::new(view)).read_only_on_reach(p("/skills/team"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_skill_is_read_once_and_refreshed_when_it_changes() {
    let Some(sandbox) = bwrap("skill folder cache") else {
        return;
    };
    let store = Arc::new(StateBackend::new());
    let skills = Arc::new(RecordingBackend::new(store.clone()));
    seed(
        store.as_ref(),
        &[("/pdf/SKILL.md", "pdf"), ("/pdf/scripts/run.sh", "echo v1")],
    )
    .await;
    let files = view(skills.clone());
    let request = ExecRequest::new("sh /skills/team/pdf/scripts/run.sh");
    let first = sandbox.execute(&files, &request).await.unwrap();
    assert_eq!(first.output, "v1\n", "{first:?}");
    let after_first = skills.read_count();
    assert_eq!(after_first, 2, "both files read once");
    let second = sandbox.execute(&files, &request).await.unwrap();
    assert_eq!(second.output, "v1\n");
    assert_eq!(skills.read_count(), after_first, "nothing read again");
    store
        .write(&p("/pdf/scripts/run.sh"), "echo v2".into(), WriteMode::Overwrite)
        .await
        .unwrap();
    let third = sandbox.execute(&files, &request).await.unwrap();
    assert_eq!(third.output, "v2\n", "the change is seen at once: {third:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_with_the_same_paths_and_versions_never_share_a_copy() {
    let Some(sandbox) = bwrap("skill folder cache keys") else {
        return;
    };
    let a = Arc::new(StateBackend::new());
    let b = Arc::new(StateBackend::new());
    // Same path, same size, same revision number in each store; different content.
    seed(a.as_ref(), &[("/pdf/note.txt", "from-A")]).await;
    seed(b.as_ref(), &[("/pdf/note.txt", "from-B")]).await;
    let request = ExecRequest::new("cat /skills/team/pdf/note.txt");
    let from_a = sandbox.execute(&view(a), &request).await.unwrap();
    let from_b = sandbox.execute(&view(b), &request).await.unwrap();
    assert_eq!(from_a.output, "from-A");
    assert_eq!(from_b.output, "from-B");
}
