//! Where the emulators are, from the environment `cargo xtask test` sets.

use std::time::{SystemTime, UNIX_EPOCH};

/// The S3 emulator.
#[derive(Debug, Clone)]
pub struct S3Target {
    /// `http://127.0.0.1:4566` or the like (`TRELLIS_S3_ENDPOINT`).
    pub endpoint: String,
    /// The test bucket (`TRELLIS_TEST_BUCKET`).
    pub bucket: String,
}

/// The S3 emulator, or `None` after printing that `suite` was skipped. With
/// `TRELLIS_EMULATORS=required` (as `cargo xtask test` and CI set) a missing emulator is a failure.
pub fn s3_target(suite: &str) -> Option<S3Target> {
    let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
    match (var("TRELLIS_S3_ENDPOINT"), var("TRELLIS_TEST_BUCKET")) {
        (Some(endpoint), Some(bucket)) => Some(S3Target { endpoint, bucket }),
        _ if std::env::var("TRELLIS_EMULATORS").as_deref() == Ok("required") => {
            panic!(
                "{suite}: TRELLIS_S3_ENDPOINT and TRELLIS_TEST_BUCKET must be set when TRELLIS_EMULATORS=required"
            )
        }
        _ => {
            println!("skipped: {suite} (set TRELLIS_S3_ENDPOINT or run `cargo xtask test`)");
            None
        }
    }
}

/// `tag` made unique to this process and moment, for key prefixes and thread ids.
pub fn unique(tag: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{tag}-{}-{nanos}", std::process::id())
}
