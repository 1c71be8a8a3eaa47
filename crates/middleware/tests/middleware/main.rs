//! The integration tests of trellis-middleware, built as one test binary: each module below was a
//! `tests/*.rs` file of its own. `common`, `adversarial_skills_common`, `rubric_common` and
//! `skills_discovery_common` hold what several of them share.

mod adversarial_scale;
mod adversarial_skills_common;
mod adversarial_skills_discovery;
mod adversarial_skills_file_tools;
mod adversarial_skills_prompt;
mod agent_loop_hooks;
mod agent_loop_runs;
mod agent_loop_tools;
mod agent_loop_truncation;
mod approvals;
mod approvals_subagents;
mod attachments;
mod checkpoint_log;
mod checkpoint_snapshots;
mod checkpoints;
mod common;
mod core_stack;
mod filesystem;
mod fuzz_regressions;
mod memory;
mod rubric_common;
mod rubric_grading_runs;
mod rubric_payload;
mod rubric_verdicts;
mod skills_catalog_cache;
mod skills_changing_bindings;
mod skills_discovery_common;
mod skills_discovery_library;
mod skills_discovery_listing;
mod skills_middleware;
mod skills_parse;
mod skills_render;
mod skills_shared_catalog;
mod subagents;
mod summarization;
mod summarization_cut_points;
mod user_layer;
