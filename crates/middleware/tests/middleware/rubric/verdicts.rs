//! RubricMiddleware's verdicts, with scripted agent and grader models: when grading is triggered,
//! every verdict and result path, the round budget, verdict checks, and how the grader is built
//! (with an insta snapshot of its verdict schema). Payload: `rubric/payload.rs`; grading runs,
//! callback and cancellation: `rubric/grading_runs.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use trellis_middleware::rubric::verdict::verdict_format;
use trellis_middleware::rubric::{
    CriterionEval, GraderVerdict, RUBRIC, RUBRIC_RESULT, Rubric, RubricResult, Verdict,
};
use trellis_middleware::rubric::{GRADER_DISPLAY_NAME, GRADER_SYSTEM_PROMPT, RUBRIC_SOURCE, VerdictError};
use trellis_middleware::runtime::message::AiMessage;
use trellis_middleware::runtime::model::ModelError;
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::*;

use crate::rubric::common::*;

// ---------------------------------------------------------------------------------------------------
// construction and trigger

#[tokio::test]
async fn construction_needs_no_call_and_has_sane_defaults() {
    let grader = Arc::new(ScriptedModel::new());
    let rubric = RubricMiddleware::new(grader.clone());
    assert_eq!(rubric.max_rounds(), 3);
    assert_eq!(rubric.grader_prompt(), GRADER_SYSTEM_PROMPT);
    assert!(GRADER_SYSTEM_PROMPT.contains("grader"));
    assert!(GRADER_SYSTEM_PROMPT.contains("untrusted observation"));
    assert!(GRADER_SYSTEM_PROMPT.contains("Trust only those exact tags"));
    let custom = RubricMiddleware::new(grader.clone())
        .with_grader_prompt("Grade strictly.")
        .with_max_rounds(max(21));
    assert_eq!(custom.grader_prompt(), "Grade strictly.");
    assert_eq!(custom.max_rounds(), 21);
    assert_eq!(grader.calls(), 0);
}

#[tokio::test]
async fn without_a_rubric_nothing_happens() {
    let model = Arc::new(ScriptedModel::from_fn(|_| {
        Ok(ModelResponse::new(AiMessage::text("done")))
    }));
    let grader = Arc::new(ScriptedModel::new());
    let agent = agent_with(&model, RubricMiddleware::new(grader.clone()));
    let events = Events::default();

    let out = agent
        .run(RunInput::human("hi").events(events.sink()))
        .await
        .unwrap();
    assert_eq!(out.state.messages.len(), 2);
    assert_eq!(out.state.get(&RUBRIC_RESULT).unwrap(), None);

    for blank in ["", "  \n\t "] {
        let out = agent
            .run(RunInput::human("hi").slot(&RUBRIC, Rubric::new(blank)))
            .await
            .unwrap();
        assert_eq!(out.state.get(&RUBRIC_RESULT).unwrap(), None);
    }
    assert_eq!(grader.calls(), 0);
    assert!(events.all().is_empty());
}

#[tokio::test]
async fn a_rubric_can_come_as_json() {
    let model = Arc::new(ScriptedModel::new().then_text("Short."));
    let grader = Arc::new(ScriptedModel::new().then(satisfied(&["brief"])));
    let agent = agent_with(&model, RubricMiddleware::new(grader.clone()));
    let out = agent
        .run(RunInput::human("hi").slot_json("rubric", json!("Be brief.")))
        .await
        .unwrap();
    assert!(result_of(&out).is_satisfied());
    assert!(payload(&grader.requests()[0]).contains("\nBe brief.\n"));
}

// ---------------------------------------------------------------------------------------------------
// verdicts and results

#[tokio::test]
async fn satisfied_ends_the_run_and_is_reported_everywhere() {
    let model = Arc::new(ScriptedModel::new().then_text("Paris."));
    let grader = Arc::new(ScriptedModel::new().then(satisfied(&["answers the question"])));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    let agent = agent_with(
        &model,
        RubricMiddleware::new(grader.clone()).on_evaluation(move |ev| {
            seen2.lock().unwrap().push(ev.clone());
            Ok(())
        }),
    );
    let events = Events::default();
    let out = agent
        .run(
            RunInput::human("Capital of France?")
                .slot(&RUBRIC, Rubric::new("Answers the question."))
                .events(events.sink()),
        )
        .await
        .unwrap();

    assert_eq!(out.final_text().as_deref(), Some("Paris."));
    assert_eq!(out.state.messages.len(), 2, "no message added");
    let ev = result_of(&out);
    assert_eq!(ev.result, RubricResult::Satisfied);
    assert_eq!(ev.verdict, Some(Verdict::Satisfied));
    assert_eq!(ev.round, 0);
    assert_eq!(ev.criteria, [CriterionEval::passed("answers the question")]);
    assert_eq!(*seen.lock().unwrap(), std::slice::from_ref(&ev));

    let events = events.all();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].0, "evaluation_started");
    assert_eq!(
        events[0].1,
        json!({"grading_run_id": ev.grading_run_id, "round": 0, "max_rounds": 3})
    );
    assert_eq!(events[1].0, "evaluation_finished");
    assert_eq!(events[1].1["result"], "satisfied");
    assert_eq!(events[1].1["final"], true);
    assert_eq!(events[1].1["grading_run_id"], ev.grading_run_id.as_str());
    assert_eq!(model.calls(), 1);
    assert_eq!(grader.calls(), 1);
}

#[tokio::test]
async fn failed_means_the_rubric_is_unusable_and_does_not_loop() {
    let model = Arc::new(ScriptedModel::new().then_text("Done."));
    let grader = Arc::new(ScriptedModel::new().then(verdict(json!({
        "result": "failed",
        "explanation": "The rubric asks for both fewer than 10 and more than 20 words.",
        "criteria": []
    }))));
    let agent = agent_with(&model, RubricMiddleware::new(grader.clone()));
    let out = agent
        .run(RunInput::human("Write.").slot(&RUBRIC, Rubric::new("Under 10 words. Over 20 words.")))
        .await
        .unwrap();
    let ev = result_of(&out);
    assert_eq!(ev.result, RubricResult::Failed);
    assert!(!ev.is_satisfied());
    assert!(ev.explanation.contains("fewer than 10"));
    assert_eq!((model.calls(), grader.calls()), (1, 1));
    assert!(feedback_messages(&out.state).is_empty());
}

#[tokio::test]
async fn needs_revision_sends_the_agent_back_with_the_gaps() {
    let model = Arc::new(
        ScriptedModel::new()
            .then_text("Paris.")
            .then_text("Paris (CIA Factbook)."),
    );
    let grader = Arc::new(
        ScriptedModel::new()
            .then(needs_revision(
                &[("cites a source", "No source is named.")],
                &["answers the question"],
            ))
            .then(satisfied(&["answers the question", "cites a source"])),
    );
    let agent = agent_with(&model, RubricMiddleware::new(grader.clone()));
    let out = agent
        .run(
            RunInput::human("Capital of France?")
                .slot(&RUBRIC, Rubric::new("Answers the question. Cites a source.")),
        )
        .await
        .unwrap();

    assert_eq!(out.final_text().as_deref(), Some("Paris (CIA Factbook)."));
    let roles: Vec<_> = out.state.messages.iter().map(|m| m.source()).collect();
    assert_eq!(roles, [None, None, Some(RUBRIC_SOURCE), None]);
    let fb = &out.state.messages[2];
    assert!(matches!(fb, Message::Human(_)));
    assert_eq!(fb.meta().display_name.as_deref(), Some(GRADER_DISPLAY_NAME));
    let text = fb.text();
    assert!(text.contains("Grader feedback: Not there yet."));
    assert!(text.contains("- cites a source: No source is named."));
    assert!(text.contains("- answers the question"));

    // The agent's second call saw the feedback last.
    let second = &model.requests()[1];
    assert_eq!(second.messages.last().unwrap(), fb);

    let ev = result_of(&out);
    assert_eq!((ev.result, ev.round), (RubricResult::Satisfied, 1));
    assert_eq!(
        fb.meta().extra["rubric"],
        json!({"grading_run_id": ev.grading_run_id, "round": 0})
    );
    assert_eq!((model.calls(), grader.calls()), (2, 2));
}

#[tokio::test]
async fn the_last_round_records_max_iterations_reached() {
    let model = Arc::new(ScriptedModel::from_fn(|_| {
        Ok(ModelResponse::new(AiMessage::text("try")))
    }));
    let grader = Arc::new(ScriptedModel::from_fn(|_| {
        Ok(needs_revision(&[("is correct", "It is wrong.")], &[]))
    }));
    let events = Events::default();
    let agent = agent_with(
        &model,
        RubricMiddleware::new(grader.clone()).with_max_rounds(max(2)),
    );
    let out = agent
        .run(
            RunInput::human("Solve it.")
                .slot(&RUBRIC, Rubric::new("Is correct."))
                .events(events.sink()),
        )
        .await
        .unwrap();

    let ev = result_of(&out);
    assert_eq!(ev.result, RubricResult::MaxIterationsReached);
    assert_eq!(
        ev.verdict,
        Some(Verdict::NeedsRevision),
        "the grader's own word is kept"
    );
    assert_eq!(ev.round, 1);
    assert_eq!(ev.criteria, [CriterionEval::failed("is correct", "It is wrong.")]);
    assert_eq!((model.calls(), grader.calls()), (2, 2));
    assert_eq!(feedback_messages(&out.state).len(), 1);
    assert!(matches!(out.state.messages.last().unwrap(), Message::Ai(_)));

    let finished: Vec<_> = events
        .all()
        .into_iter()
        .filter(|(k, _)| k == "evaluation_finished")
        .map(|(_, d)| (d["round"].clone(), d["result"].clone(), d["final"].clone()))
        .collect();
    assert_eq!(
        finished,
        [
            (json!(0), json!("needs_revision"), json!(false)),
            (json!(1), json!("max_iterations_reached"), json!(true)),
        ]
    );
}

#[tokio::test]
async fn the_default_budget_is_three_rounds_and_one_round_never_loops() {
    let always_revise = || {
        Arc::new(ScriptedModel::from_fn(|_| {
            Ok(needs_revision(&[("is done", "Not done.")], &[]))
        }))
    };
    let model = Arc::new(ScriptedModel::from_fn(|_| {
        Ok(ModelResponse::new(AiMessage::text("ok")))
    }));
    let grader = always_revise();
    let agent = agent_with(&model, RubricMiddleware::new(grader.clone()));
    let out = agent
        .run(RunInput::human("Go.").slot(&RUBRIC, Rubric::new("Is done.")))
        .await
        .unwrap();
    assert_eq!((model.calls(), grader.calls()), (3, 3));
    assert_eq!(feedback_messages(&out.state).len(), 2);
    assert_eq!(result_of(&out).result, RubricResult::MaxIterationsReached);

    let model = Arc::new(ScriptedModel::from_fn(|_| {
        Ok(ModelResponse::new(AiMessage::text("ok")))
    }));
    let grader = always_revise();
    let agent = agent_with(
        &model,
        RubricMiddleware::new(grader.clone()).with_max_rounds(max(1)),
    );
    let out = agent
        .run(RunInput::human("Go.").slot(&RUBRIC, Rubric::new("Is done.")))
        .await
        .unwrap();
    assert_eq!((model.calls(), grader.calls()), (1, 1));
    assert_eq!(result_of(&out).result, RubricResult::MaxIterationsReached);
    assert!(feedback_messages(&out.state).is_empty());
}

#[tokio::test]
async fn grader_failures_and_bad_verdicts_are_grader_errors_not_crashes() {
    let cases: Vec<(&str, ScriptedModel, &str)> = vec![
        (
            "model error",
            ScriptedModel::new().then_error(ModelError::Overloaded {
                message: "HTTP 529".into(),
                retry_after: None,
                http: None,
            }),
            "provider overloaded: HTTP 529",
        ),
        (
            "no structured output",
            ScriptedModel::new().then_text("Looks fine to me."),
            "no structured verdict (it replied: \"Looks fine to me.\")",
        ),
        (
            "passed with a gap",
            ScriptedModel::new().then(verdict(json!({"result": "satisfied", "explanation": "",
                "criteria": [{"status": "passed", "name": "a", "gap": "but not really"}]}))),
            "does not match the schema",
        ),
        (
            "failed without a gap",
            ScriptedModel::new().then(verdict(json!({"result": "needs_revision", "explanation": "",
                "criteria": [{"status": "failed", "name": "a"}]}))),
            "missing field `gap`",
        ),
        (
            "unknown field",
            ScriptedModel::new().then(verdict(json!({"result": "satisfied", "explanation": "",
                "criteria": [{"status": "passed", "name": "a"}], "confidence": 0.9}))),
            "unknown field `confidence`",
        ),
        (
            "missing criteria",
            ScriptedModel::new().then(verdict(json!({"result": "satisfied", "explanation": "ok"}))),
            "missing field `criteria`",
        ),
        (
            "unknown verdict",
            ScriptedModel::new().then(verdict(
                json!({"result": "great", "explanation": "", "criteria": []}),
            )),
            "unknown variant `great`",
        ),
        (
            "satisfied with a failure",
            ScriptedModel::new().then(verdict(json!({"result": "satisfied", "explanation": "",
                "criteria": [{"status": "failed", "name": "a", "gap": "g"}]}))),
            "'satisfied' but criterion \"a\" failed",
        ),
        (
            "needs revision with only passes",
            ScriptedModel::new().then(verdict(json!({"result": "needs_revision", "explanation": "",
                "criteria": [{"status": "passed", "name": "a"}]}))),
            "no criterion failed",
        ),
        (
            "needs revision without criteria",
            ScriptedModel::new().then(verdict(json!({"result": "needs_revision", "explanation": "",
                "criteria": []}))),
            "judges no criterion",
        ),
        (
            "satisfied without criteria",
            ScriptedModel::new().then(verdict(json!({"result": "satisfied", "explanation": "",
                "criteria": []}))),
            "judges no criterion",
        ),
    ];
    for (case, grader, expected) in cases {
        let model = Arc::new(ScriptedModel::new().then_text("my answer"));
        let grader = Arc::new(grader);
        let calls = Arc::new(AtomicUsize::new(0));
        let calls2 = calls.clone();
        let agent = agent_with(
            &model,
            RubricMiddleware::new(grader.clone()).on_evaluation(move |_| {
                calls2.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }),
        );
        let out = agent
            .run(RunInput::human("q").slot(&RUBRIC, Rubric::new("Be right.")))
            .await
            .unwrap_or_else(|e| panic!("{case}: the run failed: {e}"));
        let ev = result_of(&out);
        assert_eq!(ev.result, RubricResult::GraderError, "{case}");
        assert_eq!(ev.verdict, None, "{case}");
        assert!(ev.criteria.is_empty(), "{case}");
        assert!(ev.explanation.contains(expected), "{case}: {}", ev.explanation);
        assert_eq!(out.final_text().as_deref(), Some("my answer"), "{case}");
        assert_eq!(model.calls(), 1, "{case}: no loop");
        assert_eq!(calls.load(Ordering::Relaxed), 1, "{case}: callback still told");
    }
}

#[test]
fn verdict_checks() {
    let v = |value: Value| GraderVerdict::parse(value).unwrap();
    let fixed = ["Cites a source".to_owned(), "Is brief".to_owned()];

    // `failed` is exempt from the criteria checks, with or without fixed criteria.
    let failed = v(json!({"result": "failed", "explanation": "contradictory", "criteria": []}));
    assert_eq!(failed.validate(&[]), Ok(()));
    assert_eq!(failed.validate(&fixed), Ok(()));

    // Fixed criteria: names compare case- and whitespace-insensitively, in any order.
    let same = v(
        json!({"result": "needs_revision", "explanation": "", "criteria": [
        {"status": "passed", "name": "is  BRIEF"},
        {"status": "failed", "name": "cites a source", "gap": "none"}]}),
    );
    assert_eq!(same.validate(&fixed), Ok(()));
    assert_eq!(same.failed_criteria().count(), 1);

    let missing = v(json!({"result": "satisfied", "explanation": "", "criteria": [
        {"status": "passed", "name": "Is brief"}]}));
    assert!(matches!(
        missing.validate(&fixed),
        Err(VerdictError::CriteriaChanged { .. })
    ));
    let extra = v(json!({"result": "satisfied", "explanation": "", "criteria": [
        {"status": "passed", "name": "Is brief"}, {"status": "passed", "name": "Cites a source"},
        {"status": "passed", "name": "Is polite"}]}));
    assert!(matches!(
        extra.validate(&fixed),
        Err(VerdictError::CriteriaChanged { .. })
    ));

    let dup = v(json!({"result": "satisfied", "explanation": "", "criteria": [
        {"status": "passed", "name": "a"}, {"status": "passed", "name": "A"}]}));
    assert_eq!(
        dup.validate(&[]),
        Err(VerdictError::DuplicateCriterion("A".into()))
    );
    let blank_gap = v(
        json!({"result": "needs_revision", "explanation": "", "criteria": [
        {"status": "failed", "name": "a", "gap": "  "}]}),
    );
    assert_eq!(blank_gap.validate(&[]), Err(VerdictError::Blank));

    // Round trip.
    let json = serde_json::to_value(&same).unwrap();
    assert_eq!(
        json["criteria"][1],
        json!({"status": "failed", "name": "cites a source", "gap": "none"})
    );
    assert_eq!(GraderVerdict::parse(json).unwrap(), same);
}

// ---------------------------------------------------------------------------------------------------
// the grader

#[tokio::test]
async fn the_grader_is_built_lazily_with_its_prompt_tools_and_format() {
    let check = || {
        FnTool::new("check", "Check a claim.", json!({"type": "object"}), |_| async {
            Ok(ToolOutput::text("the file exists"))
        })
    };
    // Two grader tools with one name: building the middleware and the agent still works, and runs
    // without a rubric never notice; the first grading reports it.
    let model = Arc::new(ScriptedModel::from_fn(|_| {
        Ok(ModelResponse::new(AiMessage::text("ok")))
    }));
    let broken = RubricMiddleware::new(Arc::new(ScriptedModel::new()))
        .with_grader_tool(check())
        .with_grader_tool(check());
    let agent = agent_with(&model, broken);
    agent.run(RunInput::human("no rubric")).await.unwrap();
    let out = agent
        .run(RunInput::human("q").slot(&RUBRIC, Rubric::new("r")))
        .await
        .unwrap();
    let ev = result_of(&out);
    assert_eq!(ev.result, RubricResult::GraderError);
    assert!(
        ev.explanation.contains("could not be built"),
        "{}",
        ev.explanation
    );

    // A working grader: custom prompt, its tool, the verdict format; it may call the tool first.
    let grader = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([ToolCall::new("c1", "check", json!({"claim": "file written"}))])
            .then(satisfied(&["writes the file"])),
    );
    let agent = agent_with(
        &model,
        RubricMiddleware::new(grader.clone())
            .with_grader_prompt("You grade file work.")
            .with_grader_tool(check()),
    );
    let out = agent
        .run(RunInput::human("write it").slot(&RUBRIC, Rubric::new("Writes the file.")))
        .await
        .unwrap();
    assert!(result_of(&out).is_satisfied());
    let requests = grader.requests();
    assert_eq!(requests.len(), 2);
    let first = &requests[0];
    assert_eq!(first.system.len(), 1);
    assert_eq!(first.system[0].text, "You grade file work.");
    assert_eq!(
        first.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        ["check"]
    );
    assert_eq!(first.response_format.as_ref(), Some(&verdict_format()));
    assert_eq!(
        first.messages.len(),
        1,
        "the grader starts from the payload alone"
    );
    assert_eq!(requests[1].messages.last().unwrap().text(), "the file exists");
}

#[tokio::test]
async fn the_verdict_schema_is_a_strict_tagged_union() {
    let format = verdict_format();
    assert_eq!(format.name, "grader_verdict");
    assert!(format.strict);
    insta::assert_snapshot!(
        "rubric_verdict_schema",
        serde_json::to_string_pretty(&format.schema).unwrap()
    );
}
