//! `--sandbox` for `trellis run` and `trellis inspect`: which sandbox `execute` runs in.
//!
//! | `--sandbox` | `execute` |
//! |---|---|
//! | not given | in bubblewrap where it works; where it does not, not offered, with a warning that says why and how to fix it |
//! | `bwrap` | in bubblewrap; where it does not work, the command fails with the fix |
//! | `none` | not offered |
//! | `unsandboxed` | on the host, isolating nothing (trusted development only); a warning says so |
//!
//! Nothing ever falls back to running commands unsandboxed: that takes `--sandbox unsandboxed`.
//! `TRELLIS_BWRAP`, when set, is the `bwrap` binary to use (default: the first on `PATH`).

use std::sync::Arc;

use anyhow::{Result, bail};
use serde::Serialize;
use trellis_middleware::backend::Sandbox;
use trellis_middleware::backend::sandbox::{LimitStatus, SandboxLimits};
use trellis_middleware::tools::sandbox::{BubblewrapConfig, BubblewrapSandbox, UnsandboxedShell};

/// The `--sandbox` values (the table above). The variants carry no doc comments on purpose: clap
/// would then switch every `--help` to its long layout to describe them.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)]
pub enum SandboxChoice {
    Bwrap,
    None,
    Unsandboxed,
}

/// What `execute` will run in, for `inspect` and the warnings.
#[derive(Debug, Clone, Serialize)]
pub struct SandboxStatus {
    /// True when `execute` is offered.
    pub offered: bool,
    /// The sandbox's name, when there is one.
    pub sandbox: Option<String>,
    /// Each limit and whether this host enforces it.
    pub limits: Vec<LimitStatus>,
    /// Why there is no sandbox, or a warning about the one there is.
    pub note: Option<String>,
}

/// A chosen sandbox (if any) and its status.
#[derive(Debug, Clone)]
pub struct Selected {
    /// What `execute` runs in; `None`: no `execute`.
    pub sandbox: Option<Arc<dyn Sandbox>>,
    /// What to tell the user.
    pub status: SandboxStatus,
}

impl Selected {
    /// No sandbox, because `why`.
    pub fn none(why: &str) -> Self {
        Self {
            sandbox: None,
            status: SandboxStatus {
                offered: false,
                sandbox: None,
                limits: Vec::new(),
                note: Some(why.to_owned()),
            },
        }
    }
}

/// The sandbox for `choice` (`None`: not given), and its status.
pub fn select(choice: Option<SandboxChoice>) -> Result<Selected> {
    let made: Result<Arc<dyn Sandbox>, String> = match choice {
        Some(SandboxChoice::None) => return Ok(Selected::none("--sandbox none")),
        Some(SandboxChoice::Unsandboxed) => Ok(Arc::new(UnsandboxedShell::new(SandboxLimits::default()))),
        Some(SandboxChoice::Bwrap) | None => BubblewrapSandbox::new(bwrap_config())
            .map(|s| Arc::new(s) as Arc<dyn Sandbox>)
            .map_err(|e| e.to_string()),
    };
    match made {
        Ok(sandbox) => {
            let report = sandbox.report();
            let note = (choice == Some(SandboxChoice::Unsandboxed)).then(|| {
                "commands run on this host with your user's rights: nothing is isolated (trusted development only)"
                    .to_owned()
            });
            let status = SandboxStatus {
                offered: true,
                sandbox: Some(report.sandbox.clone()),
                limits: report.limits,
                note,
            };
            Ok(Selected {
                sandbox: Some(sandbox),
                status,
            })
        }
        Err(why) if choice == Some(SandboxChoice::Bwrap) => bail!("--sandbox bwrap: {why}"),
        Err(why) => Ok(Selected::none(&format!(
            "bubblewrap is unavailable, so there is no execute tool: {why} (pass --sandbox none to silence this, or --sandbox unsandboxed to run commands on the host)"
        ))),
    }
}

/// Bubblewrap's configuration: `TRELLIS_BWRAP`, when set, names the `bwrap` binary;
/// `TRELLIS_BWRAP_ALLOW_ROOT=1` lets commands run as root without capabilities when Trellis runs
/// as root and the unprivileged user's namespaces are refused. Both are the operator's
/// environment, never the agent file (which a cloned repository may bring). This very program is
/// the bridge that carries allowed domains' connections out of the sandbox.
fn bwrap_config() -> BubblewrapConfig {
    let mut config = BubblewrapConfig::default();
    if let Some(path) = std::env::var_os("TRELLIS_BWRAP").filter(|p| !p.is_empty()) {
        config.bwrap = Some(path.into());
    }
    config.allow_root_commands = std::env::var("TRELLIS_BWRAP_ALLOW_ROOT").as_deref() == Ok("1");
    // The `trellis` program itself is the bridge of allowed domains (see `main.rs`).
    config.network_bridge = std::env::current_exe().ok();
    config
}

impl SandboxStatus {
    /// The lines `inspect` prints.
    pub fn render(&self) -> String {
        let mut out = match (&self.sandbox, self.offered) {
            (Some(name), true) => format!("execute: offered, in {name}\n"),
            _ => "execute: not offered\n".to_owned(),
        };
        if let Some(note) = &self.note {
            out.push_str(&format!("  note: {note}\n"));
        }
        for l in &self.limits {
            let state = if l.enforced { "enforced" } else { "NOT enforced" };
            out.push_str(&format!("  {:<12} {:<13} {}\n", l.kind.as_str(), state, l.detail));
        }
        out
    }
}
