//! The cross-crate integration tests of trellis-tests, built as one test binary: each module below
//! was a test target of its own (`object_store_faults` a directory, the others one file each).

mod agent_faults;
mod checkpoint_processes;
mod doc_paths;
mod execute_skill;
mod fuzz_replay;
mod object_store_faults;
mod provider_faults;
mod thread_files;
mod thread_store;
mod user_layer;
mod workspaces;
