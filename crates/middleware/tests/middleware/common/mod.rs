//! Helpers shared by the integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Value, json};
use trellis_middleware::runtime::checkpoint::Checkpoint;
use trellis_middleware::runtime::context::RunContext;
use trellis_middleware::runtime::message::{ContentBlock, ToolMessage};
use trellis_middleware::runtime::model::ModelCapabilities;
use trellis_middleware::*;

/// A shared, ordered log.
#[derive(Debug, Clone, Default)]
pub struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    pub fn push(&self, entry: impl Into<String>) {
        self.0.lock().unwrap().push(entry.into());
    }

    pub fn entries(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// Logs every hook it sees as `{name}.{hook}`.
#[derive(Debug)]
pub struct Recorder {
    pub name: &'static str,
    pub log: Log,
}

#[async_trait]
impl Middleware for Recorder {
    fn name(&self) -> &str {
        self.name
    }

    async fn before_agent(&self, _state: &mut State, _cx: &RunContext) -> Result<(), AgentError> {
        self.log.push(format!("{}.before_agent", self.name));
        Ok(())
    }

    async fn before_model(&self, _state: &mut State, _cx: &RunContext) -> Result<(), AgentError> {
        self.log.push(format!("{}.before_model", self.name));
        Ok(())
    }

    async fn wrap_model_call(
        &self,
        request: ModelRequest,
        state: &mut State,
        cx: &RunContext,
        next: Next<'_>,
    ) -> Result<ModelResponse, AgentError> {
        self.log.push(format!("{}.wrap_model_call>", self.name));
        let out = next.run(request, state, cx).await;
        self.log.push(format!("{}.wrap_model_call<", self.name));
        out
    }

    async fn after_model(
        &self,
        _response: &mut ModelResponse,
        _state: &mut State,
        _cx: &RunContext,
    ) -> Result<(), AgentError> {
        self.log.push(format!("{}.after_model", self.name));
        Ok(())
    }

    async fn wrap_tool_call(
        &self,
        call: ToolCall,
        cx: &ToolContext<'_>,
        next: ToolNext<'_>,
    ) -> Result<ToolOutput, AgentError> {
        self.log
            .push(format!("{}.wrap_tool_call>{}", self.name, call.name));
        let out = next.run(call, cx).await;
        self.log.push(format!("{}.wrap_tool_call<", self.name));
        out
    }

    async fn after_agent(&self, _state: &mut State, _cx: &RunContext) -> Result<AfterAgent, AgentError> {
        self.log.push(format!("{}.after_agent", self.name));
        Ok(AfterAgent::Finish)
    }
}

pub fn object_schema() -> Value {
    json!({"type": "object", "properties": {"text": {"type": "string"}}})
}

/// `echo`: answers with its `text` argument.
pub fn echo_tool() -> FnTool {
    FnTool::new("echo", "Repeat the text.", object_schema(), |args| async move {
        Ok(ToolOutput::text(args["text"].as_str().unwrap_or_default()))
    })
}

pub fn call(id: &str, name: &str, args: Value) -> ToolCall {
    ToolCall::new(id, name, args)
}

/// A compact, readable shape of a conversation: `human:hi`, `ai:calls[a,b]`, `tool:a!` (error).
pub fn shape<'a>(messages: impl IntoIterator<Item = &'a Message>) -> Vec<String> {
    messages
        .into_iter()
        .map(|m| match m {
            Message::Human(h) => format!("human:{}", Message::Human(h.clone()).text()),
            Message::Ai(ai) if ai.has_tool_calls() => {
                let ids: Vec<&str> = ai.calls().map(|c| c.id.as_str()).collect();
                format!("ai:calls[{}]", ids.join(","))
            }
            Message::Ai(ai) => format!("ai:{}", ai.text_content()),
            Message::Tool(t) => format!("tool:{}{}", t.call_id, if t.is_error { "!" } else { "" }),
            Message::System(_) => "system".to_owned(),
        })
        .collect()
}

/// The text of the tool result answering `call_id`.
pub fn tool_result<'a>(messages: impl IntoIterator<Item = &'a Message>, call_id: &str) -> &'a ToolMessage {
    messages
        .into_iter()
        .filter_map(Message::as_tool)
        .find(|t| t.call_id == call_id)
        .unwrap_or_else(|| panic!("no result for {call_id}"))
}

/// Store `messages` as the latest checkpoint of `thread`, as if an earlier run had left them.
pub async fn seed_thread(checkpointer: &InMemoryCheckpointer, thread: &ThreadId, messages: Vec<Message>) {
    checkpointer
        .save(
            Checkpoint::new(thread.clone(), 0, State::with_messages(messages)),
            None,
        )
        .await
        .unwrap();
}

/// (text, is_error) of every tool result of a run, in order.
pub fn tool_texts(out: &RunOutput) -> Vec<(String, bool)> {
    out.state
        .messages
        .iter()
        .filter_map(|m| m.as_tool())
        .map(|t| {
            (
                t.content.iter().filter_map(ContentBlock::as_text).collect(),
                t.is_error,
            )
        })
        .collect()
}

/// Capabilities of a caching model; `mid_conversation` says whether it takes tools in system
/// messages mid-conversation (else disclosed tools are appended to the tool list).
pub fn caps(mid_conversation: bool) -> ModelCapabilities {
    ModelCapabilities {
        prompt_caching: true,
        max_cache_breakpoints: 4,
        tools_mid_conversation: mid_conversation,
        structured_output: false,
        images: false,
        context_window: Some(200_000),
    }
}

/// One operation a [`Spy`] saw: `"read"` (bytes returned), `"write"` or `"append"` (bytes given),
/// `"link"`, `"stat"` or `"ls"` (a directory listing; these three 0 bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpyOp {
    pub op: &'static str,
    pub path: String,
    pub bytes: u64,
}

/// Delegates to an inner backend and records every successful read (`read_many` included), every
/// write and every directory listing.
#[derive(Debug)]
pub struct Spy {
    inner: Arc<dyn trellis_middleware::backend::Backend>,
    log: Mutex<Vec<SpyOp>>,
}

impl Spy {
    pub fn new(inner: Arc<dyn trellis_middleware::backend::Backend>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            log: Mutex::default(),
        })
    }

    /// Everything recorded so far.
    pub fn ops(&self) -> Vec<SpyOp> {
        self.log.lock().unwrap().clone()
    }

    /// Everything recorded so far, forgetting it.
    pub fn take(&self) -> Vec<SpyOp> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }

    /// Bytes read from `path` (all reads), or from everywhere when `path` is `None`.
    pub fn bytes_read(&self, path: Option<&str>) -> u64 {
        self.ops()
            .iter()
            .filter(|o| o.op == "read" && path.is_none_or(|p| o.path == p))
            .map(|o| o.bytes)
            .sum()
    }

    fn record(&self, op: &'static str, path: &trellis_middleware::backend::VirtualPath, bytes: usize) {
        self.log.lock().unwrap().push(SpyOp {
            op,
            path: path.to_string(),
            bytes: bytes as u64,
        });
    }
}

#[async_trait]
impl trellis_middleware::backend::Backend for Spy {
    fn capabilities(&self) -> trellis_middleware::backend::Capabilities {
        self.inner.capabilities()
    }
    async fn ls(
        &self,
        dir: &trellis_middleware::backend::VirtualPath,
    ) -> trellis_middleware::backend::Result<Vec<trellis_middleware::backend::Entry>> {
        self.record("ls", dir, 0);
        self.inner.ls(dir).await
    }
    async fn stat(
        &self,
        path: &trellis_middleware::backend::VirtualPath,
    ) -> trellis_middleware::backend::Result<trellis_middleware::backend::Entry> {
        self.record("stat", path, 0);
        self.inner.stat(path).await
    }
    async fn read(
        &self,
        path: &trellis_middleware::backend::VirtualPath,
        range: Option<trellis_middleware::backend::ByteRange>,
    ) -> trellis_middleware::backend::Result<trellis_middleware::backend::ReadOutput> {
        let out = self.inner.read(path, range).await;
        if let Ok(o) = &out {
            self.record("read", path, o.bytes.len());
        }
        out
    }
    async fn read_many(
        &self,
        paths: &[trellis_middleware::backend::VirtualPath],
        range: Option<trellis_middleware::backend::ByteRange>,
    ) -> Vec<trellis_middleware::backend::Result<trellis_middleware::backend::ReadOutput>> {
        let out = self.inner.read_many(paths, range).await;
        for (path, result) in paths.iter().zip(&out) {
            if let Ok(o) = result {
                self.record("read", path, o.bytes.len());
            }
        }
        out
    }
    async fn write(
        &self,
        path: &trellis_middleware::backend::VirtualPath,
        data: bytes::Bytes,
        mode: trellis_middleware::backend::WriteMode,
    ) -> trellis_middleware::backend::Result<trellis_middleware::backend::WriteOutcome> {
        self.record("write", path, data.len());
        self.inner.write(path, data, mode).await
    }
    async fn append(
        &self,
        path: &trellis_middleware::backend::VirtualPath,
        data: bytes::Bytes,
        mode: trellis_middleware::backend::AppendMode,
    ) -> Option<trellis_middleware::backend::Result<trellis_middleware::backend::WriteOutcome>> {
        let len = data.len();
        let appended = self.inner.append(path, data, mode).await;
        if appended.is_some() {
            self.record("append", path, len);
        }
        appended
    }
    async fn link(
        &self,
        from: &trellis_middleware::backend::VirtualPath,
        to: &trellis_middleware::backend::VirtualPath,
        mode: trellis_middleware::backend::WriteMode,
    ) -> Option<trellis_middleware::backend::Result<trellis_middleware::backend::WriteOutcome>> {
        let linked = self.inner.link(from, to, mode).await;
        if linked.is_some() {
            self.record("link", to, 0);
        }
        linked
    }
    async fn delete(
        &self,
        path: &trellis_middleware::backend::VirtualPath,
    ) -> trellis_middleware::backend::Result<()> {
        self.inner.delete(path).await
    }
}

/// Write `text` at `path` (replacing what is there).
pub async fn put(backend: &dyn trellis_middleware::backend::Backend, path: &str, text: &str) {
    backend
        .write(
            &trellis_middleware::backend::VirtualPath::parse(path).unwrap(),
            text.to_owned().into(),
            trellis_middleware::backend::WriteMode::Overwrite,
        )
        .await
        .unwrap();
}

/// The one emulator guard of this test binary: the S3 emulator's endpoint and bucket for `suite`.
///
/// `TRELLIS_S3_ENDPOINT` unset or empty: with `TRELLIS_EMULATORS=required` (what `cargo xtask test`
/// sets) that is a failure, a panic naming the suite; otherwise the suite is skipped with one line
/// saying so, and `None` is returned. The bucket is `TRELLIS_TEST_BUCKET`, `trellis-test` when unset.
pub fn s3_emulator(suite: &str) -> Option<(String, String)> {
    let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
    let Some(endpoint) = var("TRELLIS_S3_ENDPOINT") else {
        if std::env::var("TRELLIS_EMULATORS").as_deref() == Ok("required") {
            panic!(
                "{suite}: TRELLIS_S3_ENDPOINT is not set but TRELLIS_EMULATORS=required; are the emulators running?"
            );
        }
        eprintln!("skipped: {suite} (set TRELLIS_S3_ENDPOINT or run `cargo xtask test`)");
        return None;
    };
    let bucket = var("TRELLIS_TEST_BUCKET").unwrap_or_else(|| "trellis-test".to_owned());
    Some((endpoint, bucket))
}
