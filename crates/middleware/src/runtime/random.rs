//! Randomness: unique ids (threads, runs, tool calls, checkpoint nonces) from the operating system's
//! random source, and [`SplitMix`], a seedable generator for retry jitter, where reproducible seeds
//! matter and secrecy does not.

use std::collections::hash_map::RandomState;
use std::fmt::Write as _;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A random seed from the process's hash keys, the clock and a counter.
pub(crate) fn random_seed() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    hasher.finish()
}

/// SplitMix64: tiny, fast, good enough for jitter and ids (not for secrets).
#[derive(Debug)]
pub(crate) struct SplitMix(AtomicU64);

impl SplitMix {
    pub(crate) fn new(seed: u64) -> Self {
        Self(AtomicU64::new(seed))
    }

    pub(crate) fn next_u64(&self) -> u64 {
        let mut z = self
            .0
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A float in `[0, 1)`.
    pub(crate) fn next_f64(&self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1_u64 << 53) as f64
    }
}

/// `prefix` + `-` + 24 hex digits (96 bits) from the operating system's random source. Should that
/// fail, the digits come from [`SplitMix`] over a hashed clock-and-counter seed, with a warning:
/// still unique in practice, no longer unguessable.
pub(crate) fn unique_id(prefix: &str) -> String {
    let mut bytes = [0_u8; 12];
    match getrandom::fill(&mut bytes) {
        Ok(()) => {
            let mut id = String::with_capacity(prefix.len() + 25);
            id.push_str(prefix);
            id.push('-');
            for b in bytes {
                let _ = write!(id, "{b:02x}");
            }
            id
        }
        Err(error) => {
            tracing::warn!(%error, "no OS randomness for an id; using a hashed seed");
            let rng = SplitMix::new(random_seed());
            format!("{prefix}-{:016x}{:08x}", rng.next_u64(), rng.next_u64() as u32)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_stay_in_range_and_seeds_reproduce() {
        let a = SplitMix::new(42);
        let b = SplitMix::new(42);
        for _ in 0..1000 {
            let x = a.next_f64();
            assert!((0.0..1.0).contains(&x));
            assert_eq!(x, b.next_f64());
        }
        assert_ne!(unique_id("x"), unique_id("x"));
        let id = unique_id("t");
        assert_eq!(id.len(), 2 + 24);
        assert!(
            id.starts_with("t-")
                && id[2..]
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
    }
}
