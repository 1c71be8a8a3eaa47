//! What bounds a [`RunQueue`]: the cap of a thread's active runs, the list of active runs (cancel
//! by status) and the retention of finished runs. [`suite!`] turns them into tests for one
//! implementation, as [`super::conformance`] does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use trellis_agent::server::queue::{
    MAX_ACTIVE, Multitask, NewRun, Outcome, QueueError, Retention, RunQueue, RunStatus,
};
use uuid::Uuid;

const LONG: Duration = Duration::from_secs(60);

macro_rules! suite {
    ($make:path) => {
        $crate::queue::limits::suite!(@tests $make;
            a_full_thread_refuses_more_runs,
            active_lists_pending_and_running_runs_oldest_first,
            prune_keeps_the_newest_finished_runs_and_drops_old_ones,
        );
    };
    (@tests $make:path; $($name:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                #[allow(unused_variables)]
                let Some((queue, guard)) = $make().await else { return };
                $crate::queue::limits::$name(queue).await;
            }
        )+
    };
}
pub(crate) use suite;

fn run(thread: Uuid, n: u32) -> NewRun {
    NewRun::new(thread, json!({"n": n}))
}

pub async fn a_full_thread_refuses_more_runs(q: Arc<dyn RunQueue>) {
    assert_eq!(NewRun::new(Uuid::new_v4(), json!(0)).max_active, MAX_ACTIVE);
    assert_eq!(MAX_ACTIVE, 32, "as a single server's thread queue");
    let (t, other) = (Uuid::new_v4(), Uuid::new_v4());
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(q.enqueue(run(t, n).max_active(3)).await.unwrap().run_id);
    }
    for strategy in [Multitask::Enqueue, Multitask::Interrupt, Multitask::Rollback] {
        match q.enqueue(run(t, 9).max_active(3).multitask(strategy)).await {
            Err(QueueError::Full { thread_id, active }) => assert_eq!((thread_id, active), (t, 3)),
            other => panic!("a fourth run ({strategy:?}) is refused: {other:?}"),
        }
    }
    assert!(matches!(
        q.enqueue(run(t, 9).max_active(3).multitask(Multitask::Reject))
            .await,
        Err(QueueError::Busy { .. })
    ));
    let listed = q.list(t, 10).await.unwrap();
    assert_eq!(
        listed.len(),
        3,
        "nothing stored, nothing cancelled by a refused run"
    );
    assert!(
        listed
            .iter()
            .all(|r| r.status == RunStatus::Pending && r.cancel.is_none())
    );
    // Another thread is not affected; once a run of the full thread ends, one more fits.
    q.enqueue(run(other, 0).max_active(3)).await.unwrap();
    let lease = q.claim("w", LONG).await.unwrap().unwrap();
    assert_eq!(lease.run_id, ids[0]);
    assert!(q.finish(&lease, Outcome::Success).await.unwrap());
    q.enqueue(run(t, 4).max_active(3)).await.unwrap();
}

pub async fn active_lists_pending_and_running_runs_oldest_first(q: Arc<dyn RunQueue>) {
    let (t1, t2) = (Uuid::new_v4(), Uuid::new_v4());
    let a = q.enqueue(run(t1, 1)).await.unwrap().run_id;
    let b = q.enqueue(run(t2, 2)).await.unwrap().run_id;
    let c = q.enqueue(run(t1, 3)).await.unwrap().run_id;
    let lease = q.claim("w", LONG).await.unwrap().unwrap();
    assert_eq!(lease.run_id, a);
    let active = q.active(10).await.unwrap();
    let seen: Vec<(Uuid, RunStatus)> = active.iter().map(|r| (r.run_id, r.status)).collect();
    assert_eq!(
        seen,
        vec![
            (a, RunStatus::Running),
            (b, RunStatus::Pending),
            (c, RunStatus::Pending)
        ]
    );
    assert!(q.finish(&lease, Outcome::Success).await.unwrap());
    let ids: Vec<Uuid> = q.active(10).await.unwrap().iter().map(|r| r.run_id).collect();
    assert_eq!(ids, vec![b, c], "a finished run is not active");
    let ids: Vec<Uuid> = q.active(1).await.unwrap().iter().map(|r| r.run_id).collect();
    assert_eq!(ids, vec![b], "at most the limit, oldest first");
}

pub async fn prune_keeps_the_newest_finished_runs_and_drops_old_ones(q: Arc<dyn RunQueue>) {
    // Three runs finished in order, the first with events; then one left running, one pending.
    let mut finished = Vec::new();
    for n in 0..3 {
        let id = q.enqueue(run(Uuid::new_v4(), n)).await.unwrap().run_id;
        let lease = q.claim("w", LONG).await.unwrap().unwrap();
        assert_eq!(lease.run_id, id);
        if n == 0 {
            let events = vec![("values".to_owned(), "{}".to_owned())];
            assert!(q.append_events(&lease, &events).await.unwrap());
        }
        assert!(q.finish(&lease, Outcome::Success).await.unwrap());
        finished.push(id);
        // Distinct finish times.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let running_thread = Uuid::new_v4();
    let running = q.enqueue(run(running_thread, 7)).await.unwrap().run_id;
    let held = q.claim("w", LONG).await.unwrap().unwrap();
    assert_eq!(held.run_id, running);
    let pending = q.enqueue(run(running_thread, 8)).await.unwrap().run_id;

    let hour = Duration::from_secs(3600);
    let pruned = q
        .prune(Retention {
            keep: 2,
            max_age: hour,
        })
        .await
        .unwrap();
    assert_eq!(pruned, 1, "only the oldest finished run is beyond the newest two");
    assert!(q.get(finished[0]).await.unwrap().is_none());
    assert!(
        q.events(finished[0], 0, 10).await.unwrap().is_empty(),
        "its events went with it"
    );
    for id in &finished[1..] {
        assert!(q.get(*id).await.unwrap().is_some(), "the newest two are kept");
    }
    assert_eq!(
        q.prune(Retention {
            keep: 2,
            max_age: hour
        })
        .await
        .unwrap(),
        0,
        "idempotent"
    );

    let pruned = q
        .prune(Retention {
            keep: 100,
            max_age: Duration::ZERO,
        })
        .await
        .unwrap();
    assert_eq!(pruned, 2, "every finished run is older than no time at all");
    assert_eq!(q.get(running).await.unwrap().unwrap().status, RunStatus::Running);
    assert_eq!(q.get(pending).await.unwrap().unwrap().status, RunStatus::Pending);
    assert!(
        q.finish(&held, Outcome::Success).await.unwrap(),
        "a running run is never pruned"
    );
}
