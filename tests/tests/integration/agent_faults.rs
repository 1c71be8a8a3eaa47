//! Skills, memory and checkpoints on each object-store emulator (S3, GCS, Azure) behind the
//! fault-injecting proxy, through the real `ObjectStoreBackend`, middlewares and
//! `BackendCheckpointer`: an unreadable skills source is a warning and the agent runs; an
//! unreadable memory source stops the run with an error naming it; a checkpoint save whose reply
//! was lost is neither a conflict nor a doubled turn.
//!
//! Each scenario takes the [`Cloud`] it runs on; the macro at the bottom makes one test per store.
//! Proxy rules match on folder names that read the same whether or not a store percent-encodes
//! `/` in its listing query (`teamsrc`, not `/skills/team/`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use trellis_backend::{Backend, BackendError, RetryOptions, StoreOptions, VirtualPath, WriteMode};
use trellis_middleware::memory::MemoryError;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::skills::SkillSource;
use trellis_middleware::*;
use trellis_tests::emulator::{Cloud, cloud_target, unique};
use trellis_tests::fault_proxy::{Fault, FaultProxy, Rule};

/// Only a guard against a hang: no assertion here is about speed.
const HANG_GUARD: Duration = Duration::from_secs(120);

/// The faulty backend's options: a timeout short enough that a stalled request ends soon, long
/// enough that an emulator slowed by a loaded CI machine is not taken for a stall (500 ms was not:
/// Azurite took longer than that under the full suite); fast backoff; the default retry count,
/// which is what the tests check.
fn options() -> StoreOptions {
    StoreOptions::default()
        .with_timeout(Duration::from_secs(3))
        .with_retry(RetryOptions {
            init_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(50),
            ..RetryOptions::default()
        })
}

/// A backend through a new proxy and one straight to the emulator, on the same fresh prefix.
async fn setup(cloud: Cloud, suite: &str) -> Option<(FaultProxy, Arc<dyn Backend>, Arc<dyn Backend>)> {
    let suite = format!("{suite}-{cloud:?}").to_lowercase();
    let target = cloud_target(cloud, &suite)?;
    let proxy = FaultProxy::start(&target.endpoint).await.unwrap();
    let prefix = unique(&suite);
    let faulty = target.backend(&proxy.url(), &prefix, options()).unwrap();
    // Set-up and checks go straight to the emulator with the default options: they are not under
    // test and must not fail because the machine is busy.
    let direct = target
        .backend(&target.endpoint, &prefix, StoreOptions::default())
        .unwrap();
    Some((proxy, Arc::new(faulty), Arc::new(direct)))
}

async fn put(backend: &Arc<dyn Backend>, path: &str, text: &str) {
    let path = VirtualPath::parse(path).unwrap();
    backend
        .write(&path, text.to_owned().into(), WriteMode::Overwrite)
        .await
        .unwrap();
}

fn skill(name: &str) -> String {
    format!("---\nname: {name}\ndescription: The {name} skill.\n---\n# {name}\n")
}

/// Every system block's text, joined by newlines.
pub(crate) fn system_text(request: &ModelRequest) -> String {
    request
        .system
        .iter()
        .map(|b| b.text.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

async fn an_unreadable_skills_source_is_a_warning_and_the_agent_runs(cloud: Cloud) {
    let Some((proxy, faulty, direct)) = setup(cloud, "faults-skills").await else {
        return;
    };
    for (dir, name) in [
        ("base", "greeting"),
        ("base", "unreadable"),
        ("teamsrc", "team-skill"),
        ("sharedsrc", "shared-skill"),
    ] {
        put(&direct, &format!("/skills/{dir}/{name}/SKILL.md"), &skill(name)).await;
    }
    // `teamsrc` answers 500, `sharedsrc` drops every connection, one file of `base` answers 503.
    proxy.add(Rule::new(Fault::internal_error()).target_contains("teamsrc"));
    proxy.add(Rule::new(Fault::DropBeforeForward).target_contains("sharedsrc"));
    proxy.add(Rule::new(Fault::service_unavailable()).target_contains("/unreadable/SKILL.md"));

    let sources = ["base", "teamsrc", "sharedsrc"]
        .map(|dir| SkillSource::new(faulty.clone(), &format!("/skills/{dir}")).unwrap())
        .to_vec();
    let model = Arc::new(ScriptedModel::new().then_text("done"));
    let agent = Agent::builder(model.clone())
        .middleware(SkillsMiddleware::new(sources))
        .build()
        .unwrap();
    let out = tokio::time::timeout(HANG_GUARD, agent.run(RunInput::human("hi")))
        .await
        .expect("hung")
        .unwrap();
    assert_eq!(out.final_text().as_deref(), Some("done"));

    let system = system_text(&model.requests()[0]);
    assert!(system.contains("greeting"), "{system}");
    for dir in ["teamsrc", "sharedsrc"] {
        assert!(
            system.contains(&format!("cannot list skill source `/skills/{dir}`")),
            "{dir}: {system}"
        );
    }
    assert!(
        !system.contains("team-skill") && !system.contains("shared-skill"),
        "{system}"
    );
    assert!(!system.contains("The unreadable skill."), "{system}");

    // Every failing listing and read was tried 1 + 3 times, no more.
    let attempts = 1 + RetryOptions::default().max_retries;
    assert_eq!(proxy.count("GET", "teamsrc"), attempts, "{:#?}", proxy.seen());
    assert_eq!(proxy.count("GET", "sharedsrc"), attempts, "{:#?}", proxy.seen());
    assert_eq!(
        proxy.count("GET", "/unreadable/SKILL.md"),
        attempts,
        "{:#?}",
        proxy.seen()
    );
}

async fn an_unreadable_memory_source_stops_the_run_and_names_the_source(cloud: Cloud) {
    let Some((proxy, faulty, direct)) = setup(cloud, "faults-memory").await else {
        return;
    };
    put(&direct, "/memory/AGENTS.md", "Always answer in French.\n").await;
    put(&direct, "/memory/team.md", "Team notes.\n").await;

    // (fault, whether the error is a timeout)
    let cases = [
        (Fault::internal_error(), false),
        (Fault::DropBeforeForward, false),
        (Fault::Stall, true),
    ];
    for (fault, timeout) in cases {
        proxy.clear_rules();
        proxy.reset_log();
        proxy.add(Rule::new(fault.clone()).target_contains("/memory/AGENTS.md"));
        let model = Arc::new(ScriptedModel::new().then_text("never"));
        let memory = MemoryMiddleware::new(faulty.clone(), ["/memory/AGENTS.md", "/memory/team.md"]).unwrap();
        let agent = Agent::builder(model.clone()).middleware(memory).build().unwrap();
        let err = tokio::time::timeout(HANG_GUARD, agent.run(RunInput::human("hi")))
            .await
            .expect("hung")
            .unwrap_err();

        assert_eq!(model.calls(), 0, "{fault:?}: the model was called");
        let message = err.to_string();
        assert!(message.contains("/memory/AGENTS.md"), "{fault:?}: {message}");
        let AgentError::Middleware { middleware, source } = &err else {
            panic!("{fault:?}: {err:?}");
        };
        assert_eq!(middleware, "memory");
        let Some(MemoryError::Load { path, source }) = source.downcast_ref::<MemoryError>() else {
            panic!("{fault:?}: {source:?}");
        };
        assert_eq!(path, "/memory/AGENTS.md");
        assert!(source.is_transient(), "{fault:?}: {source:?}");
        assert_eq!(
            matches!(source, BackendError::Timeout { .. }),
            timeout,
            "{fault:?}: {source:?}"
        );
        assert_eq!(
            proxy.count("GET", "/memory/AGENTS.md"),
            1 + RetryOptions::default().max_retries,
            "{fault:?}: {:#?}",
            proxy.seen()
        );
    }

    // Once the store recovers, the same agent setup loads both files.
    proxy.clear_rules();
    let model = Arc::new(ScriptedModel::new().then_text("oui"));
    let memory = MemoryMiddleware::new(faulty.clone(), ["/memory/AGENTS.md", "/memory/team.md"]).unwrap();
    let agent = Agent::builder(model.clone()).middleware(memory).build().unwrap();
    agent.run(RunInput::human("hi")).await.unwrap();
    let system = system_text(&model.requests()[0]);
    assert!(
        system.contains("Always answer in French.") && system.contains("Team notes."),
        "{system}"
    );
}

async fn a_checkpoint_save_whose_reply_was_lost_is_not_a_conflict(cloud: Cloud) {
    let Some((proxy, faulty, direct)) = setup(cloud, "faults-checkpoint").await else {
        return;
    };
    let root = VirtualPath::parse("/threads").unwrap();
    let checkpointer = |backend: &Arc<dyn Backend>| -> Arc<dyn Checkpointer> {
        Arc::new(BackendCheckpointer::new(backend.clone(), root.clone()).unwrap())
    };
    let thread = ThreadId::new(unique("thread")).unwrap();
    let run = |backend: &Arc<dyn Backend>, input: &str, reply: &str| {
        let agent = Agent::builder(Arc::new(ScriptedModel::new().then_text(reply)))
            .checkpointer(checkpointer(backend))
            .build()
            .unwrap();
        let input = RunInput::human(input).thread(thread.clone());
        async move {
            tokio::time::timeout(HANG_GUARD, agent.run(input))
                .await
                .expect("hung")
        }
    };
    run(&direct, "start", "hello").await.unwrap();

    // The first version-checked save of the next turn lands, but its reply is lost.
    proxy.add(
        Rule::new(Fault::DropAfterForward)
            .method("PUT")
            .with_header(cloud.update_header())
            .target_contains("/head.json")
            .times(1),
    );
    let out = run(&faulty, "next", "again").await.unwrap();
    assert!(
        proxy.seen().iter().any(|s| s.fault == Some("drop-after")),
        "{:#?}",
        proxy.seen()
    );
    let stored = checkpointer(&direct).load(&thread).await.unwrap().unwrap();
    let texts: Vec<String> = stored
        .checkpoint
        .state
        .messages
        .iter()
        .map(|m| m.text())
        .collect();
    assert_eq!(texts, ["start", "hello", "next", "again"]);
    assert_eq!(out.state.messages.len(), 4);
}

/// One test per scenario for the store `$cloud`, in module `$module`.
macro_rules! cloud_tests {
    ($module:ident, $cloud:expr) => {
        mod $module {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn an_unreadable_skills_source_is_a_warning_and_the_agent_runs() {
                super::an_unreadable_skills_source_is_a_warning_and_the_agent_runs($cloud).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn an_unreadable_memory_source_stops_the_run_and_names_the_source() {
                super::an_unreadable_memory_source_stops_the_run_and_names_the_source($cloud).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_checkpoint_save_whose_reply_was_lost_is_not_a_conflict() {
                super::a_checkpoint_save_whose_reply_was_lost_is_not_a_conflict($cloud).await;
            }
        }
    };
}

cloud_tests!(s3, Cloud::S3);
cloud_tests!(gcs, Cloud::Gcs);
cloud_tests!(azure, Cloud::Azure);
