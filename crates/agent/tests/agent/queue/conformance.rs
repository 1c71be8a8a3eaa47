//! What every [`RunQueue`] must do (the contract in `trellis_agent::server::queue`'s docs), one
//! function per behaviour. [`suite!`] turns them into tests for one implementation, given an async
//! function that returns a fresh, empty queue and a guard kept alive for the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use trellis_agent::server::queue::{
    CancelAction, Heartbeat, Lease, Multitask, NewRun, Outcome, QueueError, RunQueue, RunStatus,
};
use uuid::Uuid;

/// A lease long enough never to run out by accident in a test.
const LONG: Duration = Duration::from_secs(60);
/// A lease a test lets run out.
const SHORT: Duration = Duration::from_millis(300);
/// Longer than [`SHORT`], with room for a slow machine's scheduling.
const PAST_SHORT: Duration = Duration::from_millis(700);

macro_rules! suite {
    ($make:path) => {
        $crate::queue::conformance::suite!(@tests $make;
            claims_take_runs_in_order_and_finish_once,
            one_running_run_per_thread,
            a_later_run_never_starts_before_an_earlier_one,
            reject_refuses_while_a_run_is_active,
            interrupt_and_rollback_cancel_the_active_runs,
            an_expired_lease_is_reaped_and_the_old_worker_is_fenced,
            attempts_run_out_into_error,
            cancel_stops_pending_runs_and_flags_running_ones,
            release_hands_back_without_spending_an_attempt,
            duplicates_and_unknown_runs_are_errors,
            list_and_delete,
            concurrent_workers_never_share_a_thread,
            events_are_appended_under_the_lease_and_numbered_across_attempts,
            finish_keeps_the_result,
        );
    };
    (@tests $make:path; $($name:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                #[allow(unused_variables)]
                let Some((queue, guard)) = $make().await else { return };
                $crate::queue::conformance::$name(queue).await;
            }
        )+
    };
}
pub(crate) use suite;

fn run(thread: Uuid, n: u32) -> NewRun {
    NewRun::new(thread, json!({"n": n}))
}

async fn claim(q: &Arc<dyn RunQueue>, lease: Duration) -> Option<Lease> {
    q.claim("worker-a", lease).await.unwrap()
}

async fn status(q: &Arc<dyn RunQueue>, run_id: Uuid) -> RunStatus {
    q.get(run_id).await.unwrap().expect("the run exists").status
}

pub async fn claims_take_runs_in_order_and_finish_once(q: Arc<dyn RunQueue>) {
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let first = q.enqueue(run(a, 1)).await.unwrap();
    assert_eq!((first.status, first.attempt), (RunStatus::Pending, 0));
    let second = q.enqueue(run(b, 2)).await.unwrap();

    let lease = claim(&q, LONG).await.expect("a pending run");
    assert_eq!(lease.run_id, first.run_id, "the oldest first");
    assert_eq!((lease.thread_id, lease.attempt), (a, 1));
    assert_eq!(lease.payload, json!({"n": 1}));
    let held = q.get(first.run_id).await.unwrap().unwrap();
    assert_eq!(held.status, RunStatus::Running);
    assert_eq!(held.worker.as_deref(), Some("worker-a"));

    let next = claim(&q, LONG).await.expect("the other thread's run");
    assert_eq!(next.run_id, second.run_id);
    assert!(claim(&q, LONG).await.is_none(), "nothing left");

    assert!(q.finish(&lease, Outcome::Success).await.unwrap());
    assert!(
        !q.finish(&lease, Outcome::Success).await.unwrap(),
        "finished once"
    );
    assert_eq!(status(&q, first.run_id).await, RunStatus::Success);
    assert_eq!(q.heartbeat(&lease, LONG).await.unwrap(), Heartbeat::Lost);

    let error = json!({"error": "ModelError", "message": "boom"});
    assert!(q.finish(&next, Outcome::Error(error.clone())).await.unwrap());
    let failed = q.get(second.run_id).await.unwrap().unwrap();
    assert_eq!((failed.status, failed.error), (RunStatus::Error, Some(error)));
    assert_eq!(failed.worker, None);
}

pub async fn one_running_run_per_thread(q: Arc<dyn RunQueue>) {
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let a1 = q.enqueue(run(a, 1)).await.unwrap();
    let a2 = q.enqueue(run(a, 2)).await.unwrap();
    let b1 = q.enqueue(run(b, 3)).await.unwrap();
    let first = claim(&q, LONG).await.unwrap();
    let second = claim(&q, LONG).await.unwrap();
    assert_eq!(
        (first.run_id, second.run_id),
        (a1.run_id, b1.run_id),
        "a2 waits for a1"
    );
    assert!(
        claim(&q, LONG).await.is_none(),
        "a2 is not claimable while a1 runs"
    );
    assert!(q.finish(&first, Outcome::Interrupted).await.unwrap());
    let third = claim(&q, LONG).await.expect("a2 once a1 finished");
    assert_eq!(third.run_id, a2.run_id);
    assert_eq!(status(&q, a1.run_id).await, RunStatus::Interrupted);
}

pub async fn a_later_run_never_starts_before_an_earlier_one(q: Arc<dyn RunQueue>) {
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let first = q.enqueue(run(a, 1)).await.unwrap();
    let second = q.enqueue(run(a, 2)).await.unwrap();
    let lease = claim(&q, SHORT).await.unwrap();
    assert_eq!(lease.run_id, first.run_id);
    tokio::time::sleep(PAST_SHORT).await;
    // The first run is back, but not due for 30 s: the second must still wait for it.
    assert_eq!(q.reap(Duration::from_secs(30)).await.unwrap(), 1);
    assert!(
        claim(&q, LONG).await.is_none(),
        "the thread's later run started before its earlier one"
    );
    assert_eq!(status(&q, second.run_id).await, RunStatus::Pending);
    // Another thread is not held up by it.
    let other = q.enqueue(run(b, 3)).await.unwrap();
    assert_eq!(claim(&q, LONG).await.unwrap().run_id, other.run_id);
}

pub async fn reject_refuses_while_a_run_is_active(q: Arc<dyn RunQueue>) {
    let a = Uuid::new_v4();
    let pending = q.enqueue(run(a, 1)).await.unwrap();
    let refused = q.enqueue(run(a, 2).multitask(Multitask::Reject)).await;
    assert!(
        matches!(refused, Err(QueueError::Busy { thread_id, active }) if thread_id == a && active == pending.run_id),
        "{refused:?}"
    );
    let lease = claim(&q, LONG).await.unwrap();
    assert!(matches!(
        q.enqueue(run(a, 3).multitask(Multitask::Reject)).await,
        Err(QueueError::Busy { .. })
    ));
    assert!(q.finish(&lease, Outcome::Success).await.unwrap());
    let accepted = q.enqueue(run(a, 4).multitask(Multitask::Reject)).await.unwrap();
    assert_eq!(accepted.status, RunStatus::Pending);
    // A refused run was not stored.
    assert_eq!(q.list(a, 10).await.unwrap().len(), 2);
}

pub async fn interrupt_and_rollback_cancel_the_active_runs(q: Arc<dyn RunQueue>) {
    for (strategy, action) in [
        (Multitask::Interrupt, CancelAction::Interrupt),
        (Multitask::Rollback, CancelAction::Rollback),
    ] {
        let a = Uuid::new_v4();
        let running = q.enqueue(run(a, 1)).await.unwrap();
        let lease = claim(&q, LONG).await.unwrap();
        assert_eq!(lease.run_id, running.run_id);
        let queued = q.enqueue(run(a, 2)).await.unwrap();
        let newest = q.enqueue(run(a, 3).multitask(strategy)).await.unwrap();
        // The queued run is cancelled at once; the running one is asked to stop.
        let cancelled = q.get(queued.run_id).await.unwrap().unwrap();
        assert_eq!(
            (cancelled.status, cancelled.cancel),
            (RunStatus::Interrupted, Some(action))
        );
        assert_eq!(
            q.heartbeat(&lease, LONG).await.unwrap(),
            Heartbeat::Held { cancel: Some(action) }
        );
        assert!(
            claim(&q, LONG).await.is_none(),
            "the new run waits for the running one"
        );
        assert!(q.finish(&lease, Outcome::Interrupted).await.unwrap());
        let next = claim(&q, LONG).await.expect("the new run");
        assert_eq!(next.run_id, newest.run_id);
        assert!(q.finish(&next, Outcome::Success).await.unwrap());
    }
}

pub async fn an_expired_lease_is_reaped_and_the_old_worker_is_fenced(q: Arc<dyn RunQueue>) {
    let a = Uuid::new_v4();
    let queued = q.enqueue(run(a, 1)).await.unwrap();
    let old = q.claim("worker-a", SHORT).await.unwrap().unwrap();
    assert_eq!(q.reap(Duration::ZERO).await.unwrap(), 0, "the lease still holds");
    assert!(matches!(
        q.heartbeat(&old, SHORT).await.unwrap(),
        Heartbeat::Held { cancel: None }
    ));
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(q.heartbeat(&old, LONG).await.unwrap(), Heartbeat::Lost, "expired");
    assert_eq!(q.reap(Duration::ZERO).await.unwrap(), 1);
    assert_eq!(q.reap(Duration::ZERO).await.unwrap(), 0, "idempotent");
    assert_eq!(status(&q, queued.run_id).await, RunStatus::Pending);

    let new = q.claim("worker-b", LONG).await.unwrap().expect("requeued");
    assert_eq!((new.run_id, new.attempt), (queued.run_id, 2));
    // The old worker wakes up: nothing it asks takes effect.
    assert_eq!(q.heartbeat(&old, LONG).await.unwrap(), Heartbeat::Lost);
    assert!(!q.finish(&old, Outcome::Success).await.unwrap());
    assert!(!q.release(&old).await.unwrap());
    let record = q.get(queued.run_id).await.unwrap().unwrap();
    assert_eq!(record.status, RunStatus::Running);
    assert_eq!(record.worker.as_deref(), Some("worker-b"));
    assert!(q.finish(&new, Outcome::Success).await.unwrap());
    assert_eq!(status(&q, queued.run_id).await, RunStatus::Success);
}

pub async fn attempts_run_out_into_error(q: Arc<dyn RunQueue>) {
    let a = Uuid::new_v4();
    let queued = q.enqueue(run(a, 1).max_attempts(2)).await.unwrap();
    // A backoff keeps a requeued run back.
    let first = claim(&q, SHORT).await.unwrap();
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(q.reap(Duration::from_secs(30)).await.unwrap(), 1);
    assert!(claim(&q, SHORT).await.is_none(), "not due before its backoff");
    assert_eq!(first.attempt, 1);

    let b = Uuid::new_v4();
    let other = q.enqueue(run(b, 2).max_attempts(2)).await.unwrap();
    for attempt in 1..=2 {
        let lease = claim(&q, SHORT).await.expect("due at once");
        assert_eq!((lease.run_id, lease.attempt), (other.run_id, attempt));
        tokio::time::sleep(PAST_SHORT).await;
        assert_eq!(q.reap(Duration::ZERO).await.unwrap(), 1);
    }
    let given_up = q.get(other.run_id).await.unwrap().unwrap();
    assert_eq!(given_up.status, RunStatus::Error);
    assert_eq!(given_up.error.as_ref().unwrap()["error"], "LeaseExpired");
    assert!(claim(&q, SHORT).await.is_none());
    assert_eq!(status(&q, queued.run_id).await, RunStatus::Pending);
}

pub async fn cancel_stops_pending_runs_and_flags_running_ones(q: Arc<dyn RunQueue>) {
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let running = q.enqueue(run(a, 1)).await.unwrap();
    let lease = claim(&q, LONG).await.unwrap();
    let pending = q.enqueue(run(b, 2)).await.unwrap();

    let stopped = q.cancel(pending.run_id, CancelAction::Interrupt).await.unwrap();
    assert_eq!(stopped.status, RunStatus::Interrupted);
    assert!(
        claim(&q, LONG).await.is_none(),
        "a cancelled run is never claimed"
    );

    let flagged = q.cancel(running.run_id, CancelAction::Rollback).await.unwrap();
    assert_eq!(
        (flagged.status, flagged.cancel),
        (RunStatus::Running, Some(CancelAction::Rollback))
    );
    assert_eq!(
        q.heartbeat(&lease, LONG).await.unwrap(),
        Heartbeat::Held {
            cancel: Some(CancelAction::Rollback)
        }
    );
    assert!(q.finish(&lease, Outcome::Interrupted).await.unwrap());
    assert!(matches!(
        q.cancel(running.run_id, CancelAction::Interrupt).await,
        Err(QueueError::Finished(id)) if id == running.run_id
    ));
    let unknown = Uuid::new_v4();
    assert!(matches!(
        q.cancel(unknown, CancelAction::Interrupt).await,
        Err(QueueError::NotFound(id)) if id == unknown
    ));
}

pub async fn release_hands_back_without_spending_an_attempt(q: Arc<dyn RunQueue>) {
    let a = Uuid::new_v4();
    let queued = q.enqueue(run(a, 1).max_attempts(1)).await.unwrap();
    let lease = claim(&q, LONG).await.unwrap();
    assert!(q.release(&lease).await.unwrap());
    assert!(!q.release(&lease).await.unwrap(), "released once");
    assert_eq!(status(&q, queued.run_id).await, RunStatus::Pending);
    // With one attempt allowed and one used, the release gave it back: one more claim, whose
    // expiry still requeues it rather than failing it.
    let again = claim(&q, SHORT).await.expect("claimable again");
    assert_eq!(again.attempt, 2, "a new fencing token");
    assert_eq!(q.heartbeat(&lease, LONG).await.unwrap(), Heartbeat::Lost);
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(q.reap(Duration::ZERO).await.unwrap(), 1);
    assert_eq!(status(&q, queued.run_id).await, RunStatus::Error);
}

pub async fn duplicates_and_unknown_runs_are_errors(q: Arc<dyn RunQueue>) {
    let a = Uuid::new_v4();
    let queued = q.enqueue(run(a, 1)).await.unwrap();
    let mut again = run(a, 2);
    again.run_id = queued.run_id;
    assert!(matches!(q.enqueue(again).await, Err(QueueError::Duplicate(id)) if id == queued.run_id));
    assert_eq!(q.list(a, 10).await.unwrap().len(), 1);
    assert!(q.get(Uuid::new_v4()).await.unwrap().is_none());
    let stranger = Lease {
        run_id: queued.run_id,
        thread_id: a,
        attempt: 1,
        payload: json!(null),
    };
    assert_eq!(
        q.heartbeat(&stranger, LONG).await.unwrap(),
        Heartbeat::Lost,
        "a lease nobody claimed"
    );
    assert!(!q.finish(&stranger, Outcome::Success).await.unwrap());
    assert_eq!(status(&q, queued.run_id).await, RunStatus::Pending);
}

pub async fn list_and_delete(q: Arc<dyn RunQueue>) {
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let one = q.enqueue(run(a, 1)).await.unwrap();
    let two = q.enqueue(run(a, 2)).await.unwrap();
    let three = q.enqueue(run(a, 3)).await.unwrap();
    q.enqueue(run(b, 4)).await.unwrap();
    let listed: Vec<Uuid> = q.list(a, 10).await.unwrap().iter().map(|r| r.run_id).collect();
    assert_eq!(listed, [three.run_id, two.run_id, one.run_id], "newest first");
    assert_eq!(q.list(a, 2).await.unwrap().len(), 2);
    assert!(q.list(Uuid::new_v4(), 10).await.unwrap().is_empty());

    let lease = claim(&q, LONG).await.unwrap();
    assert_eq!(lease.run_id, one.run_id);
    assert!(
        matches!(q.delete(one.run_id).await, Err(QueueError::Busy { .. })),
        "a running run is not deleted"
    );
    assert!(q.delete(two.run_id).await.unwrap(), "a pending one is");
    assert!(!q.delete(two.run_id).await.unwrap());
    assert!(q.finish(&lease, Outcome::Success).await.unwrap());
    assert!(q.delete(one.run_id).await.unwrap(), "so is a finished one");
    let listed: Vec<Uuid> = q.list(a, 10).await.unwrap().iter().map(|r| r.run_id).collect();
    assert_eq!(listed, [three.run_id]);
    let next = claim(&q, LONG).await.unwrap();
    assert!(next.run_id == three.run_id || next.thread_id == b);
}

pub async fn concurrent_workers_never_share_a_thread(q: Arc<dyn RunQueue>) {
    const THREADS: usize = 5;
    const RUNS_PER_THREAD: u32 = 8;
    const WORKERS: usize = 6;
    let threads: Vec<Uuid> = (0..THREADS).map(|_| Uuid::new_v4()).collect();
    let mut expected = HashSet::new();
    for n in 0..RUNS_PER_THREAD {
        for &thread in &threads {
            expected.insert(q.enqueue(run(thread, n)).await.unwrap().run_id);
        }
    }
    let running: Arc<Mutex<HashSet<Uuid>>> = Arc::default();
    let done: Arc<Mutex<Vec<(Uuid, Uuid, u32)>>> = Arc::default();
    let workers = (0..WORKERS).map(|w| {
        let (q, running, done) = (q.clone(), running.clone(), done.clone());
        tokio::spawn(async move {
            let name = format!("worker-{w}");
            let mut idle = 0;
            while idle < 20 {
                let Some(lease) = q.claim(&name, LONG).await.unwrap() else {
                    idle += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                idle = 0;
                assert!(
                    running.lock().unwrap().insert(lease.thread_id),
                    "two workers hold runs of thread {} at once",
                    lease.thread_id
                );
                tokio::time::sleep(Duration::from_millis(2)).await;
                running.lock().unwrap().remove(&lease.thread_id);
                let n = lease.payload["n"].as_u64().unwrap() as u32;
                done.lock().unwrap().push((lease.run_id, lease.thread_id, n));
                assert!(q.finish(&lease, Outcome::Success).await.unwrap());
            }
        })
    });
    for worker in futures::future::join_all(workers).await {
        worker.unwrap();
    }
    let done = done.lock().unwrap().clone();
    let ran: HashSet<Uuid> = done.iter().map(|(id, ..)| *id).collect();
    assert_eq!(ran.len(), done.len(), "every run ran once");
    assert_eq!(ran, expected, "and every run ran");
    for &thread in &threads {
        let order: Vec<u32> = done
            .iter()
            .filter(|(_, t, _)| *t == thread)
            .map(|(.., n)| *n)
            .collect();
        assert_eq!(
            order,
            (0..RUNS_PER_THREAD).collect::<Vec<_>>(),
            "a thread's runs in enqueue order"
        );
    }
}

fn events(names: &[&str]) -> Vec<(String, String)> {
    names
        .iter()
        .map(|n| ((*n).to_owned(), format!("{{\"n\":\"{n}\"}}")))
        .collect()
}

pub async fn events_are_appended_under_the_lease_and_numbered_across_attempts(q: Arc<dyn RunQueue>) {
    let a = Uuid::new_v4();
    let queued = q.enqueue(run(a, 1)).await.unwrap();
    let first = claim(&q, SHORT).await.unwrap();
    assert!(
        q.append_events(&first, &events(&["values", "updates"]))
            .await
            .unwrap()
    );
    assert!(q.append_events(&first, &events(&["messages"])).await.unwrap());
    tokio::time::sleep(PAST_SHORT).await;
    assert_eq!(q.reap(Duration::ZERO).await.unwrap(), 1);
    assert!(
        !q.append_events(&first, &events(&["late"])).await.unwrap(),
        "a reaped lease stores nothing"
    );
    let second = claim(&q, LONG).await.unwrap();
    assert_eq!(second.attempt, 2);
    assert!(
        q.append_events(&second, &events(&["values", "end"]))
            .await
            .unwrap()
    );
    assert!(
        !q.append_events(&first, &events(&["late"])).await.unwrap(),
        "nor once another worker holds the run"
    );

    let all = q.events(queued.run_id, 0, 100).await.unwrap();
    let got: Vec<(u64, u32, &str)> = all.iter().map(|e| (e.seq, e.attempt, e.event.as_str())).collect();
    assert_eq!(
        got,
        [
            (1, 1, "values"),
            (2, 1, "updates"),
            (3, 1, "messages"),
            (4, 2, "values"),
            (5, 2, "end")
        ],
        "numbered in order across attempts, nothing from the fenced worker"
    );
    assert_eq!(all[0].data, r#"{"n":"values"}"#);
    let after: Vec<u64> = q
        .events(queued.run_id, 2, 2)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(after, [3, 4], "from a number on, at most the limit");
    assert!(q.events(queued.run_id, 5, 10).await.unwrap().is_empty());
    assert!(q.events(Uuid::new_v4(), 0, 10).await.unwrap().is_empty());

    assert!(q.finish(&second, Outcome::Success).await.unwrap());
    assert!(
        !q.append_events(&second, &events(&["after"])).await.unwrap(),
        "a finished run takes no more events"
    );
    assert!(q.delete(queued.run_id).await.unwrap());
    assert!(
        q.events(queued.run_id, 0, 10).await.unwrap().is_empty(),
        "events go with their run"
    );
}

pub async fn finish_keeps_the_result(q: Arc<dyn RunQueue>) {
    let queued = q.enqueue(run(Uuid::new_v4(), 1)).await.unwrap();
    let lease = claim(&q, LONG).await.unwrap();
    assert_eq!(q.get(queued.run_id).await.unwrap().unwrap().result, None);
    let result = json!({"messages": [{"type": "ai", "content": "done"}]});
    assert!(
        q.finish_with(&lease, Outcome::Success, Some(result.clone()))
            .await
            .unwrap()
    );
    assert!(
        !q.finish_with(&lease, Outcome::Error(json!({})), Some(json!(1)))
            .await
            .unwrap(),
        "finished once"
    );
    let record = q.get(queued.run_id).await.unwrap().unwrap();
    assert_eq!((record.status, record.result), (RunStatus::Success, Some(result)));
}
