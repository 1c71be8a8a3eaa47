//! `trellis skills list` and `trellis skills validate`.
//!
//! Text output prints what skill authors wrote (names, descriptions, issue messages quoting the
//! file) and what storage services said (source warnings) through `escape_controls`: control and
//! invisible formatting characters show as escapes, so a skill cannot start a fake line or send
//! terminal escape sequences. `--json` output is escaped by the JSON encoder.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Result;
use serde_json::{Value, json};
use trellis_middleware::skills::{DiscoveryOptions, SkillCatalog, discover, escape_controls as safe};

use crate::workspace;

async fn scan(sources: &[String]) -> Result<(SkillCatalog, workspace::Workspace)> {
    let ws = workspace::assemble(sources, &[], None)?;
    let progress = std::io::stderr().is_terminal();
    if progress {
        eprint!("scanning {} source(s)…", sources.len());
    }
    let found = discover(&ws.skills, &DiscoveryOptions::default()).await;
    if progress {
        eprintln!(
            "\rscanned {} source(s): {} skills, {} files read in {:.1}s",
            found.stats.sources,
            found.stats.loaded,
            found.stats.read + found.stats.read_on,
            found.stats.elapsed.as_secs_f64()
        );
    }
    Ok((found.catalog, ws))
}

/// The source as the user gave it, for a catalog source index.
fn given(ws: &workspace::Workspace, sources: &[String], index: usize) -> String {
    ws.mounts
        .get(index)
        .map(|(_, s)| s.clone())
        .or_else(|| sources.get(index).cloned())
        .unwrap_or_default()
}

/// `skills list`.
pub async fn list(sources: &[String], as_json: bool) -> Result<ExitCode> {
    let (catalog, ws) = scan(sources).await?;
    let skills: Vec<Value> = catalog
        .skills()
        .iter()
        .map(|s| {
            let metadata: serde_json::Map<String, Value> = s
                .metadata
                .iter()
                .map(|(k, v)| (k.to_owned(), Value::String(v.to_owned())))
                .collect();
            json!({
                "name": s.name,
                "description": s.description,
                "path": s.path.as_str(),
                "source": given(&ws, sources, s.source),
                "license": s.license,
                "compatibility": s.compatibility,
                "metadata": metadata,
                "allowed_tools": s.allowed_tools,
            })
        })
        .collect();
    let mut warnings: Vec<String> = catalog.warnings().to_vec();
    warnings.extend(catalog.issues().iter().map(ToString::to_string));
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "skills": skills, "warnings": warnings }))?
        );
    } else {
        for s in catalog.skills() {
            println!(
                "{}  {}\n    {}",
                safe(&s.name),
                safe(s.path.as_str()),
                safe(&s.description)
            );
        }
        for w in &warnings {
            eprintln!("warning: {}", safe(w));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `skills validate`: every skill against the Agent Skills rules.
pub async fn validate(sources: &[String], as_json: bool) -> Result<ExitCode> {
    let (catalog, _ws) = scan(sources).await?;
    // Per SKILL.md: (errors, warnings).
    let mut report: BTreeMap<String, (Vec<Value>, Vec<Value>)> = BTreeMap::new();
    for skill in catalog.skills().iter().chain(catalog.shadowed()) {
        report.entry(skill.path.to_string()).or_default();
    }
    for issue in catalog.issues() {
        let entry = report.entry(issue.path.to_string()).or_default();
        let item = json!({ "code": issue.code, "message": issue.message });
        if issue.code.violates_spec() {
            entry.0.push(item);
        } else {
            entry.1.push(item);
        }
    }
    let errors: usize = report.values().map(|(e, _)| e.len()).sum();
    let warnings: usize = report.values().map(|(_, w)| w.len()).sum::<usize>() + catalog.warnings().len();
    if as_json {
        let skills: Vec<Value> = report
            .iter()
            .map(|(path, (e, w))| json!({ "path": path, "errors": e, "warnings": w }))
            .collect();
        let out = json!({
            "skills": skills,
            "source_warnings": catalog.warnings(),
            "errors": errors,
            "warnings": warnings,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        for (path, (e, w)) in &report {
            let path = safe(path);
            if e.is_empty() && w.is_empty() {
                println!("ok       {path}");
                continue;
            }
            println!("{}  {path}", if e.is_empty() { "warning" } else { "error  " });
            for (kind, items) in [("error", e), ("warning", w)] {
                for item in items {
                    println!(
                        "    {kind} [{}]: {}",
                        item["code"].as_str().unwrap_or(""),
                        safe(item["message"].as_str().unwrap_or(""))
                    );
                }
            }
        }
        for w in catalog.warnings() {
            println!("warning  {}", safe(w));
        }
        println!(
            "{} SKILL.md file(s) checked: {errors} error(s), {warnings} warning(s)",
            report.len()
        );
    }
    Ok(if errors > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
