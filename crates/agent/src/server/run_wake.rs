//! Wake-ups of the streams and waiters following a shared run (`trellis serve --database`):
//! [`RunWaiters`], one per worker, maps a run to the tasks of this process waiting on it (a
//! `/stream`, `/join`, `/wait`), and [`RunWaiters::notify`] wakes them all.
//!
//! A notification is a hint, never the data: a woken follower reads the queue again, and a
//! follower that was not woken (the notification was lost: the listener was reconnecting, the
//! run changed on a worker that could not notify) reads it anyway after the fallback
//! [`RunWaiters::poll`]. Notifications come from the worker holding the run, for its own
//! followers, and from PostgreSQL `LISTEN` (one connection per worker, fanned out here) for the
//! runs held elsewhere.
//!
//! Bounds: the map holds one entry per run some task of this process follows right now, removed
//! when its last [`Watch`] is dropped; a notification for a run nobody follows here costs one
//! map lookup and is dropped.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;
use uuid::Uuid;

/// The fallback poll of a follower when no notification comes.
pub const DEFAULT_POLL: Duration = Duration::from_secs(1);

/// The followers of runs in this process, by run.
#[derive(Debug)]
pub struct RunWaiters {
    runs: Mutex<HashMap<Uuid, watch::Sender<u64>>>,
    poll: Duration,
}

impl Default for RunWaiters {
    fn default() -> Self {
        Self::new(DEFAULT_POLL)
    }
}

impl RunWaiters {
    /// Followers read the queue again at least every `poll` (at least 10 ms).
    pub fn new(poll: Duration) -> Self {
        Self {
            runs: Mutex::new(HashMap::new()),
            poll: poll.max(Duration::from_millis(10)),
        }
    }

    /// The fallback poll.
    pub fn poll(&self) -> Duration {
        self.poll
    }

    fn runs(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, watch::Sender<u64>>> {
        self.runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Follow `run`: a [`Watch`] whose [`wait`](Watch::wait) returns on the next notification
    /// for it after this call (or one that came since the last `wait`), or after the poll.
    /// Register before reading the queue, so a change between the read and the wait is not
    /// missed.
    pub fn watch(self: &std::sync::Arc<Self>, run: Uuid) -> Watch {
        let rx = self
            .runs()
            .entry(run)
            .or_insert_with(|| watch::channel(0).0)
            .subscribe();
        Watch {
            waiters: self.clone(),
            run,
            rx: Some(rx),
        }
    }

    /// Something of `run` changed (events appended, its status): wake its followers here.
    pub fn notify(&self, run: &Uuid) {
        if let Some(tx) = self.runs().get(run) {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Wake every follower (notifications may have been lost).
    pub fn notify_all(&self) {
        for tx in self.runs().values() {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Runs followed in this process now.
    pub fn followed(&self) -> usize {
        self.runs().len()
    }
}

/// One follower of one run; dropping it unregisters it.
#[derive(Debug)]
pub struct Watch {
    waiters: std::sync::Arc<RunWaiters>,
    run: Uuid,
    rx: Option<watch::Receiver<u64>>,
}

impl Watch {
    /// Until the run is notified (since the last call, or since [`RunWaiters::watch`]) or the
    /// fallback poll passed.
    pub async fn wait(&mut self) {
        let poll = self.waiters.poll;
        let Some(rx) = self.rx.as_mut() else {
            return tokio::time::sleep(poll).await;
        };
        tokio::select! {
            // The sender lives as long as a receiver does (see Drop); an error cannot happen.
            _ = rx.changed() => {}
            () = tokio::time::sleep(poll) => {}
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut runs = self.waiters.runs();
        drop(self.rx.take());
        if runs.get(&self.run).is_some_and(|tx| tx.receiver_count() == 0) {
            runs.remove(&self.run);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn a_notification_wakes_a_follower_and_the_map_empties_when_it_leaves() {
        let waiters = Arc::new(RunWaiters::new(Duration::from_secs(3600)));
        let run = Uuid::new_v4();
        let mut first = waiters.watch(run);
        let second = waiters.watch(run);
        assert_eq!(waiters.followed(), 1);
        // Notified before the wait: the wait returns at once (the poll is an hour).
        waiters.notify(&run);
        let woken = tokio::time::timeout(Duration::from_secs(60), first.wait()).await;
        assert!(woken.is_ok(), "woken by the notification, not the poll");
        // A notification for a run nobody follows is dropped and adds no entry.
        waiters.notify(&Uuid::new_v4());
        assert_eq!(waiters.followed(), 1);
        drop(first);
        assert_eq!(waiters.followed(), 1, "one follower left");
        drop(second);
        assert_eq!(waiters.followed(), 0, "the last follower removes the entry");
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_notification_the_poll_wakes_it() {
        let waiters = Arc::new(RunWaiters::new(Duration::from_secs(5)));
        let mut watch = waiters.watch(Uuid::new_v4());
        let start = tokio::time::Instant::now();
        watch.wait().await;
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }
}
