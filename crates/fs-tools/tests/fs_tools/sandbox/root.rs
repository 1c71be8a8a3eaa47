//! Trellis running as root (review F9): commands run as an unprivileged user, and as root only
//! when the configuration allows it; either way the host's private keys are not mounted.
//!
//! Root's fallback is forced by a `bwrap` that refuses every user but root (see
//! [`bwrap_for_root_only`]): the sandbox user's probe fails, root's succeeds. Not root: skipped
//! with a message (CI runs as root).

use std::time::Duration;

use trellis_backend::sandbox::{ExecFiles, ExecRequest};
use trellis_fs_tools::sandbox::{BubblewrapConfig, BubblewrapSandbox};

use super::{bwrap, state};

fn as_root(test: &str) -> bool {
    if bwrap(test).is_none() {
        return false;
    }
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| {
        use std::os::unix::fs::MetadataExt;
        m.uid() == 0
    });
    if !root {
        eprintln!("skipped: {test} (Trellis does not run as root here)");
    }
    root
}

/// A `bwrap` that refuses every user but root, as a host that denies unprivileged user namespaces
/// does (Ubuntu's AppArmor restriction, a container's seccomp profile): a script that fails unless
/// it runs as uid 0 and otherwise runs the real one. Returns its directory (keep it alive) and the
/// configuration naming it.
fn bwrap_for_root_only() -> (tempfile::TempDir, BubblewrapConfig) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix("trellis-root-only-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let real = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .chain([std::path::PathBuf::from("/usr/bin")])
        .map(|d| d.join("bwrap"))
        .find(|p| p.is_file())
        .expect("bwrap is installed");
    let script = dir.path().join("bwrap");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n[ \"$(/usr/bin/id -u)\" = 0 ] || {{ echo 'setting up uid map: Permission denied' >&2; exit 1; }}\nexec {} \"$@\"\n",
            real.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut config = BubblewrapConfig::default();
    config.bwrap = Some(script);
    (dir, config)
}

#[test]
fn refused_namespaces_for_the_sandbox_user_are_an_error_not_commands_as_root() {
    if !as_root("root fallback refused") {
        return;
    }
    let (_dir, config) = bwrap_for_root_only();
    let err = BubblewrapSandbox::new(config).unwrap_err();
    assert!(
        err.to_string().contains("do not run as root unless allowed"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_allowed_to_run_as_root_see_no_private_keys() {
    if !as_root("root fallback allowed") {
        return;
    }
    let (_dir, config) = bwrap_for_root_only();
    let sandbox = BubblewrapSandbox::new(config.allow_root_commands(true)).unwrap();
    assert_eq!(sandbox.runs_as().uid, 0);
    let request = ExecRequest::new(
        "id -u; ls /etc/ssl/private 2>&1; cat /etc/ssl/private/* 2>&1 | head -c 40; \
         ls /etc/ssl/certs | grep -c . ; test -f /etc/ssl/openssl.cnf && echo cnf",
    )
    .timeout(Duration::from_secs(30));
    let out = trellis_backend::Sandbox::execute(&sandbox, &ExecFiles::new(state()), &request)
        .await
        .unwrap();
    assert!(out.output.starts_with("0\n"), "{out:?}");
    assert!(!out.output.contains("PRIVATE KEY"), "{out:?}");
    assert!(out.output.contains("No such file"), "{out:?}");
    assert!(out.output.contains("cnf"), "{out:?}");
}
