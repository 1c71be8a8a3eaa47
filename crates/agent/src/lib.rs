//! # trellis-agent
//!
//! The assembly layer of Trellis:
//!
//! * [`providers`]: model providers speaking the real wire formats (Anthropic Messages with
//!   `cache_control`, also Claude on Amazon Bedrock and Google Vertex AI; OpenAI Chat Completions
//!   for OpenAI, ollama, vLLM and llama.cpp servers; the OpenAI Responses API), and model strings
//!   such as `anthropic:claude-sonnet-4-5`;
//! * [`builder`]: [`deep_agent`], one call from a model to an agent with the
//!   documented default stack (filesystem, skills, memory, prompt caching, retries);
//! * [`mcp`]: MCP servers (stdio or streamable HTTP, on the official `rmcp` SDK) bound to skills
//!   as tool groups, started lazily, gated by the user's roles;
//! * [`model_settings`]: typed request settings (temperature, stop, …) and the middleware that puts
//!   them on every model call;
//! * `telemetry` (feature `otel`, on by default): OpenTelemetry export of the runtime's spans and
//!   metrics over OTLP;
//! * `cli` (feature `cli`, on by default): the `trellis` command line, each command in a module of
//!   its own. Without the feature the crate compiles no clap, rustyline or toml;
//! * `server` (feature `server`, on by default): the LangGraph Agent Server API as an axum router
//!   a Rust service can mount, and with `cli` the `trellis serve` command.

/// The runtime layer this crate is built on, re-exported for applications.
pub use trellis_middleware as middleware;
/// The storage layer.
pub use trellis_middleware::backend;
/// The tools layer (the one `Tool` trait, the file tools).
pub use trellis_middleware::tools;

#[cfg(feature = "acp")]
pub mod acp;
pub mod builder;
#[cfg(feature = "cli")]
pub mod cli;
pub mod mcp;
pub mod model_settings;
pub mod providers;
#[cfg(feature = "server")]
pub mod server;
#[cfg(feature = "otel")]
pub mod telemetry;
pub mod usage;

pub use builder::{DEFAULT_SYSTEM_PROMPT, DeepAgentBuilder, deep_agent};

/// This crate's README, compiled: its examples are doctests, so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// `docs/writing-a-middleware.md`, compiled: its examples (which end with `deep_agent`) are this
/// crate's doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/writing-a-middleware.md")]
pub struct WritingAMiddleware;
