//! The seccomp filter bubblewrap installs on every command: system calls that reach past the
//! namespaces, or let a command attack what runs beside it, fail with `EPERM`.
//!
//! The namespaces already hide the host's files, processes and network, and the command holds no
//! capabilities. What is left are kernel interfaces that namespaces do not cover, or that they
//! expose to every user: the filter answers `EPERM` for
//!
//! * `io_uring_setup`, `io_uring_enter`, `io_uring_register`: io_uring performs operations without
//!   making their system calls (`IORING_OP_SOCKET` creates a socket without `socket()`), so it
//!   would get around every rule below, and it has been a steady source of kernel bugs;
//! * `ptrace`, `process_vm_readv`, `process_vm_writev`: reading or writing another process's memory;
//! * `keyctl`, `add_key`, `request_key`: the kernel keyrings are not namespaced, and the session
//!   keyring Trellis was started with is inherited (security review F17);
//! * `bpf`, `perf_event_open`, `userfaultfd`: kernel attack surface a script has no use for;
//! * `unshare`, `setns`, `mount`, `umount2`, `pivot_root` and the new mount API (`fsopen`,
//!   `fsmount`, `fsconfig`, `fspick`, `move_mount`, `open_tree`, `mount_setattr`): a command could
//!   make a user namespace of its own, become "root" in it and rearrange its mounts;
//! * `init_module`, `finit_module`, `delete_module`, `kexec_load`, `kexec_file_load`;
//! * `socket` and `socketpair` of domain `AF_VSOCK` always (VM sockets reach services of the
//!   hypervisor or of the host outside every namespace), and of any domain but `AF_UNIX` when the
//!   request has no network ([`Network::None`]): the network namespace already has nothing but its
//!   own loopback, and with the filter a command cannot open raw, netlink or packet sockets either;
//!   with allowed domains ([`Network::Domains`]) `AF_INET` and `AF_INET6` are allowed too, for the
//!   proxy on the namespace's own loopback (`proxy`), and every other domain still refused;
//! * on x86_64, every system call of the x32 ABI (numbers with bit `0x40000000` set): they share
//!   the x86_64 architecture value, so the numbers above, which are x86_64's, would not match them.
//!
//! Every other system call is allowed. A system call made for a different architecture than the
//! host's (an i386 binary's `int 0x80` on x86_64) kills the process: that is the architecture check
//! `seccompiler` puts first in every program, and without it the numbers would mean other calls.
//!
//! Not covered: `clone` and `clone3` with namespace flags (`clone3` passes its flags in memory,
//! which a seccomp filter cannot read); nested user namespaces are refused by bubblewrap's
//! `--disable-userns` where it has it instead (see `bubblewrap/mod.rs`).
//!
//! The program is built with `seccompiler` (the rust-vmm crate of the Firecracker team: pure Rust,
//! no C libseccomp), once per sandbox, for the host's architecture; x86_64 and aarch64 are
//! supported. On any other, [`SyscallFilter::for_host`] says so and the sandbox's report says the
//! limit does not hold. bubblewrap reads the program from a file descriptor (`--seccomp FD`);
//! [`SyscallFilter::launch`] says how it gets there.

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};

use trellis_backend::sandbox::Network;

/// The shell that starts `bwrap` when there is a seccomp program (as `/bin/sh -c
/// SECCOMP_ON_FD_3 sh OPTIONS_FILE BWRAP --args 4 -- COMMAND…`).
///
/// `bwrap --seccomp FD` reads the program from a file descriptor of its own, but without `unsafe`
/// code (`pre_exec`, `dup2`) a child can only be given descriptors 0, 1 and 2, and 1 and 2 are
/// the output pipe. So the program (an anonymous file) is the shell's standard input, and this
/// wrapper moves it to descriptor [`SECCOMP_FD`], gives standard input `/dev/null` back (what the
/// command gets, as without a filter), and `exec`s bwrap: one `exec` more, no process more.
/// bwrap closes the descriptor after reading it, so the command never sees it. The same way, the
/// file of bwrap's options (its first argument) is opened as descriptor [`ARGS_FD`] for `bwrap
/// --args`, which reads it whole before anything runs.
const SECCOMP_ON_FD_3: &str = r#"f=$1; shift; exec "$@" 3<&0 4<"$f" </dev/null"#;

/// The descriptor [`SECCOMP_ON_FD_3`] opens the options file on.
const ARGS_FD: &str = "4";

/// The descriptor [`SECCOMP_ON_FD_3`] leaves the program on.
const SECCOMP_FD: &str = "3";

/// What bwrap is told when it is started by [`SyscallFilter::launch`].
pub(crate) const BWRAP_ARGS: [&str; 2] = ["--seccomp", SECCOMP_FD];

/// The shell that runs [`SECCOMP_ON_FD_3`].
const SH: &str = "/bin/sh";

/// A program to start, its arguments, and its standard input (`None`: `/dev/null`).
#[derive(Debug)]
pub(crate) struct Launch {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub stdin: Option<File>,
    /// The file of bwrap's options, kept until the launch is dropped.
    pub options: Option<tempfile::NamedTempFile>,
}

impl Launch {
    /// `bwrap` with `args`, as they are (no seccomp program).
    pub(crate) fn direct(bwrap: &Path, args: Vec<OsString>) -> Self {
        Self {
            program: bwrap.to_path_buf(),
            args,
            stdin: None,
            options: None,
        }
    }
}

/// The compiled programs for one host, in the byte form `bwrap --seccomp` reads: `struct
/// sock_filter` (`u16` code, `u8` jt, `u8` jf, `u32` k, native byte order), one after the other.
#[derive(Debug, Clone)]
pub(crate) struct SyscallFilter {
    /// For a request without network: every socket domain but `AF_UNIX` refused.
    no_network: Vec<u8>,
    /// For a request with allowed domains: every socket domain but `AF_UNIX`, `AF_INET` and
    /// `AF_INET6` refused.
    domains: Vec<u8>,
    /// For a request with the host's network: only `AF_VSOCK` refused.
    host_network: Vec<u8>,
    arch: &'static str,
}

impl SyscallFilter {
    /// The filter for the architecture Trellis was built for, or why there is none.
    pub(crate) fn for_host() -> Result<Self, String> {
        Ok(Self {
            no_network: imp::program(&Network::None)?,
            domains: imp::program(&Network::Domains(Default::default()))?,
            host_network: imp::program(&Network::Host)?,
            arch: std::env::consts::ARCH,
        })
    }

    /// The program for a request with `network`.
    pub(crate) fn program(&self, network: &Network) -> &[u8] {
        match network {
            Network::None => &self.no_network,
            Network::Domains(_) => &self.domains,
            Network::Host => &self.host_network,
        }
    }

    /// The architecture the programs were built for.
    pub(crate) fn arch(&self) -> &'static str {
        self.arch
    }

    /// How to start `bwrap` with the options in `options` (which hold [`BWRAP_ARGS`]) and then
    /// `command`, under the program for `network`: through [`SECCOMP_ON_FD_3`], the program as
    /// standard input, the options read by `--args` from the file.
    pub(crate) fn launch(
        &self,
        bwrap: &Path,
        options: tempfile::NamedTempFile,
        command: Vec<OsString>,
        network: &Network,
    ) -> std::io::Result<Launch> {
        let stdin = self.file(network)?;
        let mut wrapped: Vec<OsString> = Vec::with_capacity(command.len() + 8);
        wrapped.extend([
            "-c".into(),
            SECCOMP_ON_FD_3.into(),
            "sh".into(),
            options.path().as_os_str().to_os_string(),
            bwrap.as_os_str().to_os_string(),
            "--args".into(),
            ARGS_FD.into(),
            "--".into(),
        ]);
        wrapped.extend(command);
        Ok(Launch {
            program: PathBuf::from(SH),
            args: wrapped,
            stdin: Some(stdin),
            options: Some(options),
        })
    }

    /// An anonymous in-memory file holding the program for `network`, positioned at its start
    /// (for `bwrap --seccomp`, which reads the descriptor to its end). Close-on-exec: it reaches a
    /// child only as one of its standard descriptors.
    fn file(&self, network: &Network) -> std::io::Result<File> {
        use std::os::unix::fs::FileExt;
        let file = imp::anonymous_file()?;
        // `write_all_at` leaves the offset at 0, where bwrap starts reading.
        file.write_all_at(self.program(network), 0)?;
        Ok(file)
    }
}

#[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
mod imp {
    use std::collections::BTreeMap;
    use std::fs::File;

    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch, sock_filter,
    };
    use trellis_backend::sandbox::Network;

    /// Denied whatever their arguments.
    const DENIED: &[libc::c_long] = &[
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_fsopen,
        libc::SYS_fsmount,
        libc::SYS_fsconfig,
        libc::SYS_fspick,
        libc::SYS_move_mount,
        libc::SYS_open_tree,
        libc::SYS_mount_setattr,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
    ];

    #[cfg(target_arch = "x86_64")]
    const ARCH: TargetArch = TargetArch::x86_64;
    #[cfg(target_arch = "aarch64")]
    const ARCH: TargetArch = TargetArch::aarch64;

    /// The program for a request with `network`, as bytes.
    pub(super) fn program(network: &Network) -> Result<Vec<u8>, String> {
        // The conditions of one rule must all hold (a logical and).
        let socket_rule = |domain_test: SeccompCmpOp, domains: &[libc::c_int]| {
            let conditions = domains
                .iter()
                .map(|&domain| {
                    let domain = u64::try_from(domain).map_err(|e| e.to_string())?;
                    SeccompCondition::new(0, SeccompCmpArgLen::Dword, domain_test.clone(), domain)
                        .map_err(|e| e.to_string())
                })
                .collect::<Result<Vec<_>, String>>()?;
            SeccompRule::new(conditions).map_err(|e| e.to_string())
        };
        let socket = match network {
            // Any domain but AF_UNIX (which includes AF_VSOCK).
            Network::None => socket_rule(SeccompCmpOp::Ne, &[libc::AF_UNIX])?,
            // The proxy is on the namespace's own loopback: IP sockets, nothing else.
            Network::Domains(_) => {
                socket_rule(SeccompCmpOp::Ne, &[libc::AF_UNIX, libc::AF_INET, libc::AF_INET6])?
            }
            Network::Host => socket_rule(SeccompCmpOp::Eq, &[libc::AF_VSOCK])?,
        };
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> = DENIED.iter().map(|&nr| (nr, Vec::new())).collect();
        rules.insert(libc::SYS_socket, vec![socket.clone()]);
        rules.insert(libc::SYS_socketpair, vec![socket]);
        let filter = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(errno_perm()),
            ARCH,
        )
        .map_err(|e| e.to_string())?;
        let program = BpfProgram::try_from(filter).map_err(|e| e.to_string())?;
        let program = deny_x32(program)?;
        Ok(program.iter().flat_map(encode).collect())
    }

    fn errno_perm() -> u32 {
        u32::try_from(libc::EPERM).unwrap_or(1)
    }

    /// `sock_filter` as the kernel (and bwrap) read it.
    fn encode(insn: &sock_filter) -> [u8; 8] {
        let mut out = [0u8; 8];
        out[..2].copy_from_slice(&insn.code.to_ne_bytes());
        out[2] = insn.jt;
        out[3] = insn.jf;
        out[4..].copy_from_slice(&insn.k.to_ne_bytes());
        out
    }

    /// The instructions seccompiler puts first: load the architecture, skip the next instruction
    /// when it is the target's, else kill the process.
    const ARCH_CHECK_LEN: usize = 3;

    /// `program` with the x32 system calls refused right after the architecture check, on x86_64.
    ///
    /// seccompiler's rules match system call numbers one by one, so they cannot say "every number
    /// with the x32 bit"; its output is plain BPF, so three instructions go in after its
    /// architecture check (which they do not jump across, and which nothing jumps into):
    /// load the number, jump over the return unless it is at least `0x40000000`, return `EPERM`.
    #[cfg(target_arch = "x86_64")]
    fn deny_x32(mut program: BpfProgram) -> Result<BpfProgram, String> {
        const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
        const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
        const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
        /// `offsetof(struct seccomp_data, nr)`.
        const NR_OFFSET: u32 = 0;
        const X32_SYSCALL_BIT: u32 = 0x4000_0000;
        let arch_check_is_first = program.len() > ARCH_CHECK_LEN
            && program[0].code == LD_W_ABS
            && program[1].jt == 1
            && program[1].jf == 0
            && program[2].code == RET_K;
        if !arch_check_is_first {
            return Err("seccompiler's program does not start with its architecture check".into());
        }
        let insn = |code, jt, jf, k| sock_filter { code, jt, jf, k };
        let x32 = [
            insn(LD_W_ABS, 0, 0, NR_OFFSET),
            insn(JGE_K, 0, 1, X32_SYSCALL_BIT),
            insn(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | errno_perm()),
        ];
        program.splice(ARCH_CHECK_LEN..ARCH_CHECK_LEN, x32);
        Ok(program)
    }

    /// aarch64 has one system call ABI.
    #[cfg(not(target_arch = "x86_64"))]
    fn deny_x32(program: BpfProgram) -> Result<BpfProgram, String> {
        Ok(program)
    }

    pub(super) fn anonymous_file() -> std::io::Result<File> {
        let fd = rustix::fs::memfd_create("trellis-seccomp", rustix::fs::MemfdFlags::CLOEXEC)?;
        Ok(File::from(fd))
    }

    #[cfg(test)]
    #[allow(clippy::unwrap_used)]
    mod tests {
        use super::*;

        fn decode(bytes: &[u8]) -> Vec<(u16, u8, u8, u32)> {
            bytes
                .chunks_exact(8)
                .map(|c| {
                    (
                        u16::from_ne_bytes([c[0], c[1]]),
                        c[2],
                        c[3],
                        u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
                    )
                })
                .collect()
        }

        #[test]
        fn programs_are_whole_instructions_and_differ_by_network() {
            let off = program(&Network::None).unwrap();
            let on = program(&Network::Host).unwrap();
            let proxied = program(&Network::Domains(Default::default())).unwrap();
            assert_eq!(off.len() % 8, 0);
            assert_eq!(on.len() % 8, 0);
            assert_eq!(proxied.len() % 8, 0);
            assert_ne!(off, on);
            assert_ne!(off, proxied);
            assert_ne!(on, proxied);
            let insns = decode(&off);
            // Every denied number is compared against.
            for nr in DENIED.iter().chain([&libc::SYS_socket, &libc::SYS_socketpair]) {
                let nr = u32::try_from(*nr).unwrap();
                assert!(
                    insns.iter().any(|&(code, _, _, k)| code == 0x15 && k == nr),
                    "no comparison with {nr}"
                );
            }
        }

        #[cfg(target_arch = "x86_64")]
        #[test]
        fn x32_numbers_are_refused_right_after_the_architecture_check() {
            let insns = decode(&program(&Network::Host).unwrap());
            let eperm = libc::SECCOMP_RET_ERRNO | errno_perm();
            assert_eq!(insns[1].3, 0xC000_003E, "AUDIT_ARCH_X86_64");
            assert_eq!(
                &insns[3..6],
                &[(0x20, 0, 0, 0), (0x35, 0, 1, 0x4000_0000), (0x06, 0, 0, eperm)]
            );
        }
    }
}

#[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))))]
mod imp {
    use std::fs::File;

    use trellis_backend::sandbox::Network;

    pub(super) fn program(_: &Network) -> Result<Vec<u8>, String> {
        Err(format!(
            "no seccomp filter is built for {} on {}",
            std::env::consts::ARCH,
            std::env::consts::OS
        ))
    }

    pub(super) fn anonymous_file() -> std::io::Result<File> {
        tempfile::tempfile()
    }
}
