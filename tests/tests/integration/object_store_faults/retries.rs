//! Retries and timeouts: transient failures are retried, persistent ones end after a bounded number
//! of attempts in `Unavailable`, stalls in `Timeout`.

use trellis_backend::{BackendError, WriteMode};
use trellis_tests::fault_proxy::{Fault, Rule};

use super::*;

pub async fn transient_failures_are_retried_and_then_succeed(cloud: Cloud) {
    let options = StoreOptions::default().with_retry(quick_retries());
    let Some(s) = Setup::new(cloud, "faults-transient", options).await else {
        return;
    };
    let (proxy, faulty, direct) = (&s.proxy, &s.faulty, &s.direct);
    let a = path("/a.txt");
    direct.write(&a, "v1".into(), WriteMode::Overwrite).await.unwrap();

    // Two 503s, then the read goes through: three GETs in all.
    proxy.add(
        Rule::new(Fault::service_unavailable())
            .method("GET")
            .target_contains("/a.txt")
            .times(2),
    );
    assert_eq!(guarded(content(faulty, &a)).await, "v1");
    assert_eq!(proxy.count("GET", "/a.txt"), 3, "{}", s.log());

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
    assert_eq!(proxy.count("PUT", "/a.txt"), 3, "{}", s.log());
    assert_eq!(content(direct, &a).await, "v2");

    // And for a version-checked write: a 503 is a refusal, so retrying it is safe.
    let version = direct.stat(&a).await.unwrap().version.unwrap();
    proxy.reset_log();
    proxy.add(
        Rule::new(Fault::service_unavailable())
            .method("PUT")
            .with_header(cloud.update_header())
            .times(2),
    );
    let written = guarded(faulty.write(&a, "v3".into(), WriteMode::IfVersion(version)))
        .await
        .unwrap();
    assert_eq!(proxy.count("PUT", "/a.txt"), 3, "{}", s.log());
    assert_eq!(content(direct, &a).await, "v3");
    assert_eq!(written.version, direct.stat(&a).await.unwrap().version);

    // Connections closed or reset before the request reached the server are retried too.
    for fault in [Fault::DropBeforeForward, Fault::ResetBeforeForward] {
        proxy.reset_log();
        proxy.add(
            Rule::new(fault.clone())
                .method("GET")
                .target_contains("/a.txt")
                .times(2),
        );
        assert_eq!(guarded(content(faulty, &a)).await, "v3", "{fault:?}");
        assert_eq!(proxy.count("GET", "/a.txt"), 3, "{fault:?}: {}", s.log());
    }
}

pub async fn persistent_failures_give_up_after_a_bounded_number_of_attempts(cloud: Cloud) {
    // The shipped defaults, backoff included.
    let Some(s) = Setup::new(cloud, "faults-persistent", StoreOptions::default()).await else {
        return;
    };
    let (proxy, faulty, direct) = (&s.proxy, &s.faulty, &s.direct);
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
    assert_eq!(proxy.count("GET", "/b.txt"), attempts, "{}", s.log());

    // A version-checked write: 5xx replies are retried (the server refused the request), and the
    // write is then checked once with a HEAD (which meets the 500s too).
    proxy.reset_log();
    let err = guarded(faulty.write(&b, "new".into(), WriteMode::IfVersion(version)))
        .await
        .unwrap_err();
    assert!(matches!(err, BackendError::Unavailable { .. }), "{err:?}");
    assert_eq!(proxy.count("PUT", "/b.txt"), attempts, "{}", s.log());
    assert_eq!(proxy.count("HEAD", "/b.txt"), attempts, "{}", s.log());
    assert_eq!(content(direct, &b).await, "old");

    // Retries off: one attempt.
    let once = s.through_proxy(
        "unused",
        StoreOptions::default().with_retry(RetryOptions {
            max_retries: 0,
            ..RetryOptions::default()
        }),
    );
    proxy.reset_log();
    proxy.add(Rule::new(Fault::internal_error()).target_contains("/unused/"));
    let err = guarded(once.read(&path("/x"), None)).await.unwrap_err();
    assert!(matches!(err, BackendError::Unavailable { .. }), "{err:?}");
    assert_eq!(proxy.count("GET", "/unused/x"), 1, "{}", s.log());
}

pub async fn a_stalled_store_ends_in_a_typed_timeout(cloud: Cloud) {
    let options = StoreOptions::default()
        .with_timeout(Duration::from_millis(300))
        .with_retry(RetryOptions {
            max_retries: 1,
            ..quick_retries()
        });
    let Some(s) = Setup::new(cloud, "faults-stall", options).await else {
        return;
    };
    let (proxy, faulty, direct) = (&s.proxy, &s.faulty, &s.direct);
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
    assert_eq!(proxy.count("GET", "/c.txt"), 2, "{}", s.log());

    // A version-checked write is not repeated after a timeout: it may have been applied.
    proxy.reset_log();
    proxy.add(Rule::new(Fault::Stall).method("PUT").target_contains("/c.txt"));
    let err = guarded(faulty.write(&c, "new".into(), WriteMode::IfVersion(version)))
        .await
        .unwrap_err();
    assert!(matches!(err, BackendError::Timeout { .. }), "{err:?}");
    assert_eq!(proxy.count("PUT", "/c.txt"), 1, "{}", s.log());
    assert_eq!(content(direct, &c).await, "old");

    // Latency alone is no failure.
    proxy.clear_rules();
    proxy.reset_log();
    proxy.add(Rule::new(Fault::Delay(Duration::from_millis(50))).target_contains("/d.txt"));
    let slow = s.through_proxy(&unique("faults-latency"), StoreOptions::default());
    let d = path("/d.txt");
    guarded(slow.write(&d, "late".into(), WriteMode::Overwrite))
        .await
        .unwrap();
    assert_eq!(guarded(content(&slow, &d)).await, "late");
    assert_eq!(
        proxy.count("PUT", "/d.txt") + proxy.count("GET", "/d.txt"),
        2,
        "{}",
        s.log()
    );
}
