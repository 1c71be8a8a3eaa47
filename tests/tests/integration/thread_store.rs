//! The thread store (`BackendCheckpointer`'s step log) on every kind of storage: `StateBackend`,
//! local disk (new threads in one file, and threads of the one-object-per-step layout),
//! `memory://`, and the S3, GCS and Azure emulators. One suite, run per store:
//! two workers racing on one thread (exactly one wins each step, the other reloads and re-applies,
//! nothing lost); a process killed between writing its step and moving the head, or in the middle
//! of appending it (the thread reloads at the previous step, intact); history and the state at any checkpoint; forks (own
//! state, blobs and files; deleting the source leaves the fork whole); deleting a thread removes
//! everything under it; garbage collection of unreferenced steps and blobs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use trellis_backend::{
    Backend, BackendError, BackendExt, FilesystemBackend, ObjectStoreBackend, StateBackend, StoreOptions,
    VirtualPath, WriteMode,
};
use trellis_middleware::runtime::checkpoint::{Checkpoint, CheckpointError, CheckpointVersion, ForkOrigin};
use trellis_middleware::skills::{SKILLS, SkillsState};
use trellis_middleware::*;
use trellis_tests::emulator::{Cloud, cloud_target, unique};

/// A new client of the store, each call, and the layout new threads get.
type Make = Arc<dyn Fn() -> (Arc<dyn Backend>, Layout) + Send + Sync>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// The default: one file where the store appends, one object per step elsewhere.
    Default,
    /// One object per step everywhere.
    OneObjectPerStep,
}

fn root() -> VirtualPath {
    VirtualPath::parse("/threads").unwrap()
}

/// A checkpointer on a new client of the store: what another process would have.
fn open(make: &Make) -> BackendCheckpointer {
    let (backend, layout) = make();
    let cp = BackendCheckpointer::new(backend, root()).unwrap();
    match layout {
        Layout::Default => cp,
        Layout::OneObjectPerStep => cp.one_object_per_step(),
    }
}

fn texts(state: &State) -> Vec<String> {
    state.messages.iter().map(|m| m.text()).collect()
}

async fn files_below(backend: &dyn Backend, dir: &str) -> Vec<String> {
    match backend
        .list_files(&VirtualPath::parse(dir).unwrap(), 10_000)
        .await
    {
        Ok(listing) => listing.files.into_iter().map(|f| f.path.to_string()).collect(),
        Err(BackendError::NotFound { .. }) => Vec::new(),
        Err(e) => panic!("{e}"),
    }
}

async fn save(
    cp: &BackendCheckpointer,
    state: &State,
    seq: u64,
    v: Option<&CheckpointVersion>,
) -> CheckpointVersion {
    cp.save(Checkpoint::new(state_thread(state), seq, state.clone()), v)
        .await
        .unwrap()
}

static THREAD: Slot<String> = Slot::private("_thread");

fn state_thread(state: &State) -> ThreadId {
    ThreadId::new(state.get(&THREAD).unwrap().unwrap().clone()).unwrap()
}

fn new_state(thread: &ThreadId, first: &str) -> State {
    let mut state = State::with_messages(vec![Message::human(first)]);
    state.set(&THREAD, thread.to_string());
    state
}

async fn racing_workers(make: &Make) {
    let thread = ThreadId::new(unique("race")).unwrap();
    let (a, b) = (open(make), open(make));
    save(&a, &new_state(&thread, "start"), 0, None).await;
    for round in 1..=3u64 {
        let (la, lb) = (
            a.load(&thread).await.unwrap().unwrap(),
            b.load(&thread).await.unwrap().unwrap(),
        );
        assert_eq!(la.version, lb.version);
        let (mut sa, mut sb) = (la.checkpoint.state, lb.checkpoint.state);
        sa.messages.push(Message::ai(format!("A{round}")));
        sb.messages.push(Message::ai(format!("B{round}")));
        let (ra, rb) = tokio::join!(
            a.save(Checkpoint::new(thread.clone(), round, sa), Some(&la.version)),
            b.save(Checkpoint::new(thread.clone(), round, sb), Some(&lb.version)),
        );
        let conflicts = [&ra, &rb]
            .iter()
            .filter(|r| matches!(r, Err(CheckpointError::Conflict { .. })))
            .count();
        assert_eq!(
            (conflicts, ra.is_ok() as u8 + rb.is_ok() as u8),
            (1, 1),
            "round {round}: {ra:?} {rb:?}"
        );
        // The loser reloads and re-applies its step.
        let (loser, name) = if ra.is_ok() { (&b, "B") } else { (&a, "A") };
        let reloaded = loser.load(&thread).await.unwrap().unwrap();
        let mut state = reloaded.checkpoint.state;
        state.messages.push(Message::ai(format!("{name}{round}")));
        loser
            .save(
                Checkpoint::new(thread.clone(), round, state),
                Some(&reloaded.version),
            )
            .await
            .unwrap();
    }
    let fresh = open(make).load(&thread).await.unwrap().unwrap();
    let got = texts(&fresh.checkpoint.state);
    assert_eq!(got.len(), 7, "{got:?}");
    for round in 1..=3 {
        let pair = &got[2 * round - 1..=2 * round];
        let mut sorted = pair.to_vec();
        sorted.sort();
        assert_eq!(sorted, [format!("A{round}"), format!("B{round}")], "{got:?}");
    }
    let seqs: Vec<u64> = open(make)
        .history(&thread)
        .await
        .unwrap()
        .iter()
        .map(|h| h.seq)
        .collect();
    assert_eq!(seqs, (0..=6).collect::<Vec<_>>());
    a.delete(&thread).await.unwrap();
}

async fn killed_between_step_and_head(make: &Make) {
    let thread = ThreadId::new(unique("killed")).unwrap();
    let cp = open(make);
    let mut state = new_state(&thread, "one");
    let v = save(&cp, &state, 0, None).await;
    state.messages.push(Message::ai("two"));
    save(&cp, &state, 1, Some(&v)).await;

    let (backend, _) = make();
    let one_file = VirtualPath::parse(&format!("/threads/{thread}/steps.log")).unwrap();
    if backend.stat(&one_file).await.is_ok() {
        return killed_mid_append(make, &thread, &one_file).await;
    }
    // A step 2 written by a process that died before moving the head. The head names its step
    // in its first line (on local disk the head is the step object itself, whose header does).
    let head_bytes = backend.read_bytes(&cp.path(&thread).unwrap()).await.unwrap();
    let head: serde_json::Value =
        serde_json::from_slice(head_bytes.split(|b| *b == b'\n').next().unwrap()).unwrap();
    let parent = head["step"]
        .as_str()
        .unwrap()
        .split('-')
        .nth(1)
        .unwrap()
        .to_owned();
    let orphan = format!("/threads/{thread}/log/000000000002-ffffffffffffffff-{parent}.json");
    let header = serde_json::json!({"format": 3, "thread_id": thread.as_str(), "seq": 2, "saved_at_ms": 1,
        "summary": "user: lost", "messages": 3});
    let body = serde_json::json!({"base": false, "keep": 2,
        "append": [{"role": "human", "content": [{"type": "text", "text": "lost"}]}], "set": {}, "unset": []});
    backend
        .write(
            &VirtualPath::parse(&orphan).unwrap(),
            format!("{header}\n{body}").into_bytes().into(),
            WriteMode::CreateNew,
        )
        .await
        .unwrap();

    let restarted = reloads_at_step_one_and_carries_on(make, &thread).await;

    // The dead step can never be committed now: collected whatever its age.
    let report = restarted
        .collect_garbage(&thread, Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(report.steps, 1, "{report:?}");
    let log = files_below(backend.as_ref(), &format!("/threads/{thread}/log")).await;
    assert_eq!(log.len(), 3, "{log:?}");
    assert!(!log.iter().any(|p| p.contains("ffffffffffffffff")), "{log:?}");
    cp.delete(&thread).await.unwrap();
}

/// What a process started after the kill finds: the thread at step 1, its history two steps
/// long, and a save of step 2 that a third process loads back. Returns that process's
/// checkpointer.
async fn reloads_at_step_one_and_carries_on(make: &Make, thread: &ThreadId) -> BackendCheckpointer {
    let restarted = open(make);
    let loaded = restarted.load(thread).await.unwrap().unwrap();
    assert_eq!(loaded.checkpoint.seq, 1);
    assert_eq!(texts(&loaded.checkpoint.state), ["one", "two"]);
    assert_eq!(restarted.history(thread).await.unwrap().len(), 2);
    let mut next = loaded.checkpoint.state;
    next.messages.push(Message::human("three"));
    restarted
        .save(Checkpoint::new(thread.clone(), 2, next), Some(&loaded.version))
        .await
        .unwrap();
    let loaded = open(make).load(thread).await.unwrap().unwrap();
    assert_eq!(texts(&loaded.checkpoint.state), ["one", "two", "three"]);
    restarted
}

/// The same for a thread kept in one file: a process killed in the middle of appending step 2
/// left the first part of its record (here, a copy of the file's first bytes, which is where a
/// record's header line starts).
async fn killed_mid_append(make: &Make, thread: &ThreadId, file: &VirtualPath) {
    let (backend, _) = make();
    let whole = backend.read_bytes(file).await.unwrap();
    let read = backend.read(file, None).await.unwrap();
    let half = whole.slice(..whole.len() / 2);
    let appended = backend
        .append(
            file,
            half,
            trellis_backend::AppendMode::IfVersion {
                version: read.version.unwrap(),
                keep: whole.len() as u64,
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert!(appended.version.is_some());

    let restarted = reloads_at_step_one_and_carries_on(make, thread).await;
    let after = backend.read_bytes(file).await.unwrap();
    assert_eq!(
        &after[..whole.len()],
        &whole[..],
        "the whole records are as they were"
    );

    // Appends are version-checked, so nothing is ever off the chain.
    let report = restarted.collect_garbage(thread, Duration::ZERO).await.unwrap();
    assert_eq!(report.steps, 0, "{report:?}");
    restarted.delete(thread).await.unwrap();
    assert!(backend.stat(file).await.is_err());
}

async fn history_fork_delete_and_garbage(make: &Make) {
    let source = ThreadId::new(unique("source")).unwrap();
    let cp = open(make);
    let mut state = new_state(&source, "hello");
    state.set(&SKILLS, SkillsState::default());
    let mut v = save(&cp, &state, 0, None).await;
    state.messages.push(Message::ai("hi there"));
    v = save(&cp, &state, 1, Some(&v)).await;
    state.messages.push(Message::human("and then"));
    state.update(&SKILLS, |s| s.scanned = 3).unwrap();
    save(&cp, &state, 2, Some(&v)).await;
    let files = cp.thread_files(&source).unwrap();
    files
        .write(
            &VirtualPath::parse("/notes/a.txt").unwrap(),
            b"note".to_vec().into(),
            WriteMode::Overwrite,
        )
        .await
        .unwrap();

    let history = open(make).history(&source).await.unwrap();
    let lines: Vec<(u64, &str, usize)> = history
        .iter()
        .map(|h| (h.seq, h.summary.as_str(), h.messages))
        .collect();
    assert_eq!(
        lines,
        [
            (0, "user: hello", 1),
            (1, "assistant: hi there", 2),
            (2, "user: and then", 3)
        ]
    );
    assert!(history.windows(2).all(|w| w[0].saved_at_ms <= w[1].saved_at_ms));
    let at1 = open(make).load_at(&source, 1).await.unwrap().unwrap();
    assert_eq!(texts(&at1.state), ["hello", "hi there"]);
    assert_eq!(at1.state.get(&SKILLS).unwrap().unwrap().scanned, 0);
    assert!(open(make).load_at(&source, 9).await.unwrap().is_none());

    // Fork at step 1.
    let fork = ThreadId::new(unique("fork")).unwrap();
    let other = open(make);
    let fv = other.fork(&source, 1, &fork).await.unwrap();
    let forked = open(make).load(&fork).await.unwrap().unwrap();
    assert_eq!(forked.version, fv);
    assert_eq!(forked.checkpoint.seq, 1);
    assert_eq!(texts(&forked.checkpoint.state), ["hello", "hi there"]);
    let fh = open(make).history(&fork).await.unwrap();
    assert_eq!(fh.len(), 1);
    assert_eq!(
        fh[0].forked_from,
        Some(ForkOrigin {
            thread_id: source.clone(),
            seq: 1
        })
    );
    let fork_files = other.thread_files(&fork).unwrap();
    assert_eq!(
        &fork_files
            .read_bytes(&VirtualPath::parse("/notes/a.txt").unwrap())
            .await
            .unwrap()[..],
        b"note"
    );
    let again = other.fork(&source, 1, &fork).await;
    assert!(
        matches!(again, Err(CheckpointError::Conflict { .. })),
        "{again:?}"
    );
    let missing = other
        .fork(&source, 9, &ThreadId::new(unique("nofork")).unwrap())
        .await;
    assert!(
        matches!(missing, Err(CheckpointError::NoSuchCheckpoint { seq: 9, .. })),
        "{missing:?}"
    );

    // The fork goes on by itself.
    let mut fstate = forked.checkpoint.state.clone();
    fstate.messages.push(Message::human("a different turn"));
    other
        .save(Checkpoint::new(fork.clone(), 2, fstate), Some(&fv))
        .await
        .unwrap();

    // Garbage: a blob nothing refers to goes (not while younger than the grace), the rest stays.
    let (backend, _) = make();
    let junk = format!("/threads/{source}/blobs/{}.json", "0".repeat(64));
    backend
        .write(
            &VirtualPath::parse(&junk).unwrap(),
            b"[1]".to_vec().into(),
            WriteMode::CreateNew,
        )
        .await
        .unwrap();
    let kept = cp
        .collect_garbage(&source, Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(kept.blobs, 0, "{kept:?}");
    let report = cp.collect_garbage(&source, Duration::ZERO).await.unwrap();
    assert_eq!((report.steps, report.blobs), (0, 1), "{report:?}");
    let blobs = files_below(backend.as_ref(), &format!("/threads/{source}/blobs")).await;
    assert_eq!(blobs.len(), 1, "the catalog stays: {blobs:?}");
    assert_eq!(open(make).load(&source).await.unwrap().unwrap().checkpoint.seq, 2);

    // Deleting the source removes everything it owns and leaves the fork whole.
    cp.delete(&source).await.unwrap();
    assert!(
        files_below(backend.as_ref(), &format!("/threads/{source}"))
            .await
            .is_empty()
    );
    assert!(open(make).load(&source).await.unwrap().is_none());
    let fork_now = open(make).load(&fork).await.unwrap().unwrap();
    assert_eq!(
        texts(&fork_now.checkpoint.state),
        ["hello", "hi there", "a different turn"]
    );
    assert!(fork_now.checkpoint.state.get(&SKILLS).unwrap().is_some());
    other.delete(&fork).await.unwrap();
    assert!(
        files_below(backend.as_ref(), &format!("/threads/{fork}"))
            .await
            .is_empty()
    );
}

async fn suite(make: Make) {
    racing_workers(&make).await;
    killed_between_step_and_head(&make).await;
    history_fork_delete_and_garbage(&make).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_backend() {
    let store = StateBackend::new();
    suite(Arc::new(move || {
        (Arc::new(store.clone()) as Arc<dyn Backend>, Layout::Default)
    }))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_disk() {
    for layout in [Layout::Default, Layout::OneObjectPerStep] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_owned();
        suite(Arc::new(move || {
            (
                Arc::new(FilesystemBackend::new(&path).unwrap()) as Arc<dyn Backend>,
                layout,
            )
        }))
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_store_memory() {
    let store = ObjectStoreBackend::from_url("memory://", &StoreOptions::default()).unwrap();
    suite(Arc::new(move || {
        (Arc::new(store.clone()) as Arc<dyn Backend>, Layout::Default)
    }))
    .await;
}

async fn on_cloud(cloud: Cloud) {
    let suite_name = format!("thread-store-{cloud:?}").to_lowercase();
    let Some(target) = cloud_target(cloud, &suite_name) else {
        return;
    };
    let prefix = unique(&suite_name);
    suite(Arc::new(move || {
        let backend = target
            .backend(&target.endpoint, &prefix, StoreOptions::default())
            .unwrap();
        (Arc::new(backend) as Arc<dyn Backend>, Layout::Default)
    }))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_emulator() {
    on_cloud(Cloud::S3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcs_emulator() {
    on_cloud(Cloud::Gcs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_emulator() {
    on_cloud(Cloud::Azure).await;
}
