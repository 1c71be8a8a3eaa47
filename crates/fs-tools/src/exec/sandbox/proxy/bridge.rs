//! The bridge: a small program that runs inside the sandbox ahead of the command, so that the
//! sandbox's own network namespace has an HTTP proxy at `127.0.0.1:3128` whose bytes go to the
//! Unix socket of Trellis's proxy outside.
//!
//! Started as `BRIDGE [`BRIDGE_ARG`] PORT SOCKET -- PROGRAM ARGS…` (the sandbox does this), it
//! binds `127.0.0.1:PORT` first, so a connection the command makes at once waits in the backlog;
//! hands the listening socket to a copy of itself that serves it (started through a second copy
//! that exits at once, so the server belongs to the namespace's init, not to the command); and
//! then `exec`s `PROGRAM`, which so becomes the command with the bridge's process id, standard
//! descriptors and environment. The server relays each connection to `SOCKET`, at most
//! [`MAX_CONNECTIONS`] at once, and lives until the sandbox ends.
//!
//! It is not a boundary: the command may kill it or talk to the socket itself, and meets the same
//! proxy either way. Only the standard library is used, and no `unsafe`.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The first argument of the bridge program (the `trellis-sandbox-bridge` binary, or a program
/// that hands its arguments to [`main`] when its first one is this, as the `trellis` command
/// does).
pub const BRIDGE_ARG: &str = "--trellis-sandbox-bridge";

/// Connections relayed at once; more are closed at once.
pub const MAX_CONNECTIONS: usize = 64;

/// Run the bridge with the arguments after [`BRIDGE_ARG`]. Returns only on failure (a bad
/// argument, a port already taken, a program that cannot be started), with the reason on standard
/// error.
pub fn main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let args: Vec<OsString> = args.into_iter().collect();
    let result = match args.first().and_then(|a| a.to_str()) {
        Some("--serve") => serve(args.get(1)),
        Some("--detach") => detach(args.get(1)),
        _ => start(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("trellis sandbox bridge: {why}");
            ExitCode::from(126)
        }
    }
}

/// `PORT SOCKET -- PROGRAM ARGS…`: listen, start the server, become the program.
fn start(args: &[OsString]) -> Result<(), String> {
    let [port, socket, dashes, program, rest @ ..] = args else {
        return Err("usage: PORT SOCKET -- PROGRAM ARGS...".into());
    };
    if dashes != "--" {
        return Err("usage: PORT SOCKET -- PROGRAM ARGS...".into());
    }
    let port: u16 = port
        .to_str()
        .and_then(|p| p.parse().ok())
        .ok_or("the port is not a number")?;
    let listener = TcpListener::bind(("127.0.0.1", port))
        .map_err(|e| format!("cannot listen on 127.0.0.1:{port}: {e}"))?;
    let me = std::env::current_exe().map_err(|e| format!("cannot find myself: {e}"))?;
    let mut detacher = Command::new(&me)
        .args([BRIDGE_ARG.into(), "--detach".into(), socket.clone()])
        .stdin(Stdio::from(OwnedFd::from(listener)))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start the server: {e}"))?;
    let _ = detacher.wait();
    let err = Command::new(program).args(rest).exec();
    Err(format!("cannot run {}: {err}", PathBuf::from(program).display()))
}

/// `--detach SOCKET`: start the server with the same standard input, and exit.
fn detach(socket: Option<&OsString>) -> Result<(), String> {
    let socket = socket.ok_or("no socket")?;
    let me = std::env::current_exe().map_err(|e| format!("cannot find myself: {e}"))?;
    Command::new(me)
        .args([BRIDGE_ARG.into(), "--serve".into(), socket.clone()])
        .stdin(Stdio::inherit())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(drop)
        .map_err(|e| format!("cannot start the server: {e}"))
}

/// `--serve SOCKET`: standard input is the listening socket; relay every connection to `SOCKET`.
fn serve(socket: Option<&OsString>) -> Result<(), String> {
    let socket = PathBuf::from(socket.ok_or("no socket")?);
    let listener = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map(TcpListener::from)
        .map_err(|e| format!("standard input: {e}"))?;
    let active = Arc::new(AtomicUsize::new(0));
    loop {
        let Ok((client, _)) = listener.accept() else {
            // Out of descriptors, say: wait rather than spin.
            std::thread::sleep(std::time::Duration::from_millis(50));
            continue;
        };
        if active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            active.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        let socket = socket.clone();
        let count = active.clone();
        let spawned = std::thread::Builder::new().stack_size(64 * 1024).spawn(move || {
            relay(client, &socket);
            count.fetch_sub(1, Ordering::SeqCst);
        });
        if spawned.is_err() {
            active.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Copy bytes both ways between `client` and a new connection to `socket`, passing each side's
/// end of writing on to the other.
fn relay(client: TcpStream, socket: &std::path::Path) {
    let Ok(upstream) = UnixStream::connect(socket) else {
        return;
    };
    let (Ok(client_in), Ok(upstream_out)) = (client.try_clone(), upstream.try_clone()) else {
        return;
    };
    let up = std::thread::Builder::new().stack_size(64 * 1024).spawn(move || {
        copy(client_in, &upstream_out);
        let _ = upstream_out.shutdown(Shutdown::Write);
    });
    copy(upstream, &client);
    let _ = client.shutdown(Shutdown::Write);
    if let Ok(up) = up {
        let _ = up.join();
    }
}

fn copy(mut from: impl Read, mut to: impl Write) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
}
