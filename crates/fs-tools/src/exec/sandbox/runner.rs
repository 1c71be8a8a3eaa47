//! What every local sandbox does around the command itself: checking the request, the clean
//! environment, and, afterwards, writing back the files and saving the whole output.

use bytes::Bytes;
use trellis_backend::sandbox::{
    ExecFiles, ExecOutput, ExecRequest, NotWritten, NotWrittenReason, SandboxError, SandboxLimits,
};
use trellis_backend::{VirtualPath, WriteMode};

use super::process::Finished;
use super::workdir::Workdir;

/// `PATH` inside a sandbox.
pub(crate) const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The command's home directory: in the view, so what it keeps there is the thread's.
pub(crate) fn home() -> VirtualPath {
    VirtualPath::parse("/home").unwrap_or_else(|_| VirtualPath::root())
}

/// `request`, checked, with its timeout clamped to the limits.
pub(crate) fn checked(request: &ExecRequest, limits: &SandboxLimits) -> Result<ExecRequest, SandboxError> {
    if request.command.trim().is_empty() {
        return Err(SandboxError::InvalidRequest("the command is empty".into()));
    }
    if request.command.contains('\0') {
        return Err(SandboxError::InvalidRequest(
            "the command contains a NUL byte".into(),
        ));
    }
    for (name, value) in &request.env {
        let valid = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !valid || value.contains('\0') {
            return Err(SandboxError::InvalidRequest(format!(
                "{name:?} is not a usable environment variable"
            )));
        }
        if loader_variable(name) {
            return Err(SandboxError::InvalidRequest(format!(
                "{name} is read by the dynamic loader or the C library of every program, the sandbox's host-side helpers included; a request may not set it"
            )));
        }
    }
    let top = request.cwd.segments().next().unwrap_or("");
    if super::workdir::RESERVED.contains(&top) {
        return Err(SandboxError::InvalidRequest(format!(
            "the working directory {} is a system directory of the sandbox",
            request.cwd
        )));
    }
    let mut request = request.clone();
    request.timeout = request.timeout.min(limits.max_timeout);
    Ok(request)
}

/// Variables the C library treats as unsafe for privileged programs (glibc's `UNSECURE_ENVVARS`,
/// less `TMPDIR`): every `LD_*` one (`LD_PRELOAD`, `LD_LIBRARY_PATH`, `LD_AUDIT`, …) and these.
/// They make any dynamically linked program load code or data from where they say.
const LOADER_VARIABLES: &[&str] = &[
    "GCONV_PATH",
    "GETCONF_DIR",
    "GLIBC_TUNABLES",
    "HOSTALIASES",
    "LOCALDOMAIN",
    "LOCPATH",
    "MALLOC_TRACE",
    "NIS_PATH",
    "NLSPATH",
    "RESOLV_HOST_CONF",
    "RES_OPTIONS",
    "TZDIR",
];

/// True for a variable a request may not set (see [`LOADER_VARIABLES`]).
fn loader_variable(name: &str) -> bool {
    name.starts_with("LD_") || LOADER_VARIABLES.contains(&name)
}

/// The clean environment: the base variables, then the request's.
pub(crate) fn environment(request: &ExecRequest, home: &str, tmp: &str) -> Vec<(String, String)> {
    let mut env = vec![
        ("PATH".to_owned(), PATH.to_owned()),
        ("HOME".to_owned(), home.to_owned()),
        ("LANG".to_owned(), "C.UTF-8".to_owned()),
        ("TMPDIR".to_owned(), tmp.to_owned()),
        ("PYTHONDONTWRITEBYTECODE".to_owned(), "1".to_owned()),
    ];
    for (name, value) in &request.env {
        env.retain(|(n, _)| n != name);
        env.push((name.clone(), value.clone()));
    }
    env
}

/// Eight random hex digits, for conflict copies and control-group names.
pub(crate) fn tag() -> String {
    let mut b = [0u8; 4];
    let _ = getrandom::fill(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Write back, save the whole output if it was cut, and say what happened.
pub(crate) async fn finish(
    files: &ExecFiles,
    request: &ExecRequest,
    workdir: Workdir,
    finished: Finished,
) -> Result<ExecOutput, SandboxError> {
    let (changes, mut not_written) = workdir.write_back(files, &tag()).await;
    let Finished {
        mut captured,
        exit_code,
        timed_out,
        duration,
    } = finished;
    let truncated = captured.tail.is_some();
    let mut full_output_path = None;
    let mut note = None;
    if truncated && let (Some(path), Some((file, len))) = (&request.full_output_path, captured.spill.take()) {
        if files.may_write(path) {
            let data = tokio::task::spawn_blocking(move || {
                let mut data = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
                std::io::Read::read_to_end(&mut std::io::Read::take(file, len), &mut data).map(|_| data)
            })
            .await;
            match data {
                Ok(Ok(data)) => {
                    let whole = len == captured.total;
                    match files
                        .backend
                        .write(path, Bytes::from(data), WriteMode::Overwrite)
                        .await
                    {
                        Ok(_) => {
                            full_output_path = Some(path.clone());
                            note = Some(if whole {
                                format!("the whole output is in {path}")
                            } else {
                                format!("the first {len} bytes of it are in {path}")
                            });
                        }
                        Err(e) => not_written.push(NotWritten {
                            path: path.to_string(),
                            reason: NotWrittenReason::Failed(e.to_string()),
                        }),
                    }
                }
                _ => not_written.push(NotWritten {
                    path: path.to_string(),
                    reason: NotWrittenReason::Failed("the saved output could not be read back".into()),
                }),
            }
        } else {
            not_written.push(NotWritten {
                path: path.to_string(),
                reason: NotWrittenReason::Denied,
            });
        }
    }
    let mut output = ExecOutput::new(captured.text(note.as_deref()), exit_code);
    output.timed_out = timed_out;
    output.truncated = truncated;
    output.output_bytes = captured.total;
    output.full_output_path = full_output_path;
    output.changes = changes;
    output.not_written = not_written;
    output.duration = duration;
    Ok(output)
}
