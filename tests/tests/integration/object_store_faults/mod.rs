//! `ObjectStoreBackend` on each object-store emulator (moto for S3, fake-gcs-server behind the XML
//! shim for GCS, Azurite for Azure) behind the fault-injecting proxy: transient errors are retried
//! a bounded number of times, stalls end in a typed timeout, a write whose reply was lost is neither
//! reported as a conflict nor applied twice, and a failed upload never leaves a partial object.
//! Request counts come from the proxy's log, never from timing.
//!
//! Every scenario (in `retries.rs` and `writes.rs`) takes the [`Cloud`] it runs on; the macro at
//! the bottom turns each into one test per store: `s3::…`, `gcs::…`, `azure::…`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod retries;
mod writes;

use std::time::Duration;

use bytes::Bytes;
use trellis_backend::{Backend, ObjectStoreBackend, RetryOptions, StoreOptions, VirtualPath};
use trellis_tests::emulator::{Cloud, CloudTarget, cloud_target, unique};
use trellis_tests::fault_proxy::FaultProxy;

/// Only a guard against a hang: no assertion here is about speed.
const HANG_GUARD: Duration = Duration::from_secs(120);

/// Fast backoff, default retry count: the count is what the tests check.
fn quick_retries() -> RetryOptions {
    RetryOptions {
        init_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
        ..RetryOptions::default()
    }
}

/// One scenario's stores: `faulty` goes through `proxy`, `direct` straight to the emulator, both on
/// the same fresh prefix.
struct Setup {
    target: CloudTarget,
    proxy: FaultProxy,
    faulty: ObjectStoreBackend,
    direct: ObjectStoreBackend,
}

impl Setup {
    /// `None` (after saying so) when the emulator is not configured and not required.
    async fn new(cloud: Cloud, suite: &str, options: StoreOptions) -> Option<Self> {
        let suite = format!("{suite}-{}", cloud_name(cloud));
        let target = cloud_target(cloud, &suite)?;
        let proxy = FaultProxy::start(&target.endpoint).await.unwrap();
        let prefix = unique(&suite);
        let faulty = target.backend(&proxy.url(), &prefix, options).unwrap();
        let direct = target
            .backend(&target.endpoint, &prefix, StoreOptions::default())
            .unwrap();
        Some(Self {
            target,
            proxy,
            faulty,
            direct,
        })
    }

    /// Another backend through the proxy, on `prefix`.
    fn through_proxy(&self, prefix: &str, options: StoreOptions) -> ObjectStoreBackend {
        self.target.backend(&self.proxy.url(), prefix, options).unwrap()
    }

    /// The server's status for each request with `method` whose target contains `target`, in
    /// order (`None`: not forwarded, or no reply).
    fn upstream_statuses(&self, method: &str, target: &str) -> Vec<Option<u16>> {
        self.proxy
            .seen()
            .iter()
            .filter(|s| s.method == method && s.target.contains(target))
            .map(|s| s.upstream_status)
            .collect()
    }

    /// How the proxy's log reads, for assertion messages.
    fn log(&self) -> String {
        let seen: Vec<String> = self.proxy.seen().iter().map(ToString::to_string).collect();
        format!("{:?}: {seen:#?}", self.target.cloud)
    }
}

fn cloud_name(cloud: Cloud) -> &'static str {
    match cloud {
        Cloud::S3 => "s3",
        Cloud::Gcs => "gcs",
        Cloud::Azure => "azure",
    }
}

fn path(p: &str) -> VirtualPath {
    VirtualPath::parse(p).unwrap()
}

async fn guarded<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(HANG_GUARD, f).await.expect("hung")
}

async fn content(backend: &ObjectStoreBackend, p: &VirtualPath) -> Bytes {
    backend.read(p, None).await.unwrap().bytes
}

/// One test per scenario for the store `$cloud`, in module `$module`.
macro_rules! cloud_tests {
    ($module:ident, $cloud:expr) => {
        mod $module {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn transient_failures_are_retried_and_then_succeed() {
                retries::transient_failures_are_retried_and_then_succeed($cloud).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn persistent_failures_give_up_after_a_bounded_number_of_attempts() {
                retries::persistent_failures_give_up_after_a_bounded_number_of_attempts($cloud).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_stalled_store_ends_in_a_typed_timeout() {
                retries::a_stalled_store_ends_in_a_typed_timeout($cloud).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_write_whose_reply_was_lost_is_neither_a_conflict_nor_applied_twice() {
                writes::a_write_whose_reply_was_lost_is_neither_a_conflict_nor_applied_twice($cloud).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_failed_upload_never_leaves_a_partial_object() {
                writes::a_failed_upload_never_leaves_a_partial_object($cloud).await;
            }
        }
    };
}

cloud_tests!(s3, Cloud::S3);
cloud_tests!(gcs, Cloud::Gcs);
cloud_tests!(azure, Cloud::Azure);
