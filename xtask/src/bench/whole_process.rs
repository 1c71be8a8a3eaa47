//! The sections of `docs/benchmarks.md` for `trellis-agent`'s `process` bench (whole `trellis`
//! processes: `run` steps, `skills list` against the `head -c 4096` floor at 5,000 skills and at the
//! 61,000-folder registry shape, the latency proxy), its `load` bench (200 concurrent threads) and
//! its `serve` bench (`trellis serve` beside `langgraph dev` under concurrent streaming runs) and
//! its `workers` bench (3 `trellis serve --database` workers beside one).

use std::fmt::Write as _;

use serde_json::Value;

use super::{num, thousands};

fn int(r: &Value, key: &str) -> u64 {
    r.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn case<'a>(rows: &[&'a Value], name: &str) -> Option<&'a Value> {
    rows.iter()
        .copied()
        .find(|r| r.get("case").and_then(Value::as_str) == Some(name))
}

/// `## Whole processes`: every case of the `process` bench.
pub(super) fn process_section<'a>(md: &mut String, rows: impl Iterator<Item = &'a Value>) {
    let rows: Vec<&Value> = rows.collect();
    md.push_str(
        "\n## Whole processes\n\nThe release `trellis` binary timed from outside, as a user runs it \
(`crates/agent/benches/process.rs`). `trellis run`: a scripted OpenAI-compatible model on a loopback port, \
checkpoints in the default state dir on local disk, sandbox off, 40 tool-calling steps (`ls` and `read_file`) \
then the answer, or the answer at once (0 steps); medians of interleaved runs. Target: the library adds at most \
1 ms per step at 5,000 skills against 10, `(t5000 − t10) / 40`; `startup` is the same difference of the \
0-step runs (the catalog load and the first checkpoint, paid once per process) and `per step once started` \
the rest.\n\n",
    );
    if let Some(r) = case(&rows, "run_steps") {
        let _ = write!(
            md,
            "| measure | value | target |\n|---|---:|---|\n\
| 10 skills: 0 / {steps} steps (ms) | {:.1} / {:.1} | |\n\
| 5,000 skills: 0 / {steps} steps (ms) | {:.1} / {:.1} | |\n\
| per step at 10 / 5,000 skills (ms) | {:.2} / {:.2} | |\n\
| added per step, (t5000 − t10) / {steps} (ms) | {:.2} | ≤ 1 |\n\
| of which startup, once per process (ms) | {:.1} | |\n\
| per step once started (ms) | {:.2} | |\n\
| peak RSS, 5,000 skills (MB) | {:.1} | |\n",
            num(r, "t_small_0_ms"),
            num(r, "t_small_steps_ms"),
            num(r, "t_large_0_ms"),
            num(r, "t_large_steps_ms"),
            num(r, "per_step_small_ms"),
            num(r, "per_step_large_ms"),
            num(r, "added_per_step_ms"),
            num(r, "startup_added_ms"),
            num(r, "per_step_added_ms"),
            num(r, "peak_rss_mb_large"),
            steps = int(r, "steps"),
        );
    }
    md.push_str(
        "\n`trellis skills list` against one `find | xargs head -c 4096` over every `SKILL.md` (the floor), in the same \
run: 5,000 generated skills, and the registry shape (61,000 folders, a quarter of them copies of another folder's \
skill, descriptions of 300–1,000 characters, half with nested `metadata`; about one warning per skill). `warm` is the \
default (a persisted catalog in the cache directory), `none` is `--no-cache`. Peak RSS is `/usr/bin/time -f %M` of a \
separate run. Targets: at most 1.5× the floor; at 61,000 folders, peak RSS at most 64 MB.\n\n\
| library | folders | skills listed | warnings | floor ms | output | cache | median ms | ratio to floor | peak RSS MB |\n\
|---|---:|---:|---:|---:|---|---|---:|---:|---:|\n",
    );
    for name in ["skills_list", "registry"] {
        let Some(r) = case(&rows, name) else { continue };
        for v in r.get("results").and_then(Value::as_array).into_iter().flatten() {
            let _ = writeln!(
                md,
                "| {name} | {} | {} | {} | {:.1} | {} | {} | {:.1} | {:.2} | {:.1} |",
                thousands(int(r, "folders")),
                thousands(int(r, "skills_listed")),
                thousands(int(r, "warnings")),
                num(r, "floor_ms"),
                v.get("output").and_then(Value::as_str).unwrap_or("?"),
                v.get("cache").and_then(Value::as_str).unwrap_or("?"),
                num(v, "median_ms"),
                num(v, "ratio_to_floor"),
                num(v, "peak_rss_mb"),
            );
        }
    }
    if let Some(r) = case(&rows, "write_back") {
        match r.get("skipped").and_then(Value::as_str) {
            Some(why) => {
                let _ = writeln!(md, "\nWrite-back memory: skipped ({why}).");
            }
            None => {
                let _ = writeln!(
                    md,
                    "\nWrite-back memory: peak RSS of `trellis run --sandbox bwrap` whose one `execute` writes {} MiB into \
the thread's files on local disk, {:.1} MB, against {:.1} MB for {} MiB: a ratio of {:.2} (the write-back streams \
each file; read whole, 256 MiB took it to about 9 times the 1 MiB run).",
                    int(r, "large_mib"),
                    num(r, "peak_rss_mb_large"),
                    num(r, "peak_rss_mb_small"),
                    int(r, "small_mib"),
                    num(r, "ratio"),
                );
            }
        }
    }
    if let Some(r) = case(&rows, "latency_proxy") {
        match r.get("skipped").and_then(Value::as_str) {
            Some(why) => {
                let _ = writeln!(md, "\nLatency proxy: skipped ({why}).");
            }
            None => {
                let _ = writeln!(
                    md,
                    "\n`trellis skills list --json` of {} skills on the S3 emulator: cold (no catalog cache) {:.0} ms; with a \
warm persisted catalog {:.0} ms straight, {:.0} ms through a loopback proxy adding {} ms to every request.",
                    thousands(int(r, "skills")),
                    num(r, "cold_ms"),
                    num(r, "warm_ms"),
                    num(r, "warm_through_proxy_ms"),
                    int(r, "added_latency_ms"),
                );
            }
        }
    }
}

/// `## Load`: the `load` bench.
pub(super) fn load_section<'a>(md: &mut String, rows: impl Iterator<Item = &'a Value>) {
    md.push_str(
        "\n## Load\n\nOne agent serving concurrent threads (`crates/agent/benches/load.rs`): the default stack over a \
local skill library, checkpoints and thread files on the S3 emulator, a scripted model on a loopback port. Each \
thread writes its own notes, lists and reads skills, reads its notes back and answers; afterwards every thread's \
stored messages are checked (all there, none naming another thread), and the model server refuses any request that \
names another thread. Step latency is from a thread's model reply to its next request. Peak RSS is the bench \
process's (it includes the loopback server); target ≤ 200 MB.\n\n",
    );
    for r in rows {
        if let Some(why) = r.get("skipped").and_then(Value::as_str) {
            let _ = writeln!(md, "Skipped: {why}.");
            continue;
        }
        let _ = writeln!(
            md,
            "| threads | steps each | skills | model calls | wall s | steps/s | p50 step ms | p99 step ms | peak RSS MB | threads checked |\n\
|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n\
| {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
            int(r, "threads"),
            int(r, "steps_per_thread"),
            thousands(int(r, "skills")),
            thousands(int(r, "model_calls")),
            num(r, "elapsed_ms") / 1000.0,
            num(r, "steps_per_s"),
            num(r, "step_p50_ms"),
            num(r, "step_p99_ms"),
            num(r, "peak_rss_mb"),
            int(r, "threads_checked"),
        );
    }
}

/// `## Served`: the `serve` bench, one row per server and wave.
/// The serve bench's Trellis sides (keys of its result) and their rows' labels.
const TRELLIS_SIDES: [(&str, &str); 3] = [
    ("trellis", "trellis serve"),
    ("trellis_paced", "trellis serve (paced)"),
    ("trellis_tmpfs", "trellis serve (tmpfs)"),
];

pub(super) fn serve_section<'a>(md: &mut String, rows: impl Iterator<Item = &'a Value>) {
    md.push_str(
        "\n## Served\n\n`trellis serve` and the reference Agent Server (`langgraph dev` serving a Deep Agents \
graph) side by side in one run (`crates/agent/benches/serve.rs`): each client creates a thread and streams one \
run on it (`values` + `messages-tuple`), all clients of a wave at once, against one scripted OpenAI-compatible \
model on a loopback port. Step latency is from the model's reply to the same run's next request (the server's \
tools, checkpoint and streaming for one step under that load); CPU per step is the server's own CPU time over \
the wave divided by its steps, which waiting for a core does not inflate; CPU per added step leaves out each \
run's own work (thread, run, stream, answer), measured by a wave of runs that call no tool. Trellis keeps \
checkpoints on local disk, the reference in memory; `trellis serve (tmpfs)` is Trellis again with its state dir \
on `/dev/shm`; `trellis serve (paced)` is the largest wave's runs in flight at once on a model answering in 2 to \
3 s, the server busy but not saturated. Targets at 1,000 runs: ≤ 1 ms p50 and ≤ 5 ms p99 per step, ≥ 10× the \
reference's runs per second, ≤ 300 MB peak RSS.\n\n",
    );
    for r in rows {
        let _ = writeln!(
            md,
            "| server | runs at once | runs/s | p50 step ms | p99 step ms | CPU ms per step | CPU ms per added step | failed | peak RSS MB |\n\
|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for &(side, label) in TRELLIS_SIDES.iter().chain([&("reference", "langgraph dev")]) {
            if let Some(why) = r[side].get("skipped").and_then(Value::as_str) {
                let _ = writeln!(md, "| {label} | skipped: {why} | | | | | | | |");
                continue;
            }
            for w in r[side]["waves"].as_array().into_iter().flatten() {
                let added = match w.get("server_cpu_ms_per_added_step").and_then(Value::as_f64) {
                    Some(ms) => format!("{ms:.2}"),
                    None => "–".to_owned(),
                };
                let _ = writeln!(
                    md,
                    "| {label} | {} | {:.1} | {:.2} | {:.2} | {:.2} | {added} | {} | {:.1} |",
                    thousands(int(w, "concurrency")),
                    num(w, "runs_per_s"),
                    num(w, "step_p50_ms"),
                    num(w, "step_p99_ms"),
                    num(w, "server_cpu_ms_per_step"),
                    int(w, "failed"),
                    num(&r[side], "peak_rss_mb"),
                );
            }
        }
        let on: Vec<String> = TRELLIS_SIDES
            .iter()
            .filter_map(|(side, label)| Some(format!("{label} on {}", state_fs(r[side].get("state_fs")?))))
            .collect();
        if !on.is_empty() {
            let _ = writeln!(md, "\nState: {}.", on.join("; "));
        }
        for ratio in r["ratios"].as_array().into_iter().flatten() {
            let _ = writeln!(
                md,
                "\nAt {} runs at once, Trellis serves {:.1}× the reference's runs per second, with {:.2}× its p50 step latency.",
                thousands(int(ratio, "concurrency")),
                num(ratio, "throughput_trellis_over_reference"),
                num(ratio, "step_p50_trellis_over_reference"),
            );
        }
    }
}

/// `{"type": "ext4", "ext4_journal": false}` → "ext4 without a journal".
fn state_fs(fs: &Value) -> String {
    let kind = fs["type"].as_str().unwrap_or("unknown");
    match fs["ext4_journal"].as_bool() {
        Some(true) => format!("{kind} with a journal"),
        Some(false) => format!("{kind} without a journal"),
        None => kind.to_owned(),
    }
}

pub(super) fn workers_section<'a>(md: &mut String, rows: impl Iterator<Item = &'a Value>) {
    md.push_str(
        "\n## Many workers\n\n`trellis serve --database` workers sharing one PostgreSQL database and one state dir \
(`crates/agent/benches/workers.rs`), 3 workers then 1 worker in one run, each on a fresh database: every client \
creates its thread, its background run and joins the run's stream from the start on random workers; the scripted \
model answers each request after 50 ms. Every run must succeed on its first attempt, the model must get exactly \
one request per step, and every client must see ids 0..N with no gap or duplicate, N being what the database \
stored. First event: from the run's create request to event 1 on the joined stream (queueing included). \
Database work per run from `pg_stat_database` (transactions; rows read and written).\n\n",
    );
    for r in rows {
        if let Some(why) = r.get("skipped").and_then(Value::as_str) {
            let _ = writeln!(md, "Skipped: {why}.");
            continue;
        }
        let _ = writeln!(
            md,
            "{} runs of {} steps, {} clients at once, up to {} runs per worker.\n\n\
| workers | runs/s | first event p50 ms | p99 ms | transactions per run | rows read per run | rows written per run | failed |\n\
|---:|---:|---:|---:|---:|---:|---:|---:|",
            int(r, "runs"),
            int(r, "steps_per_run"),
            int(r, "clients_at_once"),
            int(r, "runs_per_worker"),
        );
        for c in r["configurations"].as_array().into_iter().flatten() {
            let _ = writeln!(
                md,
                "| {} | {:.1} | {:.0} | {:.0} | {:.1} | {:.0} | {:.1} | {} |",
                int(c, "workers"),
                num(c, "runs_per_s"),
                num(c, "first_event_p50_ms"),
                num(c, "first_event_p99_ms"),
                num(c, "transactions_per_run"),
                num(c, "rows_read_per_run"),
                num(c, "rows_written_per_run"),
                int(c, "failed"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_and_load_rows_become_tables() {
        let rows = [
            serde_json::json!({"bench": "process", "case": "run_steps", "steps": 40, "t_small_0_ms": 28.7,
                "t_small_steps_ms": 141.3, "t_large_0_ms": 390.4, "t_large_steps_ms": 491.4,
                "per_step_small_ms": 2.81, "per_step_large_ms": 2.53, "added_per_step_ms": 8.75,
                "startup_added_ms": 361.7, "per_step_added_ms": -0.29, "peak_rss_mb_large": 38.8}),
            serde_json::json!({"bench": "process", "case": "registry", "folders": 61000, "skills_listed": 45750,
                "warnings": 60899, "floor_ms": 1940.2, "results": [{"output": "json", "cache": "warm",
                "median_ms": 4480.0, "ratio_to_floor": 2.31, "peak_rss_mb": 616.0}]}),
            serde_json::json!({"bench": "process", "case": "latency_proxy", "skipped": "TRELLIS_S3_ENDPOINT is not set"}),
        ];
        let mut md = String::new();
        process_section(&mut md, rows.iter());
        assert!(
            md.contains("| added per step, (t5000 − t10) / 40 (ms) | 8.75 | ≤ 1 |"),
            "{md}"
        );
        assert!(
            md.contains("| of which startup, once per process (ms) | 361.7 | |"),
            "{md}"
        );
        assert!(
            md.contains(
                "| registry | 61,000 | 45,750 | 60,899 | 1940.2 | json | warm | 4480.0 | 2.31 | 616.0 |"
            ),
            "{md}"
        );
        assert!(
            md.contains("Latency proxy: skipped (TRELLIS_S3_ENDPOINT is not set)."),
            "{md}"
        );
        let load = [
            serde_json::json!({"bench": "load", "threads": 200, "steps_per_thread": 10, "skills": 5000,
            "model_calls": 2200, "elapsed_ms": 12000.0, "steps_per_s": 183.3, "step_p50_ms": 20.5,
            "step_p99_ms": 90.1, "peak_rss_mb": 150.2, "threads_checked": 200}),
        ];
        let mut md = String::new();
        load_section(&mut md, load.iter());
        assert!(
            md.contains("| 200 | 10 | 5,000 | 2,200 | 12.0 | 183.3 | 20.5 | 90.1 | 150.2 | 200 |"),
            "{md}"
        );
    }

    #[test]
    fn serve_rows_become_a_table_with_ratios() {
        let row = serde_json::json!({"bench": "serve",
            "trellis": {"peak_rss_mb": 120.5, "state_fs": {"type": "ext4", "ext4_journal": false},
                "waves": [{"concurrency": 1000, "runs_per_s": 900.0,
                "step_p50_ms": 0.8, "step_p99_ms": 4.2, "server_cpu_ms_per_step": 1.9,
                "server_cpu_ms_per_added_step": 0.85, "failed": 0}]},
            "trellis_paced": {"peak_rss_mb": 130.0, "state_fs": {"type": "xfs", "ext4_journal": null},
                "waves": [{"concurrency": 1000, "runs_per_s": 70.0,
                "step_p50_ms": 0.9, "step_p99_ms": 2.5, "server_cpu_ms_per_step": 1.2, "failed": 0}]},
            "trellis_tmpfs": {"peak_rss_mb": 118.0, "waves": [{"concurrency": 1000, "runs_per_s": 950.0,
                "step_p50_ms": 0.7, "step_p99_ms": 4.0, "server_cpu_ms_per_step": 1.5, "failed": 0}]},
            "reference": {"peak_rss_mb": 900.0, "waves": [{"concurrency": 1000, "runs_per_s": 30.0,
                "step_p50_ms": 40.0, "step_p99_ms": 400.0, "server_cpu_ms_per_step": 30.0, "failed": 0}]},
            "ratios": [{"concurrency": 1000, "throughput_trellis_over_reference": 30.0,
                "step_p50_trellis_over_reference": 0.02}]});
        let mut md = String::new();
        serve_section(&mut md, [&row].into_iter());
        assert!(
            md.contains("| trellis serve | 1,000 | 900.0 | 0.80 | 4.20 | 1.90 | 0.85 | 0 | 120.5 |"),
            "{md}"
        );
        assert!(
            md.contains("| trellis serve (paced) | 1,000 | 70.0 | 0.90 | 2.50 | 1.20 | – | 0 | 130.0 |"),
            "{md}"
        );
        assert!(
            md.contains("| trellis serve (tmpfs) | 1,000 | 950.0 | 0.70 | 4.00 | 1.50 | – | 0 | 118.0 |"),
            "{md}"
        );
        assert!(
            md.contains("| langgraph dev | 1,000 | 30.0 | 40.00 | 400.00 | 30.00 | – | 0 | 900.0 |"),
            "{md}"
        );
        assert!(
            md.contains("Trellis serves 30.0× the reference's runs per second"),
            "{md}"
        );
        // The tmpfs side names no file system (an older result): it is left out.
        assert!(
            md.contains("State: trellis serve on ext4 without a journal; trellis serve (paced) on xfs.\n"),
            "{md}"
        );
        let skipped = serde_json::json!({"trellis": {"waves": []}, "reference": {"skipped": "no venv"}});
        let mut md = String::new();
        serve_section(&mut md, [&skipped].into_iter());
        assert!(md.contains("| langgraph dev | skipped: no venv |"), "{md}");
    }
}
