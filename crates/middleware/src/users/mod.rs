//! What the per-user layers (user memory, personal skills) share: where a run's user keeps their
//! files ([`UserHomes`]) and a bounded cache of what was read per user ([`UserCache`]).

mod cache;
mod home;

pub use cache::{DEFAULT_USER_CACHE_CAPACITY, UserCache};
pub use home::{UserHome, UserHomeError, UserHomes, shown_path};
