//! Crash-safe tool steps: a run dropped in the middle of a step (as a killed process leaves it:
//! the reply checkpointed, some calls finished and journaled, others started) is continued by a
//! fresh agent on the same on-disk store. A finished call is never run again, an external call
//! that started is reported as unknown (or goes to approval), a read-only one runs again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use trellis_middleware::approvals::{Ask, InterruptOn};
use trellis_middleware::backend::{FilesystemBackend, VirtualPath};
use trellis_middleware::runtime::checkpoint::{
    CallOutcome, CallRecord, Checkpoint, CheckpointError, CheckpointVersion, StoredCheckpoint,
};
use trellis_middleware::runtime::interrupt::{Decision, Decisions};
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::tools::SideEffects;
use trellis_middleware::*;

use crate::common::*;

/// Counts calls; the first call hangs forever when `hang_first`, later ones answer at once.
fn counted(name: &'static str, effects: SideEffects, hang_first: bool, counter: Arc<AtomicUsize>) -> FnTool {
    FnTool::new(name, "A test tool.", object_schema(), move |_| {
        let counter = counter.clone();
        async move {
            let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
            if hang_first && n == 1 {
                std::future::pending::<()>().await;
            }
            Ok(ToolOutput::text(format!("{name} {n}")))
        }
    })
    .with_side_effects(effects)
}

#[derive(Default, Clone)]
struct Counters {
    send: Arc<AtomicUsize>,
    deploy: Arc<AtomicUsize>,
    look: Arc<AtomicUsize>,
}

impl Counters {
    fn get(&self) -> [usize; 3] {
        [&self.send, &self.deploy, &self.look].map(|c| c.load(Ordering::SeqCst))
    }
}

/// `send` (external, answers), `deploy` (external, hangs the first time), `look` (read-only,
/// hangs the first time).
fn agent(
    checkpointer: Arc<dyn Checkpointer>,
    model: ScriptedModel,
    counters: &Counters,
    gate: bool,
) -> Agent {
    let mut builder = Agent::builder(Arc::new(model))
        .checkpointer(checkpointer)
        .middleware(PatchToolCallsMiddleware::new())
        .tool(counted(
            "send",
            SideEffects::External,
            false,
            counters.send.clone(),
        ))
        .tool(counted(
            "deploy",
            SideEffects::External,
            true,
            counters.deploy.clone(),
        ))
        .tool(counted(
            "look",
            SideEffects::ReadOnly,
            true,
            counters.look.clone(),
        ));
    if gate {
        builder = builder.interrupt_on(InterruptOn::new().tool("deploy", Ask::Always));
    }
    builder.build().unwrap()
}

fn three_calls() -> ScriptedModel {
    ScriptedModel::new().then_tool_calls([
        call("s1", "send", json!({})),
        call("d1", "deploy", json!({})),
        call("l1", "look", json!({})),
    ])
}

fn store(dir: &std::path::Path) -> Arc<dyn Checkpointer> {
    let backend = Arc::new(FilesystemBackend::new(dir).unwrap());
    Arc::new(BackendCheckpointer::new(backend, VirtualPath::parse("/threads").unwrap()).unwrap())
}

/// Run `input` until every tool has been entered once and `send`'s result is journaled, then
/// drop the run (what a kill leaves behind, minus the process).
async fn cut_short(agent: Agent, input: RunInput, counters: &Counters, checkpointer: &Arc<dyn Checkpointer>) {
    let thread = ThreadId::new("t-crash").unwrap();
    let run = tokio::spawn(async move { agent.run(input).await });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let recorded = checkpointer
            .recorded_calls(&thread, &["s1".to_owned()])
            .await
            .unwrap();
        let finished = recorded
            .iter()
            .any(|r| matches!(r.outcome, CallOutcome::Finished { .. }));
        if finished && counters.get() == [1, 1, 1] {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the step never got under way: {:?}",
            counters.get()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled());
}

fn thread() -> ThreadId {
    ThreadId::new("t-crash").unwrap()
}

/// Thread `t-crash` in `dir`, cut short in its first step by a run without approvals.
async fn crash_mid_step(dir: &std::path::Path, counters: &Counters) {
    let first = store(dir);
    let input = RunInput::human("go").thread(thread());
    cut_short(
        agent(first.clone(), three_calls(), counters, false),
        input,
        counters,
        &first,
    )
    .await;
}

#[tokio::test]
async fn a_resumed_run_keeps_finished_calls_reruns_read_only_ones_and_reports_external_ones_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let counters = Counters::default();
    crash_mid_step(dir.path(), &counters).await;

    // A new process: a fresh store on the same directory, a model that answers.
    let second = store(dir.path());
    let model = ScriptedModel::new().then_text("done");
    let agent = agent(second.clone(), model, &counters, false);
    assert!(agent.has_cut_step(&thread()).await.unwrap());
    let out = agent.run(RunInput::new().thread(thread())).await.unwrap();

    assert_eq!(
        counters.get(),
        [1, 1, 2],
        "send kept, deploy not run again, look run again"
    );
    let results = tool_texts(&out);
    assert_eq!(results[0], ("send 1".to_owned(), false));
    assert!(
        results[1].1 && results[1].0.contains("unknown"),
        "{:?}",
        results[1]
    );
    assert_eq!(results[2], ("look 2".to_owned(), false));
    assert_eq!(
        shape(&out.state.messages),
        [
            "human:go",
            "ai:calls[s1,d1,l1]",
            "tool:s1",
            "tool:d1!",
            "tool:l1",
            "ai:done"
        ]
    );
    assert!(!agent.has_cut_step(&thread()).await.unwrap());
    let ids = ["s1", "d1", "l1"].map(str::to_owned);
    assert!(
        second.recorded_calls(&thread(), &ids).await.unwrap().is_empty(),
        "the step's journal is forgotten once its results are checkpointed"
    );
}

#[tokio::test]
async fn with_approvals_configured_the_unknown_external_call_goes_to_a_person() {
    let dir = tempfile::tempdir().unwrap();
    let counters = Counters::default();
    crash_mid_step(dir.path(), &counters).await;

    let second = store(dir.path());
    let agent = agent(second, ScriptedModel::new().then_text("done"), &counters, true);
    let out = agent.run(RunInput::new().thread(thread())).await.unwrap();
    let interrupt = out.interrupt.clone().expect("deploy waits for a decision");
    assert_eq!(interrupt.requests.len(), 1);
    assert_eq!(interrupt.requests[0].call_id, "d1");
    let description = interrupt.requests[0].description.clone().unwrap_or_default();
    assert!(description.contains("unknown"), "{description}");
    assert_eq!(counters.get(), [1, 1, 1], "nothing ran while the person decides");

    let out = agent
        .run(RunInput::resume(Decisions::new().decide("d1", Decision::Approve)).thread(thread()))
        .await
        .unwrap();
    assert_eq!(
        counters.get(),
        [1, 2, 2],
        "approved: deploy runs again; send still once"
    );
    let results = tool_texts(&out);
    assert_eq!(
        results,
        [
            ("send 1".to_owned(), false),
            ("deploy 2".to_owned(), false),
            ("look 2".to_owned(), false)
        ]
    );
}

#[tokio::test]
async fn a_crash_in_a_step_resumed_after_approval_keeps_what_finished_and_asks_again_about_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let counters = Counters::default();
    let first = store(dir.path());
    let agent1 = agent(first.clone(), three_calls(), &counters, true);
    let out = agent1.run(RunInput::human("go").thread(thread())).await.unwrap();
    assert!(out.is_interrupted());
    let approve = || RunInput::resume(Decisions::new().decide("d1", Decision::Approve)).thread(thread());
    cut_short(agent1, approve(), &counters, &first).await;

    // The thread waits for that decision again, now told the call's outcome is unknown; the
    // finished call is kept, and an approval runs the external call again.
    let agent2 = agent(
        store(dir.path()),
        ScriptedModel::new().then_text("done"),
        &counters,
        true,
    );
    let interrupt = agent2.pending_interrupt(&thread()).await.unwrap().unwrap();
    assert_eq!(interrupt.requests.len(), 1);
    let description = interrupt.requests[0].description.clone().unwrap_or_default();
    assert!(description.contains("unknown"), "{description}");
    let out = agent2.run(approve()).await.unwrap();
    assert_eq!(
        counters.get(),
        [1, 2, 2],
        "send kept; deploy approved again; look re-run"
    );
    assert_eq!(
        tool_texts(&out),
        [
            ("send 1".to_owned(), false),
            ("deploy 2".to_owned(), false),
            ("look 2".to_owned(), false)
        ]
    );
}

#[tokio::test]
async fn a_new_message_keeps_recorded_results_and_runs_nothing_again() {
    let dir = tempfile::tempdir().unwrap();
    let counters = Counters::default();
    crash_mid_step(dir.path(), &counters).await;

    let agent = agent(
        store(dir.path()),
        ScriptedModel::new().then_text("ok"),
        &counters,
        false,
    );
    let out = agent
        .run(RunInput::human("something else").thread(thread()))
        .await
        .unwrap();
    assert_eq!(counters.get(), [1, 1, 1]);
    let results = tool_texts(&out);
    assert_eq!(
        results[0],
        ("send 1".to_owned(), false),
        "the recorded result, not a cancellation"
    );
    assert!(results[1].1 && results[2].1, "{results:?}");
    assert_eq!(
        tool_result(&out.state.messages, "d1").meta.source.as_deref(),
        Some("patch_tool_calls")
    );
}

/// A checkpointer that keeps no journal (the trait's defaults).
#[derive(Debug)]
struct NoJournal(InMemoryCheckpointer);

#[async_trait]
impl Checkpointer for NoJournal {
    async fn load(&self, thread_id: &ThreadId) -> Result<Option<StoredCheckpoint>, CheckpointError> {
        self.0.load(thread_id).await
    }
    async fn save(
        &self,
        checkpoint: Checkpoint,
        expected: Option<&CheckpointVersion>,
    ) -> Result<CheckpointVersion, CheckpointError> {
        self.0.save(checkpoint, expected).await
    }
    async fn delete(&self, thread_id: &ThreadId) -> Result<(), CheckpointError> {
        self.0.delete(thread_id).await
    }
}

#[tokio::test]
async fn without_a_journal_every_external_call_without_a_result_counts_as_started() {
    let counters = Counters::default();
    let cp: Arc<dyn Checkpointer> = Arc::new(NoJournal(InMemoryCheckpointer::new()));
    let agent1 = agent(cp.clone(), three_calls(), &counters, false);
    let run = tokio::spawn(async move { agent1.run(RunInput::human("go").thread(thread())).await });
    while counters.get() != [1, 1, 1] {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    run.abort();
    let _ = run.await;

    let agent2 = agent(cp, ScriptedModel::new().then_text("done"), &counters, false);
    let out = agent2.run(RunInput::new().thread(thread())).await.unwrap();
    assert_eq!(counters.get(), [1, 1, 2], "only the read-only call runs again");
    let results = tool_texts(&out);
    assert!(
        results[0].1 && results[0].0.contains("unknown"),
        "{:?}",
        results[0]
    );
    assert!(
        results[1].1 && results[1].0.contains("unknown"),
        "{:?}",
        results[1]
    );
    assert_eq!(results[2], ("look 2".to_owned(), false));
}

#[tokio::test]
async fn a_record_of_another_call_under_the_same_id_is_never_used() {
    let dir = tempfile::tempdir().unwrap();
    let counters = Counters::default();
    crash_mid_step(dir.path(), &counters).await;
    // What a rolled-back run that reused the id `s1` for another call could have left.
    let store = store(dir.path());
    let stale = CallRecord {
        call_id: "s1".to_owned(),
        reply: 1,
        fingerprint: CallRecord::fingerprint("send", &json!({"to": "someone else"})),
        outcome: CallOutcome::Finished {
            message: trellis_middleware::runtime::message::ToolMessage::text("s1", "send", "stale"),
            updates: Vec::new(),
        },
    };
    store.record_call(&thread(), &stale).await.unwrap();

    let agent = agent(store, ScriptedModel::new().then_text("done"), &counters, false);
    let out = agent.run(RunInput::new().thread(thread())).await.unwrap();
    assert_eq!(
        tool_texts(&out)[0],
        ("send 2".to_owned(), false),
        "the stale result is not replayed; with no record of its own the call never started, so it runs"
    );
}

/// An in-memory checkpointer with a journal that counts the records it is given and the ones it
/// is asked to forget, by call id.
#[derive(Debug, Default)]
struct CountingJournal {
    inner: InMemoryCheckpointer,
    records: std::sync::Mutex<Vec<String>>,
    forgotten: std::sync::Mutex<Vec<Vec<String>>>,
}

#[async_trait]
impl Checkpointer for CountingJournal {
    async fn load(&self, thread_id: &ThreadId) -> Result<Option<StoredCheckpoint>, CheckpointError> {
        self.inner.load(thread_id).await
    }
    async fn save(
        &self,
        checkpoint: Checkpoint,
        expected: Option<&CheckpointVersion>,
    ) -> Result<CheckpointVersion, CheckpointError> {
        self.inner.save(checkpoint, expected).await
    }
    async fn delete(&self, thread_id: &ThreadId) -> Result<(), CheckpointError> {
        self.inner.delete(thread_id).await
    }
    fn keeps_call_journal(&self) -> bool {
        true
    }
    async fn record_call(&self, thread_id: &ThreadId, record: &CallRecord) -> Result<(), CheckpointError> {
        self.records.lock().unwrap().push(record.call_id.clone());
        self.inner.record_call(thread_id, record).await
    }
    async fn recorded_calls(
        &self,
        thread_id: &ThreadId,
        call_ids: &[String],
    ) -> Result<Vec<CallRecord>, CheckpointError> {
        self.inner.recorded_calls(thread_id, call_ids).await
    }
    async fn forget_calls(&self, thread_id: &ThreadId, call_ids: &[String]) -> Result<(), CheckpointError> {
        self.forgotten.lock().unwrap().push(call_ids.to_vec());
        self.inner.forget_calls(thread_id, call_ids).await
    }
}

#[tokio::test]
async fn a_step_of_one_call_that_may_repeat_is_not_journaled_and_a_crash_runs_it_again() {
    let counters = Counters::default();
    let journal = Arc::new(CountingJournal::default());
    let cp: Arc<dyn Checkpointer> = journal.clone();
    // Step 1: `send` alone (external: recorded as it starts and as it finishes). Step 2: `look`
    // alone (read-only: no record), which hangs the first time: the run is dropped there.
    let model = ScriptedModel::new()
        .then_tool_calls([call("s1", "send", json!({}))])
        .then_tool_calls([call("l1", "look", json!({}))]);
    let first = agent(cp.clone(), model, &counters, false);
    let run = tokio::spawn(async move { first.run(RunInput::human("go").thread(thread())).await });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while counters.get() != [1, 0, 1] {
        assert!(tokio::time::Instant::now() < deadline, "{:?}", counters.get());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    run.abort();
    let _ = run.await;
    assert_eq!(*journal.records.lock().unwrap(), ["s1", "s1"]);

    // Step 3 of the resumed run: two read-only calls, each recorded when it finishes.
    let model = ScriptedModel::new()
        .then_tool_calls([call("l2", "look", json!({})), call("l3", "look", json!({}))])
        .then_text("done");
    let second = agent(cp.clone(), model, &counters, false);
    let out = second.run(RunInput::new().thread(thread())).await.unwrap();
    assert_eq!(counters.get(), [1, 0, 4], "the unrecorded `look` ran again");
    let results = tool_texts(&out);
    assert_eq!(results[1], ("look 2".to_owned(), false));
    assert_eq!(*journal.records.lock().unwrap(), ["s1", "s1", "l2", "l3"]);
    // The unjournaled step has nothing to forget: no removal is asked for `l1`.
    assert_eq!(
        *journal.forgotten.lock().unwrap(),
        [vec!["s1".to_owned()], vec!["l2".to_owned(), "l3".to_owned()]]
    );
}
