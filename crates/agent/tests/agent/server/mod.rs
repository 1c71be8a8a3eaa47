//! Tests of `trellis serve` and `trellis_agent::server`: the built binary driven by the official
//! Python `langgraph-sdk` ([`sdk`]; the interpreter is `TRELLIS_LANGGRAPH_PYTHON`, set by `cargo
//! xtask test`), by the official JS client's React hook `useStream` under Node ([`js_client`];
//! `TRELLIS_LANGGRAPH_NODE_MODULES`), by plain HTTP ([`http`]), and the router mounted in a larger
//! axum app ([`mount`]); `command.resume` ([`resume`]) and the run lifecycle — cancel, delete,
//! multitask strategies, `on_disconnect`, stateless runs ([`lifecycle`]); thread state, history,
//! updates and copies ([`state`]); files in state, uploads and downloads ([`files`]); run records
//! with usage and cost ([`run_records`]); and side by side with the reference server, `langgraph dev`
//! ([`differential`]). [`harness`] starts the server.

mod differential;
mod files;
mod harness;
mod http;
mod js_client;
mod lifecycle;
mod mount;
mod resume;
mod run_records;
mod sdk;
mod state;
#[cfg(feature = "postgres")]
mod workers;
