//! `cargo xtask deps`: fail when a crate declares a dependency it does not use.
//!
//! Runs [cargo-machete](https://crates.io/crates/cargo-machete) over the workspace: for each
//! dependency of each crate it searches the crate's sources for the crate's name (`use foo`,
//! `foo::`, `extern crate foo`) and exits 1 when one is named nowhere. It is a search, not a
//! parse: a name that only appears in a comment still counts as used, so it misses some unused
//! dependencies, and one that is needed but never named (declared only to turn on a feature of a
//! shared dependency) is listed under `[package.metadata.cargo-machete] ignored = [..]` in that
//! crate's manifest, with a comment saying why.
//!
//! cargo-shear, which parses the sources and is what codex-rs runs, was the first choice; its
//! current release (1.14.0) needs rustc 1.98 through rust-analyzer's parser crates, and this
//! workspace builds with 1.95.
//!
//! cargo-machete is installed (pinned, `cargo install --locked`) into `target/tools/` the first
//! time, as `cargo xtask fuzz` installs cargo-fuzz, so a fresh clone needs nothing but cargo.
//! Installing takes about 2 minutes of two cores once; a check takes well under a second.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};

use crate::layout::Layout;
use crate::test::cargo;

/// The cargo-machete release installed when it is missing.
const CARGO_MACHETE_VERSION: &str = "0.9.2";

pub fn run(layout: &Layout, args: &[String]) -> Result<ExitCode> {
    if !args.is_empty() {
        bail!("`deps` takes no arguments");
    }
    let machete = ensure_cargo_machete(layout)?;
    // `--skip-target-dir`: target/ holds downloaded sources (the emulators' venv, cargo install
    // builds) whose manifests are not ours.
    let status = Command::new(&machete)
        .arg("--skip-target-dir")
        .current_dir(&layout.workspace)
        .status()
        .with_context(|| format!("running {}", machete.display()))?;
    if status.success() {
        println!("xtask: no unused dependencies");
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("xtask: cargo-machete found unused dependencies (see above)");
        Ok(ExitCode::FAILURE)
    }
}

/// `target/tools/`: programs xtask installs for itself.
fn tools_root(layout: &Layout) -> PathBuf {
    layout.dir.parent().unwrap_or(Path::new("target")).join("tools")
}

/// The pinned cargo-machete binary, installed when missing or of another version.
fn ensure_cargo_machete(layout: &Layout) -> Result<PathBuf> {
    let root = tools_root(layout);
    let binary = root.join("bin").join("cargo-machete");
    let installed = Command::new(&binary).arg("--version").output().is_ok_and(|out| {
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains(CARGO_MACHETE_VERSION)
    });
    if installed {
        return Ok(binary);
    }
    eprintln!(
        "xtask: installing cargo-machete {CARGO_MACHETE_VERSION} into {}",
        root.display()
    );
    let status = cargo()
        .args([
            "install",
            "cargo-machete",
            "--locked",
            "--version",
            CARGO_MACHETE_VERSION,
            "--root",
        ])
        .arg(&root)
        .status()
        .context("running `cargo install cargo-machete`")?;
    if !status.success() {
        bail!("`cargo install cargo-machete` failed ({status})");
    }
    Ok(binary)
}
