//! `cargo xtask layers`: each crate under `crates/` may depend only on the crate directly below it
//! (agent → middleware → fs-tools → backend); what it needs from further down comes through that
//! crate's re-exports. `trellis-tests` and `xtask` live outside `crates/` and are exempt.
//!
//! Every dependency table counts: `[dependencies]`, `[dev-dependencies]`, `[build-dependencies]`,
//! their `target.<cfg>.` forms and the `[dependencies.<name>]` table form, with renamed
//! dependencies (`package = "…"`, also through `[workspace.dependencies]`) resolved to the package
//! they name. The manifests are read by [`crate::manifest`], a small TOML subset reader, so xtask
//! stays free of a TOML crate.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};

use crate::layout::Layout;
use crate::manifest::parse;

/// The layered crates, lowest first. Each may name only its predecessor.
pub const LAYERS: &[&str] = &[
    "trellis-backend",
    "trellis-fs-tools",
    "trellis-middleware",
    "trellis-agent",
];

/// `cargo xtask layers`.
pub fn run(layout: &Layout, args: &[String]) -> Result<ExitCode> {
    if let Some(unknown) = args.first() {
        bail!("unknown argument `{unknown}` (`cargo xtask layers` takes none)");
    }
    check(layout)?;
    eprintln!(
        "xtask: layers ok: {}",
        LAYERS.iter().rev().copied().collect::<Vec<_>>().join(" → ")
    );
    Ok(ExitCode::SUCCESS)
}

/// Fail with every violation in the workspace, named by manifest, section and dependency.
pub fn check(layout: &Layout) -> Result<()> {
    let violations = check_workspace(&layout.workspace)?;
    if violations.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = violations.iter().map(|v| format!("  {v}")).collect();
    bail!(
        "layer check failed: each crate may depend only on the crate directly below it ({}); reach \
         lower crates through its re-exports (e.g. `trellis_fs_tools::backend`).\n{}",
        LAYERS.iter().rev().copied().collect::<Vec<_>>().join(" → "),
        lines.join("\n")
    )
}

/// One dependency that breaks the layering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The manifest, as given (relative to the workspace for the real check).
    pub manifest: String,
    /// The package whose manifest it is.
    pub package: String,
    /// The section header as written, e.g. `[target.'cfg(unix)'.dev-dependencies]`.
    pub section: String,
    /// The package the dependency names (after resolving renames).
    pub dependency: String,
    /// The key it is listed under, when that differs from the package.
    pub key: Option<String>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let listed = match &self.key {
            Some(key) => format!("{} (as `{key}`)", self.dependency),
            None => self.dependency.clone(),
        };
        let allowed = match level(&self.package).and_then(|l| l.checked_sub(1)) {
            Some(below) => format!("may name only {}", LAYERS[below]),
            None => "may name no other trellis crate".to_owned(),
        };
        let why = match (level(&self.package), level(&self.dependency)) {
            (Some(own), Some(dep)) if dep < own => "a crate more than one layer down",
            _ => "a crate in its own layer or above",
        };
        write!(
            f,
            "{}: {} names {listed} in {}: {why}; {} {allowed}",
            self.manifest, self.package, self.section, self.package
        )
    }
}

fn level(package: &str) -> Option<usize> {
    LAYERS.iter().position(|l| *l == package)
}

/// Check `crates/*/Cargo.toml` under `root`, resolving renames through `root/Cargo.toml`.
pub fn check_workspace(root: &Path) -> Result<Vec<Violation>> {
    let root_manifest = root.join("Cargo.toml");
    let root_text = std::fs::read_to_string(&root_manifest)
        .with_context(|| format!("reading {}", root_manifest.display()))?;
    let workspace = parse(&root_text).with_context(|| format!("parsing {}", root_manifest.display()))?;
    let renames = workspace.workspace_packages();
    let mut dirs: Vec<_> = std::fs::read_dir(root.join("crates"))
        .context("listing crates/")?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    dirs.sort();
    let mut violations = Vec::new();
    for dir in dirs {
        let path = dir.join("Cargo.toml");
        let shown = path.strip_prefix(root).unwrap_or(&path).display().to_string();
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {shown}"))?;
        violations.extend(check_manifest(&shown, &text, &renames)?);
    }
    Ok(violations)
}

/// Check one crate manifest. `renames` maps `[workspace.dependencies]` keys to the packages they
/// name, for entries declared with `workspace = true`.
pub fn check_manifest(shown: &str, text: &str, renames: &BTreeMap<String, String>) -> Result<Vec<Violation>> {
    let manifest = parse(text).with_context(|| format!("parsing {shown}"))?;
    let Some(package) = manifest.package_name.clone() else {
        bail!("{shown}: no `[package] name`");
    };
    let Some(own) = level(&package) else {
        bail!(
            "{shown}: `{package}` is not in the layer list (xtask/src/layers.rs `LAYERS`); add it at its layer"
        );
    };
    let mut violations = Vec::new();
    for dep in &manifest.dependencies {
        let target = dep
            .package
            .clone()
            .or_else(|| dep.workspace.then(|| renames.get(&dep.key).cloned()).flatten())
            .unwrap_or_else(|| dep.key.clone());
        let Some(theirs) = level(&target) else {
            continue;
        };
        // A crate's tests may name the crate itself, to turn on a test-only feature.
        let dev = dep.section.contains("dev-dependencies") || dep.section.contains("dev_dependencies");
        if dev && target == package {
            continue;
        }
        if theirs + 1 != own {
            violations.push(Violation {
                manifest: shown.to_owned(),
                package: package.clone(),
                section: dep.section.clone(),
                key: (dep.key != target).then(|| dep.key.clone()),
                dependency: target,
            });
        }
    }
    Ok(violations)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn renames() -> BTreeMap<String, String> {
        BTreeMap::new()
    }

    fn check(text: &str) -> Vec<Violation> {
        check_manifest("crates/x/Cargo.toml", text, &renames()).unwrap()
    }

    fn one(text: &str) -> Violation {
        let found = check(text);
        assert_eq!(found.len(), 1, "{found:#?}");
        found.into_iter().next().unwrap()
    }

    #[test]
    fn the_target_layering_passes() {
        let good = [
            "[package]\nname = \"trellis-backend\"\n[dependencies]\nserde = \"1\"\n",
            "[package]\nname = \"trellis-fs-tools\"\n[dependencies]\ntrellis-backend.workspace = true\n\
             [dev-dependencies]\ntrellis-backend = { workspace = true, features = [\"x\"] }\n",
            "[package]\nname = \"trellis-middleware\"\n[dependencies]\ntrellis-fs-tools = { path = \"../fs-tools\" }\n",
            "[package]\nname = \"trellis-agent\"\n[dependencies]\ntrellis-middleware.workspace = true\n\
             [dev-dependencies]\ntrellis-middleware.workspace = true\ntempfile = \"3\"\n",
        ];
        for manifest in good {
            assert_eq!(check(manifest), vec![], "{manifest}");
        }
    }

    #[test]
    fn a_skip_level_dependency_fails_in_every_section_kind() {
        let head =
            "[package]\nname = \"trellis-agent\"\n[dependencies]\ntrellis-middleware.workspace = true\n";
        for section in [
            "[dependencies]",
            "[dev-dependencies]",
            "[build-dependencies]",
            "[dev_dependencies]",
            "[target.'cfg(unix)'.dependencies]",
            "[target.\"cfg(target_os = \\\"linux\\\")\".dev-dependencies]",
            "[target.x86_64-unknown-linux-gnu.build-dependencies]",
        ] {
            let text = format!("{head}{section}\ntrellis-backend = {{ workspace = true }}\n");
            let v = one(&text);
            assert_eq!(v.section, section, "{text}");
            assert_eq!(v.dependency, "trellis-backend");
            assert_eq!(v.package, "trellis-agent");
            let message = v.to_string();
            for part in [
                "crates/x/Cargo.toml",
                "trellis-agent",
                section,
                "trellis-backend",
                "trellis-middleware",
            ] {
                assert!(message.contains(part), "{part} missing from: {message}");
            }
        }
    }

    #[test]
    fn table_forms_renames_and_workspace_renames_are_resolved() {
        let v = one(
            "[package]\nname = \"trellis-middleware\"\n[dependencies.trellis-backend]\npath = \"../backend\"\n",
        );
        assert_eq!(v.section, "[dependencies]");
        let v = one(
            "[package]\nname = \"trellis-middleware\"\n[target.'cfg(unix)'.dev-dependencies.store]\n\
             package = \"trellis-backend\"\npath = \"../backend\"\n",
        );
        assert_eq!(
            (v.section.as_str(), v.key.as_deref()),
            ("[target.'cfg(unix)'.dev-dependencies]", Some("store"))
        );
        let v = one(
            "[package]\nname = \"trellis-agent\"\n[dependencies]\nfs = { path = \"../fs-tools\", package = \"trellis-fs-tools\" }\n",
        );
        assert_eq!(
            (v.dependency.as_str(), v.key.as_deref()),
            ("trellis-fs-tools", Some("fs"))
        );
        assert!(v.to_string().contains("(as `fs`)"));
        let v = one(
            "[package]\nname = \"trellis-agent\"\n[dependencies]\n\"trellis-backend\".workspace = true\n",
        );
        assert_eq!(v.dependency, "trellis-backend");

        let root = parse("[workspace.dependencies]\nstorage = { path = \"crates/backend\", package = \"trellis-backend\" }\n")
            .unwrap();
        let found = check_manifest(
            "m",
            "[package]\nname = \"trellis-middleware\"\n[dependencies]\nstorage.workspace = true\n",
            &root.workspace_packages(),
        )
        .unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].dependency, "trellis-backend");
    }

    #[test]
    fn upward_and_lowest_layer_dependencies_fail() {
        let v = one(
            "[package]\nname = \"trellis-fs-tools\"\n[dev-dependencies]\ntrellis-agent = { path = \"../agent\" }\n",
        );
        assert!(v.to_string().contains("own layer or above"), "{v}");
        let v =
            one("[package]\nname = \"trellis-backend\"\n[dev-dependencies]\ntrellis-fs-tools = \"0.1\"\n");
        assert!(v.to_string().contains("may name no other trellis crate"), "{v}");
    }

    #[test]
    fn comments_strings_and_multi_line_values_are_not_dependencies() {
        let text = "# [dependencies]\n# trellis-backend = 1\n[package]\nname = \"trellis-agent\" # the CLI\n\
                    description = \"\"\"\n[dependencies]\ntrellis-backend = 1\n\"\"\"\nkeywords = [\n  \"a\", # x\n  \"[b]\",\n]\n\
                    [dependencies]\ntrellis-middleware = { workspace = true, features = [\n  \"x\",\n] }\n\
                    tokio = { version = \"1\", features = [\"rt\"] } # trellis-backend\n\
                    [[bench]]\nname = \"trellis-backend\"\n[features]\ntrellis-backend = []\n";
        assert_eq!(check(text), vec![]);
        let later = format!("{text}[dev-dependencies]\ntrellis-fs-tools = {{ path = \"../fs-tools\" }}\n");
        assert_eq!(one(&later).dependency, "trellis-fs-tools");
    }

    #[test]
    fn unknown_crates_and_broken_manifests_are_errors() {
        let err = check_manifest("m", "[package]\nname = \"trellis-extra\"\n", &renames());
        assert!(err.is_err_and(|e| e.to_string().contains("LAYERS")));
        assert!(
            check_manifest("m", "[dependencies]\nx = 1\n", &renames()).is_err(),
            "no package name"
        );
        assert!(check_manifest("m", "[package]\nname = \"trellis-agent\nx = 1\n", &renames()).is_err());
        assert!(check_manifest("m", "[package]\nname = \"trellis-agent\"\nx = [1,\n", &renames()).is_err());
    }

    #[test]
    fn the_real_manifests_parse() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        // Only that they parse: whether they pass is `cargo xtask layers`' job.
        check_workspace(&root).unwrap();
    }

    #[test]
    fn a_crate_may_name_itself_in_its_dev_dependencies_only() {
        let own = "[package]\nname = \"trellis-agent\"\n[dev-dependencies]\n\
                   trellis-agent = { path = \".\", features = [\"x\"] }\n";
        assert!(check(own).is_empty());
        let normal =
            "[package]\nname = \"trellis-agent\"\n[dependencies]\ntrellis-agent = { path = \".\" }\n";
        assert_eq!(check(normal).len(), 1);
    }
}
