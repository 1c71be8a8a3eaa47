//! Where things live: the workspace, `target/emulators/` and the helper scripts.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

#[derive(Debug, Clone)]
pub struct Layout {
    /// Workspace root (the parent of `xtask/`).
    pub workspace: PathBuf,
    /// `target/emulators/`: venv, node modules, logs, pid files, service-account JSON.
    pub dir: PathBuf,
    /// `xtask/emulators/`: the Python helpers that ship with the repository.
    pub scripts: PathBuf,
}

impl Layout {
    pub fn discover() -> Result<Self> {
        let xtask = Path::new(env!("CARGO_MANIFEST_DIR"));
        let workspace = xtask
            .parent()
            .context("xtask crate has no parent directory")?
            .to_path_buf();
        // Honour CARGO_TARGET_DIR like cargo does; relative values are taken
        // from the workspace root (where `cargo xtask` is meant to be run).
        let target = match std::env::var_os("CARGO_TARGET_DIR") {
            Some(dir) if !dir.is_empty() => workspace.join(dir),
            _ => workspace.join("target"),
        };
        Ok(Self {
            dir: target.join("emulators"),
            scripts: xtask.join("emulators"),
            workspace,
        })
    }

    pub fn venv(&self) -> PathBuf {
        self.dir.join("venv")
    }

    /// The venv of the reference Agent Server (`langgraph dev` with Deep Agents).
    pub fn reference_venv(&self) -> PathBuf {
        self.dir.join("reference-venv")
    }

    /// schemathesis's venv (its own: its dependency tree must not move the others').
    pub fn schemathesis_venv(&self) -> PathBuf {
        self.dir.join("schemathesis-venv")
    }

    pub fn venv_python(&self) -> PathBuf {
        self.venv().join("bin").join("python")
    }

    pub fn node_dir(&self) -> PathBuf {
        self.dir.join("node")
    }

    pub fn logs(&self) -> PathBuf {
        self.dir.join("logs")
    }

    pub fn log(&self, name: &str) -> PathBuf {
        self.logs().join(format!("{name}.log"))
    }

    pub fn pids(&self) -> PathBuf {
        self.dir.join("pids")
    }

    pub fn pidfile(&self, name: &str) -> PathBuf {
        self.pids().join(format!("{name}.pid"))
    }

    pub fn service_account(&self) -> PathBuf {
        self.dir.join("gcs-service-account.json")
    }

    pub fn script(&self, file: &str) -> PathBuf {
        self.scripts.join(file)
    }
}
