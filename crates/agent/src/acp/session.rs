//! One ACP session: the agent built for the editor's `cwd`, its Trellis thread, the approvals
//! remembered in it, and its turns ([`Session::turn`]).
//!
//! Scopes:
//! * session → thread: the session id *is* the Trellis thread id, and the thread is kept in the
//!   state dir with its run configuration (`trellis run --thread ID` / `trellis chat --thread ID`
//!   continue it); it outlives the process.
//! * "allow always" → session ([`Always`]): in memory, forgotten when the session or the process
//!   ends.
//! * the turn's cancel signal → the running turn only.
//! * skills pinned with `/skill-name` → the thread's next run (the `PIN_SKILLS` slot, as in
//!   `trellis chat`); a `/skill-name` alone waits in the session for the next prompt.
//! * the agent (skills, memory, sandbox, `/workspace` = `cwd`) → the session: built once when it
//!   is created, from the command line's flags and agent file.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    AvailableCommand, AvailableCommandInput, ContentBlock, ContentChunk, EmbeddedResourceResource,
    PermissionOption, PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    SessionNotification, SessionUpdate, StopReason, ToolCallStatus, ToolCallUpdate, UnstructuredCommandInput,
};
use agent_client_protocol::{Client, Error};
use tokio::sync::watch;
use trellis_middleware::runtime::events::EventSink;
use trellis_middleware::runtime::interrupt::{ApprovalRequest, Decision, Decisions};
use trellis_middleware::runtime::model::StopReason as ModelStop;
use trellis_middleware::skills::{PIN_SKILLS, SkillCatalog};
use trellis_middleware::{AgentError, RunInput, ThreadId};

use crate::acp::always::{Always, Pattern};
use crate::acp::updates::{self, Updates};
use crate::cli::assemble::Built;
use crate::cli::pin::{self, Leading};

/// At most this many skills are offered as slash commands.
pub const MAX_COMMANDS: usize = 200;

/// The option ids of a permission request.
const ALLOW_ONCE: &str = "allow_once";
const ALLOW_ALWAYS: &str = "allow_always";
const REJECT_ONCE: &str = "reject_once";

/// What the model is told about a call the person rejected.
const REJECTED: &str = "The user rejected this call in the editor.";
/// What it is told about a call left undecided when the turn was cancelled.
const CANCELLED: &str = "The user cancelled the turn before deciding on this call.";

/// One session.
#[derive(Debug)]
pub struct Session {
    /// The session id, which is the thread id.
    pub thread: ThreadId,
    /// The editor's working directory, the agent's `/workspace`.
    pub cwd: PathBuf,
    built: Built,
    catalog: SkillCatalog,
    pins: Mutex<Vec<String>>,
    always: Mutex<Always>,
    /// The running turn's cancel signal.
    cancel: Mutex<Option<watch::Sender<bool>>>,
}

/// How a turn ended, for the client.
type TurnResult = Result<StopReason, Error>;

impl Session {
    /// A session on `thread` with the agent `built` for `cwd` (reads its skill catalog).
    pub async fn new(thread: ThreadId, cwd: PathBuf, built: Built) -> Self {
        let catalog = pin::catalog(&built.ws).await;
        Self {
            thread,
            cwd,
            built,
            catalog,
            pins: Mutex::new(Vec::new()),
            always: Mutex::new(Always::default()),
            cancel: Mutex::new(None),
        }
    }

    /// The checkpointer of the session's thread.
    pub fn checkpointer(&self) -> &trellis_middleware::BackendCheckpointer {
        &self.built.checkpointer
    }

    /// The skills as slash commands (`available_commands_update`), at most [`MAX_COMMANDS`].
    pub fn commands(&self) -> Vec<AvailableCommand> {
        self.catalog
            .skills()
            .iter()
            .take(MAX_COMMANDS)
            .map(|skill| {
                AvailableCommand::new(skill.name.clone(), skill.description.clone()).input(
                    AvailableCommandInput::Unstructured(UnstructuredCommandInput::new(
                        "what to do with this skill",
                    )),
                )
            })
            .collect()
    }

    /// `session/cancel`: stop the running turn, if any.
    pub fn cancel(&self) {
        if let Ok(cancel) = self.cancel.lock()
            && let Some(tx) = cancel.as_ref()
        {
            let _ = tx.send(true);
        }
    }

    /// Run one prompt to its end, sending updates and asking for permissions on `cx`.
    pub async fn turn(self: Arc<Self>, prompt: Vec<ContentBlock>, cx: ConnectionTo<Client>) -> TurnResult {
        let (tx, mut rx) = watch::channel(false);
        {
            let mut slot = self.cancel.lock().map_err(|_| Error::internal_error())?;
            if let Some(previous) = slot.replace(tx) {
                // One turn at a time: a new prompt cancels the one still running.
                let _ = previous.send(true);
            }
        }
        let cancelled = async move {
            let _ = rx.wait_for(|c| *c).await;
        };
        let result = self.drive(prompt, &cx, cancelled).await;
        result.map_err(|e| {
            tracing::warn!("turn of session {} failed: {e:#}", self.thread);
            Error::internal_error().data(serde_json::Value::String(e.to_string()))
        })
    }

    async fn drive(
        &self,
        prompt: Vec<ContentBlock>,
        cx: &ConnectionTo<Client>,
        cancelled: impl std::future::Future<Output = ()>,
    ) -> anyhow::Result<StopReason> {
        tokio::pin!(cancelled);
        self.settle_waiting().await?;
        let text = prompt_text(&prompt);
        let text = match pin::parse(&text, &self.catalog) {
            Ok(Leading::Plain(text)) => text,
            Ok(Leading::Pin { skill, rest }) => {
                if let Ok(mut pins) = self.pins.lock()
                    && !pins.contains(&skill)
                {
                    pins.push(skill.clone());
                }
                if rest.is_empty() {
                    self.say(
                        cx,
                        &format!("Pinned the skill {skill}: its instructions go with your next message."),
                    );
                    return Ok(StopReason::EndTurn);
                }
                rest
            }
            Err(unknown) => {
                // As in `trellis chat`: an unknown /word costs no model call.
                self.say(cx, &format!("{unknown}. `//` sends a leading slash."));
                return Ok(StopReason::EndTurn);
            }
        };
        let pins = self
            .pins
            .lock()
            .map(|mut p| std::mem::take(&mut *p))
            .unwrap_or_default();
        let updates = Arc::new(Mutex::new(Updates::new(
            self.cwd.clone(),
            trellis_middleware::ThreadId::generate().to_string(),
        )));
        let sink = {
            let cx = cx.clone();
            let session = self.thread.to_string();
            let updates = updates.clone();
            EventSink::from_fn(move |event| {
                let sent = updates.lock().map(|mut u| u.of(&event)).unwrap_or_default();
                for update in sent {
                    let _ = cx.send_notification(SessionNotification::new(session.clone(), update));
                }
            })
        };
        let mut input = RunInput::human(text);
        if !pins.is_empty() {
            input = input.slot(&PIN_SKILLS, pins);
        }
        loop {
            let run = self.built.prepare(input, &self.thread).events(sink.clone());
            let out = match self.built.agent.run_until(run, cancelled.as_mut()).await {
                Ok(out) => out,
                Err(AgentError::Cancelled { .. }) => return Ok(StopReason::Cancelled),
                Err(AgentError::StepLimit { .. }) => return Ok(StopReason::MaxTurnRequests),
                Err(e) => return Err(e.into()),
            };
            let Some(interrupt) = out.interrupt else {
                return Ok(match out.stop_reason {
                    ModelStop::MaxTokens => StopReason::MaxTokens,
                    ModelStop::Refusal => StopReason::Refusal,
                    _ => StopReason::EndTurn,
                });
            };
            let mut decisions = Decisions::new();
            for request in &interrupt.requests {
                let decision = tokio::select! {
                    biased;
                    () = cancelled.as_mut() => None,
                    decision = self.ask(request, cx) => decision?,
                };
                let Some(decision) = decision else {
                    // Cancelled at the question: the calls stay waiting, and are rejected as
                    // cancelled before the next prompt.
                    return Ok(StopReason::Cancelled);
                };
                if matches!(decision, Decision::Reject { .. }) {
                    send(
                        cx,
                        &self.thread,
                        updates::status(&request.call_id, ToolCallStatus::Failed),
                    );
                }
                decisions.insert(request.id.clone(), decision);
            }
            input = RunInput::resume(decisions);
        }
    }

    /// The decision on `request`: approved when allowed always in this session, else the
    /// person's answer to `session/request_permission`; `None` when the client cancelled it.
    async fn ask(
        &self,
        request: &ApprovalRequest,
        cx: &ConnectionTo<Client>,
    ) -> anyhow::Result<Option<Decision>> {
        let remembered = self
            .always
            .lock()
            .map(|a| a.allows(&request.tool, &request.args))
            .unwrap_or(false);
        if remembered {
            return Ok(Some(Decision::Approve));
        }
        let pattern = Pattern::of(&request.tool, &request.args);
        let options = vec![
            PermissionOption::new(ALLOW_ONCE, "Allow once", PermissionOptionKind::AllowOnce),
            PermissionOption::new(ALLOW_ALWAYS, pattern.label(), PermissionOptionKind::AllowAlways),
            PermissionOption::new(REJECT_ONCE, "Reject", PermissionOptionKind::RejectOnce),
        ];
        let fields = updates::fields(&self.cwd, &request.tool, &request.args).status(ToolCallStatus::Pending);
        let call = ToolCallUpdate::new(request.call_id.clone(), fields);
        let asked = RequestPermissionRequest::new(self.thread.to_string(), call, options);
        let answer = cx
            .send_request(asked)
            .block_task()
            .await
            .map_err(|e| anyhow::anyhow!("session/request_permission failed: {e}"))?;
        Ok(match answer.outcome {
            RequestPermissionOutcome::Selected(selected) => match &*selected.option_id.0 {
                ALLOW_ONCE => Some(Decision::Approve),
                ALLOW_ALWAYS => {
                    if let Ok(mut always) = self.always.lock() {
                        always.remember(pattern);
                    }
                    Some(Decision::Approve)
                }
                _ => Some(Decision::Reject {
                    message: Some(REJECTED.to_owned()),
                }),
            },
            _ => None,
        })
    }

    /// A message from Trellis itself (not the model) in the conversation.
    fn say(&self, cx: &ConnectionTo<Client>, text: &str) {
        let chunk = ContentChunk::new(ContentBlock::from(text.to_owned()));
        send(cx, &self.thread, SessionUpdate::AgentMessageChunk(chunk));
    }

    /// Calls left undecided by a cancelled turn are rejected (without a model call) before the
    /// thread takes a new message.
    async fn settle_waiting(&self) -> anyhow::Result<()> {
        let Some(interrupt) = self.built.agent.pending_interrupt(&self.thread).await? else {
            return Ok(());
        };
        let mut decisions = Decisions::new();
        for request in &interrupt.requests {
            decisions.insert(
                request.id.clone(),
                Decision::Reject {
                    message: Some(CANCELLED.to_owned()),
                },
            );
        }
        // No model call: the rejections are saved, then the step limit of 0 stops the run.
        let run = self
            .built
            .prepare(RunInput::resume(decisions).max_steps(0), &self.thread);
        match self.built.agent.run(run).await {
            Ok(_) | Err(AgentError::StepLimit { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

fn send(cx: &ConnectionTo<Client>, thread: &ThreadId, update: SessionUpdate) {
    let _ = cx.send_notification(SessionNotification::new(thread.to_string(), update));
}

/// The text the model gets for a prompt: text blocks as they are, a resource link as a
/// `[@name](uri)` mention, an embedded text resource in a `<context>` block; images, audio and
/// binary resources are not accepted (`promptCapabilities` says so) and are left out.
pub fn prompt_text(prompt: &[ContentBlock]) -> String {
    let mut parts = Vec::new();
    for block in prompt {
        match block {
            ContentBlock::Text(text) => parts.push(text.text.clone()),
            ContentBlock::ResourceLink(link) => parts.push(format!("[@{}]({})", link.name, link.uri)),
            ContentBlock::Resource(embedded) => {
                if let EmbeddedResourceResource::TextResourceContents(r) = &embedded.resource {
                    parts.push(format!("<context uri=\"{}\">\n{}\n</context>", r.uri, r.text));
                }
            }
            _ => {}
        }
    }
    parts.join("\n")
}
