//! `cargo xtask deps`: fail when a crate declares a dependency it does not use.
//!
//! Runs [cargo-shear](https://crates.io/crates/cargo-shear) (what codex-rs uses) over the whole
//! workspace. cargo-shear parses each crate's sources and reports dependencies no `use`, path or
//! macro names, and dev-dependencies only the library uses; it exits non-zero when it finds any.
//! A dependency named only through a feature or a build script it cannot see is listed under
//! `[package.metadata.cargo-shear] ignored = [..]` in that crate's manifest, with a comment saying
//! why.
//!
//! cargo-shear is installed (pinned, `cargo install --locked`) into `target/tools/` the first time,
//! as `cargo xtask fuzz` installs cargo-fuzz, so a fresh clone needs nothing but cargo.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};

use crate::layout::Layout;
use crate::test::cargo;

/// The cargo-shear release installed when it is missing.
const CARGO_SHEAR_VERSION: &str = "1.14.0";

pub fn run(layout: &Layout, args: &[String]) -> Result<ExitCode> {
    if !args.is_empty() {
        bail!("`deps` takes no arguments");
    }
    let shear = ensure_cargo_shear(layout)?;
    let status = Command::new(&shear)
        .arg("shear")
        .current_dir(&layout.workspace)
        .status()
        .with_context(|| format!("running {}", shear.display()))?;
    if status.success() {
        println!("xtask: no unused dependencies");
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("xtask: cargo-shear found unused or misplaced dependencies (see above)");
        Ok(ExitCode::FAILURE)
    }
}

/// `target/tools/`: programs xtask installs for itself.
fn tools_root(layout: &Layout) -> PathBuf {
    layout.dir.parent().unwrap_or(Path::new("target")).join("tools")
}

/// The pinned cargo-shear binary, installed when missing or of another version.
fn ensure_cargo_shear(layout: &Layout) -> Result<PathBuf> {
    let root = tools_root(layout);
    let binary = root.join("bin").join("cargo-shear");
    let installed = Command::new(&binary)
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success() && String::from_utf8_lossy(&out.stdout).contains(CARGO_SHEAR_VERSION));
    if installed {
        return Ok(binary);
    }
    eprintln!("xtask: installing cargo-shear {CARGO_SHEAR_VERSION} into {}", root.display());
    let status = cargo()
        .args(["install", "cargo-shear", "--locked", "--version", CARGO_SHEAR_VERSION, "--root"])
        .arg(&root)
        .status()
        .context("running `cargo install cargo-shear`")?;
    if !status.success() {
        bail!("`cargo install cargo-shear` failed ({status})");
    }
    Ok(binary)
}
