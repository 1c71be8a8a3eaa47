//! Tests of `trellis serve` and `trellis_agent::server`: the built binary driven by the official
//! Python `langgraph-sdk` ([`sdk`]; the interpreter is `TRELLIS_LANGGRAPH_PYTHON`, set by `cargo
//! xtask test`), by the official JS client's React hook `useStream` under Node ([`js_client`];
//! `TRELLIS_LANGGRAPH_NODE_MODULES`), by plain HTTP ([`http`]), and the router mounted in a larger
//! axum app ([`mount`]); `command.resume` ([`resume`]), `command.update` / `goto` ([`command`]) and the run lifecycle — cancel, delete,
//! multitask strategies, `on_disconnect`, stateless runs ([`lifecycle`]) and batches ([`batch`]); thread state, history,
//! updates and copies ([`state`]); runs from an older checkpoint ([`branching`]); threads on an object store with `--store` ([`store`]); files in state, uploads and downloads ([`files`]; of `/workspace` and the shared mounts, [`view_files`]); run records
//! with usage and cost ([`run_records`]); `/openapi.json` and schemathesis against it ([`openapi`]); the `tasks`, `checkpoints`, `debug` and `custom` stream modes ([`introspection`]); the web page in headless Chromium ([`ui`]; its message model under Node, [`ui_model`]; connections dropped by [`cut_proxy`]); and side by side with the reference server, `langgraph dev`
//! ([`differential`]); the binary's heap without transparent huge pages ([`heap`]). [`harness`] starts the server. With `--database` (feature `postgres`):
//! many workers ([`workers`]), followers woken by notifications ([`follow`]), cancel by status and
//! the thread cap ([`shared_limits`]), stateless runs ([`shared_stateless`]); [`db_harness`] starts such a worker.

mod batch;
mod branching;
mod command;
mod crash;
mod cut_proxy;
#[cfg(feature = "postgres")]
mod db_harness;
mod differential;
mod files;
#[cfg(feature = "postgres")]
mod follow;
mod harness;
mod heap;
mod http;
mod introspection;
mod js_client;
mod lifecycle;
mod mount;
mod openapi;
mod resume;
mod run_records;
mod sdk;
#[cfg(feature = "postgres")]
mod shared_limits;
#[cfg(feature = "postgres")]
mod shared_stateless;
mod skills;
mod state;
mod store;
mod ui;
mod ui_cost;
mod ui_model;
mod ui_skills;
mod view_files;
#[cfg(feature = "postgres")]
mod workers;
