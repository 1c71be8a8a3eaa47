//! The one emulator guard of this test binary: tests that need a storage emulator ask for its
//! variables here. Unset, the test says it was skipped (one message format) and returns; under
//! `TRELLIS_EMULATORS=required` (set by `cargo xtask test` and CI) it fails instead, naming what is
//! missing.

use trellis_backend::{ObjectStoreBackend, StoreOptions};

/// The value of the emulator variable `var` for `suite`; `None` (after saying the suite was
/// skipped) when it is unset and emulators are not required.
pub fn emulator(var: &str, suite: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ if std::env::var("TRELLIS_EMULATORS").as_deref() == Ok("required") => {
            panic!("{suite}: {var} is not set but TRELLIS_EMULATORS=required; is the emulator running?")
        }
        _ => {
            eprintln!("skipped: {suite} (set {var} or run `cargo xtask test`)");
            None
        }
    }
}

/// The test bucket (`TRELLIS_TEST_BUCKET`, default `trellis-test`).
pub fn bucket() -> String {
    std::env::var("TRELLIS_TEST_BUCKET").unwrap_or_else(|_| "trellis-test".to_owned())
}

/// An S3 backend on the emulator at `endpoint`, below `prefix` of the test bucket.
pub fn s3_backend(endpoint: &str, prefix: &str) -> ObjectStoreBackend {
    let options = StoreOptions::s3_compatible(endpoint, "test", "test");
    ObjectStoreBackend::from_url(&format!("s3://{}/{prefix}", bucket()), &options).unwrap()
}
