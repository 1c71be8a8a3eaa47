//! The benches' generated skill libraries (included with `#[path]` by the benches of this crate and
//! of `trellis-agent`; not a bench target). Deterministic: skill `i` has the same bytes whatever
//! the size of the library.
//!
//! * [`skill`]: the reference's synthetic shape (~8.6 KB, ~205 lines per `SKILL.md`, descriptions up
//!   to 150 characters in four YAML styles, optional fields), with no warnings.
//! * [`registry_skill`]: the shape of a large public registry: a quarter of the folders are copies
//!   of another folder's skill under another folder name (so about half the folders share a
//!   `name` with another, and each copy warns twice: its name differs from its folder, and the name
//!   is a duplicate), descriptions of 300–1,000 characters, and half the skills with nested
//!   `metadata` (warned as not a string, kept as YAML text): about one warning per skill.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::Path;
use std::sync::Arc;

use futures::StreamExt;
use trellis_middleware::backend::{Backend, VirtualPath, WriteMode};

const VERBS: [&str; 16] = [
    "analyze",
    "build",
    "convert",
    "deploy",
    "extract",
    "format",
    "generate",
    "index",
    "merge",
    "review",
    "summarize",
    "translate",
    "validate",
    "plan",
    "draft",
    "audit",
];
const NOUNS: [&str; 16] = [
    "pdf",
    "invoice",
    "dataset",
    "report",
    "schema",
    "contract",
    "image",
    "transcript",
    "forecast",
    "ticket",
    "meeting",
    "pipeline",
    "release",
    "budget",
    "survey",
    "campaign",
];
const WORDS: [&str; 24] = [
    "quickly",
    "carefully",
    "customer",
    "records",
    "with",
    "the",
    "team",
    "tables",
    "charts",
    "sales",
    "notes",
    "weekly",
    "quality",
    "checks",
    "for",
    "and",
    "documents",
    "using",
    "templates",
    "sources",
    "errors",
    "metrics",
    "drafts",
    "reviews",
];

struct Rng(u64);
impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A `SKILL.md` body of at least `size` bytes: a title, then numbered lines of `words` words.
fn body(rng: &mut Rng, name: &str, size: usize, words: usize, number: fn(usize) -> String) -> String {
    let mut body = format!("# {name}\n\n");
    let mut line = 0;
    while body.len() < size {
        line += 1;
        body.push_str(&number(line));
        for _ in 0..words {
            body.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
            body.push(' ');
        }
        body.push('\n');
    }
    body
}

/// Directory name and SKILL.md bytes of skill `i`.
pub fn skill(i: usize) -> (String, String) {
    let mut rng = Rng::new(i as u64 + 1);
    let name = format!(
        "{}-{}-{i}",
        VERBS[rng.below(16) as usize],
        NOUNS[rng.below(16) as usize]
    );
    let mut description = format!("Use when the user needs to {} ", name.replace('-', " "));
    while description.len() < 140 {
        description.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
        description.push(' ');
    }
    if rng.below(20) == 0 {
        description.push_str("— café données");
    }
    let description = description.trim().chars().take(150).collect::<String>();
    let description_line = match rng.below(10) {
        0 => format!("description: \"{description}\""),
        1 => format!("description: '{}'", description.replace('\'', "''")),
        2 => format!("description: >-\n  {description}"),
        _ => format!("description: {}", description.replace(": ", " - ")),
    };
    let mut fm = format!("---\nname: {name}\n{description_line}\n");
    if rng.below(2) == 0 {
        fm.push_str("license: MIT\n");
    }
    if rng.below(5) == 0 {
        fm.push_str("compatibility: Requires Python 3.11+ and network access\n");
    }
    if rng.below(5) < 2 {
        fm.push_str(&format!(
            "metadata:\n  author: team-{}\n  version: \"1.{}\"\n",
            rng.below(50),
            rng.below(20)
        ));
    }
    if rng.below(10) < 3 {
        fm.push_str("allowed-tools: Bash Read Write\n");
    }
    fm.push_str("---\n\n");
    let body = body(&mut rng, &name, 8_600 - fm.len(), 5, |line| {
        format!("{line}. Step {line}: ")
    });
    (name, fm + &body)
}

/// Write entries `0..n` of `shape` ([`skill`] or [`registry_skill`]) under
/// `root/skills/<folder>/SKILL.md`.
pub fn write_local(root: &Path, n: usize, shape: fn(usize) -> (String, String)) {
    let dir = root.join("skills");
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..n {
        let (folder, text) = shape(i);
        let d = dir.join(&folder);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("SKILL.md"), text).unwrap();
    }
}

/// Write skills `0..n` of the [`skill`] shape under `root/skills/<name>/SKILL.md`.
pub fn generate_local(root: &Path, n: usize) {
    write_local(root, n, skill);
}

/// Write skills `0..n` of the [`skill`] shape to `backend` at `/skills/<name>/SKILL.md`, 32 at once.
pub async fn upload(backend: &Arc<dyn Backend>, n: usize) {
    futures::stream::iter(0..n)
        .map(|i| {
            let backend = backend.clone();
            async move {
                let (name, text) = skill(i);
                let path = VirtualPath::parse(&format!("/skills/{name}/SKILL.md")).unwrap();
                backend
                    .write(&path, text.into(), WriteMode::Overwrite)
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
}

/// Folder name and `SKILL.md` bytes of folder `i` of the registry shape (see the module docs).
/// Folder `4k + 1` holds a copy of folder `4k`'s skill (its name, another description).
pub fn registry_skill(i: usize) -> (String, String) {
    let mut rng = Rng::new(i as u64 + 0x5eed);
    let original = if i % 4 == 1 { i - 1 } else { i };
    let mut named = Rng::new(original as u64 + 0x5eed);
    let name = format!(
        "{}-{}-{original}",
        VERBS[named.below(16) as usize],
        NOUNS[named.below(16) as usize]
    );
    let folder = if original == i {
        name.clone()
    } else {
        format!("{name}-fork")
    };
    let target = 300 + rng.below(701) as usize;
    let mut description = format!("Use when the user needs to {} ", name.replace('-', " "));
    while description.len() < target {
        description.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
        description.push(' ');
    }
    let description = description.trim().chars().take(target).collect::<String>();
    let mut fm = format!("---\nname: {name}\ndescription: >-\n  {description}\nlicense: Apache-2.0\n");
    if rng.below(2) == 0 {
        fm.push_str(&format!(
            "metadata:\n  author: org-{}\n  version: \"{}.{}\"\n  tags: {} {}\n  source:\n    repository: https://example.com/org-{}/skills\n    path: skills/{folder}\n",
            rng.below(500),
            rng.below(5),
            rng.below(30),
            NOUNS[rng.below(16) as usize],
            VERBS[rng.below(16) as usize],
            rng.below(500),
        ));
    } else {
        fm.push_str(&format!("metadata:\n  author: org-{}\n", rng.below(500)));
    }
    fm.push_str("---\n\n");
    let size = 1_000 + rng.below(5_000) as usize;
    let body = body(&mut rng, &name, size.saturating_sub(fm.len()), 8, |line| {
        format!("{line}. ")
    });
    (folder, fm + &body)
}

/// Write folders `0..n` of the [`registry_skill`] shape under `root/skills/<folder>/SKILL.md`.
pub fn generate_registry(root: &Path, n: usize) {
    write_local(root, n, registry_skill);
}
