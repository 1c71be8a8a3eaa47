//! The sections of `docs/benchmarks.md` for the thread log, users, thread resume, sandbox and
//! streaming benches: one function per bench, each turning its JSON rows into text and a table.

use std::fmt::Write as _;

use serde_json::Value;

use super::{num, thousands};

/// `## Thread log`: bytes written over a thread of about 200 checkpoints against its stored size,
/// and listing the history of a 1,000-checkpoint thread (from the `loop_overhead` bench).
pub(super) fn thread_log_section<'a>(md: &mut String, runs: impl Iterator<Item = &'a Value>) {
    md.push_str(
        "\n## Thread log\n\nOn local disk. `200 steps`: two runs of 51 model calls on one thread with the 5,000-skill catalog \
(each model call is saved after the model's reply and after the tools), every byte the store was asked to write against \
what the thread occupies at the end (head, steps and blobs) and against its final state serialized as one JSON document \
(what one snapshot holds); target: written at most 2× the thread. `history`: `Checkpointer::history` of a thread of \
1,000 checkpoints through a fresh checkpointer each time (median of 21; target 50 ms), and loading that thread, for scale. \
`resume`: loading the 200-step thread through a fresh store and checkpointer (a new process), median of 21, and the objects \
that reads (head, the steps since the last snapshot, message chunks, blobs; a listing counts as one).\n\n\
| case | checkpoints | bytes written | thread bytes | final state JSON bytes | written / thread | written / state JSON |\n|---|---:|---:|---:|---:|---:|---:|\n",
    );
    let int = |r: &Value, key: &str| r.get(key).and_then(Value::as_u64).unwrap_or(0);
    let runs: Vec<&Value> = runs.collect();
    for r in runs.iter().filter_map(|r| r.get("thread_bytes")) {
        let _ = writeln!(
            md,
            "| 200 steps | {} | {} | {} | {} | {:.2} | {:.2} |",
            int(r, "checkpoints"),
            thousands(int(r, "bytes_written")),
            thousands(int(r, "thread_bytes")),
            thousands(int(r, "state_json_bytes")),
            num(r, "ratio_written_to_thread"),
            num(r, "ratio_written_to_state_json"),
        );
    }
    md.push_str(
        "\n| case | checkpoints | history ms | load ms | objects read to load |\n|---|---:|---:|---:|---:|\n",
    );
    for r in runs.iter().filter_map(|r| r.get("history_listing")) {
        let _ = writeln!(
            md,
            "| history | {} | {:.2} | {:.2} | |",
            int(r, "checkpoints"),
            num(r, "history_ms"),
            num(r, "load_ms"),
        );
    }
    for r in runs.iter().filter_map(|r| r.get("thread_bytes")) {
        let _ = writeln!(
            md,
            "| resume 200 steps | {} | | {:.2} | {} |",
            int(r, "checkpoints"),
            num(r, "resume_ms"),
            int(r, "resume_objects_read"),
        );
    }
}

/// `## Thread resume`: one row per store and case of the `thread_resume` bench; a store the bench
/// skipped gets one row saying why.
/// The many-users section: every number of the `user_layers` bench next to its target.
pub(super) fn users_section<'a>(md: &mut String, rows: impl Iterator<Item = &'a Value>) {
    for r in rows {
        let int = |key: &str| r.get(key).and_then(Value::as_u64).unwrap_or(0);
        let _ = write!(
            md,
            "\n## Many users\n\n{} users × {} personal skills (and 3 memory files each) over a {}-skill organisation \
library on local disk; a zero-cost scripted model (`crates/middleware/benches/user_layers.rs`).\n\n\
| measure | value | target |\n|---|---:|---|\n\
| peak RSS, one user, as many new threads (MB) | {:.1} | |\n\
| peak RSS, every user, one new thread each (MB) | {:.1} | |\n\
| ratio all users / one user | {:.3} | ≤ 1.5 |\n\
| first request of a new user (ms) | {:.2} | |\n\
| first request of a new thread, agent without the user layer (ms) | {:.2} | |\n\
| reading one user's files directly (ms) | {:.2} | |\n\
| new user beyond those two (ms) | {:.2} | ≤ 5 |\n\
| new thread of a known user (ms) | {:.2} | |\n\
| per call, a user among {} (µs) | {:.2} | |\n\
| per call, no user layer (µs) | {:.2} | |\n\
| per-call ratio | {:.3} | ≈ 1 |\n\n\
\"One user\" runs as many new threads as all users together, so both sides do the same work; a single first \
request peaks at {:.1} MB (every new thread rescans the 5,000-skill library, and the allocator keeps the \
high-water mark of those transient catalogs). A new user's first request is compared with a new thread of an \
agent without the user layer (both rescan the library) and with reading that user's files directly; the \
samples are interleaved and the difference is the median of paired differences. Per call is the median gap \
between two model calls of a 51-call run on a warm thread.\n",
            thousands(int("users")),
            int("personal_skills_per_user"),
            thousands(int("org_skills")),
            num(r, "peak_rss_one_user_mb"),
            num(r, "peak_rss_all_users_mb"),
            num(r, "rss_ratio_all_users_to_one"),
            num(r, "new_user_first_request_ms"),
            num(r, "single_user_new_thread_ms"),
            num(r, "user_files_read_ms"),
            num(r, "new_user_beyond_files_ms"),
            num(r, "known_user_new_thread_ms"),
            thousands(int("users")),
            num(r, "per_call_us_users"),
            num(r, "per_call_us_single_user"),
            num(r, "per_call_ratio_users_to_single"),
            num(r, "peak_rss_first_request_mb"),
        );
    }
}

pub(super) fn thread_resume_section<'a>(md: &mut String, rows: impl Iterator<Item = &'a Value>) {
    let rows: Vec<&Value> = rows.collect();
    let text = |r: &Value, key: &str| r.get(key).and_then(Value::as_str).unwrap_or("?").to_owned();
    let int = |r: &Value, key: &str| r.get(key).and_then(Value::as_u64).unwrap_or(0);
    let setup = rows.iter().find(|r| r.get("skipped").is_none());
    let mut iterations: Vec<String> = Vec::new();
    for (store, name) in [("local", "local disk"), ("s3-emulator", "the S3 emulator")] {
        let measured = rows
            .iter()
            .find(|r| r.get("store").and_then(Value::as_str) == Some(store) && r.get("skipped").is_none());
        if let Some(r) = measured {
            iterations.push(format!("{} iterations on {name}", int(r, "runs")));
        }
    }
    let _ = write!(
        md,
        "\n## Thread resume\n\nA thread whose checkpoint holds {} messages ({} bytes as stored, written by two runs \
of the agent loop) and whose file space holds {} files of {} bytes. Every iteration opens a fresh store backend \
and a fresh `BackendCheckpointer`, as a new worker process would. `resume` loads the checkpoint and obtains the \
thread's files, which is what a run does before its first model call; `resume_read_one` adds one \
`read_file`-equivalent read of one file; `resume_read_all` adds listing the space and reading all its files \
(what a tool that greps the whole space pays). A counting wrapper around the store sums the bytes that reads \
return and counts requests (a batch counts once per path). Resuming reads the thread's head and its steps and \
nothing else (its bytes read equal their stored size, one read each plus one listing of the log, checked by the \
bench), so resume costs O(checkpoint), not O(files): a file is read only when a tool asks for it. Median and p90 over {}.\n\n| store | case | median ms | p90 ms | bytes read | files read | requests | ratio to resume |\n|---|---|---:|---:|---:|---:|---:|---:|\n",
        setup.map_or(0, |r| int(r, "messages")),
        thousands(setup.map_or(0, |r| int(r, "checkpoint_bytes"))),
        setup.map_or(0, |r| int(r, "files")),
        thousands(setup.map_or(0, |r| int(r, "file_bytes"))),
        iterations.join(" and "),
    );
    for r in rows {
        if let Some(reason) = r.get("skipped") {
            let _ = writeln!(
                md,
                "| {} | skipped: {} | — | — | — | — | — | — |",
                text(r, "store"),
                reason.as_str().unwrap_or("?")
            );
            continue;
        }
        let _ = writeln!(
            md,
            "| {} | {} | {:.2} | {:.2} | {} | {} | {} | {:.2} |",
            text(r, "store"),
            text(r, "case"),
            num(r, "median_ms"),
            num(r, "p90_ms"),
            thousands(int(r, "bytes_read")),
            int(r, "files_read"),
            int(r, "requests"),
            num(r, "ratio_to_resume"),
        );
    }
}

/// `## Running commands`: the `sandbox_exec` bench, one row per case (or why it was skipped).
pub(super) fn sandbox_section<'a>(md: &mut String, rows: impl Iterator<Item = &'a Value>) {
    md.push_str(
        "\n## Running commands (`execute`)\n\nOne `execute` of `true` (materialize an empty view, run, write back) against a plain `sh -c true` spawn, \
in one run; target for bubblewrap: under 20 ms per call. Then materializing the folder of a 50-file skill (2 KB files) from a \
301-skill library on the S3 emulator, as `execute` does when a command names the skill: copied, and from a warm folder \
cache (one listing, no reads); and the same view when the command names no skill. Last, an `execute` of `true` over a \
thread space of many files on the S3 emulator the second time (the thread's cached base is current: one listing, no \
reads) against the first (every file fetched), in one run.\n\n| case | median ms | p90 ms | ratio to spawn |\n|---|---:|---:|---:|\n",
    );
    for r in rows {
        let case = r.get("case").and_then(Value::as_str).unwrap_or("?");
        if let Some(reason) = r.get("skipped").and_then(Value::as_str) {
            let _ = writeln!(md, "| {case} | skipped: {reason} | — | — |");
            continue;
        }
        let ratio = r
            .get("ratio_to_spawn")
            .and_then(Value::as_f64)
            .map_or("—".to_owned(), |x| format!("{x:.1}"));
        let _ = writeln!(
            md,
            "| {case} | {:.2} | {:.2} | {ratio} |",
            num(r, "median_ms"),
            num(r, "p90_ms")
        );
        if let Some(first) = r.get("first_ms").and_then(Value::as_f64) {
            let _ = writeln!(
                md,
                "| the first time (every file fetched into the base) | {first:.2} | — | — |\n| again ÷ first | {:.3} | — | — |",
                num(r, "ratio_to_first")
            );
        }
        if let Some(unnamed) = r.get("median_ms_naming_no_skill").and_then(Value::as_f64) {
            let _ = writeln!(md, "| the same view, no skill named | {unnamed:.2} | — | — |");
        }
    }
}

/// `## Streaming`: the `streaming` bench.
pub(super) fn streaming_section<'a>(md: &mut String, rows: impl Iterator<Item = &'a Value>) {
    md.push_str(
        "\n## Streaming\n\nA 2,000-token answer from a loopback server through the Anthropic provider: one non-streaming body \
against the same answer as 2,000 text deltas, in one run (the ratio is the cost of parsing the event stream; a real model \
takes seconds to write such an answer). Then how long a delta takes from the moment its bytes are written to the socket \
to the moment the caller's `on_delta` sees it.\n\n| case | result |\n|---|---|\n",
    );
    for r in rows {
        let case = r.get("case").and_then(Value::as_str).unwrap_or("?");
        let result = if r.get("ratio").is_some() {
            format!(
                "{:.2} ms streamed vs {:.2} ms whole (ratio {:.1})",
                num(r, "streaming_ms"),
                num(r, "non_streaming_ms"),
                num(r, "ratio")
            )
        } else {
            format!(
                "median {:.0} µs, p99 {:.0} µs",
                num(r, "median_us"),
                num(r, "p99_us")
            )
        };
        let _ = writeln!(md, "| {case} | {result} |");
    }
}

/// `## Telemetry export`: the `telemetry` bench.
pub(super) fn telemetry_section<'a>(md: &mut String, rows: impl Iterator<Item = &'a Value>) {
    md.push_str(
        "\n## Telemetry export\n\nThe same tool-calling run (scripted model, one tool call per step, no checkpointer) with no \
`tracing` subscriber and with the OTLP export layers sending spans and metrics to a loopback collector, in one process. \
Target: at most 5 µs added per model call. `spans only` is the same with the metrics layer left out.\n\n\
| case | off | on | added | spans only | ratio | dropped spans |\n|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let _ = writeln!(
            md,
            "| {} | {:.1} µs | {:.1} µs | {:.1} µs | {:.1} µs | {:.2} | {} |",
            r.get("case").and_then(Value::as_str).unwrap_or("?"),
            num(r, "off_us"),
            num(r, "on_us"),
            num(r, "added_us"),
            num(r, "spans_only_us"),
            num(r, "ratio"),
            num(r, "dropped_spans")
        );
    }
}

/// `## Persisted skills catalog`: a new process listing skills with a warm catalog cache (the
/// `persisted_catalog` rows of the `skills_discovery` bench).
pub(super) fn persisted_catalog_section<'a>(md: &mut String, rows: impl Iterator<Item = &'a Value>) {
    md.push_str(
        "\n## Persisted skills catalog\n\nEach run is what a new `trellis skills list` process does: a new backend, the \
catalog loaded from a warm local cache directory, every source listed, only new or changed `SKILL.md` files read. \
`unchanged` reads none (target at 5,000 skills on S3: at most 1,000 ms; a cold scan without the cache took 12.5 s); \
`1% changed` rewrites every hundredth file first, and is compared with `read changed`, one `read_many` of just those \
files (target: at most 1,000 ms more). Medians of 3.\n\n\
| store | skills | cold + save ms | cache bytes | unchanged ms | changed files | 1% changed ms | read changed ms |\n|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows.filter(|r| r.get("case").and_then(Value::as_str) == Some("persisted_catalog")) {
        let int = |key: &str| r.get(key).and_then(Value::as_u64).unwrap_or(0);
        let _ = writeln!(
            md,
            "| {} | {} | {:.1} | {} | {:.1} | {} | {:.1} | {:.1} |",
            r.get("store").and_then(Value::as_str).unwrap_or("?"),
            thousands(int("skills")),
            num(r, "cold_and_save_ms"),
            thousands(int("cache_bytes")),
            num(r, "unchanged_ms"),
            int("changed_files"),
            num(r, "one_percent_changed_ms"),
            num(r, "read_changed_ms"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_space_row_shows_both_runs_and_their_ratio() {
        let rows = [
            serde_json::json!({"case": "execute true over a 2000-file S3 thread space, again (cached base)",
            "files": 2000, "first_ms": 812.5, "median_ms": 40.25, "p90_ms": 44.0, "ratio_to_first": 0.0495}),
        ];
        let mut md = String::new();
        sandbox_section(&mut md, rows.iter());
        assert!(
            md.contains(
                "| execute true over a 2000-file S3 thread space, again (cached base) | 40.25 | 44.00 | — |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| the first time (every file fetched into the base) | 812.50 | — | — |"),
            "{md}"
        );
        assert!(md.contains("| again ÷ first | 0.050 | — | — |"), "{md}");
    }
}
