//! `cargo xtask snapshot [--accept]`: every prompt snapshot test, with a readable diff on change.
//!
//! Rendered prompts are product: each consumer alone (filesystem, skills, memory, rubric, file tools)
//! and the full default stack (`trellis inspect` on the example agent) are insta snapshots. This runs
//! the test targets that hold them. Without `--accept` a changed snapshot fails with insta's diff and
//! nothing is written; with `--accept` the new text is written to the `.snap` files, and the changed
//! files are listed for review before committing.

use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::layout::Layout;
use crate::test::cargo;

/// The test binary of each package that holds prompt snapshots, and the modules in it that do.
const TARGETS: &[(&str, &str, &[&str])] = &[
    ("trellis-fs-tools", "fs_tools", &["snapshots", "eviction"]),
    (
        "trellis-middleware",
        "middleware",
        &[
            "core_stack",
            "filesystem",
            "memory",
            "skills::render",
            "skills::middleware",
            "rubric::verdicts",
            "rubric::payload",
            "summarization",
            "subagents",
            "attachments",
            "user_layer",
            "adversarial::skills_prompt",
        ],
    ),
    // mcp::agent: the tools a real MCP server discloses (needs the venv's `mcp`; skipped without it).
    ("trellis-agent", "agent", &["cli::inspect", "mcp::agent"]),
];

pub fn run(layout: &Layout, args: &[String]) -> Result<ExitCode> {
    let accept = args.iter().any(|a| a == "--accept");
    if let Some(unknown) = args.iter().find(|a| *a != "--accept") {
        anyhow::bail!("unknown argument `{unknown}` (expected `--accept`)");
    }
    let mut cmd = cargo();
    cmd.arg("test").arg("--no-fail-fast");
    for (package, test, _) in TARGETS {
        cmd.args(["-p", package, "--test", test]);
    }
    // libtest runs the tests whose path contains any filter: `core_stack::` is that module's tests.
    // Every binary gets every filter; the module names are distinct across the three binaries.
    cmd.arg("--");
    for (_, _, modules) in TARGETS {
        cmd.args(modules.iter().map(|m| format!("{m}::")));
    }
    if layout.venv_python().exists() {
        cmd.env("TRELLIS_MCP_PYTHON", layout.venv_python());
    }
    // `always` writes new snapshots in place; `no` only reports.
    cmd.env("INSTA_UPDATE", if accept { "always" } else { "no" })
        .env_remove("INSTA_FORCE_PASS")
        .env("CI", "true")
        .current_dir(&layout.workspace);
    eprintln!(
        "xtask: running prompt snapshots{}",
        if accept { " (accepting changes)" } else { "" }
    );
    let status = cmd.status().context("running cargo test")?;
    let changed = std::process::Command::new("git")
        .args(["status", "--short", "--", "*.snap"])
        .current_dir(&layout.workspace)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    if !changed.trim().is_empty() {
        eprintln!("xtask: snapshot files that differ from git (review before committing):\n{changed}");
    }
    if status.success() {
        eprintln!("xtask: every prompt snapshot matches");
        Ok(ExitCode::SUCCESS)
    } else if accept {
        eprintln!("xtask: tests failed for reasons other than snapshots; see above");
        Ok(ExitCode::FAILURE)
    } else {
        eprintln!("xtask: a prompt changed (diff above); run `cargo xtask snapshot --accept` to take it");
        Ok(ExitCode::FAILURE)
    }
}
