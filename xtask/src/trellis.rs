//! `cargo xtask trellis ARGS`: build the `trellis` binary from exactly the units `cargo xtask test`
//! builds, and run it with ARGS.
//!
//! `cargo run -p trellis-agent` resolves features for `trellis-agent` alone, while `cargo test
//! --workspace` unifies them across every member and its dev-dependencies (tokio's `test-util`,
//! wiremock's hyper server, the unicode tables of `regex`, …). Some 26 crates under the binary then
//! come out different, and a newcomer who runs the README's two commands compiles them twice.
//! `cargo build --workspace --bin trellis --examples` resolves features the way the test build does:
//! asking for examples makes cargo include dev-dependencies, and `--workspace` includes every
//! member's. The workspace has no examples, so nothing else is built, and every unit this builds is
//! one the test build reuses. (An example added later would be built here too; the test build
//! builds it anyway.)

use std::process::{Command, ExitCode, Stdio};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::layout::Layout;
use crate::test::cargo;

/// The cargo arguments that build the binary as the test build does.
pub const BUILD_ARGS: &[&str] = &["build", "--workspace", "--bin", "trellis", "--examples"];

pub fn run(layout: &Layout, args: &[String]) -> Result<ExitCode> {
    let exe = build(layout)?;
    // Run from the caller's directory, as `cargo run` would, so relative paths mean what they say.
    let status = Command::new(&exe)
        .args(args)
        .status()
        .with_context(|| format!("running {exe}"))?;
    let code = status.code().and_then(|c| u8::try_from(c).ok()).unwrap_or(1);
    Ok(ExitCode::from(code))
}

/// Build the binary as the test build does; its path.
pub fn build(layout: &Layout) -> Result<String> {
    let out = cargo()
        .args(BUILD_ARGS)
        .arg("--message-format=json-render-diagnostics")
        .current_dir(&layout.workspace)
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo build")?;
    if !out.status.success() {
        bail!("cargo {} failed ({})", BUILD_ARGS.join(" "), out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(exe) = executable(&text) else {
        bail!(
            "cargo {} did not report the trellis executable",
            BUILD_ARGS.join(" ")
        );
    };
    Ok(exe)
}

/// The path of the `trellis` executable in cargo's JSON messages.
fn executable(messages: &str) -> Option<String> {
    messages
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "trellis")
        .find_map(|m| m["executable"].as_str().map(str::to_owned))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_executable_among_the_messages() {
        let messages = concat!(
            "{\"reason\":\"compiler-artifact\",\"target\":{\"name\":\"serde\"},\"executable\":null}\n",
            "not json\n",
            "{\"reason\":\"compiler-artifact\",\"target\":{\"name\":\"trellis\"},\"executable\":\"/t/debug/trellis\"}\n",
            "{\"reason\":\"build-finished\",\"success\":true}\n",
        );
        assert_eq!(executable(messages).as_deref(), Some("/t/debug/trellis"));
        assert_eq!(executable("{\"reason\":\"build-finished\"}"), None);
    }
}
