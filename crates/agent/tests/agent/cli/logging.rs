//! The `trellis` binary's logging and help, with stderr piped (not a terminal): no colour codes,
//! `RUST_LOG` and `-v`/`-q` decide the level, and every flag says what it does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

/// `trellis` with a clean logging environment (the caller's `RUST_LOG` and `NO_COLOR` removed).
/// The binary with neither `RUST_LOG` nor `NO_COLOR` inherited from the test's environment.
fn trellis() -> Command {
    let mut command = super::harness::trellis();
    command.env_remove("RUST_LOG").env_remove("NO_COLOR");
    command
}

/// A skills directory with one skill that logs a warning (broken YAML, skipped) and one that logs
/// only at debug level (an unknown frontmatter field, a spec-only finding).
fn skills_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let write = |rel: &str, text: &str| {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("broken/SKILL.md", "---\nname: [unclosed\n---\n");
    write(
        "extra-field/SKILL.md",
        "---\nname: extra-field\ndescription: Has a field the spec does not define.\nflavour: mint\n---\nBody.\n",
    );
    dir
}

/// `trellis <args> inspect --skills <dir>`, returning its output; it must succeed.
fn inspect(skills: &Path, before: &[&str], env: &[(&str, &str)]) -> Output {
    let out = trellis()
        .args(before)
        .args(["inspect", "--skills"])
        .arg(skills)
        .envs(env.iter().copied())
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out
}

fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).unwrap()
}

fn assert_no_escape(out: &Output) {
    assert!(
        !out.stderr.contains(&0x1b),
        "ESC in stderr that is not a terminal: {:?}",
        stderr(out)
    );
}

#[test]
fn warnings_by_default_without_colour_codes() {
    let skills = skills_dir();
    let out = inspect(skills.path(), &[], &[]);
    let log = stderr(&out);
    assert!(log.contains("WARN") && log.contains("skill(s) skipped"), "{log}");
    assert!(!log.contains("DEBUG"), "default level is WARN: {log}");
    assert_no_escape(&out);
    // An empty NO_COLOR is unset; a set one is honoured; neither brings colour to a pipe.
    for no_color in ["", "1"] {
        assert_no_escape(&inspect(skills.path(), &["-vvv"], &[("NO_COLOR", no_color)]));
    }
}

#[test]
fn rust_log_debug_produces_debug_lines() {
    let skills = skills_dir();
    let out = inspect(skills.path(), &[], &[("RUST_LOG", "debug")]);
    let log = stderr(&out);
    assert!(log.contains("DEBUG") && log.contains("flavour"), "{log}");
    assert_no_escape(&out);
    // A target filter keeps only what it names.
    let out = inspect(skills.path(), &[], &[("RUST_LOG", "trellis_backend=debug")]);
    assert!(!stderr(&out).contains("flavour"), "{}", stderr(&out));
}

#[test]
fn verbose_raises_and_quiet_lowers_the_level() {
    let skills = skills_dir();
    let log = stderr(&inspect(skills.path(), &["-v"], &[]));
    assert!(log.contains("WARN") && !log.contains("DEBUG"), "{log}");
    let log = stderr(&inspect(skills.path(), &["-vv"], &[]));
    assert!(log.contains("DEBUG") && log.contains("flavour"), "{log}");
    let quiet = inspect(skills.path(), &["-q"], &[]);
    assert_eq!(stderr(&quiet), "", "-q keeps errors only");
    // The flags are global: after the subcommand too.
    let out = trellis()
        .args(["skills", "list", "-q"])
        .arg(skills.path())
        .output()
        .unwrap();
    assert!(!stderr(&out).contains("WARN"), "{}", stderr(&out));
}

#[test]
fn rust_log_takes_precedence_over_the_flags() {
    let skills = skills_dir();
    let log = stderr(&inspect(skills.path(), &["-q"], &[("RUST_LOG", "debug")]));
    assert!(log.contains("DEBUG"), "RUST_LOG beats -q: {log}");
    let log = stderr(&inspect(skills.path(), &["-vv"], &[("RUST_LOG", "error")]));
    assert_eq!(log, "", "RUST_LOG beats -vv");
    // Empty means unset: the flags decide.
    let log = stderr(&inspect(skills.path(), &["-vv"], &[("RUST_LOG", "")]));
    assert!(log.contains("DEBUG"), "{log}");
    // A malformed RUST_LOG is reported, and the flags decide.
    let log = stderr(&inspect(skills.path(), &["-q"], &[("RUST_LOG", "=oops=")]));
    assert!(
        log.contains("ignoring RUST_LOG") && !log.contains("WARN"),
        "{log}"
    );
}

/// The help text after a flag in `trellis <command> --help`, or `None` when the flag is not listed.
fn flag_help(command: &[&str], flag: &str) -> Option<String> {
    let out = trellis().args(command).arg("--help").output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let help = String::from_utf8(out.stdout).unwrap();
    help.lines().find_map(|line| {
        let spec = line.trim_start();
        let named = spec
            .split([' ', ','])
            .take(3)
            .any(|t| t == flag || t == format!("{flag}..."));
        if !spec.starts_with('-') || !named {
            return None;
        }
        // Columns are separated by at least two spaces.
        Some(
            spec.split_once("  ")
                .map_or("", |(_, rest)| rest.trim())
                .to_owned(),
        )
    })
}

#[test]
fn every_flag_named_in_the_issue_has_help_text() {
    let cases: &[(&[&str], &[&str])] = &[
        (&[], &["--verbose", "--quiet"]),
        (
            &["inspect"],
            &["--skills", "--memory", "--json", "--model", "-v", "-q"],
        ),
        (
            &["run"],
            &["--skills", "--memory", "--model", "--thread", "--mcp"],
        ),
        (&["skills", "list"], &["--json", "--quiet"]),
        (&["skills", "validate"], &["--json", "--verbose"]),
    ];
    for (command, flags) in cases {
        for flag in *flags {
            let help = flag_help(command, flag).unwrap_or_else(|| panic!("{command:?} lists no {flag}"));
            assert!(
                !help.is_empty() && !help.starts_with("[default"),
                "`trellis {} --help`: {flag} has no help text",
                command.join(" ")
            );
        }
    }
    let out = trellis().arg("--help").output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(
        help.contains("RUST_LOG, when set and not empty, takes precedence over -v and -q"),
        "{help}"
    );
}

/// A library where every skill has a problem logs one summary line per source and code, with the
/// count, not a line per skill; `-v` shows each skill's own line, `skills list --json` every issue.
#[test]
fn skill_warnings_are_summarised_per_source() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..40 {
        let skill = dir.path().join(format!("broken-{i:02}"));
        std::fs::create_dir_all(&skill).unwrap();
        let text = if i % 4 == 0 {
            "no frontmatter here\n"
        } else {
            "---\nname: [unclosed\n---\n"
        };
        std::fs::write(skill.join("SKILL.md"), text).unwrap();
    }
    let out = inspect(dir.path(), &[], &[]);
    let log = stderr(&out);
    let mut warn_lines: Vec<&str> = log.lines().filter(|l| l.contains("WARN")).collect();
    warn_lines.sort_by_key(|l| l.contains("invalid-yaml"));
    assert_eq!(
        warn_lines.len(),
        2,
        "one line per source and code, not one per skill: {log}"
    );
    assert!(
        warn_lines[0].contains(": 10 skill(s) skipped [frontmatter-missing], first /skills/"),
        "{}",
        warn_lines[0]
    );
    assert!(
        warn_lines[1].contains(": 30 skill(s) skipped [invalid-yaml], first /skills/"),
        "{}",
        warn_lines[1]
    );
    let verbose = stderr(&inspect(dir.path(), &["-v"], &[]));
    assert_eq!(verbose.matches("skipping skill:").count(), 40, "{verbose}");

    // `skills list`: the same two summary lines, no line per skill; `--json` holds every issue.
    let cache = tempfile::tempdir().unwrap();
    let list = |extra: &[&str]| {
        trellis()
            .args(["skills", "list", "--cache-dir"])
            .arg(cache.path())
            .args(extra)
            .arg(dir.path())
            .output()
            .unwrap()
    };
    let text = list(&[]);
    assert!(text.status.success());
    let log = stderr(&text);
    assert_eq!(log.lines().count(), 2, "{log}");
    assert!(!log.contains("broken-02"), "no per-skill line: {log}");
    let json = list(&["--json"]);
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(value["warnings"].as_array().map(Vec::len), Some(40), "{value}");
}
