//! Whole `trellis` processes (the release binary cargo builds for this bench), timed from outside
//! as a user runs them. Prints one JSON object per case.
//!
//! * `run_steps`: `trellis run` against a scripted OpenAI-compatible model on a loopback port
//!   (`bench_util/scripted.rs`), checkpoints in the default state dir on local disk, sandbox off,
//!   at 10 and 5,000 skills, with 40 tool-calling steps (`ls /` and `read_file` of a skill,
//!   alternating) then a final answer, and with none (the answer at once). Medians of interleaved
//!   runs. `added_per_step_ms` = (t5000 − t10) / 40 of the 40-step runs (target ≤ 1 ms);
//!   `startup_added_ms` is the same difference of the 0-step runs (the catalog load and the first
//!   checkpoint, paid once per process), and `per_step_added_ms` the 40-step difference minus that,
//!   over 40: what a step costs more at 5,000 skills once started.
//! * `skills_list` at 5,000 generated skills and `registry` at 61,000 folders of the registry shape
//!   (`middleware/benches/bench_util/library.rs`): `trellis skills list` text and `--json`, with a
//!   warm catalog cache (the default) and with `--no-cache`, against the floor: one
//!   `find | xargs head -c 4096` over every `SKILL.md` in the same run (target: ≤ 1.5× the floor).
//!   Peak RSS of each is `/usr/bin/time -f %M` of a separate run (target at 61,000: ≤ 64 MB).
//! * `execute_workdir`: what a `--workdir` costs `execute` (issue 33's target: a 10,000-file,
//!   40 MB workdir adds at most 25 ms to an `execute` of `true` over an empty one). `trellis run
//!   --sandbox bwrap --ask none` with 0 and 5 `execute` calls, once with an empty workdir and
//!   once with the large one, interleaved; `added_per_execute_ms` = ((large 5 − large 0) −
//!   (empty 5 − empty 0)) / 5, so process start-up and the model's round trips cancel out. Skipped
//!   (with the reason) where bubblewrap does not run. As root, both workdirs are handed to
//!   `nobody`, the commands' user, as a user owns their own workdir: that is the case the sandbox
//!   mounts through an overlay instead of copying. `TRELLIS_BENCH_WORKDIR=copy` leaves them
//!   root's, which the sandbox copies (the cost before overlays).
//! * `write_back`: what writing back one large file costs in memory. Peak RSS of `trellis run
//!   --sandbox bwrap` whose one `execute` writes 256 MiB of zeros into the thread's own files (on
//!   local disk), against one that writes 1 MiB, in the same run; `ratio` is large / small (about
//!   1 when the write-back streams the file; it was about 9 when it read each file whole).
//! * `latency_proxy` (when `TRELLIS_S3_ENDPOINT` is set): `trellis skills list --json` of 5,000
//!   skills on the S3 emulator with a warm persisted catalog, straight and through a loopback
//!   proxy adding 50 ms to every request (`TRELLIS_BENCH_LATENCY_MS`).
//!
//! Under `cargo test --all-targets` (no `--bench`) it does a quick smoke run: 3 skills, 2 steps,
//! no registry or S3 case. `TRELLIS_BENCH_REGISTRY=N` sets the registry's folder count;
//! `TRELLIS_BENCH_CASES=registry,latency_proxy` runs only the cases named; `TRELLIS_BENCH_ROOT=DIR`
//! generates the libraries under `DIR` and keeps them (reused by the next run, and there to profile
//! by hand), instead of in a temporary directory.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "bench_util/scripted.rs"]
mod scripted;

#[path = "../../middleware/benches/bench_util/library.rs"]
mod library;

#[path = "../../middleware/benches/bench_util/mod.rs"]
mod bench_util;

#[path = "../../backend/benches/bench_util/latency_proxy.rs"]
mod latency_proxy;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use trellis_agent::backend::{Backend, ObjectStoreBackend, StoreOptions};

use bench_util::{median, ms};

const TRELLIS: &str = env!("CARGO_BIN_EXE_trellis");

fn smoke() -> bool {
    !std::env::args().any(|a| a == "--bench")
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Run `command` to completion with stdout and stderr discarded unless it fails; its wall time.
fn timed(command: &mut Command) -> Duration {
    let started = Instant::now();
    let out = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

/// Peak RSS of one run of `command` in MB (`/usr/bin/time -f %M`), or `None` without that tool.
fn peak_rss_mb(command: &Command) -> Option<f64> {
    let time = Path::new("/usr/bin/time");
    if !time.exists() {
        return None;
    }
    let report = tempfile::NamedTempFile::new().unwrap();
    let mut wrapped = Command::new(time);
    wrapped
        .args(["-f", "%M", "-o"])
        .arg(report.path())
        .arg(command.get_program())
        .args(command.get_args());
    for (k, v) in command.get_envs() {
        match v {
            Some(v) => wrapped.env(k, v),
            None => wrapped.env_remove(k),
        };
    }
    if let Some(dir) = command.get_current_dir() {
        wrapped.current_dir(dir);
    }
    timed(&mut wrapped);
    let kb: f64 = std::fs::read_to_string(report.path()).ok()?.trim().parse().ok()?;
    Some((kb / 1024.0 * 10.0).round() / 10.0)
}

/// The floor: one `head -c 4096` over every `SKILL.md` under `dir` (found by `find`, batched by
/// `xargs`), output discarded.
fn floor(dir: &Path) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg("find \"$1\" -name SKILL.md -print0 | xargs -0 head -c 4096 > /dev/null")
        .arg("floor")
        .arg(dir);
    c
}

fn trellis(cwd: &Path) -> Command {
    let mut c = Command::new(TRELLIS);
    c.current_dir(cwd)
        .env("TRELLIS_CACHE_DIR", cwd.join("cache"))
        .env_remove("RUST_LOG");
    c
}

/// `trellis run` with `steps` tool calls at `skills`, in `cwd` (its default state dir).
fn run_command(cwd: &Path, skills: &Path, model_url: &str, steps: usize) -> Command {
    let mut c = trellis(cwd);
    c.args(["run", "--model", "openai:bench", "--sandbox", "none", "--skills"])
        .arg(skills)
        .arg(format!("Look around. steps={steps}"))
        .env("OPENAI_API_KEY", "bench-key")
        .env("OPENAI_BASE_URL", model_url);
    c
}

fn run_steps(model_url: &str, root: &Path) {
    let (sizes, steps, runs) = if smoke() {
        ([3, 3], 2, 1)
    } else {
        ([10, 5_000], 40, 5)
    };
    let mut dirs = Vec::new();
    for n in sizes {
        let dir = root.join(format!("lib-{n}"));
        if !dir.exists() {
            library::generate_local(&dir, n);
        }
        dirs.push(dir.join("skills"));
    }
    let cwd = tempfile::tempdir().unwrap();
    // A correct run first: the answer comes after the steps, and the thread holds them.
    let out = run_command(cwd.path(), &dirs[1], model_url, steps)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let answer = String::from_utf8_lossy(&out.stdout);
    assert!(answer.contains(&format!("after {steps} steps")), "{answer}");
    let mut times = vec![vec![Vec::new(); 2]; 2];
    for _ in 0..runs {
        for (d, dir) in dirs.iter().enumerate() {
            for (s, n) in [0, steps].into_iter().enumerate() {
                times[d][s].push(timed(&mut run_command(cwd.path(), dir, model_url, n)));
            }
        }
    }
    let t = |d: usize, s: usize| ms(median(times[d][s].clone()));
    let startup_added = t(1, 0) - t(0, 0);
    let added_total = t(1, 1) - t(0, 1);
    let rss = peak_rss_mb(&run_command(cwd.path(), &dirs[1], model_url, steps));
    println!(
        "{}",
        json!({
            "bench": "process", "case": "run_steps", "steps": steps, "runs": runs,
            "skills": sizes,
            "t_small_0_ms": t(0, 0), "t_small_steps_ms": t(0, 1),
            "t_large_0_ms": t(1, 0), "t_large_steps_ms": t(1, 1),
            "per_step_small_ms": round2((t(0, 1) - t(0, 0)) / steps as f64),
            "per_step_large_ms": round2((t(1, 1) - t(1, 0)) / steps as f64),
            "added_per_step_ms": round2(added_total / steps as f64),
            "startup_added_ms": round2(startup_added),
            "per_step_added_ms": round2((added_total - startup_added) / steps as f64),
            "peak_rss_mb_large": rss,
            "target_added_per_step_ms": 1.0,
        })
    );
}

/// A workdir of `files` files of 4 KiB each in 100 folders, made once under `root`.
fn workdir(root: &Path, files: usize) -> PathBuf {
    let dir = root.join(format!("workdir-{files}"));
    if dir.exists() {
        return dir;
    }
    let partial = root.join(format!("workdir-{files}.partial"));
    let _ = std::fs::remove_dir_all(&partial);
    let page = vec![b'x'; 4096];
    for i in 0..files {
        let folder = partial.join(format!("d{:03}", i % 100));
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join(format!("f{i:05}.txt")), &page).unwrap();
    }
    std::fs::rename(&partial, &dir).unwrap();
    dir
}

/// When this runs as root, give `dir` and everything in it to the sandbox's own user
/// (`SANDBOX_UID`), whom the bubblewrap sandbox runs commands as then, or back to root when not
/// `to_commands_user`.
fn hand_to_commands_user(dir: &Path, to_commands_user: bool) {
    use std::os::unix::fs::MetadataExt;
    if std::fs::metadata("/proc/self").unwrap().uid() != 0 {
        return;
    }
    let owner = if to_commands_user {
        trellis_agent::tools::sandbox::SANDBOX_UID
    } else {
        0
    };
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        std::os::unix::fs::lchown(&path, Some(owner), Some(owner)).unwrap();
        if path.is_dir() && !path.is_symlink() {
            stack.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        }
    }
}

/// `trellis run --sandbox bwrap` with `--workdir workdir` and `calls` calls of `execute true`
/// (`extra` is added to the task: ` write_mib=N` writes N MiB instead).
fn execute_command(cwd: &Path, workdir: &Path, model_url: &str, calls: usize, extra: &str) -> Command {
    let mut c = trellis(cwd);
    c.args([
        "run",
        "--model",
        "openai:bench",
        "--sandbox",
        "bwrap",
        "--ask",
        "none",
    ])
    .arg("--workdir")
    .arg(workdir)
    .arg(format!("Run it. steps={calls} tool=execute{extra}"))
    .env("OPENAI_API_KEY", "bench-key")
    .env("OPENAI_BASE_URL", model_url);
    c
}

fn execute_workdir(model_url: &str, root: &Path) {
    let (files, calls, runs) = if smoke() { (20, 1, 1) } else { (10_000, 5, 5) };
    let cwd = tempfile::tempdir().unwrap();
    let empty = root.join("workdir-empty");
    std::fs::create_dir_all(&empty).unwrap();
    let large = workdir(root, files);
    // As root, commands run as nobody: a workdir is theirs, as a user's own `--workdir` is the
    // user's, so it is mounted through an overlay rather than copied (docs/sandbox.md).
    // TRELLIS_BENCH_WORKDIR=copy leaves them root's, which the sandbox copies: the cost before.
    let copied = std::env::var("TRELLIS_BENCH_WORKDIR").as_deref() == Ok("copy");
    for dir in [&empty, &large] {
        hand_to_commands_user(dir, !copied);
    }
    // A correct run first, which also tells whether bubblewrap runs here.
    let out = execute_command(cwd.path(), &large, model_url, calls, "")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        // `cargo xtask test` sets TRELLIS_SANDBOX=required: there a failure is a failure, not a
        // host without bubblewrap.
        assert!(
            std::env::var("TRELLIS_SANDBOX").as_deref() != Ok("required"),
            "execute_workdir failed under TRELLIS_SANDBOX=required:\n{stderr}"
        );
        println!(
            "{}",
            json!({"bench": "process", "case": "execute_workdir", "skipped": stderr.trim()})
        );
        return;
    }
    let answer = String::from_utf8_lossy(&out.stdout);
    assert!(
        answer.contains(&format!("after {calls} steps")),
        "{answer}\n{stderr}"
    );
    let dirs = [&empty, &large];
    let mut times = vec![vec![Vec::new(); 2]; 2];
    for _ in 0..runs {
        for (d, dir) in dirs.iter().enumerate() {
            for (s, n) in [0, calls].into_iter().enumerate() {
                times[d][s].push(timed(&mut execute_command(cwd.path(), dir, model_url, n, "")));
            }
        }
    }
    let t = |d: usize, s: usize| ms(median(times[d][s].clone()));
    let per_execute = |d: usize| (t(d, 1) - t(d, 0)) / calls as f64;
    println!(
        "{}",
        json!({
            "bench": "process", "case": "execute_workdir", "files": files,
            "workdir": if copied { "copied (root's)" } else { "the commands' user's (overlay)" },
            "bytes": files * 4096, "calls": calls, "runs": runs,
            "t_empty_0_ms": t(0, 0), "t_empty_calls_ms": t(0, 1),
            "t_large_0_ms": t(1, 0), "t_large_calls_ms": t(1, 1),
            "per_execute_empty_ms": round2(per_execute(0)),
            "per_execute_large_ms": round2(per_execute(1)),
            "added_per_execute_ms": round2(per_execute(1) - per_execute(0)),
            "target_added_per_execute_ms": 25.0,
        })
    );
}

/// Peak RSS of `trellis run` whose one `execute` writes `mib` MiB into the thread's own files
/// (after a first run checked that the file is written back), or why it could not be measured:
/// bubblewrap does not run here (a failure under `TRELLIS_SANDBOX=required`), or there is no
/// `/usr/bin/time`.
fn write_back_rss(model_url: &str, mib: u64) -> Result<f64, String> {
    let cwd = tempfile::tempdir().unwrap();
    let workdir = cwd.path().join("workdir");
    std::fs::create_dir_all(&workdir).unwrap();
    let extra = format!(" write_mib={mib}");
    let out = execute_command(cwd.path(), &workdir, model_url, 1, &extra)
        .output()
        .unwrap();
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            std::env::var("TRELLIS_SANDBOX").as_deref() != Ok("required"),
            "write_back failed under TRELLIS_SANDBOX=required:\n{stderr}"
        );
        return Err(stderr.trim().to_owned());
    }
    let threads = cwd.path().join(".trellis/threads");
    let written: Vec<u64> = std::fs::read_dir(&threads)
        .unwrap()
        .filter_map(|t| std::fs::metadata(t.unwrap().path().join("files/big.bin")).ok())
        .map(|m| m.len())
        .collect();
    assert_eq!(written, [mib << 20], "big.bin written back once, whole");
    peak_rss_mb(&execute_command(cwd.path(), &workdir, model_url, 1, &extra))
        .ok_or_else(|| "no /usr/bin/time".to_owned())
}

fn write_back(model_url: &str) {
    let (small, large) = if smoke() { (1, 8) } else { (1, 256) };
    let measured = write_back_rss(model_url, small).and_then(|s| Ok((s, write_back_rss(model_url, large)?)));
    let row = match measured {
        Ok((small_rss, large_rss)) => json!({
            "bench": "process", "case": "write_back", "small_mib": small, "large_mib": large,
            "peak_rss_mb_small": small_rss, "peak_rss_mb_large": large_rss,
            "ratio": round2(large_rss / small_rss),
        }),
        Err(why) => json!({"bench": "process", "case": "write_back", "skipped": why}),
    };
    println!("{row}");
}

/// `skills list` (text and `--json`, warm cache and `--no-cache`) of `dir` against the floor.
fn skills_list(case: &str, dir: &Path, skills: usize, runs: usize) {
    let cwd = tempfile::tempdir().unwrap();
    let list = |json: bool, cache: bool| {
        let mut c = trellis(cwd.path());
        c.args(["skills", "list"]);
        if json {
            c.arg("--json");
        }
        if !cache {
            c.arg("--no-cache");
        }
        c.arg(dir);
        c
    };
    // Warm the page cache and the catalog cache; check the output once.
    let out = list(true, true).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let listed = value["skills"].as_array().map_or(0, Vec::len);
    let warnings = value["warnings"].as_array().map_or(0, Vec::len);
    timed(&mut floor(dir));
    let variants = [(false, true), (true, true), (false, false), (true, false)];
    let mut floor_times = Vec::new();
    let mut times = vec![Vec::new(); variants.len()];
    for _ in 0..runs {
        floor_times.push(timed(&mut floor(dir)));
        for (v, (json, cache)) in variants.iter().enumerate() {
            times[v].push(timed(&mut list(*json, *cache)));
        }
    }
    let floor_ms = ms(median(floor_times));
    let rows: Vec<_> = variants
        .iter()
        .enumerate()
        .map(|(v, (json, cache))| {
            let t = ms(median(times[v].clone()));
            json!({
                "output": if *json { "json" } else { "text" },
                "cache": if *cache { "warm" } else { "none" },
                "median_ms": t,
                "ratio_to_floor": round2(t / floor_ms),
                "peak_rss_mb": peak_rss_mb(&list(*json, *cache)),
            })
        })
        .collect();
    println!(
        "{}",
        json!({
            "bench": "process", "case": case, "folders": skills, "skills_listed": listed,
            "warnings": warnings, "runs": runs, "floor_ms": floor_ms, "results": rows,
            "target_ratio": 1.5,
        })
    );
}

async fn latency_proxy_case(endpoint: &str) {
    let n = 5_000;
    let bucket = std::env::var("TRELLIS_TEST_BUCKET").unwrap_or_else(|_| "trellis-test".into());
    let prefix = format!("bench-process-{}", std::process::id());
    let options = StoreOptions::s3_compatible(endpoint, "test", "test");
    let backend: Arc<dyn Backend> =
        Arc::new(ObjectStoreBackend::from_url(&format!("s3://{bucket}/{prefix}"), &options).unwrap());
    library::upload(&backend, n).await;
    let delay: u64 = std::env::var("TRELLIS_BENCH_LATENCY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let host = endpoint.trim_start_matches("http://").to_owned();
    let proxied = latency_proxy::latency_proxy(host, Duration::from_millis(delay)).await;
    let cwd = tempfile::tempdir().unwrap();
    let dir = cwd.path().to_owned();
    let url = format!("s3://{bucket}/{prefix}/skills");
    let list = move |at: String| {
        let mut c = trellis(&dir);
        c.args(["skills", "list", "--json", &url]);
        for (k, v) in [
            ("AWS_ENDPOINT", at.as_str()),
            ("AWS_ALLOW_HTTP", "true"),
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_REGION", "us-east-1"),
        ] {
            c.env(k, v);
        }
        c
    };
    let measure = |at: String| {
        let list = list.clone();
        tokio::task::spawn_blocking(move || {
            let cold = timed(&mut list(at.clone()));
            let warm: Vec<Duration> = (0..3).map(|_| timed(&mut list(at.clone()))).collect();
            (ms(cold), ms(median(warm)))
        })
    };
    let (cold, direct) = measure(endpoint.to_owned()).await.unwrap();
    let (_, through_proxy) = measure(proxied).await.unwrap();
    println!(
        "{}",
        json!({
            "bench": "process", "case": "latency_proxy", "skills": n, "added_latency_ms": delay,
            "cold_ms": cold, "warm_ms": direct, "warm_through_proxy_ms": through_proxy,
        })
    );
}

/// Whether `TRELLIS_BENCH_CASES` (a comma-separated list; all when unset) names `case`.
fn wanted(case: &str) -> bool {
    std::env::var("TRELLIS_BENCH_CASES").map_or(true, |cases| cases.split(',').any(|c| c.trim() == case))
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (_server, model_url, _scripted) = rt.block_on(scripted::start());
    let temp = tempfile::tempdir().unwrap();
    let root =
        std::env::var_os("TRELLIS_BENCH_ROOT").map_or_else(|| temp.path().to_path_buf(), PathBuf::from);
    if wanted("run_steps") || smoke() {
        run_steps(&model_url, &root);
    }
    if wanted("execute_workdir") || smoke() {
        execute_workdir(&model_url, &root);
    }
    if wanted("write_back") || smoke() {
        write_back(&model_url);
    }
    if smoke() {
        skills_list("skills_list", &root.join("lib-3/skills"), 3, 1);
        return;
    }
    if wanted("skills_list") {
        let lib = root.join("lib-5000");
        if !lib.exists() {
            library::generate_local(&lib, 5_000);
        }
        skills_list("skills_list", &lib.join("skills"), 5_000, 5);
    }
    let folders: usize = std::env::var("TRELLIS_BENCH_REGISTRY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(61_000);
    if wanted("registry") {
        let registry = root.join(format!("registry-{folders}"));
        if !registry.exists() {
            let started = Instant::now();
            library::generate_registry(&registry, folders);
            eprintln!(
                "generated the registry shape ({folders} folders) in {:.1} s",
                started.elapsed().as_secs_f64()
            );
        }
        skills_list("registry", &registry.join("skills"), folders, 3);
    }
    if !wanted("latency_proxy") {
        return;
    }
    match std::env::var("TRELLIS_S3_ENDPOINT") {
        Ok(endpoint) => rt.block_on(latency_proxy_case(&endpoint)),
        Err(_) => println!(
            "{}",
            json!({"bench": "process", "case": "latency_proxy", "skipped": "TRELLIS_S3_ENDPOINT is not set"})
        ),
    }
}
