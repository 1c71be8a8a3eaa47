//! Project automation for Trellis, run as `cargo xtask <command>`.
//!
//! `cargo xtask help` prints every command with what it does ([`USAGE`] below is that text, the
//! one list of commands).
//!
//! Only `std` and `anyhow`: argument parsing, HTTP readiness checks and process
//! management are hand-written so that `cargo xtask` builds in a few seconds.

mod bench;
mod deps;
mod emulators;
mod fuzz;
mod http;
mod install;
mod layers;
mod layout;
mod live;
mod manifest;
mod postgres;
mod procs;
mod snapshot;
mod test;
mod timings;
mod trellis;

use std::process::ExitCode;

use anyhow::{Result, bail};

use crate::layout::Layout;

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  deps              fail on a dependency a crate declares but does not use (cargo-machete,
                    installed pinned into target/tools/ when missing)
  emulators start   install (idempotently) and start moto (S3), fake-gcs-server + XML shim
                    (GCS) and azurite (Azure Blob) on 127.0.0.1, create bucket `trellis-test`
  emulators stop    stop exactly the emulator processes recorded in target/emulators/pids
  emulators env     print `export ...` lines for tests run against started emulators
  bench [--report]  run every benchmark against the emulators (JSON); --report writes
                    docs/benchmarks.md with tables and SVG charts
  fuzz [--seconds N] [TARGET...]
                    install cargo-fuzz if missing, run each fuzz target in fuzz/ for N seconds
                    (default 60), seeded from fuzz/seeds/; one JSON line per target with
                    executions and crashes (artifacts in fuzz/artifacts/); see docs/fuzzing.md
  live              opt-in, never part of `test`: for each provider whose credentials are set
                    (ANTHROPIC_API_KEY, OPENAI_API_KEY, OLLAMA_HOST, AWS_ACCESS_KEY_ID +
                    AWS_REGION, GOOGLE_APPLICATION_CREDENTIALS + CLOUD_ML_REGION), two real
                    `trellis run`s checking a skill read, a tool call and a prompt-cache hit;
                    prints what it could not run (models: TRELLIS_LIVE_<PROVIDER>_MODEL)
  layers            fail when a crate under crates/ names a trellis crate other than the one
                    directly below it (agent → middleware → fs-tools → backend), in any
                    dependency section
  snapshot [--accept]
                    run every prompt snapshot test; show a diff on change, or take the new text
  test [-- ARGS]    run the layer check (stop on failure), install + start the emulators,
                    run `cargo test --workspace --all-targets` and `cargo test --workspace
                    --doc` (ARGS are passed to cargo test); stop the emulators it started,
                    exit with the tests' status
  trellis ARGS      build the `trellis` binary with the features the test build uses (so
                    `test` reuses every crate it compiles) and run it with ARGS, e.g.
                    `cargo xtask trellis inspect --skills examples/sales-assistant/skills`
  help              print this message";

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(err) => {
            eprintln!("xtask: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<ExitCode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let layout = Layout::discover()?;
    match args.first().map(String::as_str) {
        Some("emulators") => {
            match args.get(1).map(String::as_str) {
                Some("start") if args.len() == 2 => emulators::start_command(&layout)?,
                Some("stop") if args.len() == 2 => emulators::stop_command(&layout)?,
                Some("env") if args.len() == 2 => emulators::env_command(&layout),
                _ => bail!("expected `emulators start|stop|env`\n\n{USAGE}"),
            }
            Ok(ExitCode::SUCCESS)
        }
        Some("snapshot") => snapshot::run(&layout, &args[1..]),
        Some("bench") => bench::run(&layout, &args[1..]),
        Some("deps") => deps::run(&layout, &args[1..]),
        Some("fuzz") => fuzz::run(&layout, &args[1..]),
        Some("layers") => layers::run(&layout, &args[1..]),
        Some("live") => live::run(&layout, &args[1..]),
        Some("trellis") => {
            let rest = &args[1..];
            trellis::run(&layout, rest.strip_prefix(&["--".to_owned()][..]).unwrap_or(rest))
        }
        Some("test") => {
            // `cargo xtask test -- --nocapture` reaches us as `test -- --nocapture`.
            let rest = &args[1..];
            let extra = match rest.first().map(String::as_str) {
                Some("--") => &rest[1..],
                _ => rest,
            };
            test::run(&layout, extra)
        }
        Some("help" | "-h" | "--help") | None => {
            println!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        Some(other) => bail!("unknown command `{other}`\n\n{USAGE}"),
    }
}
