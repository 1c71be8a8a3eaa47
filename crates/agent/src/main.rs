//! The `trellis` command line: `inspect`, `run`, `chat`, `resume`, `threads`, `serve`, `skills list`,
//! `skills validate`, `skills index`, `schema`. This file only parses the arguments; the commands
//! live in [`trellis_agent::cli`].

use std::process::ExitCode;

use clap::Parser;
use trellis_agent::cli::{Cli, run_main};
use trellis_agent::tools::sandbox::bridge;

/// mimalloc rather than glibc's malloc, built without asking for transparent huge pages (the
/// `no_thp` feature): see "Speed" in docs/server.md, items 7 and 13, for what each measured.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // Inside the sandbox, as the bridge of a command with allowed domains (`--allow-domain`).
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() == Some(bridge::BRIDGE_ARG.as_ref()) {
        return bridge::main(args);
    }
    run_main(Cli::parse())
}
