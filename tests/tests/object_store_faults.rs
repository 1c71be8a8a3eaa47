//! `ObjectStoreBackend` on the S3 emulator behind the fault-injecting proxy: transient errors are
//! retried a bounded number of times, stalls end in a typed timeout, a write whose reply was lost
//! is not reported as a conflict (nor applied twice), and a failed upload never leaves a partial
//! object. Request counts come from the proxy's log, never from timing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use bytes::Bytes;
use trellis_backend::{
    Backend, BackendError, BackendExt, ConflictKind, ObjectStoreBackend, RetryOptions, StoreOptions,
    VirtualPath, WriteMode,
};
use trellis_tests::emulator::{S3Target, s3_target, unique};
use trellis_tests::fault_proxy::{Fault, FaultProxy, Rule};

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

fn store(endpoint: &str, target: &S3Target, prefix: &str, options: StoreOptions) -> ObjectStoreBackend {
    let options = StoreOptions {
        options: StoreOptions::s3_compatible(endpoint, "test", "test").options,
        ..options
    };
    ObjectStoreBackend::from_url(&format!("s3://{}/{prefix}", target.bucket), &options).unwrap()
}

/// A backend through the proxy and one straight to the emulator, on the same fresh prefix.
async fn setup(
    suite: &str,
    options: StoreOptions,
) -> Option<(FaultProxy, ObjectStoreBackend, ObjectStoreBackend)> {
    let target = s3_target(suite)?;
    let proxy = FaultProxy::start(&target.endpoint).await.unwrap();
    let prefix = unique(suite);
    let faulty = store(&proxy.url(), &target, &prefix, options);
    let direct = store(&target.endpoint, &target, &prefix, StoreOptions::default());
    Some((proxy, faulty, direct))
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_failures_are_retried_and_then_succeed() {
    let options = StoreOptions::default().with_retry(quick_retries());
    let Some((proxy, faulty, direct)) = setup("faults-transient", options).await else {
        return;
    };
    let a = path("/a.txt");
    direct.write(&a, "v1".into(), WriteMode::Overwrite).await.unwrap();

    // Two 503s, then the read goes through: three GETs in all.
    proxy.add(
        Rule::new(Fault::service_unavailable())
            .method("GET")
            .target_contains("/a.txt")
            .times(2),
    );
    assert_eq!(guarded(content(&faulty, &a)).await, "v1");
    assert_eq!(proxy.count("GET", "/a.txt"), 3, "{:?}", proxy.seen());

    // The same for a write.
    proxy.reset_log();
    proxy.add(
        Rule::new(Fault::service_unavailable())
            .method("PUT")
            .target_contains("/a.txt")
            .times(2),
    );
    guarded(faulty.write(&a, "v2".into(), WriteMode::Overwrite))
        .await
        .unwrap();
    assert_eq!(proxy.count("PUT", "/a.txt"), 3, "{:?}", proxy.seen());
    assert_eq!(content(&direct, &a).await, "v2");

    // Connections closed or reset before the request reached the server are retried too.
    for fault in [Fault::DropBeforeForward, Fault::ResetBeforeForward] {
        proxy.reset_log();
        proxy.add(
            Rule::new(fault.clone())
                .method("GET")
                .target_contains("/a.txt")
                .times(2),
        );
        assert_eq!(guarded(content(&faulty, &a)).await, "v2", "{fault:?}");
        assert_eq!(proxy.count("GET", "/a.txt"), 3, "{fault:?}: {:?}", proxy.seen());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_failures_give_up_after_a_bounded_number_of_attempts() {
    // The shipped defaults, backoff included.
    let Some((proxy, faulty, direct)) = setup("faults-persistent", StoreOptions::default()).await else {
        return;
    };
    let attempts = 1 + RetryOptions::default().max_retries;
    assert_eq!(attempts, 4, "documented default: 3 retries");
    let b = path("/b.txt");
    direct
        .write(&b, "old".into(), WriteMode::Overwrite)
        .await
        .unwrap();
    let version = direct.stat(&b).await.unwrap().version.unwrap();

    proxy.add(Rule::new(Fault::internal_error()).target_contains("/b.txt"));
    let err = guarded(faulty.read(&b, None)).await.unwrap_err();
    assert!(matches!(err, BackendError::Unavailable { .. }), "{err:?}");
    assert!(err.is_transient() && err.to_string().contains("/b.txt"), "{err}");
    assert_eq!(proxy.count("GET", "/b.txt"), attempts, "{:?}", proxy.seen());

    // A version-checked write: 5xx replies are retried (the server refused the request), and the
    // write is then checked once with a HEAD.
    proxy.reset_log();
    let err = guarded(faulty.write(&b, "new".into(), WriteMode::IfVersion(version)))
        .await
        .unwrap_err();
    assert!(matches!(err, BackendError::Unavailable { .. }), "{err:?}");
    assert_eq!(proxy.count("PUT", "/b.txt"), attempts, "{:?}", proxy.seen());
    assert_eq!(content(&direct, &b).await, "old");

    // Retries off: one attempt.
    let target = s3_target("faults-persistent").unwrap();
    let once = store(
        &proxy.url(),
        &target,
        "unused",
        StoreOptions::default().with_retry(RetryOptions {
            max_retries: 0,
            ..RetryOptions::default()
        }),
    );
    proxy.reset_log();
    proxy.add(Rule::new(Fault::internal_error()).target_contains("/unused/"));
    let err = guarded(once.read(&path("/x"), None)).await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    assert_eq!(proxy.count("GET", "/unused/x"), 1, "{:?}", proxy.seen());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_store_ends_in_a_typed_timeout() {
    let options = StoreOptions::default()
        .with_timeout(Duration::from_millis(300))
        .with_retry(RetryOptions {
            max_retries: 1,
            ..quick_retries()
        });
    let Some((proxy, faulty, direct)) = setup("faults-stall", options).await else {
        return;
    };
    let c = path("/c.txt");
    direct
        .write(&c, "old".into(), WriteMode::Overwrite)
        .await
        .unwrap();
    let version = direct.stat(&c).await.unwrap().version.unwrap();

    // A read is safe to repeat: retried once after its timeout, then a typed timeout.
    proxy.add(Rule::new(Fault::Stall).method("GET").target_contains("/c.txt"));
    let err = guarded(faulty.read(&c, None)).await.unwrap_err();
    assert!(matches!(err, BackendError::Timeout { .. }), "{err:?}");
    assert!(err.is_timeout() && err.is_transient(), "{err:?}");
    assert_eq!(err.path(), "/c.txt");
    assert_eq!(proxy.count("GET", "/c.txt"), 2, "{:?}", proxy.seen());

    // A version-checked write is not repeated after a timeout: it may have been applied.
    proxy.reset_log();
    proxy.add(Rule::new(Fault::Stall).method("PUT").target_contains("/c.txt"));
    let err = guarded(faulty.write(&c, "new".into(), WriteMode::IfVersion(version)))
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    assert_eq!(proxy.count("PUT", "/c.txt"), 1, "{:?}", proxy.seen());
    assert_eq!(content(&direct, &c).await, "old");

    // Latency alone is no failure.
    let target = s3_target("faults-stall").unwrap();
    proxy.clear_rules();
    proxy.reset_log();
    proxy.add(Rule::new(Fault::Delay(Duration::from_millis(50))).target_contains("/d.txt"));
    let slow = store(&proxy.url(), &target, "faults-latency", StoreOptions::default());
    let d = path("/d.txt");
    guarded(slow.write(&d, "late".into(), WriteMode::Overwrite))
        .await
        .unwrap();
    assert_eq!(guarded(content(&slow, &d)).await, "late");
    assert_eq!(proxy.count("PUT", "/d.txt") + proxy.count("GET", "/d.txt"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_reply_was_lost_is_neither_a_conflict_nor_applied_twice() {
    let options = StoreOptions::default().with_retry(quick_retries());
    let Some((proxy, faulty, direct)) = setup("faults-reply-lost", options).await else {
        return;
    };
    // (fault, PUTs sent): a closed connection or a 5xx is retried (the retry meets its own
    // write: 412); a reset connection is not (a version-checked write is not idempotent).
    let cases = [
        (Fault::DropAfterForward, 2),
        (Fault::ResetAfterForward, 1),
        (
            Fault::RespondAfterForward {
                status: 503,
                body: "applied, then lost".into(),
            },
            2,
        ),
    ];
    for (i, (fault, puts)) in cases.into_iter().enumerate() {
        let p = path(&format!("/versioned-{i}.txt"));
        let v0 = direct.write(&p, "v0".into(), WriteMode::Overwrite).await.unwrap();
        proxy.reset_log();
        proxy.add(
            Rule::new(fault.clone())
                .method("PUT")
                .with_header("if-match")
                .times(1),
        );
        let outcome = guarded(faulty.write(&p, "v1".into(), WriteMode::IfVersion(v0.version.unwrap())))
            .await
            .unwrap_or_else(|e| panic!("{fault:?}: the write landed but was reported as {e:?}"));
        assert_eq!(content(&direct, &p).await, "v1", "{fault:?}");
        assert_eq!(
            outcome.version,
            direct.stat(&p).await.unwrap().version,
            "{fault:?}"
        );
        assert_eq!(
            proxy.count("PUT", &p.as_str()[1..]),
            puts,
            "{fault:?}: {:?}",
            proxy.seen()
        );
    }

    // Create-only: the retry meets the file it created.
    let created = path("/created.txt");
    proxy.reset_log();
    proxy.add(
        Rule::new(Fault::DropAfterForward)
            .method("PUT")
            .with_header("if-none-match")
            .times(1),
    );
    guarded(faulty.write(&created, "mine".into(), WriteMode::CreateNew))
        .await
        .unwrap();
    assert_eq!(content(&direct, &created).await, "mine");
    assert_eq!(proxy.count("PUT", "/created.txt"), 2);

    // Read-modify-write: the increment is applied exactly once.
    let counter = path("/counter");
    direct
        .write(&counter, "0".into(), WriteMode::Overwrite)
        .await
        .unwrap();
    proxy.add(
        Rule::new(Fault::DropAfterForward)
            .method("PUT")
            .with_header("if-match")
            .times(1),
    );
    guarded(faulty.update(&counter, 5, |old| {
        let n: u64 = std::str::from_utf8(old.unwrap()).unwrap().parse().unwrap();
        Ok(Bytes::from((n + 1).to_string()))
    }))
    .await
    .unwrap();
    assert_eq!(content(&direct, &counter).await, "1");

    // A real conflict stays a conflict, even when its reply is lost too.
    let contested = path("/contested.txt");
    let stale = direct
        .write(&contested, "a".into(), WriteMode::Overwrite)
        .await
        .unwrap();
    direct
        .write(&contested, "b".into(), WriteMode::Overwrite)
        .await
        .unwrap();
    proxy.add(
        Rule::new(Fault::DropAfterForward)
            .method("PUT")
            .with_header("if-match")
            .times(1),
    );
    let err = guarded(faulty.write(
        &contested,
        "c".into(),
        WriteMode::IfVersion(stale.version.unwrap()),
    ))
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            BackendError::Conflict {
                kind: ConflictKind::VersionMismatch,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(content(&direct, &contested).await, "b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_upload_never_leaves_a_partial_object() {
    let options = StoreOptions::default().with_retry(quick_retries());
    let Some((proxy, faulty, direct)) = setup("faults-partial", options).await else {
        return;
    };
    let big = path("/big.bin");
    let old = Bytes::from(vec![b'a'; 256 * 1024]);
    let new = Bytes::from(vec![b'b'; 256 * 1024]);
    direct
        .write(&big, old.clone(), WriteMode::Overwrite)
        .await
        .unwrap();
    let version = direct.stat(&big).await.unwrap().version.unwrap();

    // Every upload is cut off after 1000 bytes: the write fails and the old object is intact.
    proxy.add(Rule::new(Fault::TruncateBody(1000)).method("PUT"));
    let err = guarded(faulty.write(&big, new.clone(), WriteMode::Overwrite))
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    assert_eq!(proxy.count("PUT", "/big.bin"), 4, "{:?}", proxy.seen());
    assert_eq!(content(&direct, &big).await, old);
    let err = guarded(faulty.write(&big, new.clone(), WriteMode::IfVersion(version.clone())))
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    assert_eq!(content(&direct, &big).await, old);
    assert_eq!(direct.stat(&big).await.unwrap().version, Some(version.clone()));

    // Cut off once: the retry uploads the whole object.
    proxy.clear_rules();
    proxy.add(Rule::new(Fault::TruncateBody(1000)).method("PUT").times(1));
    guarded(faulty.write(&big, new.clone(), WriteMode::IfVersion(version)))
        .await
        .unwrap();
    assert_eq!(content(&direct, &big).await, new);
}
