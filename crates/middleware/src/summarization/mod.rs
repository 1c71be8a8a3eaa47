//! [`SummarizationMiddleware`]: keeps long runs inside the context window, in two stages, triggered
//! by an estimate of the whole request.
//!
//! On every model call the middleware estimates the request the model would receive — every system
//! block (instructions, the skills catalog, memory: register this middleware *inside* the ones that
//! add them), the conversation and the tool definitions — with a [`TokenEstimator`]. Below the
//! threshold ([`Threshold`]: absolute tokens, or a fraction of the model's context window) nothing
//! happens.
//!
//! * **Stage 1** (request view only; stored messages are never changed): long arguments of old
//!   `write_file`/`edit_file` calls are shortened, and tool results over
//!   [`SummarizationConfig::tool_result_token_limit`] are replaced by the tool's name, the size, the
//!   path of a file holding the full text and a preview. Each file is written once per tool call id
//!   (under `<results_root>/<thread>/tool_results/`) and remembered in the thread's state. Results
//!   the model has not seen yet (those after the last AI message) are left whole.
//! * **Stage 2**, when the stage-1 request is still over `threshold × l2_trigger_ratio`: the model
//!   condenses the older messages (their stage-1 view, plus the previous summary) into one summary
//!   message, in a separate call with its own prompt ([`SUMMARY_PROMPT`]). The most recent
//!   [`SummarizationConfig::keep_messages`] messages stay; the cut is moved back to a point that
//!   separates no tool call from its results ([`safe_cutoff`]). The summary and the cut are kept in
//!   the thread's private state ([`SUMMARIZATION`]), so later calls reuse them: they send the summary
//!   followed by the stored messages from the cut on. The replaced messages stay in the checkpoint,
//!   and their transcript is written to `<results_root>/<thread>/transcript.md` for the agent to read.
//! * **Overflow**: when the provider answers [`ModelError::ContextTooLong`], both stages run forced
//!   (every tool result over the limit is offloaded, newest included; stage 2 runs whatever the
//!   estimate) and the call is retried exactly once.
//!
//! Events (`RunEvent::Middleware` from `summarization`): `stage1`, `stage2` (token numbers before and
//! after, the threshold, what was offloaded or summarized), `stage2_skipped`, `summary_failed`,
//! `context_overflow`.

pub mod cut;
pub mod estimate;
mod offload;
mod stage2;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::backend::{Backend, VirtualPath, WriteMode};
use crate::tools::{FileLayout, RunSpaces};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::json;

pub use cut::{safe_cutoff, safe_cuts};
pub use estimate::{BytesEstimator, RequestEstimate, TokenEstimator};
pub use offload::ARG_HEAD_CHARS;
pub use stage2::{SUMMARY_PROMPT, SUMMARY_SOURCE, Summary};

use crate::runtime::context::RunContext;
use crate::runtime::error::AgentError;
use crate::runtime::message::Message;
use crate::runtime::message_list::Messages;
use crate::runtime::middleware::{Middleware, Next};
use crate::runtime::model::{ChatModel, ModelError, ModelRequest, ModelResponse};
use crate::runtime::state::{Slot, State};

use cut::{Aligned, view_after};

/// The middleware's name and the source tag of its events.
pub const NAME: &str = "summarization";
/// Default directory for offloaded results and transcripts.
pub const DEFAULT_RESULTS_ROOT: &str = "/conversation_history";
/// Context window assumed for a [`Threshold::Fraction`] when the model does not declare one.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 128_000;

/// The thread's summarization state (private: never returned to callers or parent agents).
pub static SUMMARIZATION: Slot<SummarizationState> = Slot::private("_summarization");

/// What [`SummarizationMiddleware`] keeps in a thread's state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SummarizationState {
    /// The current summary, if stage 2 ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,
    /// Offloaded tool results: tool call id → path of the file holding the full text.
    #[serde(default)]
    pub offloaded: BTreeMap<String, String>,
}

/// When summarization starts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Threshold {
    /// At this many estimated tokens.
    Tokens(u64),
    /// At this fraction (in `(0, 1]`) of the context window the model declares
    /// ([`DEFAULT_CONTEXT_WINDOW`] when it declares none).
    Fraction(f64),
}

/// Settings; every field has a default.
#[derive(Debug, Clone, PartialEq)]
pub struct SummarizationConfig {
    /// When stage 1 starts. Default: 75% of the context window (the bytes/4 estimate undercounts
    /// some scripts, hence the margin).
    pub threshold: Threshold,
    /// Messages kept after a summary (the cut moves back to keep tool calls with their results).
    /// Default 10.
    pub keep_messages: usize,
    /// Tool results estimated above this many tokens are offloaded in stage 1; the preview shows
    /// about as many (4 bytes a token). Default 500.
    pub tool_result_token_limit: u64,
    /// Stage 2 runs when the stage-1 request is still above `threshold × ratio`. Clamped to
    /// `[0, 1]`; smaller summarizes sooner. Default 0.4.
    pub l2_trigger_ratio: f64,
    /// String arguments of old calls to [`SummarizationConfig::trim_args_of`] longer than this many
    /// characters are shortened in stage 1. Default 2000.
    pub arg_max_chars: usize,
    /// Tools whose old arguments are shortened. Default `write_file`, `edit_file`.
    pub trim_args_of: Vec<String>,
    /// Where offloaded results and transcripts are written. Default [`DEFAULT_RESULTS_ROOT`].
    pub results_root: VirtualPath,
    /// The summarizer's system prompt. Default [`SUMMARY_PROMPT`].
    pub summary_prompt: Option<String>,
    /// Most tokens of messages given to the summarizer (oldest left out first). Default: the
    /// threshold.
    pub summary_input_tokens: Option<u64>,
    /// Cap on the summary's length, in tokens. Default 4000.
    pub summary_max_tokens: u32,
}

impl Default for SummarizationConfig {
    fn default() -> Self {
        Self {
            threshold: Threshold::Fraction(0.75),
            keep_messages: 10,
            tool_result_token_limit: 500,
            l2_trigger_ratio: 0.4,
            arg_max_chars: 2_000,
            trim_args_of: vec!["write_file".to_owned(), "edit_file".to_owned()],
            results_root: VirtualPath::parse(DEFAULT_RESULTS_ROOT).unwrap_or_else(|_| VirtualPath::root()),
            summary_prompt: None,
            summary_input_tokens: None,
            summary_max_tokens: 4_000,
        }
    }
}

impl SummarizationConfig {
    /// The threshold in tokens for a model with this context window (at least 1).
    pub fn threshold_tokens(&self, context_window: Option<u64>) -> u64 {
        let tokens = match self.threshold {
            Threshold::Tokens(n) => n,
            Threshold::Fraction(f) => {
                let window = context_window.unwrap_or(DEFAULT_CONTEXT_WINDOW);
                (window as f64 * f.clamp(0.0, 1.0)) as u64
            }
        };
        tokens.max(1)
    }

    /// The stage-2 trigger in tokens for this threshold (at least 1).
    pub fn l2_trigger_tokens(&self, threshold: u64) -> u64 {
        ((threshold as f64 * self.l2_trigger_ratio.clamp(0.0, 1.0)) as u64).max(1)
    }
}

/// Two-stage summarization; see the module docs.
#[derive(Debug, Clone)]
pub struct SummarizationMiddleware {
    backend: Arc<dyn Backend>,
    layout: FileLayout,
    config: SummarizationConfig,
    estimator: Arc<dyn TokenEstimator>,
    summary_model: Option<Arc<dyn ChatModel>>,
}

impl SummarizationMiddleware {
    /// Summarization with default settings, writing offloaded results and transcripts to `backend`.
    pub fn new(backend: Arc<dyn Backend>) -> Self {
        Self {
            backend,
            layout: FileLayout::Shared,
            config: SummarizationConfig::default(),
            estimator: Arc::new(BytesEstimator),
            summary_model: None,
        }
    }

    /// Write through this layout, as the file tools do, so that the model can read what was
    /// offloaded: under [`FileLayout::PerThread`] offloads land in the run's thread space.
    pub fn with_layout(mut self, layout: FileLayout) -> Self {
        self.layout = layout;
        self
    }

    /// Replace the settings.
    pub fn with_config(mut self, config: SummarizationConfig) -> Self {
        self.config = config;
        self
    }

    /// Estimate tokens with `estimator` (a real tokenizer) instead of bytes / 4.
    pub fn with_estimator(mut self, estimator: Arc<dyn TokenEstimator>) -> Self {
        self.estimator = estimator;
        self
    }

    /// Summarize with `model` instead of the model the call goes to.
    pub fn with_summary_model(mut self, model: Arc<dyn ChatModel>) -> Self {
        self.summary_model = Some(model);
        self
    }

    /// The settings.
    pub fn config(&self) -> &SummarizationConfig {
        &self.config
    }
}

#[async_trait]
impl Middleware for SummarizationMiddleware {
    fn name(&self) -> &str {
        NAME
    }

    async fn wrap_model_call(
        &self,
        mut request: ModelRequest,
        state: &mut State,
        cx: &RunContext,
        next: Next<'_>,
    ) -> Result<ModelResponse, AgentError> {
        let model = next.model().clone();
        let stored = state.messages.clone();
        let before = state.get(&SUMMARIZATION)?.cloned().unwrap_or_default();
        let messages = std::mem::take(&mut request.messages);
        let fixed = self.estimator.request(&request);
        let files = self
            .layout
            .view(&self.backend, &thread_only(cx))
            .map_err(|e| AgentError::middleware(NAME, e))?;
        let mut pass = Pass {
            mw: self,
            cx,
            files,
            summary_model: self.summary_model.clone().unwrap_or_else(|| model.clone()),
            threshold: self.config.threshold_tokens(model.capabilities().context_window),
            fixed,
            aligned: Aligned::new(messages, &stored),
            stored,
            st: before.clone(),
        };
        pass.check_summary();

        let first = pass.prepare(false).await;
        if pass.st != before {
            state.set(&SUMMARIZATION, pass.st.clone());
        }
        request.messages = first;
        let error = match next.run(request.clone(), state, cx).await {
            Err(AgentError::Model(error @ ModelError::ContextTooLong { .. })) => error,
            other => return other,
        };
        tracing::warn!(%error, "the request was too long for the model; summarizing and retrying once");
        cx.emit_middleware(NAME, "context_overflow", || json!({ "error": error.to_string() }));
        request.messages = pass.prepare(true).await;
        state.set(&SUMMARIZATION, pass.st.clone());
        next.run(request, state, cx).await
    }
}

/// The run's thread space (and its parent's), without the user's workspace: offloads and
/// transcripts belong to the thread, and a user id only matters to `/workspace`.
fn thread_only<'a>(cx: &'a RunContext) -> RunSpaces<'a> {
    RunSpaces {
        user_files: None,
        user_id: None,
        ..RunSpaces::from_extensions(cx.extensions())
    }
}

/// One model call's work.
struct Pass<'a> {
    mw: &'a SummarizationMiddleware,
    cx: &'a RunContext,
    /// Where offloads and transcripts are written: the run's view of the files.
    files: Arc<dyn Backend>,
    summary_model: Arc<dyn ChatModel>,
    threshold: u64,
    /// Estimate of everything but the messages.
    fixed: RequestEstimate,
    aligned: Aligned,
    stored: Messages,
    st: SummarizationState,
}

impl Pass<'_> {
    fn config(&self) -> &SummarizationConfig {
        &self.mw.config
    }

    fn estimate(&self, messages: &Messages) -> u64 {
        let m: u64 = messages.iter().map(|m| self.mw.estimator.message(m)).sum();
        self.fixed.system + self.fixed.tools + m
    }

    /// Drop or move back a summary whose cut no longer fits the stored messages (edited elsewhere).
    fn check_summary(&mut self) {
        let Some(summary) = &mut self.st.summary else {
            return;
        };
        let n = self.stored.len();
        let fits = summary.cutoff <= n
            && self
                .stored
                .get(summary.cutoff)
                .is_none_or(|m| m.as_tool().is_none());
        if fits {
            return;
        }
        match safe_cutoff(&self.stored, 0, summary.cutoff.min(n), false) {
            Some(c) => summary.cutoff = c,
            None => self.st.summary = None,
        }
    }

    fn thread_dir(&self) -> Option<VirtualPath> {
        self.config().results_root.join(self.cx.thread_id().as_str()).ok()
    }

    /// The messages the model sees: the summary (if any) in place of the messages before `start`.
    fn view(&self, messages: &Messages, summary: Option<&Summary>) -> Messages {
        match summary {
            Some(s) => view_after(messages, self.aligned.position(s.cutoff), s.message()),
            None => messages.clone(),
        }
    }

    /// The messages to send: the current view, through stage 1 when over the threshold and through
    /// stage 2 when still over the stage-2 trigger (or when `forced`).
    async fn prepare(&mut self, forced: bool) -> Messages {
        let summary = self.st.summary.clone();
        let view0 = self.view(&self.aligned.messages, summary.as_ref());
        let tokens0 = self.estimate(&view0);
        if !forced && tokens0 < self.threshold {
            return view0;
        }
        let start = summary.as_ref().map_or(0, |s| self.aligned.position(s.cutoff));
        let l1 = self.stage1(self.aligned.messages.clone(), start, forced).await;
        let view1 = self.view(&l1.0, summary.as_ref());
        let tokens1 = self.estimate(&view1);
        self.emit_stage1(&l1.1, tokens0, tokens1, forced);
        let trigger = self.config().l2_trigger_tokens(self.threshold);
        if !forced && tokens1 <= trigger {
            return view1;
        }
        match self.stage2(&l1.0, start, tokens1, trigger, forced).await {
            Some(messages) => messages,
            None => view1,
        }
    }

    /// Stage 1 over `messages` (request indices), from `start` on.
    async fn stage1(
        &mut self,
        mut messages: Messages,
        start: usize,
        forced: bool,
    ) -> (Messages, offload::Report) {
        let Some(dir) = self.thread_dir().and_then(|d| d.join("tool_results").ok()) else {
            return (messages, offload::Report::default());
        };
        let n = messages.len();
        let plan = offload::Plan {
            start,
            old_before: n.saturating_sub(self.config().keep_messages),
            protect_from: if forced {
                n
            } else {
                messages
                    .iter()
                    .rposition(|m| matches!(m, Message::Ai(_)))
                    .map_or(0, |i| i + 1)
            },
        };
        let limits = offload::Limits {
            result_tokens: self.config().tool_result_token_limit,
            arg_max_chars: self.config().arg_max_chars,
            trim_tools: &self.mw.config.trim_args_of,
        };
        let report = offload::apply(
            &mut messages,
            plan,
            limits,
            self.mw.estimator.as_ref(),
            self.files.as_ref(),
            &dir,
            &mut self.st.offloaded,
        )
        .await;
        (messages, report)
    }

    fn emit_stage1(&self, report: &offload::Report, before: u64, after: u64, forced: bool) {
        self.cx.emit_middleware(NAME, "stage1", || {
            json!({
                "forced": forced,
                "threshold": self.threshold,
                "tokens_before": before,
                "tokens_after": after,
                "system_tokens": self.fixed.system,
                "tool_tokens": self.fixed.tools,
                "results_offloaded": report.offloaded,
                "files_written": report.written,
                "write_failures": report.failed,
                "args_trimmed": report.args_trimmed,
            })
        });
    }

    /// Stage 2 on the stage-1 messages `l1`; `None` when no summary could be made (the stage-1
    /// view is sent instead).
    async fn stage2(
        &mut self,
        l1: &Messages,
        start: usize,
        before: u64,
        trigger: u64,
        forced: bool,
    ) -> Option<Messages> {
        let previous = self.st.summary.clone();
        let c0 = previous.as_ref().map_or(0, |s| s.cutoff);
        let target = self.stored.len().saturating_sub(self.config().keep_messages);
        let Some(c1) = safe_cutoff(&self.stored, c0, target, forced) else {
            self.cx.emit_middleware(NAME, "stage2_skipped", || {
                json!({
                    "reason": "no point to cut the conversation without separating a tool call from its result",
                    "tokens": before,
                    "trigger_tokens": trigger,
                })
            });
            return None;
        };
        let p1 = self.aligned.position(c1);
        let replaced: Vec<&Message> = l1
            .iter()
            .take(p1)
            .skip(start)
            .filter(|m| !matches!(m, Message::System(_)))
            .collect();
        let input = stage2::summarizer_input(
            previous.as_ref().map(|s| s.text.as_str()),
            &replaced,
            self.config().summary_input_tokens.unwrap_or(self.threshold),
            self.mw.estimator.as_ref(),
        );
        let prompt = self.config().summary_prompt.as_deref().unwrap_or(SUMMARY_PROMPT);
        let (text, usage) = match stage2::summarize(
            &self.summary_model,
            prompt,
            input,
            self.config().summary_max_tokens,
        )
        .await
        {
            Ok(done) => done,
            Err(e) => {
                tracing::warn!(error = %e, "summarization failed; sending the stage-1 view");
                self.cx
                    .emit_middleware(NAME, "summary_failed", || json!({ "error": e.to_string() }));
                return None;
            }
        };
        let transcript = self.write_transcript(c1).await;
        let summary = Summary {
            cutoff: c1,
            text,
            transcript,
            count: previous.as_ref().map_or(0, |s| s.count) + 1,
        };
        let summary_tokens = self.mw.estimator.text(&summary.text);
        self.st.summary = Some(summary.clone());

        // What the next call will send too: the view after the new summary, through stage 1 when
        // still over the threshold.
        let mut view = self.view(&self.aligned.messages, Some(&summary));
        let mut after = self.estimate(&view);
        if forced || after >= self.threshold {
            let (l1b, _) = self.stage1(self.aligned.messages.clone(), p1, forced).await;
            view = self.view(&l1b, Some(&summary));
            after = self.estimate(&view);
        }
        self.cx.emit_middleware(NAME, "stage2", || {
            json!({
                "forced": forced,
                "threshold": self.threshold,
                "trigger_tokens": trigger,
                "tokens_before": before,
                "tokens_after": after,
                "summarized_messages": c1 - c0,
                "kept_messages": self.stored.len() - c1,
                "cutoff": c1,
                "summary_tokens": summary_tokens,
                "summary_count": summary.count,
                "transcript": summary.transcript,
                "summarizer_usage": usage,
            })
        });
        Some(view)
    }

    /// Write the transcript of stored messages `..cutoff`; its path, or `None` when it failed.
    async fn write_transcript(&self, cutoff: usize) -> Option<String> {
        let path = self.thread_dir()?.join("transcript.md").ok()?;
        let offloaded = &self.st.offloaded;
        let text = stage2::transcript(self.cx.thread_id().as_str(), &self.stored.slice(..cutoff), |id| {
            offloaded.get(id).cloned()
        });
        match self.files.write(&path, text.into(), WriteMode::Overwrite).await {
            Ok(_) => Some(path.to_string()),
            Err(e) => {
                tracing::warn!(path = %path, error = %e, "could not write the summarized transcript");
                None
            }
        }
    }
}
