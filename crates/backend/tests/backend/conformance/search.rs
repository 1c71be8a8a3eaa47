//! `glob` and `grep` over the backend's files.

use bytes::Bytes;
use trellis_backend::{EntryKind, GrepQuery};

use super::{Target, put};

const GLOB_TREE: &[&str] = &[
    "a.py",
    "sub/b.py",
    "sub/nested/c.py",
    "readme.md",
    ".hidden.py",
    ".hidden/x.py",
    ".github/workflows/ci.yml",
];

pub(super) async fn glob_matrix(t: &Target) {
    let root = t.path("g");
    for rel in GLOB_TREE {
        put(t, &format!("g/{rel}"), "x").await;
    }
    let py = ["a.py", ".hidden/x.py", "sub/b.py", "sub/nested/c.py"];
    let rows: Vec<(&str, &str, Vec<&str>)> = vec![
        ("*.py", "", py.to_vec()),
        ("**/*.py", "", vec!["a.py", "sub/b.py", "sub/nested/c.py"]),
        ("*.md", "", vec!["readme.md"]),
        ("sub/*.py", "", vec!["sub/b.py"]),
        ("sub/**/*.py", "", vec!["sub/b.py", "sub/nested/c.py"]),
        ("/*.py", "", vec!["a.py"]),
        ("a.py/**", "", vec![]),
        ("*.py", "sub", vec!["sub/b.py", "sub/nested/c.py"]),
        ("*.yml", "", vec![".github/workflows/ci.yml"]),
        ("**/*.yml", "", vec![]),
        (".github/**/*.yml", "", vec![".github/workflows/ci.yml"]),
        (".hidden.py", "", vec![".hidden.py"]),
        (".*.py", "", vec![".hidden.py"]),
        (
            "*",
            "",
            vec![
                ".github/workflows/ci.yml",
                ".hidden/x.py",
                "a.py",
                "readme.md",
                "sub/b.py",
                "sub/nested/c.py",
            ],
        ),
        (
            "*.{py,md}",
            "",
            vec!["a.py", ".hidden/x.py", "readme.md", "sub/b.py", "sub/nested/c.py"],
        ),
        ("*.{yml,yaml}", "", vec![".github/workflows/ci.yml"]),
        ("?.py", "", py.to_vec()),
        ("[ab].py", "", vec!["a.py", "sub/b.py"]),
        ("[!a].py", "", vec![".hidden/x.py", "sub/b.py", "sub/nested/c.py"]),
        ("[^a].py", "", vec![".hidden/x.py", "sub/b.py", "sub/nested/c.py"]),
    ];
    for (pattern, under, want) in rows {
        let base = if under.is_empty() {
            root.clone()
        } else {
            root.join_relative(under).unwrap()
        };
        let out = t
            .backend
            .glob(pattern, &base)
            .await
            .unwrap_or_else(|e| panic!("{pattern}: {e}"));
        let mut got: Vec<String> = out
            .matches
            .iter()
            .map(|e| e.path.relative_to(&root).unwrap().to_owned())
            .collect();
        let mut want: Vec<String> = want.into_iter().map(str::to_owned).collect();
        got.sort();
        want.sort();
        assert_eq!(got, want, "glob {pattern:?} under {under:?}");
        assert!(out.matches.iter().all(|e| e.kind == EntryKind::File));
        assert!(!out.truncated);
    }
}

pub(super) async fn grep_literal(t: &Target) {
    put(t, "s/a.md", "alpha\nneedle one\nbeta needle\n").await;
    put(t, "s/b.txt", "needle in txt\r\nnothing\n").await;
    put(t, "s/deep/c.md", "no match here\n(a.*b) literal\n").await;
    put(
        t,
        "s/bin.dat",
        Bytes::from_static(&[0xff, b'n', b'e', b'e', b'd', b'l', b'e']),
    )
    .await;
    let mut query = GrepQuery::new("needle", t.path("s"));
    let out = t.backend.grep(&query).await.unwrap();
    let got: Vec<(String, u64, String)> = out
        .matches
        .iter()
        .map(|m| {
            (
                m.path.relative_to(&t.base).unwrap().to_owned(),
                m.line,
                m.text.clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("s/a.md".to_owned(), 2, "needle one".to_owned()),
            ("s/a.md".to_owned(), 3, "beta needle".to_owned()),
            ("s/b.txt".to_owned(), 1, "needle in txt".to_owned()),
        ]
    );
    assert!(!out.truncated);
    assert_eq!(
        out.skipped,
        vec![t.path("s/bin.dat")],
        "binary files are skipped, and said so"
    );
    query.file_glob = Some("*.md".to_owned());
    assert_eq!(t.backend.grep(&query).await.unwrap().matches.len(), 2);
    query.file_glob = None;
    query.max_matches = 2;
    let capped = t.backend.grep(&query).await.unwrap();
    assert_eq!(capped.matches.len(), 2);
    assert!(capped.truncated);
    let literal = t
        .backend
        .grep(&GrepQuery::new("(a.*b)", t.path("s")))
        .await
        .unwrap();
    assert_eq!(literal.matches.len(), 1, "the query is literal text, not a regex");
    let single = t
        .backend
        .grep(&GrepQuery::new("needle", t.path("s/b.txt")))
        .await
        .unwrap();
    assert_eq!(single.matches.len(), 1, "a file base searches that file");
}
