//! A throwaway PostgreSQL cluster of one test, under its temporary directory, made and run with
//! the binaries `cargo xtask test` uses (`/usr/lib/postgresql/*/bin`) the way xtask runs its own
//! (`xtask/src/postgres.rs`): `initdb` with `trust` on loopback, and as root every command through
//! `runuser -u postgres` (`initdb` refuses root). The test can stop and start it without
//! disturbing the shared cluster the other tests use. Stopped (immediately) when dropped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The cluster; [`Cluster::url`] is its superuser's database `postgres`.
pub(super) struct Cluster {
    bin: PathBuf,
    data: PathBuf,
    options: String,
    log: PathBuf,
    owner: Option<&'static str>,
    port: u16,
    _dir: tempfile::TempDir,
}

/// The newest `/usr/lib/postgresql/<version>/bin` with `initdb`.
fn bin_dir() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

impl Cluster {
    /// A new cluster, started; `None` (the test skips, or fails under
    /// `TRELLIS_EMULATORS=required`) when PostgreSQL's server binaries are not installed.
    pub(super) fn start() -> Option<Self> {
        let Some(bin) = bin_dir() else {
            assert_ne!(
                std::env::var("TRELLIS_EMULATORS").as_deref(),
                Ok("required"),
                "PostgreSQL's server binaries are not installed"
            );
            eprintln!("skipped: no /usr/lib/postgresql/*/bin/initdb");
            return None;
        };
        let owner = is_root().then_some("postgres");
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let sockets = dir.path().join("run");
        std::fs::create_dir_all(&sockets).unwrap();
        if let Some(user) = owner {
            let status = Command::new("chown")
                .args(["-R", &format!("{user}:{user}")])
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(status.success(), "chown the cluster's directory");
        }
        let cluster = Self {
            data: dir.path().join("data"),
            log: dir.path().join("server.log"),
            options: format!(
                "-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories='{}'",
                sockets.display()
            ),
            bin,
            owner,
            port,
            _dir: dir,
        };
        let out = cluster
            .command("initdb")
            .arg("-D")
            .arg(&cluster.data)
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        cluster.up();
        Some(cluster)
    }

    fn command(&self, program: &str) -> Command {
        match self.owner {
            Some(user) => {
                let mut command = Command::new("runuser");
                command.args(["-u", user, "--"]).arg(self.bin.join(program));
                command
            }
            None => Command::new(self.bin.join(program)),
        }
    }

    fn pg_ctl(&self, args: &[&str]) -> std::process::Output {
        self.command("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(args)
            .output()
            .unwrap()
    }

    /// The superuser's URL.
    pub(super) fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Start it (waits until it takes connections).
    pub(super) fn up(&self) {
        let log: &Path = &self.log;
        let out = self.pg_ctl(&[
            "start",
            "-w",
            "-t",
            "60",
            "-o",
            &self.options,
            "-l",
            log.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "pg_ctl start: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }

    /// Stop it at once, as a crash would (`-m immediate`: no shutdown checkpoint; sessions are cut).
    pub(super) fn down(&self) {
        let out = self.pg_ctl(&["stop", "-m", "immediate", "-w"]);
        assert!(
            out.status.success(),
            "pg_ctl stop: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.pg_ctl(&["stop", "-m", "immediate", "-w"]);
    }
}
