//! # trellis-agent
//!
//! The assembly layer of Trellis:
//!
//! * [`providers`]: model providers speaking the real wire formats (Anthropic Messages with
//!   `cache_control`, also Claude on Amazon Bedrock and Google Vertex AI; OpenAI Chat Completions
//!   for OpenAI, ollama, vLLM and llama.cpp servers; the OpenAI Responses API), and model strings
//!   such as `anthropic:claude-sonnet-4-5`;
//! * [`builder`]: [`deep_agent`](builder::deep_agent), one call from a model to an agent with the
//!   documented default stack (filesystem, skills, memory, prompt caching, retries);
//! * [`mcp`]: MCP servers (stdio or streamable HTTP, on the official `rmcp` SDK) bound to skills
//!   as tool groups, started lazily, gated by the user's roles;
//! * [`workspace`], [`inspect`], [`skills_cli`], [`threads_cli`], [`sandbox_cli`], [`run_output`]: what the `trellis`
//!   command line is made of.

/// The runtime layer this crate is built on, re-exported for applications.
pub use trellis_middleware as middleware;
/// The storage layer.
pub use trellis_middleware::backend;
/// The tools layer (the one `Tool` trait, the file tools).
pub use trellis_middleware::tools;

pub mod agent_file;
pub mod approval_cli;
pub mod builder;
pub mod chat;
pub mod inspect;
pub mod mcp;
pub mod model_settings;
pub mod pin;
pub mod providers;
pub mod run_cli;
pub mod run_output;
pub mod run_summary;
pub mod sandbox_cli;
pub mod skills_cli;
#[cfg(feature = "otel")]
pub mod telemetry;
pub mod threads_cli;
pub mod workspace;

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
