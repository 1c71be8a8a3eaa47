//! The model providers' tests: wire formats checked literally against each API's documented shapes
//! on a mock server (`anthropic_*`, `openai*`, `responses*`, `bedrock`, `vertex`), streaming,
//! errors, limits, SigV4, the model-string registry and parsers that never panic. `common` holds
//! the mock-server helpers they share; `anthropic_common` the Anthropic model and example answer.

mod anthropic_common;
mod anthropic_errors;
mod anthropic_messages;
mod anthropic_options;
mod bedrock;
mod common;
mod error_details;
mod limits;
mod openai;
mod openai_schemas;
mod parsers_never_panic;
mod platform_matrix;
mod redirects;
mod registry;
mod request_settings;
mod responses;
mod responses_streaming;
mod sigv4;
mod stop_reasons;
mod stream_error_ids;
mod streaming;
mod vertex;
