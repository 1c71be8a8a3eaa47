//! The integration tests of trellis-middleware, built as one test binary, in folders by subject:
//! `agent_loop/`, `approvals/`, `checkpoint/`, `skills/`, `rubric/`, `summarization/` and
//! `adversarial/` (each with its own `common` where its tests share helpers), beside the
//! single-file subjects. `common` holds what every folder shares, the emulator guard included.

mod adversarial;
mod agent_loop;
mod approvals;
mod attachments;
mod checkpoint;
mod common;
mod core_stack;
mod filesystem;
mod fuzz_regressions;
mod memory;
mod rubric;
mod skills;
mod subagents;
mod summarization;
mod user_layer;
