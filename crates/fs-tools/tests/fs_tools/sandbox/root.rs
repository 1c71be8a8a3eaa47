//! Trellis running as root (review F9): commands run as an unprivileged user, and as root only
//! when the configuration allows it; either way the host's private keys are not mounted.
//!
//! Root's fallback is forced by a `bwrap` that refuses every user but root (see
//! [`bwrap_for_root_only`]): the sandbox user's probe fails, root's succeeds. Not root: skipped
//! with a message (CI runs as root).

use std::time::Duration;

use trellis_backend::sandbox::{ExecFiles, ExecRequest};
use trellis_fs_tools::sandbox::workdir::Owner;
use trellis_fs_tools::sandbox::{BubblewrapConfig, BubblewrapSandbox, SANDBOX_UID};

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

/// Run `sleep` in `sandbox` and, while it runs, try as the host's shared `nobody` (65534) what
/// any daemon running as that user could: signal one of the command's processes (`kill -0`) and
/// list its root, the command's private copy of the files, through `/proc/<pid>/root`. What the
/// command printed as its ids, and whether each try worked.
async fn what_nobody_reaches(sandbox: std::sync::Arc<BubblewrapSandbox>) -> (String, bool, bool) {
    use std::os::unix::process::CommandExt;
    let marker = format!("trellis-f13-{}", std::process::id());
    let command = format!("echo \"ids $(id -u):$(id -g)\"; sleep 4; echo done # {marker}");
    let running = {
        let sandbox = sandbox.clone();
        tokio::spawn(async move {
            let request = ExecRequest::new(command).timeout(Duration::from_secs(30));
            trellis_backend::Sandbox::execute(sandbox.as_ref(), &ExecFiles::new(state()), &request)
                .await
                .unwrap()
        })
    };
    let mut pid = None;
    for _ in 0..200 {
        pid = std::fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let mine = String::from_utf8_lossy(&cmdline).contains(&marker)
                && std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == "sh");
            mine.then(|| e.file_name().to_string_lossy().into_owned())
        });
        if pid.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid = pid.expect("the command's shell is running");
    let as_nobody = |script: &str| {
        std::process::Command::new("/bin/sh")
            .args(["-c", script, "sh", &pid])
            .uid(65534)
            .gid(65534)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap()
            .success()
    };
    let signalled = as_nobody("kill -0 \"$1\"");
    let listed = as_nobody("ls \"/proc/$1/root/\"");
    let out = running.await.unwrap();
    let ids = out
        .output
        .lines()
        .find(|l| l.starts_with("ids "))
        .unwrap_or("")
        .to_owned();
    (ids, signalled, listed)
}

/// Review F13: as root, commands run as a user of the sandbox's own ([`SANDBOX_UID`]), not as
/// the shared `nobody`, whom any host daemon running as `nobody` shares. With commands as
/// `nobody` (before; configured here), such a daemon could signal a command's processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_run_as_a_user_of_their_own_that_nobody_cannot_reach() {
    if !as_root("commands run as a user of their own") {
        return;
    }
    let sandbox = bwrap("commands run as a user of their own").unwrap();
    assert_eq!(
        sandbox.runs_as().uid,
        SANDBOX_UID,
        "{:?}",
        trellis_backend::Sandbox::report(sandbox.as_ref())
    );
    let (ids, signalled, listed) = what_nobody_reaches(sandbox).await;
    assert_eq!(ids, format!("ids {SANDBOX_UID}:{SANDBOX_UID}"));
    assert!(
        !signalled && !listed,
        "nobody reached the command (signal: {signalled}, root: {listed})"
    );

    let mut shared = BubblewrapConfig::default();
    shared.run_as_when_root = Some(Owner {
        uid: 65534,
        gid: 65534,
    });
    let shared = std::sync::Arc::new(BubblewrapSandbox::new(shared).unwrap());
    let (ids, signalled, _) = what_nobody_reaches(shared).await;
    assert_eq!(ids, "ids 65534:65534");
    assert!(
        signalled,
        "as nobody, a command's processes are nobody's to signal"
    );
}
