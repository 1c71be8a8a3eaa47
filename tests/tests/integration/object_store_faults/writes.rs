//! Writes under faults: a conditional write applied upstream whose reply was lost is reported as
//! written, once; an upload cut off mid-body (reset, or abandoned with a close) leaves the old
//! object whole.

use trellis_backend::{BackendError, BackendExt, ConflictKind, WriteMode};
use trellis_tests::fault_proxy::{Fault, Rule};

use super::*;

pub async fn a_write_whose_reply_was_lost_is_neither_a_conflict_nor_applied_twice(cloud: Cloud) {
    let options = StoreOptions::default().with_retry(quick_retries());
    let Some(s) = Setup::new(cloud, "faults-reply-lost", options).await else {
        return;
    };
    let (proxy, faulty, direct) = (&s.proxy, &s.faulty, &s.direct);
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
                .with_header(cloud.update_header())
                .times(1),
        );
        let outcome = guarded(faulty.write(&p, "v1".into(), WriteMode::IfVersion(v0.version.unwrap())))
            .await
            .unwrap_or_else(|e| panic!("{fault:?}: the write landed but was reported as {e:?}"));
        assert_eq!(content(direct, &p).await, "v1", "{fault:?}");
        assert_eq!(
            outcome.version,
            direct.stat(&p).await.unwrap().version,
            "{fault:?}"
        );
        assert_eq!(
            proxy.count("PUT", &p.as_str()[1..]),
            puts,
            "{fault:?}: {}",
            s.log()
        );
        // The first PUT was applied (2xx upstream); a retry met that very write and was refused.
        let statuses = s.upstream_statuses("PUT", &p.as_str()[1..]);
        let refused = if puts == 2 { vec![Some(412)] } else { vec![] };
        assert_eq!(statuses[0].map(|c| c / 100), Some(2), "{fault:?}: {}", s.log());
        assert_eq!(statuses[1..], refused, "{fault:?}: {}", s.log());
        // The loss was noticed and settled by one HEAD reading the write tag back.
        assert_eq!(proxy.count("HEAD", &p.as_str()[1..]), 1, "{fault:?}: {}", s.log());
    }

    // Create-only: the retry meets the file it created.
    let created = path("/created.txt");
    proxy.reset_log();
    proxy.add(
        Rule::new(Fault::DropAfterForward)
            .method("PUT")
            .with_header(cloud.create_header())
            .times(1),
    );
    guarded(faulty.write(&created, "mine".into(), WriteMode::CreateNew))
        .await
        .unwrap();
    assert_eq!(content(direct, &created).await, "mine");
    assert_eq!(proxy.count("PUT", "/created.txt"), 2, "{}", s.log());
    // The retry is refused as "exists": 412 from moto and the GCS shim, 409 from Azurite (real
    // Azure answers 412); object_store reports both as `AlreadyExists`.
    let exists = if cloud == Cloud::Azure { 409 } else { 412 };
    assert_eq!(
        s.upstream_statuses("PUT", "/created.txt")[1],
        Some(exists),
        "{}",
        s.log()
    );

    // Read-modify-write: the increment is applied exactly once.
    let counter = path("/counter");
    direct
        .write(&counter, "0".into(), WriteMode::Overwrite)
        .await
        .unwrap();
    proxy.reset_log();
    proxy.add(
        Rule::new(Fault::DropAfterForward)
            .method("PUT")
            .with_header(cloud.update_header())
            .times(1),
    );
    guarded(faulty.update(&counter, 5, |old| {
        let n: u64 = std::str::from_utf8(old.unwrap()).unwrap().parse().unwrap();
        Ok(Bytes::from((n + 1).to_string()))
    }))
    .await
    .unwrap();
    assert_eq!(content(direct, &counter).await, "1");
    assert_eq!(proxy.count("PUT", "/counter"), 2, "{}", s.log());

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
            .with_header(cloud.update_header())
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
    assert_eq!(content(direct, &contested).await, "b");
}

pub async fn a_failed_upload_never_leaves_a_partial_object(cloud: Cloud) {
    let options = StoreOptions::default().with_retry(quick_retries());
    let Some(s) = Setup::new(cloud, "faults-partial", options).await else {
        return;
    };
    let (proxy, faulty, direct) = (&s.proxy, &s.faulty, &s.direct);
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
    assert_eq!(proxy.count("PUT", "/big.bin"), 4, "{}", s.log());
    assert_eq!(content(direct, &big).await, old);
    let err = guarded(faulty.write(&big, new.clone(), WriteMode::IfVersion(version.clone())))
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    assert_eq!(content(direct, &big).await, old);
    assert_eq!(direct.stat(&big).await.unwrap().version, Some(version.clone()));

    // Abandoned after 1000 bytes with a close (FIN), as when the writing process dies: the server
    // must refuse the short body, not store it.
    proxy.clear_rules();
    proxy.reset_log();
    proxy.add(Rule::new(Fault::AbandonUpload(1000)).method("PUT"));
    let err = guarded(faulty.write(&big, new.clone(), WriteMode::Overwrite))
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    assert_eq!(proxy.count("PUT", "/big.bin"), 4, "{}", s.log());
    let statuses = s.upstream_statuses("PUT", "/big.bin");
    assert!(
        statuses.iter().all(|c| c.is_none_or(|c| c >= 400)),
        "a short body was accepted: {}",
        s.log()
    );
    assert_eq!(content(direct, &big).await, old, "{}", s.log());

    // Cut off once: the retry uploads the whole object.
    proxy.clear_rules();
    proxy.add(Rule::new(Fault::TruncateBody(1000)).method("PUT").times(1));
    guarded(faulty.write(&big, new.clone(), WriteMode::IfVersion(version)))
        .await
        .unwrap();
    assert_eq!(content(direct, &big).await, new);
}
