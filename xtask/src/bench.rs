//! `cargo xtask bench [--report]`: every benchmark against the emulators, as JSON; with `--report`,
//! `docs/benchmarks.md` with tables and SVG charts.
//!
//! Benchmarks (each a bench binary that prints JSON, so numbers are compared as ratios within one
//! run, never asserted in tests): `trellis-backend/read_many`, `trellis-fs-tools/sandbox_exec`,
//! `trellis-agent/streaming`, `trellis-agent/telemetry`, `trellis-agent/process` (whole `trellis`
//! processes), `trellis-agent/load` (200 concurrent threads), `trellis-agent/serve` (`trellis serve`
//! beside `langgraph dev`, 1 to 1,000 concurrent streaming runs), `trellis-agent/workers` (3
//! `trellis serve --database` workers beside one), `trellis-middleware/loop_overhead`,
//! `trellis-middleware/skills_discovery`, `trellis-middleware/thread_resume`,
//! `trellis-middleware/user_layers`. Results go to
//! `target/bench/results.json`, with one more entry, `python_reference`: numbers for the Python
//! package quoted (not measured) from the project's baseline, with their source, version and date;
//! the report labels them the same way.

use std::fmt::Write as _;
use std::process::{ExitCode, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::emulators;
use crate::install;
use crate::layout::Layout;
use crate::procs::Attach;
use crate::test::cargo;
use crate::timings::Timings;

mod sections;
mod whole_process;
use sections::{
    persisted_catalog_section, sandbox_section, streaming_section, telemetry_section, thread_log_section,
    thread_resume_section, users_section,
};
use whole_process::{load_section, process_section, serve_section, workers_section};

const BENCHES: &[(&str, &str)] = &[
    ("trellis-backend", "read_many"),
    ("trellis-fs-tools", "sandbox_exec"),
    ("trellis-agent", "streaming"),
    ("trellis-agent", "telemetry"),
    ("trellis-agent", "process"),
    ("trellis-agent", "load"),
    ("trellis-agent", "serve"),
    ("trellis-agent", "workers"),
    ("trellis-middleware", "loop_overhead"),
    ("trellis-middleware", "skills_discovery"),
    ("trellis-middleware", "thread_resume"),
    ("trellis-middleware", "user_layers"),
];

/// Numbers for the Python package, quoted from a measurement made outside this repository: nothing
/// here reproduces them, so every place they appear (report, charts, `results.json`) says so.
struct Quoted {
    /// Where the numbers are written down, and what that is.
    source: &'static str,
    source_note: &'static str,
    package: &'static str,
    version: &'static str,
    /// The packages and interpreter it ran with.
    environment: &'static str,
    /// When it was measured (the measuring machine's clock).
    measured: &'static str,
    machine: &'static str,
    /// Skill discovery on local disk: (skills, median discovery s, peak RSS MB, skills section
    /// tokens as chars / 4).
    discovery: &'static [(u64, f64, f64, u64)],
    /// Median time between two model calls with a scripted model, filesystem backend:
    /// (skills, ms); 0 skills means the skills middleware is off.
    per_call_ms: &'static [(u64, f64)],
}

const REFERENCE: Quoted = Quoted {
    source: "baseline-deepagents-perf.md",
    source_note: "the project's performance baseline of the Python package; neither that file nor the \
                  harness that produced it is in this repository, so nothing here reproduces them",
    package: "deepagents",
    version: "0.7.32",
    environment: "langchain 1.5.2, langchain-core 1.8.3, langgraph 1.2.24, PyYAML 6.0.4, Python 3.11.7",
    measured: "2026-11-30",
    machine: "a 2-vCPU machine shared with other workloads",
    discovery: &[
        (100, 0.053, 81.0, 7_752),
        (1_000, 0.823, 90.0, 72_267),
        (5_000, 3.867, 131.0, 358_178),
        (20_000, 15.62, 280.0, 1_428_519),
    ],
    per_call_ms: &[(0, 11.0), (5_000, 24.1)],
};

impl Quoted {
    /// "deepagents 0.7.32, measured 2026-11-30".
    fn label(&self) -> String {
        format!("{} {}, measured {}", self.package, self.version, self.measured)
    }

    /// The quoted numbers and where they come from, for `results.json`.
    fn to_json(&self) -> Value {
        serde_json::json!({
            "quoted": true,
            "reproduced_by_this_repository": false,
            "source": self.source,
            "source_note": self.source_note,
            "package": self.package,
            "version": self.version,
            "environment": self.environment,
            "measured": self.measured,
            "machine": self.machine,
            "skills_discovery": self.discovery.iter().map(|(skills, s, rss, tokens)| serde_json::json!({
                "store": "local",
                "skills": skills,
                "discovery_s": s,
                "peak_rss_mb": rss,
                "section_tokens": tokens,
            })).collect::<Vec<_>>(),
            "per_call_gap_ms": self.per_call_ms.iter().map(|(skills, ms)| serde_json::json!({
                "backend": "filesystem",
                "skills": skills,
                "median_ms": ms,
            })).collect::<Vec<_>>(),
        })
    }

    /// The paragraph that says what the quoted numbers are.
    fn note(&self) -> String {
        format!(
            "Numbers marked *quoted* (table columns, chart lines, and the `python_reference` entry of \
             `results.json`) are not measured by this command. They are quoted from `{}`, {}. They were \
             measured on {} for the Python package {} {} ({}) on {}, with the same synthetic library shape.",
            self.source,
            self.source_note,
            self.measured,
            self.package,
            self.version,
            self.environment,
            self.machine
        )
    }
}

pub fn run(layout: &Layout, args: &[String]) -> Result<ExitCode> {
    let report = args.iter().any(|a| a == "--report");
    if let Some(unknown) = args.iter().find(|a| *a != "--report") {
        bail!("unknown argument `{unknown}` (expected `--report`)");
    }
    let mut timings = Timings::default();
    install::ensure_all(layout, &mut timings)?;
    let mut running = emulators::start_all(layout, Attach::Attached, &mut timings)?;
    let env = emulators::contract_env(layout);
    let mut results = Vec::new();
    for (package, bench) in BENCHES {
        eprintln!("xtask: cargo bench -p {package} --bench {bench}");
        let t = Instant::now();
        let out = cargo()
            .args(["bench", "-p", package, "--bench", bench])
            .envs(env.iter().map(|(k, v)| (k, v)))
            .current_dir(&layout.workspace)
            .stderr(Stdio::inherit())
            .output()
            .with_context(|| format!("running bench {bench}"))?;
        timings.since(format!("bench {bench}"), t);
        if !out.status.success() {
            running.stop_spawned();
            bail!("bench {bench} failed ({})", out.status);
        }
        let text = String::from_utf8_lossy(&out.stdout);
        for value in serde_json::Deserializer::from_str(&text).into_iter::<Value>() {
            match value {
                Ok(v) => {
                    println!("{v}");
                    results.push(serde_json::json!({ "bench": bench, "result": v }));
                }
                Err(_) => break,
            }
        }
    }
    running.stop_spawned();
    results.push(serde_json::json!({ "bench": "python_reference", "result": REFERENCE.to_json() }));
    let dir = layout.workspace.join("target/bench");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("results.json"), serde_json::to_string_pretty(&results)?)?;
    eprintln!("xtask: results in {}", dir.join("results.json").display());
    if report {
        write_report(layout, &results)?;
    }
    timings.print("cargo xtask bench timings");
    Ok(ExitCode::SUCCESS)
}

/// 5000 → "5,000".
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn num(v: &Value, key: &str) -> f64 {
    v.get(key).and_then(Value::as_f64).unwrap_or(f64::NAN)
}

fn write_report(layout: &Layout, results: &[Value]) -> Result<()> {
    let of = |bench: &'static str| {
        results
            .iter()
            .filter(move |r| r["bench"] == bench)
            .map(|r| &r["result"])
    };
    let mut md = String::new();
    md.push_str(
        "# Benchmarks\n\nGenerated by `cargo xtask bench --report` on this project's 2-core machine (noisy: \
compare ratios within one run, not absolute numbers across runs). Reproduce the Trellis numbers with that \
command; raw results land in `target/bench/results.json`.\n\n",
    );
    md.push_str(&REFERENCE.note());
    md.push_str("\n\n");

    md.push_str("## Skill discovery\n\n`new thread ms` is an unchanged rescan: what a new thread pays once another thread of the same middleware has loaded the library (it re-reads only changed `SKILL.md` files). The Python package loads from scratch on every new thread. Its quoted numbers are for local disk only.\n\n| store | skills | discovery ms | floor ms | ratio to floor | new thread ms | peak RSS MB | section tokens | deepagents s (quoted) | deepagents RSS MB (quoted) | deepagents tokens (quoted) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let mut local = Vec::new();
    let mut s3 = Vec::new();
    for r in of("skills_discovery").filter(|r| r.get("case").is_none()) {
        let n = r.get("skills").and_then(Value::as_u64).unwrap_or(0);
        let store = r.get("store").and_then(Value::as_str).unwrap_or("?");
        // The quoted measurement is for local disk only.
        let reference = REFERENCE
            .discovery
            .iter()
            .find(|(k, ..)| *k == n && store == "local");
        let _ = writeln!(
            md,
            "| {store} | {n} | {:.1} | {:.1} | {:.2} | {:.1} | {:.1} | {} | {} | {} | {} |",
            num(r, "discovery_ms"),
            num(r, "floor_ms"),
            num(r, "ratio"),
            num(r, "rescan_unchanged_ms"),
            num(r, "peak_rss_mb"),
            r.get("section_tokens").and_then(Value::as_u64).unwrap_or(0),
            reference.map_or("—".into(), |x| format!("{:.2}", x.1)),
            reference.map_or("—".into(), |x| format!("{:.0}", x.2)),
            reference.map_or("—".into(), |x| x.3.to_string()),
        );
        let point = (n as f64, num(r, "discovery_ms"));
        if store == "local" {
            local.push(point)
        } else {
            s3.push(point)
        }
    }
    let quoted = REFERENCE.label();
    let reference_ms: Vec<(f64, f64)> = REFERENCE
        .discovery
        .iter()
        .map(|(n, s, ..)| (*n as f64, s * 1000.0))
        .collect();
    let charts = layout.workspace.join("docs/benchmarks");
    std::fs::create_dir_all(&charts)?;
    std::fs::write(
        charts.join("discovery.svg"),
        svg_chart(
            "Skill discovery time (ms, log scale) vs library size",
            &[
                ("Trellis, local disk", "#2b7a0b", &local),
                ("Trellis, S3 emulator", "#1f5fbf", &s3),
                (&format!("{quoted}, local disk (quoted)"), "#b33", &reference_ms),
            ],
        ),
    )?;
    let tokens: Vec<(f64, f64)> = of("skills_discovery")
        .filter(|r| r.get("case").is_none())
        .filter(|r| r.get("store").and_then(Value::as_str) == Some("local"))
        .map(|r| (num(r, "skills"), num(r, "section_tokens")))
        .collect();
    let reference_tokens: Vec<(f64, f64)> = REFERENCE
        .discovery
        .iter()
        .map(|(n, .., t)| (*n as f64, *t as f64))
        .collect();
    std::fs::write(
        charts.join("tokens.svg"),
        svg_chart(
            "Skills section tokens (log scale) vs library size",
            &[
                ("Trellis (budgeted)", "#2b7a0b", &tokens),
                (
                    &format!("{quoted}, everything listed (quoted)"),
                    "#b33",
                    &reference_tokens,
                ),
            ],
        ),
    )?;
    md.push_str(
        "\n![discovery time](benchmarks/discovery.svg)\n\n![section tokens](benchmarks/tokens.svg)\n",
    );
    persisted_catalog_section(&mut md, of("skills_discovery"));
    md.push('\n');

    let per_call: Vec<String> = REFERENCE
        .per_call_ms
        .iter()
        .map(|(skills, ms)| match skills {
            0 => format!("{ms:.1} ms with no skills"),
            n => format!("{ms:.1} ms at {} skills", thousands(*n)),
        })
        .collect();
    let _ = write!(
        md,
        "## Per-call overhead\n\nA zero-cost scripted model, 50 tool-calling turns per run. For comparison, the \
quoted measurement of {} {} ({}) has a median gap between two model calls of {} (filesystem backend).",
        REFERENCE.package,
        REFERENCE.version,
        REFERENCE.measured,
        per_call.join(" and ")
    );
    md.push_str(" The `backend_checkpointer` rows save every step through `BackendCheckpointer` (the step log: each save writes the step's new messages and changed slots, the 5,000-skill catalog is stored once per thread by content) on in-memory storage, on local disk and on `memory://`; every run is a new thread, so each run also stores the catalog once. `ratio to in-memory` is their overhead per call over the in-memory checkpointer's at 5,000 skills in the same run (target: at most 100 µs per call and 5×).\n\n| scenario | per call µs | overhead per call µs | bytes written per run | ratio to in-memory |\n|---|---:|---:|---:|---:|\n");
    for r in of("loop_overhead") {
        for s in r.get("results").and_then(Value::as_array).into_iter().flatten() {
            let _ = writeln!(
                md,
                "| {} | {:.2} | {:.2} | {} | {} |",
                s.get("scenario").and_then(Value::as_str).unwrap_or("?"),
                num(s, "per_call_us"),
                num(s, "overhead_per_call_us"),
                s.get("bytes_written_per_run")
                    .and_then(Value::as_u64)
                    .map_or("—".to_owned(), |b| b.to_string()),
                s.get("ratio_to_in_memory")
                    .and_then(Value::as_f64)
                    .map_or("—".to_owned(), |x| format!("{x:.2}"))
            );
        }
    }
    thread_log_section(&mut md, of("loop_overhead"));
    md.push_str("\n## read_many vs one-by-one reads (1,000 small files)\n\n| store | added latency ms | sequential ms | read_many ms | ratio |\n|---|---:|---:|---:|---:|\n");
    for r in of("read_many") {
        let _ = writeln!(
            md,
            "| {} | {} | {:.1} | {:.1} | {:.3} |",
            r.get("store").and_then(Value::as_str).unwrap_or("?"),
            r.pointer("/setup/added_latency_ms")
                .and_then(Value::as_u64)
                .unwrap_or(0),
            num(r, "sequential_ms"),
            num(r, "read_many_ms"),
            num(r, "ratio")
        );
    }
    md.push_str("\nOn the bare S3 emulator both sides are bound by moto's own CPU (about 3 ms per request on one Python thread), so concurrency cannot help much there; the run with an added per-request latency shows what `read_many` is for.\n");
    thread_resume_section(&mut md, of("thread_resume"));
    sandbox_section(&mut md, of("sandbox_exec"));
    streaming_section(&mut md, of("streaming"));
    telemetry_section(&mut md, of("telemetry"));
    users_section(&mut md, of("user_layers"));
    process_section(&mut md, of("process"));
    load_section(&mut md, of("load"));
    serve_section(&mut md, of("serve"));
    workers_section(&mut md, of("workers"));
    std::fs::write(layout.workspace.join("docs/benchmarks.md"), md)?;
    eprintln!("xtask: wrote docs/benchmarks.md and docs/benchmarks/*.svg");
    Ok(())
}

/// One line of a chart: label, colour, points.
type Series<'a> = (&'a str, &'a str, &'a [(f64, f64)]);

/// A small log-log line chart.
fn svg_chart(title: &str, series: &[Series<'_>]) -> String {
    let (w, h, left, right, top, bottom) = (640.0, 360.0, 70.0, 20.0, 40.0, 90.0);
    let points: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.2.iter().copied())
        .filter(|(x, y)| *x > 0.0 && *y > 0.0)
        .collect();
    let lg = |v: f64| v.log10();
    let (x0, x1) = points
        .iter()
        .fold((f64::MAX, f64::MIN), |a, p| (a.0.min(lg(p.0)), a.1.max(lg(p.0))));
    let (y0, y1) = points
        .iter()
        .fold((f64::MAX, f64::MIN), |a, p| (a.0.min(lg(p.1)), a.1.max(lg(p.1))));
    let (x0, x1) = (x0.floor(), x1.ceil().max(x0.floor() + 1.0));
    let (y0, y1) = (y0.floor(), y1.ceil().max(y0.floor() + 1.0));
    let sx = |x: f64| left + (lg(x) - x0) / (x1 - x0) * (w - left - right);
    let sy = |y: f64| top + (1.0 - (lg(y) - y0) / (y1 - y0)) * (h - top - bottom);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{left}\" y=\"22\" font-size=\"14\">{title}</text>\n"
    );
    for e in (x0 as i32)..=(x1 as i32) {
        let x = sx(10f64.powi(e));
        let _ = writeln!(
            out,
            "<line x1=\"{x}\" y1=\"{top}\" x2=\"{x}\" y2=\"{}\" stroke=\"#ddd\"/><text x=\"{x}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            h - bottom,
            h - bottom + 16.0,
            10u64.pow(e.max(0) as u32)
        );
    }
    for e in (y0 as i32)..=(y1 as i32) {
        let y = sy(10f64.powi(e));
        let _ = writeln!(
            out,
            "<line x1=\"{left}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{}\" text-anchor=\"end\">1e{e}</text>",
            w - right,
            left - 6.0,
            y + 4.0
        );
    }
    for (i, (name, color, data)) in series.iter().enumerate() {
        let pts: Vec<String> = data
            .iter()
            .filter(|(x, y)| *x > 0.0 && *y > 0.0)
            .map(|(x, y)| format!("{:.1},{:.1}", sx(*x), sy(*y)))
            .collect();
        if !pts.is_empty() {
            let _ = writeln!(
                out,
                "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>",
                pts.join(" ")
            );
        }
        let ly = h - bottom + 36.0 + i as f64 * 16.0;
        let _ = writeln!(
            out,
            "<line x1=\"{left}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{color}\" stroke-width=\"2\"/><text x=\"{}\" y=\"{}\">{name}</text>",
            left + 24.0,
            left + 30.0,
            ly + 4.0
        );
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_numbers_say_what_they_are() {
        let json = REFERENCE.to_json();
        assert_eq!(json["quoted"], true);
        assert_eq!(json["reproduced_by_this_repository"], false);
        for key in [
            "source",
            "package",
            "version",
            "measured",
            "environment",
            "machine",
        ] {
            assert!(json[key].as_str().is_some_and(|s| !s.is_empty()), "{key}");
        }
        assert_eq!(json["skills_discovery"].as_array().map(Vec::len), Some(4));
        let note = REFERENCE.note();
        for part in [
            "quoted",
            "deepagents 0.7.32",
            "2026-11-30",
            "baseline-deepagents-perf.md",
        ] {
            assert!(note.contains(part), "{part}: {note}");
        }
        assert_eq!(thousands(5_000), "5,000");
        assert_eq!(thousands(20_000), "20,000");
        assert_eq!(thousands(100), "100");
        assert_eq!(thousands(1_428_519), "1,428,519");
    }

    #[test]
    fn thread_log_rows_are_reported() {
        let run = serde_json::json!({
            "thread_bytes": {"checkpoints": 206, "bytes_written": 1000, "thread_bytes": 900,
                "state_json_bytes": 500, "ratio_written_to_thread": 1.11, "ratio_written_to_state_json": 2.0,
                "resume_ms": 0.75, "resume_objects_read": 12},
            "history_listing": {"checkpoints": 1000, "history_ms": 12.5, "load_ms": 30.0},
        });
        let mut md = String::new();
        thread_log_section(&mut md, std::iter::once(&run));
        assert!(
            md.contains("| 200 steps | 206 | 1,000 | 900 | 500 | 1.11 | 2.00 |"),
            "{md}"
        );
        assert!(md.contains("| history | 1000 | 12.50 | 30.00 | |"), "{md}");
        assert!(md.contains("| resume 200 steps | 206 | | 0.75 | 12 |"), "{md}");
    }

    #[test]
    fn persisted_catalog_rows_are_reported() {
        let rows = [
            serde_json::json!({"bench": "skills_discovery", "case": "persisted_catalog", "store": "s3-emulator",
                "skills": 5000, "cold_and_save_ms": 9000.0, "cache_bytes": 4_200_000, "unchanged_ms": 310.5,
                "changed_files": 50, "one_percent_changed_ms": 420.4, "read_changed_ms": 95.0}),
            serde_json::json!({"bench": "skills_discovery", "store": "local", "skills": 100}),
        ];
        let mut md = String::new();
        persisted_catalog_section(&mut md, rows.iter());
        assert!(md.contains("## Persisted skills catalog"), "{md}");
        assert!(
            md.contains("| s3-emulator | 5,000 | 9000.0 | 4,200,000 | 310.5 | 50 | 420.4 | 95.0 |"),
            "{md}"
        );
        assert_eq!(md.matches("\n| local").count(), 0, "only persisted rows: {md}");
    }

    #[test]
    fn thread_resume_rows_and_skips_are_reported() {
        let rows = [
            serde_json::json!({"bench": "thread_resume", "store": "local", "case": "resume", "files": 100,
                "file_bytes": 10240, "messages": 36, "checkpoint_bytes": 31650, "median_ms": 0.21,
                "p90_ms": 0.3, "bytes_read": 31650, "files_read": 1, "requests": 1,
                "ratio_to_resume": 1.0, "runs": 50}),
            serde_json::json!({"bench": "thread_resume", "store": "s3-emulator",
                "skipped": "TRELLIS_S3_ENDPOINT is not set"}),
        ];
        let mut md = String::new();
        thread_resume_section(&mut md, rows.iter());
        assert!(md.contains("## Thread resume"), "{md}");
        assert!(md.contains("36 messages (31,650 bytes"), "{md}");
        assert!(md.contains("100 files of 10,240 bytes"), "{md}");
        assert!(md.contains("over 50 iterations on local disk."), "{md}");
        assert!(
            md.contains("| local | resume | 0.21 | 0.30 | 31,650 | 1 | 1 | 1.00 |"),
            "{md}"
        );
        assert!(
            md.contains("| s3-emulator | skipped: TRELLIS_S3_ENDPOINT is not set |"),
            "{md}"
        );
    }
}
