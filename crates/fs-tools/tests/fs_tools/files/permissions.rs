//! A denied path is unreadable, unwritable and invisible through all seven tools, and the backend is
//! never asked about it by a tool that was given it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::{Value, json};
use trellis_backend::{
    Backend, ByteRange, Capabilities, Entry, FileListing, GlobOutput, GrepOutput, GrepQuery, ReadOutput,
    Result, StateBackend, VirtualPath, WriteMode, WriteOutcome,
};
use trellis_fs_tools::{Access, FileAccess, PermissionRule, Permissions, ToolOutput};

use crate::common::{call, content, fill};

/// A backend that records every path it is asked about.
#[derive(Debug)]
struct Recording {
    inner: StateBackend,
    seen: Mutex<Vec<String>>,
}

impl Recording {
    fn note(&self, path: &VirtualPath) {
        self.seen.lock().unwrap().push(path.to_string());
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

#[async_trait]
impl Backend for Recording {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn ls(&self, dir: &VirtualPath) -> Result<Vec<Entry>> {
        self.note(dir);
        self.inner.ls(dir).await
    }
    async fn stat(&self, path: &VirtualPath) -> Result<Entry> {
        self.note(path);
        self.inner.stat(path).await
    }
    async fn read(&self, path: &VirtualPath, range: Option<ByteRange>) -> Result<ReadOutput> {
        self.note(path);
        self.inner.read(path, range).await
    }
    async fn write(&self, path: &VirtualPath, data: Bytes, mode: WriteMode) -> Result<WriteOutcome> {
        self.note(path);
        self.inner.write(path, data, mode).await
    }
    async fn delete(&self, path: &VirtualPath) -> Result<()> {
        self.note(path);
        self.inner.delete(path).await
    }
    async fn list_files(&self, base: &VirtualPath, limit: usize) -> Result<FileListing> {
        self.note(base);
        self.inner.list_files(base, limit).await
    }
    async fn glob(&self, pattern: &str, base: &VirtualPath) -> Result<GlobOutput> {
        self.note(base);
        self.inner.glob(pattern, base).await
    }
    async fn grep(&self, query: &GrepQuery) -> Result<GrepOutput> {
        self.note(&query.base);
        self.inner.grep(query).await
    }
}

const SECRET: &str = "TOKEN=hunter2";

async fn setup(rules: Vec<PermissionRule>) -> (Arc<Recording>, FileAccess) {
    let inner = StateBackend::new();
    fill(
        &inner,
        &[
            ("/secrets/key.txt", format!("{SECRET}\n").into_bytes()),
            ("/secrets/.env", format!("{SECRET}\n").into_bytes()),
            ("/secrets/sub/deep.txt", format!("{SECRET}\n").into_bytes()),
            ("/public/readme.txt", b"TOKEN= goes in /secrets\n".to_vec()),
            ("/public/app.pem", format!("{SECRET}\n").into_bytes()),
        ],
    )
    .await;
    let backend = Arc::new(Recording {
        inner,
        seen: Mutex::new(Vec::new()),
    });
    let ctx = FileAccess::new(backend.clone()).with_permissions(Permissions::new(rules));
    (backend, ctx)
}

fn deny_secrets() -> Vec<PermissionRule> {
    vec![
        PermissionRule::deny("/secrets/**", &[Access::Read, Access::Write]).unwrap(),
        PermissionRule::deny("/**/*.pem", &[Access::Read, Access::Write]).unwrap(),
    ]
}

fn assert_denied(out: &ToolOutput, access: &str, path: &str) {
    assert!(out.is_error, "{out:?}");
    assert_eq!(
        out.text_content(),
        format!("Error: permission denied: {access} access to {path} is not allowed."),
        "{out:?}"
    );
}

#[tokio::test]
async fn exact_path_tools_refuse_before_touching_the_backend() {
    let (backend, ctx) = setup(deny_secrets()).await;
    let cases: Vec<(&str, Value, &str, &str)> = vec![
        (
            "read_file",
            json!({"file_path": "/secrets/key.txt"}),
            "read",
            "/secrets/key.txt",
        ),
        (
            "read_file",
            json!({"file_path": "//secrets/./sub/deep.txt"}),
            "read",
            "/secrets/sub/deep.txt",
        ),
        (
            "read_file",
            json!({"file_path": "/secrets/missing.txt"}),
            "read",
            "/secrets/missing.txt",
        ),
        (
            "read_file",
            json!({"file_path": "/secrets/.env"}),
            "read",
            "/secrets/.env",
        ),
        (
            "read_file",
            json!({"file_path": "/public/app.pem"}),
            "read",
            "/public/app.pem",
        ),
        (
            "write_file",
            json!({"file_path": "/secrets/new.txt", "content": "x"}),
            "write",
            "/secrets/new.txt",
        ),
        (
            "write_file",
            json!({"file_path": "/secrets/key.txt", "content": "x", "overwrite": true}),
            "write",
            "/secrets/key.txt",
        ),
        (
            "edit_file",
            json!({"file_path": "/secrets/key.txt", "old_string": "hunter2", "new_string": "x"}),
            "write",
            "/secrets/key.txt",
        ),
        (
            "delete",
            json!({"file_path": "/secrets/key.txt"}),
            "write",
            "/secrets/key.txt",
        ),
        (
            "delete",
            json!({"file_path": "/public/app.pem"}),
            "write",
            "/public/app.pem",
        ),
        ("ls", json!({"path": "/secrets"}), "read", "/secrets"),
        ("ls", json!({"path": "/secrets/sub"}), "read", "/secrets/sub"),
        (
            "glob",
            json!({"pattern": "*", "path": "/secrets"}),
            "read",
            "/secrets",
        ),
        (
            "grep",
            json!({"pattern": "TOKEN", "path": "/secrets"}),
            "read",
            "/secrets",
        ),
        (
            "grep",
            json!({"pattern": "TOKEN", "path": "/secrets/key.txt"}),
            "read",
            "/secrets/key.txt",
        ),
    ];
    for (tool, args, access, path) in cases {
        let out = call(&ctx, tool, args.clone()).await;
        assert_denied(&out, access, path);
        assert_eq!(
            backend.take(),
            Vec::<String>::new(),
            "{tool} {args} touched the backend"
        );
    }
    // Nothing changed.
    assert_eq!(
        content(backend.as_ref(), "/secrets/key.txt").await.as_deref(),
        Some("TOKEN=hunter2\n")
    );
    assert_eq!(content(backend.as_ref(), "/secrets/new.txt").await, None);
    assert!(content(backend.as_ref(), "/public/app.pem").await.is_some());
}

#[tokio::test]
async fn listings_and_searches_hide_denied_paths() {
    let (_, ctx) = setup(deny_secrets()).await;
    let ls = call(&ctx, "ls", json!({})).await;
    assert_eq!(ls.text_content(), "/public/");
    let ls = call(&ctx, "ls", json!({"path": "/public"})).await;
    assert_eq!(ls.text_content(), "/public/readme.txt");
    for pattern in [
        "*",
        "**/*",
        "*.txt",
        "secrets/**",
        "/secrets/*",
        "*.{env,pem,txt}",
        ".env",
        "*.pem",
    ] {
        let out = call(&ctx, "glob", json!({"pattern": pattern})).await;
        assert!(!out.is_error, "{out:?}");
        let nothing = format!("No files match {pattern:?} under /.");
        assert!(
            out.text_content() == nothing || out.text_content().lines().all(|l| l == "/public/readme.txt"),
            "{pattern}: {}",
            out.text_content()
        );
    }
    let out = call(&ctx, "glob", json!({"pattern": "*"})).await;
    assert_eq!(out.text_content(), "/public/readme.txt");
    for mode in ["files_with_matches", "content", "count"] {
        let out = call(&ctx, "grep", json!({"pattern": "TOKEN", "output_mode": mode})).await;
        assert!(!out.is_error, "{out:?}");
        assert!(out.text_content().starts_with("/public/readme.txt"), "{out:?}");
        assert!(
            !out.text_content().contains("hunter2") && !out.text_content().contains(".pem"),
            "{out:?}"
        );
        assert!(!out.text_content().contains("/secrets/"), "{out:?}");
    }
    // A search whose only matches are denied looks exactly like one with no matches.
    let out = call(&ctx, "grep", json!({"pattern": "hunter2"})).await;
    assert_eq!(out.text_content(), "No matches for \"hunter2\" under /.");
    let out = call(&ctx, "grep", json!({"pattern": "hunter2", "glob": "*.pem"})).await;
    assert_eq!(out.text_content(), "No matches for \"hunter2\" under /.");
}

#[tokio::test]
async fn first_matching_rule_wins_and_operations_are_separate() {
    let rules = vec![
        PermissionRule::allow("/secrets/shared/**", &[Access::Read]).unwrap(),
        PermissionRule::deny("/secrets/**", &[Access::Read, Access::Write]).unwrap(),
        PermissionRule::deny("/public/**", &[Access::Write]).unwrap(),
    ];
    let (backend, ctx) = setup(rules).await;
    fill(
        &backend.inner,
        &[("/secrets/shared/ok.txt", b"shared\n".to_vec())],
    )
    .await;
    let out = call(&ctx, "read_file", json!({"file_path": "/secrets/shared/ok.txt"})).await;
    assert_eq!(out.text_content(), "[line 1 of 1]\n1\tshared");
    // The allow rule covers reads only: writing there falls through to the deny rule.
    let out = call(
        &ctx,
        "write_file",
        json!({"file_path": "/secrets/shared/ok.txt", "content": "x", "overwrite": true}),
    )
    .await;
    assert_denied(&out, "write", "/secrets/shared/ok.txt");
    // Read-only area: readable and listed, but not writable, editable or deletable.
    let out = call(&ctx, "read_file", json!({"file_path": "/public/readme.txt"})).await;
    assert!(!out.is_error, "{out:?}");
    let out = call(
        &ctx,
        "edit_file",
        json!({"file_path": "/public/readme.txt", "old_string": "TOKEN", "new_string": "x"}),
    )
    .await;
    assert_denied(&out, "write", "/public/readme.txt");
    let out = call(&ctx, "delete", json!({"file_path": "/public/readme.txt"})).await;
    assert_denied(&out, "write", "/public/readme.txt");
    let out = call(&ctx, "ls", json!({"path": "/secrets"})).await;
    assert_denied(&out, "read", "/secrets");
    let out = call(&ctx, "glob", json!({"pattern": "**/*.txt"})).await;
    assert_eq!(out.text_content(), "/public/readme.txt\n/secrets/shared/ok.txt");
    assert_eq!(
        content(backend.as_ref(), "/public/readme.txt").await.as_deref(),
        Some("TOKEN= goes in /secrets\n")
    );
}

#[tokio::test]
async fn edit_needs_read_access_too() {
    let rules = vec![PermissionRule::deny("/secrets/**", &[Access::Read]).unwrap()];
    let (backend, ctx) = setup(rules).await;
    let out = call(
        &ctx,
        "edit_file",
        json!({"file_path": "/secrets/key.txt", "old_string": "TOKEN", "new_string": "x"}),
    )
    .await;
    assert_denied(&out, "read", "/secrets/key.txt");
    assert_eq!(backend.take(), Vec::<String>::new());
    // A write-only area still accepts new files.
    let out = call(
        &ctx,
        "write_file",
        json!({"file_path": "/secrets/drop.txt", "content": "x"}),
    )
    .await;
    assert!(!out.is_error, "{out:?}");
}
