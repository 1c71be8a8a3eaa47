//! RubricMiddleware across runs: grading runs that finish, continue or restart, criteria fixed in the
//! first round, the callback, cancellation, and the grading state staying private.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use trellis_middleware::rubric::GradingState;
use trellis_middleware::rubric::{RUBRIC, RUBRIC_RESULT, Rubric, RubricResult};
use trellis_middleware::runtime::error::BoxError;
use trellis_middleware::runtime::message::AiMessage;
use trellis_middleware::runtime::model::ModelError;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::*;

use crate::rubric::common::*;

// ---------------------------------------------------------------------------------------------------
// grading runs

#[tokio::test]
async fn a_finished_grading_run_is_not_continued_and_the_old_result_is_cleared() {
    let model = Arc::new(ScriptedModel::from_fn(|_| {
        Ok(ModelResponse::new(AiMessage::text("ok")))
    }));
    let grader = Arc::new(ScriptedModel::from_fn(|_| Ok(satisfied(&["ok"]))));
    let agent = agent_with(&model, RubricMiddleware::new(grader.clone()));

    let first = agent
        .run(RunInput::human("one").slot(&RUBRIC, Rubric::new("Says ok.")))
        .await
        .unwrap();
    let a = result_of(&first);
    // The rubric stays in the thread: the next run is graded again, in a new grading run.
    let second = agent
        .run(RunInput::human("two").thread(first.thread_id.clone()))
        .await
        .unwrap();
    let b = result_of(&second);
    assert_ne!(a.grading_run_id, b.grading_run_id);
    assert_eq!(b.round, 0);
    // A changed rubric also starts over.
    let third = agent
        .run(
            RunInput::human("three")
                .thread(first.thread_id.clone())
                .slot(&RUBRIC, Rubric::new("Says ok, politely.")),
        )
        .await
        .unwrap();
    assert_ne!(result_of(&third).grading_run_id, b.grading_run_id);
    // A blank rubric turns grading off, and the previous run's result does not linger.
    let fourth = agent
        .run(
            RunInput::human("four")
                .thread(first.thread_id.clone())
                .slot(&RUBRIC, Rubric::new("")),
        )
        .await
        .unwrap();
    assert_eq!(fourth.state.get(&RUBRIC_RESULT).unwrap(), None);
    assert_eq!(grader.calls(), 3);
}

/// A run sent back by the grader whose next model call fails: the thread keeps an unfinished grading
/// run. Returns the agent, its models, and the grading run's id.
async fn interrupted_thread(thread: &ThreadId) -> (Agent, Arc<ScriptedModel>, Arc<ScriptedModel>, String) {
    let model = Arc::new(
        ScriptedModel::new()
            .then_text("draft")
            .then_error(ModelError::Auth {
                message: "key revoked".into(),
                http: None,
            })
            .then_text("final"),
    );
    let grader = Arc::new(
        ScriptedModel::new()
            .then(needs_revision(&[("Is final", "It is a draft.")], &["Is short"]))
            .then(satisfied(&["is final", "is short"])),
    );
    let agent = agent_with(&model, RubricMiddleware::new(grader.clone()));
    let err = agent
        .run(
            RunInput::human("Write it.")
                .thread(thread.clone())
                .slot(&RUBRIC, Rubric::new("Is final. Is short.")),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, AgentError::Model(ModelError::Auth { .. })));
    let saved = agent.state(thread).await.unwrap().unwrap();
    let ev = saved.get(&RUBRIC_RESULT).unwrap().unwrap();
    assert_eq!(ev.result, RubricResult::NeedsRevision);
    (agent, model, grader, ev.grading_run_id)
}

#[tokio::test]
async fn an_unfinished_grading_run_continues_with_the_same_rubric() {
    let thread = ThreadId::new("continued").unwrap();
    let (agent, _model, grader, id) = interrupted_thread(&thread).await;
    let out = agent.run(RunInput::new().thread(thread)).await.unwrap();
    let ev = result_of(&out);
    assert_eq!(ev.grading_run_id, id);
    assert_eq!((ev.round, ev.result), (1, RubricResult::Satisfied));
    // The criteria were fixed in round 0 and the grader was held to them.
    let p = payload(&grader.requests()[1]);
    assert!(p.contains(&format!("<criteria-{}>\n1. Is final\n2. Is short\n", nonce(&p))));
}

#[tokio::test]
async fn a_changed_rubric_starts_a_new_grading_run() {
    let thread = ThreadId::new("changed").unwrap();
    let (agent, _model, grader, id) = interrupted_thread(&thread).await;
    let out = agent
        .run(
            RunInput::new()
                .thread(thread)
                .slot(&RUBRIC, Rubric::new("Is final.")),
        )
        .await
        .unwrap();
    let ev = result_of(&out);
    assert_ne!(ev.grading_run_id, id);
    assert_eq!(ev.round, 0);
    // Fresh criteria: the grader was asked to split the new rubric itself.
    let p = payload(&grader.requests()[1]);
    assert!(!p.contains("<criteria-"));
    assert!(p.contains("Grading round 1 of at most 3."));
}

#[tokio::test]
async fn criteria_fixed_in_the_first_round_bind_later_rounds() {
    let model = Arc::new(ScriptedModel::new().then_text("a").then_text("b"));
    let grader = Arc::new(
        ScriptedModel::new()
            .then(needs_revision(&[("accurate", "Wrong date.")], &["brief"]))
            .then(satisfied(&["accurate", "friendly"])),
    );
    let agent = agent_with(&model, RubricMiddleware::new(grader.clone()));
    let out = agent
        .run(RunInput::human("When?").slot(&RUBRIC, Rubric::new("Accurate and brief.")))
        .await
        .unwrap();
    let ev = result_of(&out);
    assert_eq!((ev.round, ev.result), (1, RubricResult::GraderError));
    assert!(
        ev.explanation
            .contains("fixed in the first round as [accurate, brief]"),
        "{}",
        ev.explanation
    );
}

// ---------------------------------------------------------------------------------------------------
// callback and cancellation

#[tokio::test]
async fn callback_errors_and_panics_are_logged_and_swallowed() {
    let failing = |f: Box<dyn Fn() -> Result<(), BoxError> + Send + Sync>| {
        let model = Arc::new(ScriptedModel::new().then_text("a").then_text("b"));
        let grader = Arc::new(
            ScriptedModel::new()
                .then(needs_revision(&[("x", "gap")], &[]))
                .then(satisfied(&["x"])),
        );
        let calls = Arc::new(AtomicUsize::new(0));
        let calls2 = calls.clone();
        let rubric = RubricMiddleware::new(grader).on_evaluation(move |_| {
            calls2.fetch_add(1, Ordering::Relaxed);
            f()
        });
        (agent_with(&model, rubric), calls)
    };
    let (agent, calls) = failing(Box::new(|| -> Result<(), BoxError> {
        Err("the dashboard is down".into())
    }));
    let out = agent
        .run(RunInput::human("q").slot(&RUBRIC, Rubric::new("x")))
        .await
        .unwrap();
    assert!(result_of(&out).is_satisfied());
    assert_eq!(calls.load(Ordering::Relaxed), 2);

    let (agent, calls) = failing(Box::new(|| -> Result<(), BoxError> { panic!("callback bug") }));
    let out = agent
        .run(RunInput::human("q").slot(&RUBRIC, Rubric::new("x")))
        .await
        .unwrap();
    assert!(
        result_of(&out).is_satisfied(),
        "the loop went on after the first panic"
    );
    assert_eq!(calls.load(Ordering::Relaxed), 2);
}

#[tokio::test(start_paused = true)]
async fn cancellation_passes_through_the_grader() {
    let model = Arc::new(ScriptedModel::new().then_text("answer"));
    let grader = Arc::new(ScriptedModel::new().then_async(|_| std::future::pending()));
    let told = Arc::new(AtomicUsize::new(0));
    let told2 = told.clone();
    let agent = agent_with(
        &model,
        RubricMiddleware::new(grader.clone()).on_evaluation(move |_| {
            told2.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }),
    );
    let thread = ThreadId::new("cancelled").unwrap();
    let run = agent.run(
        RunInput::human("q")
            .thread(thread.clone())
            .slot(&RUBRIC, Rubric::new("r")),
    );
    assert!(tokio::time::timeout(Duration::from_secs(30), run).await.is_err());
    assert_eq!(
        grader.calls(),
        1,
        "the grader was running when the run was dropped"
    );
    assert_eq!(told.load(Ordering::Relaxed), 0, "no evaluation was made up");
    let saved = agent.state(&thread).await.unwrap().unwrap();
    assert_eq!(saved.get(&RUBRIC_RESULT).unwrap(), None);
    assert_eq!(saved.messages.len(), 2);
}

#[tokio::test]
async fn grading_state_stays_private() {
    let model = Arc::new(ScriptedModel::new().then_text("ok"));
    let grader = Arc::new(ScriptedModel::new().then(satisfied(&["ok"])));
    let agent = agent_with(&model, RubricMiddleware::new(grader));
    let out = agent
        .run(RunInput::human("q").slot(&RUBRIC, Rubric::new("ok")))
        .await
        .unwrap();
    let keys: Vec<_> = out.state.slots.keys().map(String::as_str).collect();
    assert_eq!(keys, ["rubric", "rubric_result"]);
    assert_eq!(
        out.state.get(&trellis_middleware::rubric::GRADING).unwrap(),
        None::<GradingState>
    );
}
