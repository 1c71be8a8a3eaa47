//! [`ScriptedModel`]: a [`ChatModel`] for tests that answers from a script and records every request.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use futures::future::BoxFuture;

use crate::runtime::message::{AiMessage, ToolCall};
use crate::runtime::model::{ChatModel, ModelCapabilities, ModelError, ModelRequest, ModelResponse};

type Respond = dyn Fn(&ModelRequest) -> Result<ModelResponse, ModelError> + Send + Sync;
type RespondOnce = dyn FnOnce(ModelRequest) -> BoxFuture<'static, Result<ModelResponse, ModelError>> + Send;

enum Step {
    Ready(Box<Result<ModelResponse, ModelError>>),
    Later(Box<RespondOnce>),
}

/// A model that answers from a queue of scripted steps, then (optionally) from a function, and keeps
/// every request it received. Costs nothing beyond a lock and (when recording) a clone of the request.
///
/// ```
/// use std::sync::Arc;
/// use trellis_middleware::runtime::scripted_model::ScriptedModel;
/// use trellis_middleware::{ChatModel, ModelRequest, ToolCall};
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let model = Arc::new(
///     ScriptedModel::new()
///         .then_tool_calls([ToolCall::new("c1", "ls", serde_json::json!({"path": "/"}))])
///         .then_text("done"),
/// );
/// let first = model.invoke(ModelRequest::default()).await.unwrap();
/// assert!(first.message.has_tool_calls());
/// assert_eq!(model.requests().len(), 1);
/// # });
/// ```
pub struct ScriptedModel {
    id: String,
    capabilities: ModelCapabilities,
    script: Mutex<VecDeque<Step>>,
    fallback: Option<Arc<Respond>>,
    record: bool,
    requests: Mutex<Vec<ModelRequest>>,
    calls: AtomicUsize,
}

impl fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedModel")
            .field("id", &self.id)
            .field("remaining", &self.remaining())
            .field("calls", &self.calls())
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Default for ScriptedModel {
    fn default() -> Self {
        Self::new()
    }
}

impl ScriptedModel {
    /// An empty script (every call fails until steps are added); id `scripted`, no capabilities.
    pub fn new() -> Self {
        Self {
            id: "scripted".to_owned(),
            capabilities: ModelCapabilities::default(),
            script: Mutex::new(VecDeque::new()),
            fallback: None,
            record: true,
            requests: Mutex::new(Vec::new()),
            calls: AtomicUsize::new(0),
        }
    }

    /// A model that answers every call with `f` (after any scripted steps).
    pub fn from_fn(
        f: impl Fn(&ModelRequest) -> Result<ModelResponse, ModelError> + Send + Sync + 'static,
    ) -> Self {
        Self {
            fallback: Some(Arc::new(f)),
            ..Self::new()
        }
    }

    /// Set the model id.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }

    /// Declare capabilities.
    pub fn with_capabilities(mut self, capabilities: ModelCapabilities) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// Do not keep requests (for benchmarks).
    pub fn without_recording(mut self) -> Self {
        self.record = false;
        self
    }

    fn push(self, step: Step) -> Self {
        lock(&self.script).push_back(step);
        self
    }

    /// Answer the next call with `response`.
    pub fn then(self, response: ModelResponse) -> Self {
        self.push(Step::Ready(Box::new(Ok(response))))
    }

    /// Answer the next call with a text reply.
    pub fn then_text(self, text: impl Into<String>) -> Self {
        self.then(ModelResponse::new(AiMessage::text(text)))
    }

    /// Answer the next call by calling these tools.
    pub fn then_tool_calls(self, calls: impl IntoIterator<Item = ToolCall>) -> Self {
        self.then(ModelResponse::new(AiMessage::tool_calls(calls)))
    }

    /// Fail the next call.
    pub fn then_error(self, error: ModelError) -> Self {
        self.push(Step::Ready(Box::new(Err(error))))
    }

    /// Answer the next call with an async function of its request (e.g. to wait on a barrier).
    pub fn then_async<F, Fut>(self, f: F) -> Self
    where
        F: FnOnce(ModelRequest) -> Fut + Send + 'static,
        Fut: Future<Output = Result<ModelResponse, ModelError>> + Send + 'static,
    {
        self.push(Step::Later(Box::new(move |req| Box::pin(f(req)))))
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<ModelRequest> {
        lock(&self.requests).clone()
    }

    /// The last request received.
    pub fn last_request(&self) -> Option<ModelRequest> {
        lock(&self.requests).last().cloned()
    }

    /// How many calls were made (recorded or not).
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::Relaxed)
    }

    /// Scripted steps not used yet.
    pub fn remaining(&self) -> usize {
        lock(&self.script).len()
    }
}

#[async_trait]
impl ChatModel for ScriptedModel {
    fn id(&self) -> &str {
        &self.id
    }

    fn capabilities(&self) -> ModelCapabilities {
        self.capabilities
    }

    async fn invoke(&self, request: ModelRequest) -> Result<ModelResponse, ModelError> {
        let call = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        if self.record {
            lock(&self.requests).push(request.clone());
        }
        let step = lock(&self.script).pop_front();
        match step {
            Some(Step::Ready(result)) => *result,
            Some(Step::Later(f)) => f(request).await,
            None => match &self.fallback {
                Some(f) => f(&request),
                None => Err(ModelError::other(format!(
                    "scripted model {:?} has no response left for call {call}",
                    self.id
                ))),
            },
        }
    }
}
