//! The file tools beyond their snapshots: permissions through all seven tools (`permissions`) and
//! ten agents editing one file at once (`concurrency`).

mod concurrency;
mod permissions;
