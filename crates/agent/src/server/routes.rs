//! The table of routes: each operation's method, path, handler and documentation. The router
//! ([`crate::server::router`]) and `/openapi.json` ([`crate::server::openapi`]) are both built
//! from it.

use axum::Json;
use axum::extract::DefaultBodyLimit;
use axum::http::Method;
use axum::routing::{MethodRouter, delete, get, patch, post};
use serde_json::{Map, Value};

use crate::server::openapi::{Route, count, flag, route, string};
use crate::server::shapes::{
    Assistant, Health, Info, Run, RunResult, Skill, StateUpdated, Thread, ThreadState, Uploads,
};
use crate::server::{assistants, cancel, checkpoints, runs, skills, thread_copy, threads, transfer, update};

/// `stream_mode` as a join-stream query parameter.
fn stream_modes() -> Value {
    serde_json::json!({"type": "string"})
}

/// Every route; `openapi` answers `GET /openapi.json`.
pub(crate) fn routes(openapi: MethodRouter<crate::server::Shared>) -> Vec<Route> {
    use Method as M;
    let runs_tag = "runs";
    vec![
        route(
            "system",
            M::GET,
            "/ok",
            get(assistants::ok),
            "Health check (no key needed)",
        )
        .reply::<Health>(200),
        route(
            "system",
            M::GET,
            "/info",
            get(assistants::info),
            "Server information",
        )
        .reply::<Info>(200),
        route("system", M::GET, "/openapi.json", openapi, "This document"),
        route(
            "assistants",
            M::POST,
            "/assistants/search",
            post(assistants::search),
            "Search the assistants (one per served graph)",
        )
        .body::<assistants::AssistantSearch>()
        .reply::<Vec<Assistant>>(200),
        route(
            "assistants",
            M::GET,
            "/assistants/{assistant_id}",
            get(assistants::get_one),
            "An assistant, by UUID or graph id",
        )
        .reply::<Assistant>(200),
        route(
            "threads",
            M::POST,
            "/threads",
            post(threads::create),
            "Create a thread",
        )
        .body::<threads::ThreadCreate>()
        .reply::<Thread>(200),
        route(
            "threads",
            M::POST,
            "/threads/search",
            post(threads::search),
            "Search the caller's threads",
        )
        .body::<threads::ThreadSearch>()
        .reply::<Vec<Thread>>(200),
        route(
            "threads",
            M::GET,
            "/threads/{thread_id}",
            get(threads::get_one),
            "A thread",
        )
        .reply::<Thread>(200),
        route(
            "threads",
            M::PATCH,
            "/threads/{thread_id}",
            patch(threads::patch),
            "Merge a thread's metadata",
        )
        .body::<threads::ThreadPatch>()
        .reply::<Thread>(200),
        route(
            "threads",
            M::DELETE,
            "/threads/{thread_id}",
            delete(threads::delete),
            "Delete a thread: its record, checkpoints, files and runs",
        )
        .empty(204),
        route(
            "threads",
            M::GET,
            "/threads/{thread_id}/state",
            get(checkpoints::state),
            "The thread's latest state",
        )
        .reply::<ThreadState>(200),
        route(
            "threads",
            M::POST,
            "/threads/{thread_id}/state",
            post(update::update_state),
            "Update the thread's state (messages, todos, files), version-checked",
        )
        .body::<update::StateUpdate>()
        .reply::<StateUpdated>(200),
        route(
            "threads",
            M::POST,
            "/threads/{thread_id}/state/checkpoint",
            post(checkpoints::state_at_body),
            "The thread's state at a checkpoint",
        )
        .body::<checkpoints::StateAtBody>()
        .reply::<ThreadState>(200),
        route(
            "threads",
            M::GET,
            "/threads/{thread_id}/state/{checkpoint_id}",
            get(checkpoints::state_at),
            "The thread's state at a checkpoint",
        )
        .reply::<ThreadState>(200),
        route(
            "threads",
            M::POST,
            "/threads/{thread_id}/history",
            post(checkpoints::history),
            "The thread's checkpoints, newest first",
        )
        .body::<checkpoints::HistoryBody>()
        .reply::<Vec<ThreadState>>(200),
        route(
            "threads",
            M::GET,
            "/threads/{thread_id}/history",
            get(checkpoints::history_get),
            "The thread's checkpoints, newest first",
        )
        .query("limit", count, "At most this many (default 10)")
        .query("before", string, "Only checkpoints older than this checkpoint id")
        .reply::<Vec<ThreadState>>(200),
        route(
            "threads",
            M::POST,
            "/threads/{thread_id}/copy",
            post(thread_copy::copy),
            "Copy a thread: its checkpoints and files, owned by the caller",
        )
        .body::<threads::NoBody>()
        .reply::<Thread>(200),
        route(
            "files",
            M::GET,
            "/threads/{thread_id}/files",
            get(transfer::download),
            "Download a file of the thread's view: its own files, the owner's /workspace, the skill and memory mounts",
        )
        .query("path", string, "The file's absolute path in the thread's view (/report.md, /workspace/…, /skills/…)")
        .file()
        .extension(),
        route(
            "files",
            M::POST,
            "/threads/{thread_id}/files",
            post(transfer::upload).layer(DefaultBodyLimit::max(transfer::MAX_UPLOAD_BYTES)),
            "Upload files into the thread's /uploads",
        )
        .query("path", string, "The file name, for a raw body")
        .upload()
        .reply::<Uploads>(200)
        .extension(),
        route(
            "skills",
            M::GET,
            "/threads/{thread_id}/skills",
            get(skills::list),
            "The skills the thread's runs see for the caller (search with q)",
        )
        .query("q", string, "Only skills matching these words, best first")
        .query("limit", count, "At most this many (default 50, at most 500)")
        .query(
            "assistant_id",
            string,
            "The graph (default: the thread's graph_id, or the only graph)",
        )
        .reply::<Vec<Skill>>(200)
        .extension(),
        route(
            runs_tag,
            M::POST,
            "/threads/{thread_id}/runs",
            post(runs::create),
            "Start a run in the background",
        )
        .body::<runs::RunCreate>()
        .reply::<Run>(200),
        route(
            runs_tag,
            M::GET,
            "/threads/{thread_id}/runs",
            get(runs::list),
            "The thread's runs, newest first",
        )
        .query("limit", count, "At most this many (default 10)")
        .query("offset", count, "Skip this many")
        .query("status", string, "Only runs in this status")
        .reply::<Vec<Run>>(200),
        route(
            runs_tag,
            M::POST,
            "/threads/{thread_id}/runs/stream",
            post(runs::stream),
            "Start a run and stream its events",
        )
        .body::<runs::RunCreate>()
        .events(),
        route(
            runs_tag,
            M::POST,
            "/threads/{thread_id}/runs/wait",
            post(runs::wait),
            "Start a run and wait for its result",
        )
        .body::<runs::RunCreate>()
        .reply::<RunResult>(200),
        route(
            runs_tag,
            M::GET,
            "/threads/{thread_id}/runs/{run_id}",
            get(runs::get_one),
            "A run",
        )
        .reply::<Run>(200),
        route(
            runs_tag,
            M::DELETE,
            "/threads/{thread_id}/runs/{run_id}",
            delete(cancel::delete),
            "Forget a run that has ended",
        )
        .empty(204),
        route(
            runs_tag,
            M::POST,
            "/threads/{thread_id}/runs/{run_id}/cancel",
            post(cancel::cancel),
            "Cancel a run (202; with wait, its result once stopped)",
        )
        .query("wait", flag, "Answer once the run has stopped")
        .query("action", action, "interrupt (default) or rollback")
        .empty(202)
        .also::<RunResult>(200),
        route(
            runs_tag,
            M::GET,
            "/threads/{thread_id}/runs/{run_id}/join",
            get(runs::join),
            "Wait for a run's result",
        )
        .reply::<RunResult>(200),
        route(
            runs_tag,
            M::GET,
            "/threads/{thread_id}/runs/{run_id}/stream",
            get(runs::join_stream),
            "Join a run's stream (Last-Event-ID replays a resumable run's events after that id)",
        )
        .query(
            "stream_mode",
            stream_modes,
            "The modes to receive (default: the run's)",
        )
        .query(
            "cancel_on_disconnect",
            flag,
            "Cancel the run when this client hangs up",
        )
        .header("Last-Event-ID", "Replay the events after this id")
        .events(),
        route(
            runs_tag,
            M::POST,
            "/runs",
            post(runs::stateless_create),
            "Start a run on a new temporary thread",
        )
        .body::<runs::RunCreate>()
        .reply::<Run>(200),
        route(
            runs_tag,
            M::POST,
            "/runs/batch",
            post(runs::stateless_batch),
            "Start stateless background runs, all checked before any starts",
        )
        .body::<Vec<runs::RunCreate>>()
        .reply::<Vec<Run>>(200),
        route(
            runs_tag,
            M::POST,
            "/runs/cancel",
            post(cancel::cancel_many),
            "Cancel runs by id or by status",
        )
        .body::<cancel::CancelMany>()
        .query("action", action, "interrupt (default) or rollback")
        .empty(204),
        route(
            runs_tag,
            M::POST,
            "/runs/stream",
            post(runs::stateless_stream),
            "Stream a run on a new temporary thread",
        )
        .body::<runs::RunCreate>()
        .events(),
        route(
            runs_tag,
            M::POST,
            "/runs/wait",
            post(runs::stateless_wait),
            "Wait for a run on a new temporary thread",
        )
        .body::<runs::RunCreate>()
        .reply::<RunResult>(200),
    ]
}

/// `action` of a cancel.
fn action() -> Value {
    serde_json::json!({"type": "string", "enum": ["interrupt", "rollback"]})
}

/// The document, for the handler of `/openapi.json`: `secured` when the server takes API keys;
/// a run's `assistant_id` is one of `graphs` or its assistant's UUID.
pub(crate) fn openapi_json<'a>(secured: bool, graphs: impl Iterator<Item = &'a str>) -> Value {
    let table = routes(get(|| async { Json(Map::<String, Value>::new()) }));
    let mut doc = crate::server::openapi::document(&table, secured);
    let ids: Vec<String> = graphs
        .flat_map(|g| [g.to_owned(), assistants::assistant_id(g).to_string()])
        .collect();
    doc["components"]["schemas"]["RunCreate"]["properties"]["assistant_id"] = serde_json::json!({"type": "string", "enum": ids, "description": "A served graph's id or its assistant's UUID"});
    doc
}
