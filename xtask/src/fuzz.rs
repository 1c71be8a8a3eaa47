//! `cargo xtask fuzz [--seconds N] [TARGET...]`: run the cargo-fuzz targets in `fuzz/`.
//!
//! Installs cargo-fuzz (pinned) when `cargo fuzz` is missing, builds every requested target once,
//! then runs each for N seconds (default 60), one after the other in a single process each, with
//! `fuzz/corpus/<target>/` as the writable corpus and `fuzz/seeds/<target>/` (plus
//! `fuzz/regressions/<target>/` when present) as read-only seed corpora. Works on a stable
//! toolchain: `RUSTC_BOOTSTRAP=1` lets cargo-fuzz pass its `-Z` flags (harmless on nightly).
//!
//! libFuzzer's output goes to `fuzz/artifacts/<target>/fuzz.log`; crash inputs are written next to
//! it (`crash-*`, `timeout-*`, `oom-*`). One JSON line per target is printed with the number of
//! executions (libFuzzer's `stat::number_of_executed_units`) and crashes found; the command fails
//! when any target crashed. Builds go to `$CARGO_TARGET_DIR` when set, else `fuzz/target`.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::json;

use crate::layout::Layout;
use crate::procs;
use crate::test::cargo;

/// The cargo-fuzz release installed when `cargo fuzz` is missing.
const CARGO_FUZZ_VERSION: &str = "0.13.2";
/// Seconds per target unless `--seconds` says otherwise.
const DEFAULT_SECONDS: u64 = 60;
/// Longest input libFuzzer generates, per target (others get [`DEFAULT_MAX_LEN`]). Paths go past
/// the 4 KiB path limit so joins and relative inputs can cross it; frontmatter past a few KiB so
/// alias expansion can be large.
const MAX_LEN: &[(&str, usize)] = &[("frontmatter", 16 * 1024), ("path", 9 * 1024)];
const DEFAULT_MAX_LEN: usize = 4096;
/// libFuzzer flags for every run: one input may take at most 10 s and 2 GiB.
const LIBFUZZER_FLAGS: &[&str] = &["-print_final_stats=1", "-timeout=10", "-rss_limit_mb=2048"];

/// What one target's run gave.
#[derive(Debug)]
struct Outcome {
    target: String,
    exit_ok: bool,
    executions: Option<u64>,
    crashes: Vec<String>,
    log: PathBuf,
}

pub fn run(layout: &Layout, args: &[String]) -> Result<ExitCode> {
    let fuzz_dir = layout.workspace.join("fuzz");
    let available = list_targets(&fuzz_dir)?;
    let (seconds, mut targets) = parse_args(args)?;
    if let Some(unknown) = targets.iter().find(|t| !available.contains(t)) {
        bail!(
            "unknown fuzz target `{unknown}` (targets: {})",
            available.join(", ")
        );
    }
    if targets.is_empty() {
        targets = available;
    }

    ensure_cargo_fuzz()?;
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .filter(|d| !d.is_empty())
        .map(|d| layout.workspace.join(d));

    eprintln!("xtask: building fuzz targets: {}", targets.join(", "));
    let mut build = cargo_fuzz(layout, "build", target_dir.as_deref());
    if let [only] = targets.as_slice() {
        build.arg(only);
    }
    let status = build.status().context("running `cargo fuzz build`")?;
    if !status.success() {
        bail!("`cargo fuzz build` failed ({status})");
    }

    let mut outcomes = Vec::new();
    for target in &targets {
        let outcome = run_target(layout, &fuzz_dir, target_dir.as_deref(), target, seconds)?;
        println!(
            "{}",
            json!({
                "target": outcome.target,
                "seconds": seconds,
                "executions": outcome.executions,
                "crashes": outcome.crashes.len(),
                "artifacts": outcome.crashes,
                "libfuzzer_exit_ok": outcome.exit_ok,
                "log": outcome.log.strip_prefix(&layout.workspace).unwrap_or(&outcome.log),
            })
        );
        outcomes.push(outcome);
    }

    let failed: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| !o.exit_ok || !o.crashes.is_empty())
        .collect();
    for outcome in &failed {
        procs::print_tail(&format!("fuzz target `{}`", outcome.target), &outcome.log);
    }
    if failed.is_empty() {
        eprintln!("xtask: fuzz: {} target(s), no crashes", outcomes.len());
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "xtask: fuzz: crashes or failures in {}; add each input to fuzz/regressions/<target>/ and a \
             regression test in the owning crate (docs/fuzzing.md)",
            failed
                .iter()
                .map(|o| o.target.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        Ok(ExitCode::FAILURE)
    }
}

/// `--seconds N` (or `--seconds=N`) and target names.
fn parse_args(args: &[String]) -> Result<(u64, Vec<String>)> {
    let mut seconds = DEFAULT_SECONDS;
    let mut targets = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let value = if arg == "--seconds" {
            Some(iter.next().context("`--seconds` needs a number")?.as_str())
        } else {
            arg.strip_prefix("--seconds=")
        };
        match value {
            Some(v) => {
                seconds = v
                    .parse()
                    .ok()
                    .filter(|s| *s > 0)
                    .with_context(|| format!("`--seconds` needs a positive number, got `{v}`"))?;
            }
            None if arg.starts_with('-') => bail!("unknown option `{arg}` (expected `--seconds N`)"),
            None => targets.push(arg.clone()),
        }
    }
    Ok((seconds, targets))
}

/// The targets, from the file names in `fuzz/fuzz_targets/`, sorted.
fn list_targets(fuzz_dir: &Path) -> Result<Vec<String>> {
    let dir = fuzz_dir.join("fuzz_targets");
    let mut targets: Vec<String> = fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            name.strip_suffix(".rs").map(str::to_owned)
        })
        .collect();
    targets.sort();
    Ok(targets)
}

/// `cargo fuzz ...` from the workspace root, able to pass `-Z` flags on a stable toolchain.
fn cargo_fuzz(layout: &Layout, subcommand: &str, target_dir: Option<&Path>) -> Command {
    let mut cmd = cargo();
    cmd.current_dir(&layout.workspace).env("RUSTC_BOOTSTRAP", "1");
    cmd.arg("fuzz").arg(subcommand);
    if let Some(dir) = target_dir {
        cmd.arg("--target-dir").arg(dir);
    }
    cmd
}

fn ensure_cargo_fuzz() -> Result<()> {
    let found = cargo()
        .args(["fuzz", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return Ok(());
    }
    eprintln!("xtask: installing cargo-fuzz {CARGO_FUZZ_VERSION} (cargo install --locked)");
    let status = cargo()
        .args([
            "install",
            "cargo-fuzz",
            "--locked",
            "--version",
            CARGO_FUZZ_VERSION,
        ])
        .status()
        .context("running `cargo install cargo-fuzz`")?;
    if !status.success() {
        bail!("`cargo install cargo-fuzz` failed ({status})");
    }
    Ok(())
}

fn run_target(
    layout: &Layout,
    fuzz_dir: &Path,
    target_dir: Option<&Path>,
    target: &str,
    seconds: u64,
) -> Result<Outcome> {
    let corpus = fuzz_dir.join("corpus").join(target);
    let artifacts = fuzz_dir.join("artifacts").join(target);
    for dir in [&corpus, &artifacts] {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let before = crash_files(&artifacts);
    let log = artifacts.join("fuzz.log");
    let log_file = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let max_len = MAX_LEN
        .iter()
        .find(|(name, _)| *name == target)
        .map_or(DEFAULT_MAX_LEN, |(_, len)| *len);

    let mut cmd = cargo_fuzz(layout, "run", target_dir);
    cmd.arg(target).arg(&corpus);
    for extra in ["seeds", "regressions"] {
        let dir = fuzz_dir.join(extra).join(target);
        if dir.is_dir() {
            cmd.arg(dir);
        }
    }
    cmd.arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .arg(format!("-max_len={max_len}"))
        .args(LIBFUZZER_FLAGS);
    cmd.stdout(log_file.try_clone()?).stderr(log_file);

    eprintln!(
        "xtask: fuzzing `{target}` for {seconds} s (log: {})",
        log.display()
    );
    let start = Instant::now();
    let status = cmd
        .status()
        .with_context(|| format!("running `cargo fuzz run {target}`"))?;
    eprintln!(
        "xtask: `{target}` finished in {:.0} s ({status})",
        start.elapsed().as_secs_f64()
    );

    let text = fs::read_to_string(&log).unwrap_or_default();
    let crashes = crash_files(&artifacts)
        .into_iter()
        .filter(|f| !before.contains(f))
        .map(|f| {
            f.strip_prefix(&layout.workspace)
                .unwrap_or(&f)
                .display()
                .to_string()
        })
        .collect();
    Ok(Outcome {
        target: target.to_owned(),
        exit_ok: status.success(),
        executions: executions(&text),
        crashes,
        log,
    })
}

/// Crash, timeout, out-of-memory and leak inputs libFuzzer wrote, sorted.
fn crash_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                        ["crash-", "timeout-", "oom-", "leak-", "slow-unit-"]
                            .iter()
                            .any(|prefix| n.starts_with(prefix))
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// libFuzzer's count of executed inputs: `stat::number_of_executed_units: N` (printed with
/// `-print_final_stats=1`, also after a crash), else the `Done N runs in S second(s)` line.
fn executions(log: &str) -> Option<u64> {
    let stat = log.lines().rev().find_map(|line| {
        line.trim()
            .strip_prefix("stat::number_of_executed_units:")
            .and_then(|n| n.trim().parse().ok())
    });
    stat.or_else(|| {
        log.lines().rev().find_map(|line| {
            line.trim()
                .strip_prefix("Done ")
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|n| n.parse().ok())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_executions_from_final_stats_or_done_line() {
        let log = "#1024\tpulse  cov: 10 ft: 12 corp: 3/40b exec/s: 512 rss: 40Mb\n\
                   Done 4567 runs in 2 second(s)\n\
                   stat::number_of_executed_units: 4568\n\
                   stat::average_exec_per_sec:     2284\n";
        assert_eq!(executions(log), Some(4568));
        assert_eq!(executions("Done 77 runs in 1 second(s)\n"), Some(77));
        assert_eq!(executions("INFO: Seed: 1\n"), None);
    }

    #[test]
    fn parses_seconds_and_targets() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (seconds, targets) = parse_args(&args(&["--seconds", "5", "path", "glob"])).unwrap_or_default();
        assert_eq!(
            (seconds, targets),
            (5, vec!["path".to_owned(), "glob".to_owned()])
        );
        assert_eq!(parse_args(&args(&["--seconds=9"])).map(|r| r.0).ok(), Some(9));
        assert!(parse_args(&args(&["--seconds", "0"])).is_err());
        assert!(parse_args(&args(&["--jobs", "2"])).is_err());
        assert_eq!(parse_args(&[]).map(|r| r.0).ok(), Some(DEFAULT_SECONDS));
    }
}
