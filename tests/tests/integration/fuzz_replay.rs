//! Replays every committed fuzz input — `fuzz/seeds/<target>/*` and `fuzz/regressions/<target>/*` —
//! through the same invariant checks the fuzz targets run, so `cargo test` (and CI, which does not
//! run the fuzzer) exercises them.

use std::fs;
use std::path::{Path, PathBuf};

use trellis_tests::fuzz::TARGETS;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// The files directly in `dir`, sorted; none when it does not exist.
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn every_seed_and_regression_passes_its_target_check() {
    let mut replayed = 0;
    for (name, check) in TARGETS {
        let seeds = inputs(&fuzz_dir().join("seeds").join(name));
        assert!(!seeds.is_empty(), "fuzz/seeds/{name}/ has no seed files");
        let regressions = inputs(&fuzz_dir().join("regressions").join(name));
        for file in seeds.iter().chain(&regressions) {
            let data = fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let outcome = std::panic::catch_unwind(|| check(&data));
            assert!(outcome.is_ok(), "{name}: {} breaks an invariant", file.display());
            replayed += 1;
        }
    }
    println!("replayed {replayed} fuzz inputs");
}

#[test]
fn every_target_has_a_fuzz_target_file() {
    for (name, _) in TARGETS {
        let file = fuzz_dir().join("fuzz_targets").join(format!("{name}.rs"));
        let source = fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert!(
            source.contains(&format!("fuzz::{name}::"))
                || source.contains(&format!("providers::check_{name}")),
            "{} does not call the `{name}` check",
            file.display()
        );
    }
}
