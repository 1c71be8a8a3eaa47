//! [`Clock`]: the time a provider signs with or checks token expiry against; injected so tests can
//! recompute a signature made at a fixed instant.

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

/// A source of the current time (the system clock by default).
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> SystemTime + Send + Sync>);

impl Clock {
    /// The system clock.
    pub fn system() -> Self {
        Self(Arc::new(SystemTime::now))
    }

    /// A clock that always says `at` (for tests).
    pub fn fixed(at: SystemTime) -> Self {
        Self(Arc::new(move || at))
    }

    /// A clock reading `now`.
    pub fn from_fn(now: impl Fn() -> SystemTime + Send + Sync + 'static) -> Self {
        Self(Arc::new(now))
    }

    /// The current time.
    pub fn now(&self) -> SystemTime {
        (self.0)()
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::system()
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Clock")
    }
}
