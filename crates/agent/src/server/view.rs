//! The thread's view beyond its own files, for downloads (`GET /threads/{id}/files?path=`): the
//! user's `/workspace` and the shared skill and memory mounts (`/skills/NAME`, `/memory/NAME`) the
//! thread's runs see, read-only over the API.
//!
//! Which mounts: those of the thread's graph (its `metadata.graph_id` when it names a graph this
//! server serves, else the server's first graph), as that graph gives them for the thread's owner
//! ([`Graph::shared_view`]). A path under one of the mount points is read there; any other path is
//! one of the thread's own files ([`crate::server::files`]). Paths are the view's: absolute, no `..`
//! (as the thread's own files); each mount's storage keeps a path inside it (a local
//! directory refuses a symlink that leaves it), so no path reaches another user's workspace.

use std::sync::Arc;

use trellis_middleware::backend::{Backend, VirtualPath};

use crate::server::error::{ApiError, ApiResult};
use crate::server::extract::User;
use crate::server::threads::ThreadRecord;
use crate::server::{Graph, Shared, files};

/// What a user's runs see beside each thread's own files.
#[derive(Debug, Clone)]
pub struct SharedView {
    /// The mounts' storage, addressed with the view's paths (`/workspace/notes.md`).
    pub backend: Arc<dyn Backend>,
    /// Where the mounts are: `backend` is read only for a path under one of them.
    pub mount_points: Vec<VirtualPath>,
}

/// The storage that holds `path` of `record`'s view, for `user` (the thread's owner): a mount's
/// ([`SharedView`]) or the thread's own files (422 when the server keeps none).
pub(crate) async fn storage_of(
    server: &Shared,
    user: &User,
    record: &ThreadRecord,
    path: &VirtualPath,
) -> ApiResult<Arc<dyn Backend>> {
    if let Some(graph) = graph_of(server, record) {
        let view = graph
            .shared_view(user.id())
            .await
            .map_err(|e| ApiError::internal("the thread's mounts", format!("{e:#}")))?;
        if let Some(view) = view
            && view.mount_points.iter().any(|at| path.starts_with(at))
        {
            return Ok(view.backend);
        }
    }
    files::space(server, record)
}

/// The graph whose mounts the thread's view has.
fn graph_of<'a>(server: &'a Shared, record: &ThreadRecord) -> Option<&'a Arc<dyn Graph>> {
    record
        .metadata
        .get("graph_id")
        .and_then(|g| g.as_str())
        .and_then(|g| server.graphs.get(g))
        .or_else(|| server.graphs.values().next())
}
