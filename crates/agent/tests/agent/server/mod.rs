//! Tests of `trellis serve` and `trellis_agent::server`: the built binary driven by the official
//! Python `langgraph-sdk` ([`sdk`]; the interpreter is `TRELLIS_LANGGRAPH_PYTHON`, set by `cargo
//! xtask test`), by plain HTTP ([`http`]), and the router mounted in a larger axum app
//! ([`mount`]). [`harness`] starts the server.

mod files;
mod harness;
mod http;
mod mount;
mod sdk;
mod state;
