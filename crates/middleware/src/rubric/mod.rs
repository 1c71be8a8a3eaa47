//! [`RubricMiddleware`]: an independent grader that sends the agent back until its work meets the
//! caller's rubric.
//!
//! A model that grades itself explains its criteria away. With this middleware the caller passes a
//! [`Rubric`] with a run (the public [`RUBRIC`] slot); when the agent would finish, a separate grader
//! agent judges the transcript against it and, if needed, sends the agent back with concrete gaps.
//!
//! ```
//! use std::sync::Arc;
//! use serde_json::json;
//! use trellis_middleware::rubric::{RUBRIC, RUBRIC_RESULT, Rubric, RubricResult};
//! use trellis_middleware::runtime::message::AiMessage;
//! use trellis_middleware::runtime::scripted_model::ScriptedModel;
//! use trellis_middleware::{Agent, AgentError, ModelResponse, RubricMiddleware, RunInput};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let agent_model = Arc::new(ScriptedModel::new().then_text("Paris.").then_text("Paris (source: CIA Factbook)."));
//! let mut first = ModelResponse::new(AiMessage::text(""));
//! first.structured_output = Some(json!({
//!     "result": "needs_revision", "explanation": "No source.",
//!     "criteria": [{"status": "failed", "name": "cites a source", "gap": "Name the source."}]
//! }));
//! let mut second = ModelResponse::new(AiMessage::text(""));
//! second.structured_output = Some(json!({
//!     "result": "satisfied", "explanation": "Sourced.",
//!     "criteria": [{"status": "passed", "name": "cites a source"}]
//! }));
//! let grader = Arc::new(ScriptedModel::new().then(first).then(second));
//!
//! let agent = Agent::builder(agent_model).middleware(RubricMiddleware::new(grader)).build()?;
//! let out = agent
//!     .run(RunInput::human("Capital of France?").slot(&RUBRIC, Rubric::new("Cites a source.")))
//!     .await?;
//! let grading = out.state.get(&RUBRIC_RESULT)?.unwrap();
//! assert_eq!(grading.result, RubricResult::Satisfied);
//! assert_eq!(grading.round, 1);
//! # Ok::<(), AgentError>(())
//! # }).unwrap();
//! ```
//!
//! # Contract
//!
//! * **Trigger.** `after_agent` (the model stopped calling tools), only when the run's state holds a
//!   non-blank [`RUBRIC`]; otherwise a no-op. Not part of any default stack.
//! * **Two vocabularies.** The grader says a [`Verdict`] (`satisfied`, `needs_revision`, `failed` =
//!   the rubric is unusable); the middleware records a [`RubricResult`] (those, plus
//!   `max_iterations_reached` and `grader_error`). Only `needs_revision` sends the agent back, with a
//!   feedback message ([`feedback`]). At the last allowed round it is recorded as
//!   `max_iterations_reached` instead, and the run ends.
//! * **The grader** is an [`Agent`](crate::Agent) built on first use (so building the middleware needs
//!   no credentials), asked for structured output ([`verdict::verdict_format`]). An answer that cannot
//!   be parsed or fails the checks of [`GraderVerdict::validate`], and any failure of the grader's
//!   run, is recorded as `grader_error`: never a crash of the agent's run. A panic in the grader
//!   propagates, and dropping the run's future cancels the grader with it.
//! * **The payload** ([`payload`]) fences the rubric and a bounded transcript in nonce tags.
//! * **Grading runs.** A grading run has an id and a round counter. A new one starts when the rubric
//!   changes or the previous one ended (any result but `needs_revision`); the same rubric in an
//!   unfinished grading run (a run interrupted after feedback) continues it. The criteria the grader
//!   names in the first round are fixed for the rest of the grading run.
//! * **Reporting.** Every evaluation is recorded in the public [`RUBRIC_RESULT`] slot (so
//!   [`RunOutput::state`](crate::RunOutput) says how grading ended: a caller cannot mistake a failed or
//!   exhausted grading for success; the slot is cleared at the start of every run), sent as
//!   `evaluation_started` / `evaluation_finished` middleware events, and passed to the optional
//!   [`RubricMiddleware::on_evaluation`] callback, whose errors and panics are logged and ignored.

pub mod feedback;
pub mod grader;
pub mod payload;
pub mod verdict;

use std::fmt;
use std::num::NonZeroU32;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::json;

pub use feedback::{GRADER_DISPLAY_NAME, feedback_message, feedback_text};
pub use grader::{DEFAULT_GRADER_MAX_STEPS, GRADER_AGENT_NAME, GRADER_SYSTEM_PROMPT};
pub use payload::{MAX_MESSAGE_CHARS, MAX_TRANSCRIPT_MESSAGES};
pub use verdict::{CriterionEval, GraderVerdict, Verdict, VerdictError};

use crate::runtime::context::RunContext;
use crate::runtime::error::{AgentError, BoxError};
use crate::runtime::middleware::{AfterAgent, Middleware};
use crate::runtime::model::ChatModel;
use crate::runtime::state::{Slot, State};
use crate::tools::Tool;
use grader::{GradeError, Grader};
use payload::{PayloadParts, grader_payload, random_nonce, render_transcript};

/// The middleware's name, and the `source` tag of the feedback messages it injects.
pub const RUBRIC_SOURCE: &str = "rubric";

/// Grading rounds per grading run by default.
pub const DEFAULT_MAX_ROUNDS: u32 = 3;

/// The caller's rubric for a run (public; set it with [`RunInput::slot`](crate::RunInput::slot), or as
/// a JSON string under `"rubric"`). It stays in the thread's state, so later runs of the thread are
/// graded too; a blank rubric turns grading off.
pub static RUBRIC: Slot<Rubric> = Slot::public("rubric");

/// The latest evaluation of this run (public): how grading ended. Cleared when a run starts, so it
/// never describes an earlier run.
pub static RUBRIC_RESULT: Slot<RubricEvaluation> = Slot::public("rubric_result");

/// The grading run in progress or last finished (private).
pub static GRADING: Slot<GradingState> = Slot::private("_rubric_grading");

/// What "done" means for a run, in the caller's words. Serialized as a plain string.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Rubric(String);

impl Rubric {
    /// A rubric from its text.
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True when there is nothing to grade against (empty or whitespace).
    pub fn is_blank(&self) -> bool {
        self.0.trim().is_empty()
    }
}

impl From<&str> for Rubric {
    fn from(text: &str) -> Self {
        Self::new(text)
    }
}

impl From<String> for Rubric {
    fn from(text: String) -> Self {
        Self::new(text)
    }
}

/// What the middleware records for one evaluation (its vocabulary; compare [`Verdict`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RubricResult {
    /// The grader found every criterion met.
    Satisfied,
    /// The grader asked for revisions; the agent was sent back (the only non-final result).
    NeedsRevision,
    /// The grader found the rubric unusable.
    Failed,
    /// The grader still asked for revisions in the last allowed round.
    MaxIterationsReached,
    /// The grader failed or gave an unusable answer.
    GraderError,
}

impl RubricResult {
    /// True for every result but `needs_revision`: the grading run is over.
    pub fn is_final(self) -> bool {
        self != Self::NeedsRevision
    }

    /// The `snake_case` name, as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Satisfied => "satisfied",
            Self::NeedsRevision => "needs_revision",
            Self::Failed => "failed",
            Self::MaxIterationsReached => "max_iterations_reached",
            Self::GraderError => "grader_error",
        }
    }
}

impl From<Verdict> for RubricResult {
    fn from(verdict: Verdict) -> Self {
        match verdict {
            Verdict::Satisfied => Self::Satisfied,
            Verdict::NeedsRevision => Self::NeedsRevision,
            Verdict::Failed => Self::Failed,
        }
    }
}

/// One evaluation: in [`RUBRIC_RESULT`], in `evaluation_finished` events, and given to the callback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RubricEvaluation {
    /// The grading run.
    pub grading_run_id: String,
    /// The round within the grading run, 0-based.
    pub round: u32,
    /// What was recorded.
    pub result: RubricResult,
    /// What the grader said (`None` on a grader error). Differs from `result` when the last round's
    /// `needs_revision` became `max_iterations_reached`.
    pub verdict: Option<Verdict>,
    /// The grader's explanation, or what went wrong with the grader.
    pub explanation: String,
    /// The grader's criteria (empty on a grader error).
    pub criteria: Vec<CriterionEval>,
}

impl RubricEvaluation {
    /// True only when the grader found every criterion met.
    pub fn is_satisfied(&self) -> bool {
        self.result == RubricResult::Satisfied
    }
}

/// The state of a thread's grading run (kept in the private [`GRADING`] slot).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct GradingState {
    /// The grading run's id.
    pub grading_run_id: String,
    /// The rubric it grades against (trimmed).
    pub rubric: String,
    /// Rounds done.
    pub rounds: u32,
    /// The last round's result (`None` before the first).
    pub status: Option<RubricResult>,
    /// Criteria fixed in the first round.
    pub criteria: Vec<String>,
    /// This grading run's evaluations, in order.
    pub evaluations: Vec<RubricEvaluation>,
}

type OnEvaluation = dyn Fn(&RubricEvaluation) -> Result<(), BoxError> + Send + Sync;
type NonceFn = dyn Fn() -> String + Send + Sync;

/// Grades the agent's work against the run's rubric; see the module docs.
pub struct RubricMiddleware {
    grader: Grader,
    max_rounds: u32,
    on_evaluation: Option<Arc<OnEvaluation>>,
    nonce: Option<Arc<NonceFn>>,
}

impl fmt::Debug for RubricMiddleware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RubricMiddleware")
            .field("grader", &self.grader)
            .field("max_rounds", &self.max_rounds)
            .field("on_evaluation", &self.on_evaluation.is_some())
            .field("fixed_nonce", &self.nonce.is_some())
            .finish()
    }
}

impl RubricMiddleware {
    /// Grade with `grader_model`, the default prompt, no tools and [`DEFAULT_MAX_ROUNDS`] rounds. Makes
    /// no call and needs no credentials: the grader is built on first use.
    pub fn new(grader_model: Arc<dyn ChatModel>) -> Self {
        Self {
            grader: Grader::new(grader_model),
            max_rounds: DEFAULT_MAX_ROUNDS,
            on_evaluation: None,
            nonce: None,
        }
    }

    /// Replace the grader's system prompt ([`GRADER_SYSTEM_PROMPT`]). Keep its substance: trust only
    /// the nonce tags, treat the transcript as untrusted, define the three verdicts.
    pub fn with_grader_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.grader.prompt = Some(prompt.into());
        self
    }

    /// Give the grader a tool to verify the agent's claims with (e.g. `read_file`).
    pub fn with_grader_tool(self, tool: impl Tool + 'static) -> Self {
        self.with_grader_tool_arc(Arc::new(tool))
    }

    /// Give the grader a shared tool.
    pub fn with_grader_tool_arc(mut self, tool: Arc<dyn Tool>) -> Self {
        self.grader.tools.push(tool);
        self
    }

    /// Add a middleware to the grader agent (e.g. [`ModelRetryMiddleware`](crate::ModelRetryMiddleware),
    /// so a rate-limited grader retries instead of ending the grading with a grader error).
    pub fn with_grader_middleware(mut self, middleware: impl Middleware + 'static) -> Self {
        self.grader.middleware.push(Arc::new(middleware));
        self
    }

    /// Most grading rounds per grading run ([`DEFAULT_MAX_ROUNDS`]); the agent is sent back at most
    /// `rounds - 1` times.
    pub fn with_max_rounds(mut self, rounds: NonZeroU32) -> Self {
        self.max_rounds = rounds.get();
        self
    }

    /// Most model calls of one grading ([`DEFAULT_GRADER_MAX_STEPS`]); beyond, the round is a grader
    /// error.
    pub fn with_grader_max_steps(mut self, steps: u32) -> Self {
        self.grader.max_steps = steps;
        self
    }

    /// Call `f` with every finished evaluation. For observation only: errors and panics are logged
    /// and ignored, and `f` runs on the run's task, so it must be quick.
    pub fn on_evaluation(
        mut self,
        f: impl Fn(&RubricEvaluation) -> Result<(), BoxError> + Send + Sync + 'static,
    ) -> Self {
        self.on_evaluation = Some(Arc::new(f));
        self
    }

    /// Take payload nonces from `f` instead of the OS random source; characters other than ASCII
    /// letters and digits are dropped (and an empty result falls back to a random nonce). **For tests and snapshots only**: a predictable nonce lets a
    /// transcript forge the rubric's tags.
    pub fn with_nonce_fn(mut self, f: impl Fn() -> String + Send + Sync + 'static) -> Self {
        self.nonce = Some(Arc::new(f));
        self
    }

    /// Most grading rounds per grading run.
    pub fn max_rounds(&self) -> u32 {
        self.max_rounds
    }

    /// The grader's system prompt.
    pub fn grader_prompt(&self) -> &str {
        self.grader.prompt()
    }

    /// The grader's model.
    pub fn grader_model(&self) -> &Arc<dyn ChatModel> {
        &self.grader.model
    }

    fn nonce(&self) -> String {
        let fixed: Option<String> = self
            .nonce
            .as_ref()
            .map(|f| f().chars().filter(char::is_ascii_alphanumeric).collect());
        fixed.filter(|n| !n.is_empty()).unwrap_or_else(random_nonce)
    }

    /// The grading run this evaluation belongs to: the current one when it grades the same rubric, is
    /// unfinished and has rounds left; otherwise a fresh one.
    fn grading_run(&self, state: &State, rubric: &str) -> Result<GradingState, AgentError> {
        if let Some(current) = state.get(&GRADING)?
            && current.rubric == rubric
            && current.status.is_none_or(|s| !s.is_final())
            && current.rounds < self.max_rounds
        {
            return Ok(current.clone());
        }
        Ok(GradingState {
            grading_run_id: crate::runtime::random::unique_id("grading"),
            rubric: rubric.to_owned(),
            ..GradingState::default()
        })
    }

    /// The evaluation for one round's outcome.
    fn evaluate(
        &self,
        grading: &GradingState,
        graded: Result<GraderVerdict, GradeError>,
    ) -> RubricEvaluation {
        let round = grading.rounds;
        let (result, verdict, explanation, criteria) = match graded {
            Ok(v) => {
                let mut result = RubricResult::from(v.result);
                if result == RubricResult::NeedsRevision && round + 1 >= self.max_rounds {
                    tracing::info!(
                        grading_run_id = %grading.grading_run_id,
                        rounds = round + 1,
                        "rubric grading ended without satisfaction: max rounds reached"
                    );
                    result = RubricResult::MaxIterationsReached;
                }
                (result, Some(v.result), v.explanation, v.criteria)
            }
            Err(error) => {
                tracing::warn!(grading_run_id = %grading.grading_run_id, round, %error, "rubric grader error");
                (RubricResult::GraderError, None, error.to_string(), Vec::new())
            }
        };
        RubricEvaluation {
            grading_run_id: grading.grading_run_id.clone(),
            round,
            result,
            verdict,
            explanation,
            criteria,
        }
    }

    /// Give the evaluation to the callback; its errors and panics are logged and ignored.
    fn notify(&self, evaluation: &RubricEvaluation) {
        let Some(callback) = &self.on_evaluation else {
            return;
        };
        match std::panic::catch_unwind(AssertUnwindSafe(|| callback(evaluation))) {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::error!(%error, "rubric on_evaluation callback failed (ignored)");
            }
            Err(panic) => {
                let detail = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "no message".to_owned());
                tracing::error!(panic = %detail, "rubric on_evaluation callback panicked (ignored)");
            }
        }
    }
}

#[async_trait]
impl Middleware for RubricMiddleware {
    fn name(&self) -> &str {
        RUBRIC_SOURCE
    }

    /// Clear the previous run's [`RUBRIC_RESULT`].
    async fn before_agent(&self, state: &mut State, _cx: &RunContext) -> Result<(), AgentError> {
        state.remove(&RUBRIC_RESULT);
        Ok(())
    }

    async fn after_agent(&self, state: &mut State, cx: &RunContext) -> Result<AfterAgent, AgentError> {
        let rubric = match state.get(&RUBRIC)? {
            Some(r) if !r.is_blank() => r.as_str().trim().to_owned(),
            _ => return Ok(AfterAgent::Finish),
        };
        let mut grading = self.grading_run(state, &rubric)?;
        cx.emit_middleware(RUBRIC_SOURCE, "evaluation_started", || {
            json!({
                "grading_run_id": grading.grading_run_id,
                "round": grading.rounds,
                "max_rounds": self.max_rounds,
            })
        });

        let transcript = render_transcript(&state.messages);
        let nonce = self.nonce();
        let payload = grader_payload(&PayloadParts {
            round: grading.rounds,
            max_rounds: self.max_rounds,
            rubric: &rubric,
            transcript: &transcript,
            criteria: &grading.criteria,
            nonce: &nonce,
        });
        let graded = self.grader.grade(payload, &grading.criteria, cx).await;
        let evaluation = self.evaluate(&grading, graded);

        if grading.criteria.is_empty() && evaluation.verdict.is_some_and(|v| v != Verdict::Failed) {
            grading.criteria = evaluation.criteria.iter().map(|c| c.name().to_owned()).collect();
        }
        grading.rounds += 1;
        grading.status = Some(evaluation.result);
        grading.evaluations.push(evaluation.clone());
        state.set(&GRADING, grading);
        state.set(&RUBRIC_RESULT, evaluation.clone());

        cx.emit_middleware(RUBRIC_SOURCE, "evaluation_finished", || {
            let mut data = serde_json::to_value(&evaluation).unwrap_or_default();
            if let Some(map) = data.as_object_mut() {
                map.insert("max_rounds".to_owned(), json!(self.max_rounds));
                map.insert("final".to_owned(), json!(evaluation.result.is_final()));
            }
            data
        });
        self.notify(&evaluation);

        Ok(match evaluation.result {
            RubricResult::NeedsRevision => {
                AfterAgent::JumpToModel(vec![feedback_message(&evaluation, self.max_rounds)])
            }
            _ => AfterAgent::Finish,
        })
    }
}
