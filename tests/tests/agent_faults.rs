//! Skills, memory and checkpoints on the S3 emulator behind the fault-injecting proxy, through the
//! real `ObjectStoreBackend`, middlewares and `BackendCheckpointer`: an unreadable skills source is
//! a warning and the agent runs; an unreadable memory source stops the run with an error naming
//! it; a checkpoint save whose reply was lost is neither a conflict nor a doubled turn.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use trellis_backend::{
    Backend, BackendError, ObjectStoreBackend, RetryOptions, StoreOptions, VirtualPath, WriteMode,
};
use trellis_middleware::memory::MemoryError;
use trellis_middleware::*;
use trellis_tests::emulator::{s3_target, unique};
use trellis_tests::fault_proxy::{Fault, FaultProxy, Rule};

/// Only a guard against a hang: no assertion here is about speed.
const HANG_GUARD: Duration = Duration::from_secs(120);

fn options(endpoint: &str) -> StoreOptions {
    StoreOptions::s3_compatible(endpoint, "test", "test")
        .with_timeout(Duration::from_millis(500))
        .with_retry(RetryOptions {
            init_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(50),
            ..RetryOptions::default()
        })
}

/// A backend through a new proxy and one straight to the emulator, on the same fresh prefix.
async fn setup(suite: &str) -> Option<(FaultProxy, Arc<dyn Backend>, Arc<dyn Backend>)> {
    let target = s3_target(suite)?;
    let proxy = FaultProxy::start(&target.endpoint).await.unwrap();
    let url = format!("s3://{}/{}", target.bucket, unique(suite));
    let faulty = ObjectStoreBackend::from_url(&url, &options(&proxy.url())).unwrap();
    let direct = ObjectStoreBackend::from_url(&url, &options(&target.endpoint)).unwrap();
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

fn system_text(request: &ModelRequest) -> String {
    request
        .system
        .iter()
        .map(|b| b.text.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_skills_source_is_a_warning_and_the_agent_runs() {
    let Some((proxy, faulty, direct)) = setup("faults-skills").await else {
        return;
    };
    for (dir, name) in [
        ("base", "greeting"),
        ("base", "unreadable"),
        ("team", "team-skill"),
        ("shared", "shared-skill"),
    ] {
        put(&direct, &format!("/skills/{dir}/{name}/SKILL.md"), &skill(name)).await;
    }
    // `team` answers 500, `shared` drops every connection, and one file of `base` answers 503.
    proxy.add(Rule::new(Fault::internal_error()).target_contains("/skills/team/"));
    proxy.add(Rule::new(Fault::DropBeforeForward).target_contains("/skills/shared/"));
    proxy.add(Rule::new(Fault::service_unavailable()).target_contains("/unreadable/SKILL.md"));

    let sources = ["base", "team", "shared"]
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
    for dir in ["team", "shared"] {
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
    assert_eq!(
        proxy.count("GET", "/skills/team/"),
        attempts,
        "{:#?}",
        proxy.seen()
    );
    assert_eq!(
        proxy.count("GET", "/skills/shared/"),
        attempts,
        "{:#?}",
        proxy.seen()
    );
    assert_eq!(
        proxy.count("GET", "/unreadable/SKILL.md"),
        attempts,
        "{:#?}",
        proxy.seen()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_memory_source_stops_the_run_and_names_the_source() {
    let Some((proxy, faulty, direct)) = setup("faults-memory").await else {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_save_whose_reply_was_lost_is_not_a_conflict() {
    let Some((proxy, faulty, direct)) = setup("faults-checkpoint").await else {
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
            .with_header("if-match")
            .target_contains("/checkpoint.json")
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
