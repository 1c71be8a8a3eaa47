//! `trellis skills list`, `trellis skills validate` and `trellis skills index`.
//!
//! `list` and `validate` seed discovery with each source's persisted catalog (see
//! `trellis_middleware::skills::persist`): the local cache directory first, then the index object a
//! `trellis skills index URL` published into an object-store source. Either way every source is
//! listed and only new or changed `SKILL.md` files are read; the local cache is rewritten when the
//! catalog changed. `--no-cache` scans from scratch and writes nothing.
//!
//! Per-skill warnings are summarised in the log (one WARN line per source and code, each skill at
//! INFO with `-v`); `--json` output carries every warning.
//!
//! Text output prints what skill authors wrote (names, descriptions, issue messages quoting the
//! file) and what storage services said (source warnings) through `escape_controls`: control and
//! invisible formatting characters show as escapes, so a skill cannot start a fake line or send
//! terminal escape sequences. `--json` output is escaped by the JSON encoder.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use trellis_middleware::skills::{
    BucketIndex, CatalogStore, DiscoveryOptions, LocalCatalogDir, Persisted, SkillCatalog, default_cache_dir,
    discover_persisted,
};
use trellis_middleware::untrusted::escape_controls as safe;

use crate::cli::mounts::Mounts;

/// Where `list`, `validate` and `run` keep persisted catalogs.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CacheChoice {
    /// `--no-cache`: scan from scratch, write nothing.
    pub disabled: bool,
    /// `--cache-dir`, else [`default_cache_dir`].
    pub dir: Option<PathBuf>,
}

/// What names a source's place, for its cache key: an object-store URL without trailing
/// slashes, or the canonical absolute directory.
fn origin(source: &str) -> String {
    if source.contains("://") {
        return source.trim_end_matches('/').to_owned();
    }
    std::fs::canonicalize(source).map_or_else(|_| source.to_owned(), |p| p.display().to_string())
}

/// How each source of `ws` is persisted under `cache` (none with `--no-cache`): the local cache
/// directory, and for a bucket its published index.
pub fn persistence(ws: &Mounts, sources: &[String], cache: &CacheChoice) -> Vec<Option<Persisted>> {
    if cache.disabled {
        return Vec::new();
    }
    let local: Option<Arc<dyn CatalogStore>> = cache
        .dir
        .clone()
        .or_else(default_cache_dir)
        .map(|dir| Arc::new(LocalCatalogDir::new(dir)) as Arc<dyn CatalogStore>);
    ws.skills
        .iter()
        .enumerate()
        .map(|(i, skill_source)| {
            let given = given(ws, sources, i);
            let mut stores: Vec<(Arc<dyn CatalogStore>, bool)> = Vec::new();
            if let Some(local) = &local {
                stores.push((local.clone(), true));
            }
            if given.contains("://")
                && let Ok(index) = BucketIndex::new(ws.backend.clone(), skill_source.path())
            {
                stores.push((Arc::new(index), false));
            }
            (!stores.is_empty()).then(|| Persisted {
                origin: origin(&given),
                stores,
            })
        })
        .collect()
}

async fn scan(sources: &[String], cache: &CacheChoice) -> Result<(SkillCatalog, Mounts)> {
    let ws = Mounts::from_sources(sources, &[], None)?;
    let progress = std::io::stderr().is_terminal();
    if progress {
        eprint!("scanning {} source(s)…", sources.len());
    }
    let persisted = persistence(&ws, sources, cache);
    let found = discover_persisted(&ws.skills, &persisted, &DiscoveryOptions::default())
        .await
        .discovery;
    tracing::info!(
        "skills: {} SKILL.md file(s) read, {} reused from the catalog cache",
        found.stats.read + found.stats.read_on,
        found.stats.reused
    );
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
fn given(ws: &Mounts, sources: &[String], index: usize) -> String {
    ws.mounts
        .get(index)
        .map(|(_, s)| s.clone())
        .or_else(|| sources.get(index).cloned())
        .unwrap_or_default()
}

/// `skills index URL`: scan an object-store source (seeded by its current index) and publish its
/// catalog as `<URL>/.trellis-skills-index`, create-only or version-checked against the index it
/// read, so two publishers racing cannot interleave (the loser fails and can retry).
pub async fn index(url: &str) -> Result<ExitCode> {
    if !url.contains("://") {
        bail!(
            "`skills index` publishes into an object store: give a URL (s3://, gs://, az://, memory://), not {url:?}"
        );
    }
    let sources = [url.to_owned()];
    let ws = Mounts::from_sources(&sources, &[], None)?;
    let source = ws.skills.first().context("no source")?;
    let index = Arc::new(BucketIndex::new(ws.backend.clone(), source.path())?);
    let persisted = [Some(Persisted {
        origin: origin(url),
        stores: vec![(index.clone() as Arc<dyn CatalogStore>, true)],
    })];
    let found = discover_persisted(&ws.skills, &persisted, &DiscoveryOptions::default()).await;
    let report = found.reports.first().cloned().unwrap_or_default();
    if found.discovery.stats.unlisted_sources > 0 {
        bail!(
            "cannot list {url}: {}",
            found.discovery.catalog.warnings().join("; ")
        );
    }
    if let Some(problem) = report.warnings.iter().find(|w| w.starts_with("cannot save")) {
        bail!("{problem}");
    }
    let stats = &found.discovery.stats;
    println!(
        "{} {} skills ({} files read, {} reused) {} {}/{}",
        if report.saved > 0 {
            "published"
        } else {
            "unchanged:"
        },
        stats.loaded,
        stats.read + stats.read_on,
        stats.reused,
        if report.saved > 0 { "to" } else { "in" },
        url.trim_end_matches('/'),
        trellis_middleware::skills::persist::INDEX_FILE
    );
    Ok(ExitCode::SUCCESS)
}

/// `skills list`.
pub async fn list(sources: &[String], as_json: bool, cache: &CacheChoice) -> Result<ExitCode> {
    let (catalog, ws) = scan(sources, cache).await?;
    // Streamed through one buffer: no JSON tree or output string of the whole catalog is built
    // (at 61,000 skills those were most of the peak memory), and no write per line.
    let mut out = std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
    if as_json {
        out.write_all(b"{\n  \"skills\": [")?;
        for (i, s) in catalog.skills().iter().enumerate() {
            out.write_all(if i == 0 { b"\n    " } else { b",\n    " })?;
            let metadata: serde_json::Map<String, Value> = s
                .metadata
                .iter()
                .map(|(k, v)| (k.to_owned(), Value::String(v.to_owned())))
                .collect();
            let entry = json!({
                "name": s.name,
                "description": s.description,
                "path": s.path.as_str(),
                "source": given(&ws, sources, s.source),
                "license": s.license,
                "compatibility": s.compatibility,
                "metadata": metadata,
                "allowed_tools": s.allowed_tools,
            });
            serde_json::to_writer(&mut out, &entry)?;
        }
        out.write_all(b"\n  ],\n  \"warnings\": [")?;
        let issues = catalog.issues().iter().map(ToString::to_string);
        for (i, w) in catalog.warnings().iter().cloned().chain(issues).enumerate() {
            out.write_all(if i == 0 { b"\n    " } else { b",\n    " })?;
            serde_json::to_writer(&mut out, &w)?;
        }
        out.write_all(b"\n  ]\n}\n")?;
    } else {
        for s in catalog.skills() {
            writeln!(
                out,
                "{}  {}\n    {}",
                safe(&s.name),
                safe(s.path.as_str()),
                safe(&s.description)
            )?;
        }
        // Per-skill issues are summarised in the log (one line per source and code).
        for w in catalog.warnings() {
            eprintln!("warning: {}", safe(w));
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// `skills validate`: every skill against the Agent Skills rules.
pub async fn validate(sources: &[String], as_json: bool, cache: &CacheChoice) -> Result<ExitCode> {
    let (catalog, _ws) = scan(sources, cache).await?;
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
