//! The catalog a SkillsMiddleware's threads share: new threads that start together make one scan
//! and share its catalog; a reload never joins another load.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::json;
use trellis_middleware::backend::{Backend, StateBackend, VirtualPath, WriteMode};
use trellis_middleware::runtime::message::AiMessage;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::skills::RELOAD_SKILLS;
use trellis_middleware::skills::SkillSource;
use trellis_middleware::*;

use crate::common::caps;
use crate::skills::middleware::{library, loaded_events, section};

/// A backend whose listings wait until the test opens the gate, counting them.
#[derive(Debug)]
struct Gated {
    inner: Arc<StateBackend>,
    gate: tokio::sync::Semaphore,
    listings: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl Backend for Gated {
    fn capabilities(&self) -> trellis_middleware::backend::Capabilities {
        self.inner.capabilities()
    }
    async fn ls(
        &self,
        dir: &VirtualPath,
    ) -> trellis_middleware::backend::Result<Vec<trellis_middleware::backend::Entry>> {
        self.listings.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        drop(self.gate.acquire().await.unwrap());
        self.inner.ls(dir).await
    }
    async fn stat(
        &self,
        path: &VirtualPath,
    ) -> trellis_middleware::backend::Result<trellis_middleware::backend::Entry> {
        self.inner.stat(path).await
    }
    async fn read(
        &self,
        path: &VirtualPath,
        range: Option<trellis_middleware::backend::ByteRange>,
    ) -> trellis_middleware::backend::Result<trellis_middleware::backend::ReadOutput> {
        self.inner.read(path, range).await
    }
    async fn write(
        &self,
        path: &VirtualPath,
        data: bytes::Bytes,
        mode: WriteMode,
    ) -> trellis_middleware::backend::Result<trellis_middleware::backend::WriteOutcome> {
        self.inner.write(path, data, mode).await
    }
    async fn delete(&self, path: &VirtualPath) -> trellis_middleware::backend::Result<()> {
        self.inner.delete(path).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_starting_together_share_one_load_and_one_catalog() {
    let gated = Arc::new(Gated {
        inner: library().await,
        gate: tokio::sync::Semaphore::new(0),
        listings: Default::default(),
    });
    let listings = || gated.listings.load(std::sync::atomic::Ordering::SeqCst);
    let skills = SkillsMiddleware::new(vec![SkillSource::new(gated.clone(), "/skills").unwrap()]);
    let model = Arc::new(
        ScriptedModel::from_fn(|_| Ok(ModelResponse::new(AiMessage::text("ok"))))
            .with_capabilities(caps(false)),
    );
    let agent = Agent::builder(model.clone()).middleware(skills).build().unwrap();
    let runs: Vec<_> = (0..8)
        .map(|_| {
            let agent = agent.clone();
            tokio::spawn(async move { loaded_events(&agent).await })
        })
        .collect();
    // Every thread has had time to start its load; only one may be listing.
    while listings() == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(listings(), 1, "one scan for eight threads starting together");
    gated.gate.add_permits(1_000);
    let mut joined = 0;
    for run in runs {
        let loaded = run.await.unwrap();
        assert_eq!(loaded.len(), 1, "{loaded:?}");
        if loaded[0]["joined"] == json!(true) {
            assert_eq!(loaded[0]["skills"], json!(3));
            joined += 1;
        }
    }
    assert_eq!(joined, 7, "seven threads joined the first one's load");
    assert_eq!(listings(), 1);
    let requests = model.requests();
    assert_eq!(requests.len(), 8);
    assert!(requests.iter().all(|r| section(r) == section(&requests[0])));

    // A thread starting when no load runs scans itself; a reload never joins another load: it
    // scans again and sees a change made just before it.
    let first = agent.run(RunInput::human("again")).await.unwrap();
    assert_eq!(listings(), 2);
    gated
        .inner
        .write(
            &VirtualPath::parse("/skills/forecast/SKILL.md").unwrap(),
            "---\nname: forecast\ndescription: Update the quarterly forecast.\n---\n"
                .to_owned()
                .into(),
            WriteMode::Overwrite,
        )
        .await
        .unwrap();
    agent
        .run(
            RunInput::human("reload")
                .thread(first.thread_id)
                .slot(&RELOAD_SKILLS, true),
        )
        .await
        .unwrap();
    assert_eq!(listings(), 3);
    assert!(section(model.requests().last().unwrap()).contains("quarterly forecast"));
}
