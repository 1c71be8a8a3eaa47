//! `cargo xtask test`: check the crate layering (and stop if it fails), install + start the
//! emulators, run every test with the emulator environment, stop what was started, exit with the
//! tests' status.

use std::ffi::{OsStr, OsString};
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{Context, Result};

use crate::emulators;
use crate::install;
use crate::layers;
use crate::layout::Layout;
use crate::procs::Attach;
use crate::timings::Timings;

/// cargo options that pick targets; with any of them we run one `cargo test`
/// with exactly the caller's selection instead of `--all-targets` + `--doc`.
const TARGET_FLAGS: &[&str] = &[
    "--lib",
    "--bins",
    "--bin",
    "--examples",
    "--example",
    "--tests",
    "--test",
    "--benches",
    "--bench",
    "--all-targets",
    "--doc",
];

pub fn run(layout: &Layout, extra: &[String]) -> Result<ExitCode> {
    let total = Instant::now();
    let mut timings = Timings::default();

    // Cheapest check first: a layering mistake fails before anything is installed or built.
    layers::check(layout)?;
    eprintln!("xtask: layer check passed");

    let t = Instant::now();
    install::ensure_all(layout, &mut timings)?;
    timings.since("install (total)", t);

    let t = Instant::now();
    // Attached: a Ctrl-C reaches the emulators as well. Dropping `running`
    // (also on an early error return) stops the ones started here.
    let mut running = emulators::start_all(layout, Attach::Attached, &mut timings)?;
    timings.since("start (total)", t);

    let env = emulators::contract_env(layout);
    let mut first_failure = None;
    for (label, args) in plan(extra) {
        eprintln!("xtask: cargo {}", args.join(" "));
        let t = Instant::now();
        let status = cargo()
            .args(&args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .current_dir(&layout.workspace)
            .status()
            .context("running cargo test")?;
        timings.since(
            format!("{label}{}", if status.success() { "" } else { " (FAILED)" }),
            t,
        );
        if !status.success() && first_failure.is_none() {
            first_failure = Some(status);
        }
    }

    if running.reused_any() {
        eprintln!("xtask: leaving the reused emulators running (`cargo xtask emulators stop`)");
    }
    running.stop_spawned();
    timings.since("total", total);
    timings.print("cargo xtask test timings");

    Ok(match first_failure {
        None => ExitCode::SUCCESS,
        Some(status) => {
            eprintln!("xtask: tests failed ({status})");
            let code = status.code().and_then(|c| u8::try_from(c).ok());
            ExitCode::from(code.filter(|c| *c != 0).unwrap_or(1))
        }
    })
}

/// A `cargo` command without the variables `cargo run` set for xtask itself.
pub(crate) fn cargo() -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(cargo);
    for (name, _) in std::env::vars_os() {
        if is_run_variable(&name) {
            cmd.env_remove(name);
        }
    }
    cmd
}

/// Variables `cargo run` sets for xtask itself (CARGO_MANIFEST_DIR,
/// CARGO_PKG_NAME, ...). They must not reach the nested cargo: build scripts
/// such as ring's declare `rerun-if-env-changed` on them, and cargo compares
/// those against its own environment, so leaking them makes every switch
/// between `cargo xtask test` and a plain `cargo` rebuild ring and all that
/// depends on it.
fn is_run_variable(name: &OsStr) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    name.starts_with("CARGO_PKG_")
        || matches!(
            name,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_RUSTC_CURRENT_DIR"
        )
}

/// The `cargo test` invocations for the given extra arguments.
fn plan(extra: &[String]) -> Vec<(&'static str, Vec<String>)> {
    let cargo_args = extra.split(|a| a == "--").next().unwrap_or_default();
    let picks_targets = cargo_args.iter().any(|a| {
        TARGET_FLAGS
            .iter()
            .any(|f| a == f || a.strip_prefix(f).is_some_and(|r| r.starts_with('=')))
    });
    let picks_packages = cargo_args
        .iter()
        .any(|a| a.starts_with("-p") || a == "--package" || a.starts_with("--package="));

    let build = |selection: &[&str]| {
        // Every failing test binary is reported, not just the first.
        let mut args = vec!["test".to_string(), "--no-fail-fast".to_string()];
        if !picks_packages {
            args.push("--workspace".to_string());
        }
        args.extend(selection.iter().map(|s| s.to_string()));
        args.extend(extra.iter().cloned());
        args
    };
    if picks_targets {
        vec![("tests", build(&[]))]
    } else {
        // `--all-targets` does not include doctests, hence two runs.
        vec![
            ("tests: --all-targets", build(&["--all-targets"])),
            ("tests: --doc", build(&["--doc"])),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn default_plan_runs_all_targets_and_doctests() {
        let p = plan(&strings(&["--", "--nocapture"]));
        assert_eq!(p.len(), 2);
        assert_eq!(
            p[0].1,
            strings(&[
                "test",
                "--no-fail-fast",
                "--workspace",
                "--all-targets",
                "--",
                "--nocapture"
            ])
        );
        assert_eq!(
            p[1].1,
            strings(&[
                "test",
                "--no-fail-fast",
                "--workspace",
                "--doc",
                "--",
                "--nocapture"
            ])
        );
    }

    #[test]
    fn strips_only_what_cargo_run_sets() {
        assert!(is_run_variable(OsStr::new("CARGO_MANIFEST_DIR")));
        assert!(is_run_variable(OsStr::new("CARGO_PKG_VERSION_MAJOR")));
        assert!(!is_run_variable(OsStr::new("CARGO_TARGET_DIR")));
        assert!(!is_run_variable(OsStr::new("CARGO_HOME")));
        assert!(!is_run_variable(OsStr::new("CARGO")));
    }

    #[test]
    fn explicit_selection_is_passed_through_once() {
        let p = plan(&strings(&["-p", "trellis-backend", "--test", "s3"]));
        assert_eq!(p.len(), 1);
        assert_eq!(
            p[0].1,
            strings(&["test", "--no-fail-fast", "-p", "trellis-backend", "--test", "s3"])
        );
        // `--test` after `--` is a harness argument, not a target selection.
        assert_eq!(plan(&strings(&["--", "--test"])).len(), 2);
    }
}
