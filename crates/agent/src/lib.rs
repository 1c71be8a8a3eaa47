//! # trellis-agent
//!
//! The assembly layer of Trellis: model [`providers`] speaking the real wire formats (Anthropic Messages
//! with `cache_control`, OpenAI Chat Completions for OpenAI, ollama, vLLM and llama.cpp servers).

pub mod providers;
