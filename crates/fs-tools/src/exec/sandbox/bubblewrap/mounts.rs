//! The mounts every bubblewrap command gets besides its own files: the host's system directories
//! read-only, a small `/etc`, `/proc`, `/dev` and the in-memory `/tmp`.

use std::ffi::OsString;
use std::path::Path;

/// Files of the host's `/etc` mounted read-only, when they exist: what the dynamic linker, name
/// lookups, time zones, TLS and Python read.
const ETC_FILES: &[&str] = &[
    "alternatives",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "nsswitch.conf",
    "hosts",
    "resolv.conf",
    // Trust roots and OpenSSL's configuration only: `/etc/ssl/private` holds host keys, which a
    // command running as root (see `allow_root_commands`) could otherwise read.
    "ssl/certs",
    "ssl/openssl.cnf",
    "ca-certificates",
    "mime.types",
    "protocols",
    "services",
];

/// links or directories, a read-only `/etc` with [`ETC_FILES`], `/etc/python*` and the generated
/// `passwd`/`group` from `identity`, a fresh `/proc`, a minimal read-only `/dev` with a private
/// `/dev/shm`, and a private `/tmp`; the last two are tmpfs (memory) of at most `tmp_bytes` each.
/// They depend only on the host and the limits, so they are worked out once, when the sandbox is
/// built.
pub(super) fn system_mounts(identity: &Path, tmp_bytes: u64) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::with_capacity(64);
    let mut push = |items: &[&std::ffi::OsStr]| a.extend(items.iter().map(|s| s.to_os_string()));
    push(&["--ro-bind".as_ref(), "/usr".as_ref(), "/usr".as_ref()]);
    for dir in ["bin", "sbin", "lib", "lib32", "lib64", "libx32"] {
        let host = Path::new("/").join(dir);
        let Ok(meta) = std::fs::symlink_metadata(&host) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            if let Ok(target) = std::fs::read_link(&host) {
                push(&["--symlink".as_ref(), target.as_os_str(), host.as_os_str()]);
            }
        } else if meta.is_dir() {
            push(&["--ro-bind".as_ref(), host.as_os_str(), host.as_os_str()]);
        }
    }
    push(&["--tmpfs".as_ref(), "/etc".as_ref()]);
    for name in ETC_FILES {
        let host = Path::new("/etc").join(name);
        push(&["--ro-bind-try".as_ref(), host.as_os_str(), host.as_os_str()]);
    }
    if let Ok(entries) = std::fs::read_dir("/etc") {
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with("python") {
                let host = entry.path();
                push(&["--ro-bind".as_ref(), host.as_os_str(), host.as_os_str()]);
            }
        }
    }
    let passwd = identity.join("passwd");
    let group = identity.join("group");
    push(&["--ro-bind".as_ref(), passwd.as_os_str(), "/etc/passwd".as_ref()]);
    push(&["--ro-bind".as_ref(), group.as_os_str(), "/etc/group".as_ref()]);
    push(&["--remount-ro".as_ref(), "/etc".as_ref()]);
    push(&[
        "--proc".as_ref(),
        "/proc".as_ref(),
        "--dev".as_ref(),
        "/dev".as_ref(),
    ]);
    // `--dev` is a tmpfs the sandbox user may write, with no size: read-only, and `/dev/shm`
    // (POSIX shared memory, Python's multiprocessing locks) a capped tmpfs of its own.
    let size = tmp_bytes.max(1).to_string();
    push(&["--remount-ro".as_ref(), "/dev".as_ref()]);
    push(&[
        "--size".as_ref(),
        size.as_ref(),
        "--tmpfs".as_ref(),
        "/dev/shm".as_ref(),
    ]);
    push(&[
        "--size".as_ref(),
        size.as_ref(),
        "--tmpfs".as_ref(),
        "/tmp".as_ref(),
    ]);
    a
}
