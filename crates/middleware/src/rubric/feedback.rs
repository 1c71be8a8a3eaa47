//! The revision request sent back to the agent when the grader says `needs_revision`.
//!
//! It goes in as a human message — the role models most reliably act on — tagged with the
//! middleware's `source` ([`RUBRIC_SOURCE`]) and shown as [`GRADER_DISPLAY_NAME`], so UIs, evals and
//! the transcript builder never mistake it for the user.

use std::fmt::Write as _;

use serde_json::json;

use crate::runtime::message::Message;

use super::{RUBRIC_SOURCE, RubricEvaluation};

/// The display name of the grader's feedback messages.
pub const GRADER_DISPLAY_NAME: &str = "Rubric grader";

/// The feedback text for a `needs_revision` evaluation: what the grader said, each failed criterion
/// with its gap, the criteria already met, and the instruction to fix the rest without regressing.
pub fn feedback_text(evaluation: &RubricEvaluation, max_rounds: u32) -> String {
    let mut out = format!(
        "An independent grader checked your work against the caller's rubric and asks for revisions \
         (grading round {} of at most {max_rounds}).",
        evaluation.round + 1
    );
    let explanation = evaluation.explanation.trim();
    if !explanation.is_empty() {
        let _ = write!(out, "\n\nGrader feedback: {explanation}");
    }
    let mut failed = evaluation.criteria.iter().filter(|c| !c.is_passed()).peekable();
    if failed.peek().is_some() {
        out.push_str("\n\nCriteria that still need work:");
        for c in failed {
            let _ = write!(out, "\n- {}: {}", c.name(), c.gap().unwrap_or_default().trim());
        }
    }
    let mut passed = evaluation.criteria.iter().filter(|c| c.is_passed()).peekable();
    if passed.peek().is_some() {
        out.push_str("\n\nCriteria already met (keep them met):");
        for c in passed {
            let _ = write!(out, "\n- {}", c.name());
        }
    }
    out.push_str(
        "\n\nAddress every criterion that still needs work without breaking the ones already met, then \
         give your final answer.",
    );
    out
}

/// The feedback message: [`feedback_text`] as a human message with source [`RUBRIC_SOURCE`], display
/// name [`GRADER_DISPLAY_NAME`], and the grading run id and round under `meta.extra["rubric"]`.
pub fn feedback_message(evaluation: &RubricEvaluation, max_rounds: u32) -> Message {
    let mut message = Message::injected(
        feedback_text(evaluation, max_rounds),
        RUBRIC_SOURCE,
        Some(GRADER_DISPLAY_NAME.to_owned()),
    );
    message.meta_mut().extra.insert(
        "rubric".to_owned(),
        json!({"grading_run_id": evaluation.grading_run_id, "round": evaluation.round}),
    );
    message
}
