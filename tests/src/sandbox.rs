//! The bubblewrap sandbox for the integration tests, or skipping (or failing) when it is missing.

use std::sync::{Arc, OnceLock};

use trellis_backend::Sandbox;
use trellis_middleware::tools::sandbox::{BubblewrapConfig, BubblewrapSandbox};

/// The shared bubblewrap sandbox, or `None` after printing that `suite` was skipped. With
/// `TRELLIS_SANDBOX=required` (as `cargo xtask test` and CI set) a missing sandbox is a failure.
pub fn bubblewrap(suite: &str) -> Option<Arc<dyn Sandbox>> {
    static MADE: OnceLock<Result<Arc<dyn Sandbox>, String>> = OnceLock::new();
    let made = MADE.get_or_init(|| {
        BubblewrapSandbox::new(BubblewrapConfig::default())
            .map(|s| Arc::new(s) as Arc<dyn Sandbox>)
            .map_err(|e| e.to_string())
    });
    match made {
        Ok(s) => Some(Arc::clone(s)),
        Err(e) if std::env::var("TRELLIS_SANDBOX").as_deref() == Ok("required") => {
            panic!("{suite}: bubblewrap is unavailable but TRELLIS_SANDBOX=required: {e}")
        }
        Err(e) => {
            println!("skipped: {suite} (bubblewrap unavailable: {e})");
            None
        }
    }
}
