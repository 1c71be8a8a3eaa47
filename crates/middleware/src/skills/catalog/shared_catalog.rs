//! [`SharedCatalog`]: the newest catalog of a [`SkillsMiddleware`](crate::skills::SkillsMiddleware)'s
//! sources, shared by every thread (and clone) of the middleware, and how threads get it.
//!
//! Agent-scoped: it holds only what the sources say (the same for every thread and user of the
//! agent); each thread keeps the `Arc` it was given in its own state, and per-user filtering
//! happens after, in the views.
//!
//! * **New threads** ([`SharedCatalog::for_new_thread`]) are single-flight: while one new thread's
//!   load runs, others wait for it and take its result instead of scanning too, so 200 threads
//!   starting at once share one catalog, one search index and one checkpoint blob, not 200. A
//!   thread that finds no load running scans itself (a rescan against the newest catalog, or a
//!   first discovery seeded by the persisted catalogs), so a change to a source stays unseen by a
//!   new thread for at most the length of one scan.
//! * **Reloads** ([`SharedCatalog::reload`]) never join another load: each rescans, so it sees every
//!   change made before it started.
//! * A scan that finds nothing changed keeps the newest catalog and its generation, and with them
//!   the per-viewer views (rendered section, search index) keyed by that generation.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::runtime::context::RunContext;
use crate::skills::catalog::SkillCatalog;
use crate::skills::discovery::source::SkillSource;
use crate::skills::discovery::{Discovery, DiscoveryOptions, discover, rescan};
use crate::skills::persist::{Persisted, discover_persisted};

/// A catalog as threads receive it.
#[derive(Clone)]
pub(in crate::skills) struct Latest {
    pub catalog: Arc<SkillCatalog>,
    /// Changes whenever the catalog does; keys the per-viewer caches.
    pub generation: u64,
}

/// What a middleware's sources are and how it reads them.
pub(in crate::skills) struct Sources<'a> {
    pub sources: &'a [SkillSource],
    pub persisted: &'a [Option<Persisted>],
    pub discovery: &'a DiscoveryOptions,
}

/// See the module docs.
#[derive(Default)]
pub(in crate::skills) struct SharedCatalog {
    latest: Mutex<Option<Latest>>,
    /// Held while a new thread's load runs.
    turn: tokio::sync::Mutex<()>,
    /// New threads' loads finished so far.
    completed: AtomicU64,
}

impl SharedCatalog {
    fn newest(&self) -> Option<Latest> {
        self.latest.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The catalog for a thread that has none yet.
    pub async fn for_new_thread(&self, from: Sources<'_>, cx: &RunContext) -> Latest {
        let ticket = self.completed.load(Ordering::Acquire);
        let _turn = self.turn.lock().await;
        let newest = self.newest();
        if let Some(joined) = &newest
            && self.completed.load(Ordering::Acquire) != ticket
        {
            let skills = joined.catalog.len();
            cx.emit_middleware(
                "skills",
                "loaded",
                || serde_json::json!({ "skills": skills, "joined": true }),
            );
            return joined.clone();
        }
        let found = match &newest {
            Some(l) => rescan(from.sources, &l.catalog, from.discovery).await,
            None if from.persisted.iter().any(Option::is_some) => {
                discover_persisted(from.sources, from.persisted, from.discovery)
                    .await
                    .discovery
            }
            None => discover(from.sources, from.discovery).await,
        };
        let latest = self.publish(found, newest, "loaded", cx);
        self.completed.fetch_add(1, Ordering::AcqRel);
        latest
    }

    /// A reload (the `RELOAD_SKILLS` run input) of a thread holding `previous`.
    pub async fn reload(&self, from: Sources<'_>, previous: &SkillCatalog, cx: &RunContext) -> Latest {
        let newest = self.newest();
        let found = rescan(from.sources, previous, from.discovery).await;
        self.publish(found, newest, "reloaded", cx)
    }

    /// Report a scan and make its catalog the newest (keeping `newest` when nothing changed).
    fn publish(
        &self,
        found: Discovery,
        newest: Option<Latest>,
        event: &'static str,
        cx: &RunContext,
    ) -> Latest {
        let stats = &found.stats;
        cx.emit_middleware("skills", event, || {
            serde_json::json!({
                "skills": stats.loaded, "read": stats.read, "reused": stats.reused,
                "skipped": stats.skipped, "unlisted_sources": stats.unlisted_sources,
            })
        });
        let latest = match newest {
            Some(l) if *l.catalog == found.catalog => l,
            _ => Latest {
                catalog: Arc::new(found.catalog),
                generation: next_generation(),
            },
        };
        *self.latest.lock().unwrap_or_else(|p| p.into_inner()) = Some(latest.clone());
        latest
    }
}

/// A generation no other catalog of this process (or, by the clock, of an earlier one) has.
fn next_generation() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ NEXT.fetch_add(1, Ordering::Relaxed).rotate_left(48)
}
