//! A throwaway PostgreSQL cluster for the tests of the PostgreSQL run queue: Debian's `postgresql`
//! package (installed with apt-get when missing and this runs as root, as on CI), a cluster in
//! `target/emulators/postgres/data` (see [`cluster_dir`] for when it cannot be there) made by `initdb`, listening on 127.0.0.1:[`PORT`] only, with
//! `trust` authentication (loopback only, data nobody keeps). `initdb` refuses to run as root, so
//! as root the cluster belongs to the package's unprivileged `postgres` user and every command runs
//! through `runuser`. `fsync` stays on: the crash tests kill the database and must find what it
//! committed.
//!
//! Started and stopped with the emulators (`emulators start` / `stop`, and around `cargo xtask
//! test`); a cluster already running there is reused and left running.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::http;
use crate::install::is_root;
use crate::layout::Layout;
use crate::timings::Timings;

/// The cluster's port on 127.0.0.1.
pub const PORT: u16 = 55432;

/// The URL the tests connect with (`TRELLIS_DATABASE_URL`): the superuser, so a test can create
/// and drop a database of its own.
pub fn database_url() -> String {
    format!("postgres://postgres@127.0.0.1:{PORT}/postgres")
}

/// The newest `/usr/lib/postgresql/<version>/bin` with `initdb`, if any.
fn bin_dir() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
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

/// Installs the `postgresql` package when no server binaries are there.
pub fn ensure_installed(layout: &Layout, timings: &mut Timings) -> Result<()> {
    if bin_dir().is_some() {
        timings.note("install: postgresql", "already there");
        return Ok(());
    }
    if !is_root() {
        bail!(
            "PostgreSQL's server binaries (/usr/lib/postgresql/*/bin/initdb) are missing; install them \
             with `sudo apt-get install -y postgresql` (the run queue tests need a real PostgreSQL)"
        );
    }
    let start = Instant::now();
    crate::install::apt_install(layout, "postgresql")?;
    if bin_dir().is_none() {
        bail!("after apt-get install postgresql, there is still no /usr/lib/postgresql/*/bin/initdb");
    }
    timings.since("install: postgresql", start);
    Ok(())
}

/// The cluster of one xtask invocation; stops it when dropped if this invocation started it.
#[derive(Debug)]
pub struct Cluster {
    bin: PathBuf,
    data: PathBuf,
    /// `Some("postgres")` when commands must run as that user (xtask runs as root).
    owner: Option<String>,
    started_here: bool,
    keep: bool,
}

impl Cluster {
    fn command(bin: &Path, owner: Option<&str>, program: &str) -> Command {
        match owner {
            Some(user) => {
                let mut cmd = Command::new("runuser");
                cmd.args(["-u", user, "--"]).arg(bin.join(program));
                cmd
            }
            None => Command::new(bin.join(program)),
        }
    }

    fn pg_ctl(&self) -> Command {
        let mut cmd = Self::command(&self.bin, self.owner.as_deref(), "pg_ctl");
        cmd.arg("-D").arg(&self.data);
        cmd
    }

    fn running(&self) -> bool {
        self.pg_ctl()
            .arg("status")
            .output()
            .is_ok_and(|o| o.status.success())
    }

    /// Leave it running after xtask exits.
    pub fn keep(&mut self) {
        self.keep = true;
    }

    /// Stops it if this invocation started it (fast shutdown: sessions are disconnected).
    pub fn stop_started(&mut self) {
        if self.started_here && !self.keep {
            self.started_here = false;
            let _ = self.pg_ctl().args(["stop", "-m", "fast", "-w"]).output();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop_started();
    }
}

/// Whether `user` can enter `dir` (every directory above it lets others through).
fn reachable(dir: &Path, user: &str) -> bool {
    Command::new("runuser")
        .args(["-u", user, "--", "test", "-x"])
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success())
}

/// Where the cluster lives: `target/emulators/postgres`, unless (as root) the `postgres` user
/// cannot enter `target/emulators` — a checkout under a home directory of mode 0700, say — in
/// which case a directory of the temporary folder named after the checkout, so each checkout has
/// its own and `emulators stop` finds it again.
fn cluster_dir(layout: &Layout, owner: Option<&str>) -> PathBuf {
    let under_target = layout.dir.join("postgres");
    match owner {
        Some(user) if !reachable(&layout.dir, user) => {
            use std::hash::{Hash, Hasher};
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            layout.dir.hash(&mut hasher);
            std::env::temp_dir().join(format!("trellis-postgres-{:016x}", hasher.finish()))
        }
        _ => under_target,
    }
}

/// Creates the cluster if needed and starts it, or finds it running.
pub fn start(layout: &Layout, timings: &mut Timings) -> Result<Cluster> {
    let bin = bin_dir().context("PostgreSQL is not installed (run `cargo xtask emulators start`)")?;
    let owner = is_root().then(|| "postgres".to_owned());
    let dir = cluster_dir(layout, owner.as_deref());
    let data = dir.join("data");
    let sockets = dir.join("run");
    let mut cluster = Cluster {
        bin,
        data,
        owner,
        started_here: false,
        keep: false,
    };
    fs::create_dir_all(&sockets)?;
    if let Some(user) = &cluster.owner {
        let status = Command::new("chown")
            .args(["-R", &format!("{user}:{user}")])
            .arg(&dir)
            .status()?;
        if !status.success() {
            bail!("chown -R {user} {} failed", dir.display());
        }
        if !reachable(&dir, user) {
            bail!(
                "the `{user}` user cannot enter {}, where the PostgreSQL cluster of the tests lives",
                dir.display()
            );
        }
    }
    if !cluster.data.join("PG_VERSION").exists() {
        let start = Instant::now();
        let out = Cluster::command(&cluster.bin, cluster.owner.as_deref(), "initdb")
            .arg("-D")
            .arg(&cluster.data)
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"])
            .output()?;
        if !out.status.success() {
            bail!("initdb failed: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        timings.since("start: postgresql initdb", start);
    }
    if cluster.running() {
        timings.note("start: postgresql", "reused the running cluster");
        return Ok(cluster);
    }
    if http::port_open(PORT) {
        bail!("127.0.0.1:{PORT} (for PostgreSQL) is in use by a process xtask did not start; stop it first");
    }
    let start = Instant::now();
    let options = format!(
        "-c listen_addresses=127.0.0.1 -c port={PORT} -c unix_socket_directories='{}' -c max_connections=300",
        sockets.display()
    );
    let log = dir.join("server.log");
    let out = cluster
        .pg_ctl()
        .args(["start", "-w", "-t", "60", "-o", &options, "-l"])
        .arg(&log)
        .output()?;
    if !out.status.success() {
        let tail = fs::read_to_string(&log).unwrap_or_default();
        let tail: Vec<&str> = tail.lines().rev().take(20).collect();
        bail!(
            "pg_ctl start failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr).trim(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    cluster.started_here = true;
    timings.since("start: postgresql", start);
    Ok(cluster)
}

/// `emulators stop`: stops the cluster if it runs.
pub fn stop_command(layout: &Layout) {
    let Some(bin) = bin_dir() else { return };
    let owner = is_root().then(|| "postgres".to_owned());
    let data = cluster_dir(layout, owner.as_deref()).join("data");
    if !data.join("PG_VERSION").exists() {
        return;
    }
    let mut cluster = Cluster {
        bin,
        data,
        owner,
        started_here: true,
        keep: false,
    };
    if cluster.running() {
        cluster.stop_started();
        eprintln!("xtask: stopped postgresql");
    } else {
        cluster.started_here = false;
    }
}
