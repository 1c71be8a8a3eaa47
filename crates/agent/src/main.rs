//! The `trellis` command line: `inspect`, `run`, `chat`, `resume`, `threads`, `serve`, `skills list`,
//! `skills validate`, `skills index`, `schema`. This file only parses the arguments; the commands
//! live in [`trellis_agent::cli`].

use std::process::ExitCode;

use clap::Parser;
use trellis_agent::cli::{Cli, run_main};

fn main() -> ExitCode {
    run_main(Cli::parse())
}
