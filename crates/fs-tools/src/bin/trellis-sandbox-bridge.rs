//! The in-sandbox bridge of `execute` commands with allowed domains (see
//! `trellis_fs_tools::sandbox::bridge`): `trellis-sandbox-bridge --trellis-sandbox-bridge PORT
//! SOCKET -- PROGRAM ARGS…`.

use std::process::ExitCode;

use trellis_fs_tools::sandbox::bridge;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(bridge::BRIDGE_ARG.as_ref()) {
        eprintln!("trellis-sandbox-bridge runs inside Trellis's sandbox only");
        return ExitCode::from(2);
    }
    bridge::main(args)
}
