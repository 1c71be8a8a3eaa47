//! The shapes of the JSON the handlers answer, for `/openapi.json` only: the handlers build their
//! answers as JSON values (the clients' field names and nulls, byte for byte as the reference
//! server's), so these types are never constructed. schemathesis checks the server's answers
//! against them (`tests/agent/server/openapi.rs`): a field renamed here or there fails it.
#![allow(dead_code)]

use schemars::JsonSchema;
use serde_json::{Map, Value};

/// Every error: `{"detail": "…"}`.
#[derive(Debug, JsonSchema)]
pub struct ErrorBody {
    /// What went wrong.
    pub detail: String,
}

/// `GET /ok`.
#[derive(Debug, JsonSchema)]
pub struct Health {
    pub ok: bool,
}

/// `GET /info`.
#[derive(Debug, JsonSchema)]
pub struct Info {
    /// Trellis's version.
    pub version: String,
    pub flags: Map<String, Value>,
    pub host: Map<String, Value>,
}

/// An assistant: one per served graph.
#[derive(Debug, JsonSchema)]
pub struct Assistant {
    #[schemars(extend("format" = "uuid"))]
    pub assistant_id: String,
    pub graph_id: String,
    pub name: String,
    pub config: Map<String, Value>,
    pub context: Map<String, Value>,
    pub metadata: Map<String, Value>,
    pub version: u64,
    pub description: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// A thread's status.
#[derive(Debug, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ThreadStatus {
    Idle,
    Busy,
    Interrupted,
    Error,
}

/// A thread.
#[derive(Debug, JsonSchema)]
pub struct Thread {
    #[schemars(extend("format" = "uuid"))]
    pub thread_id: String,
    pub created_at: String,
    pub updated_at: String,
    pub state_updated_at: String,
    pub metadata: Map<String, Value>,
    pub status: ThreadStatus,
    pub config: Map<String, Value>,
    /// The state's values (`messages`, `todos`, `files`, …).
    pub values: Value,
    /// The pending interrupts by task id.
    pub interrupts: Map<String, Value>,
    pub error: Value,
}

/// A checkpoint as clients name it.
#[derive(Debug, JsonSchema)]
pub struct CheckpointConfig {
    #[schemars(extend("format" = "uuid"))]
    pub thread_id: String,
    pub checkpoint_ns: String,
    #[schemars(extend("format" = "uuid"))]
    pub checkpoint_id: String,
    pub checkpoint_map: Option<Map<String, Value>>,
}

/// A thread's state at a checkpoint (all nulls and empty lists for a thread with none).
#[derive(Debug, JsonSchema)]
pub struct ThreadState {
    pub values: Value,
    pub next: Vec<String>,
    pub tasks: Vec<Map<String, Value>>,
    pub metadata: Map<String, Value>,
    pub created_at: Option<String>,
    pub checkpoint: Option<CheckpointConfig>,
    pub parent_checkpoint: Option<CheckpointConfig>,
    pub interrupts: Vec<Map<String, Value>>,
    pub checkpoint_id: Option<String>,
    pub parent_checkpoint_id: Option<String>,
}

/// `POST /threads/{thread_id}/state`: the new checkpoint.
#[derive(Debug, JsonSchema)]
pub struct StateUpdated {
    pub checkpoint: CheckpointConfig,
}

/// A run's status.
#[derive(Debug, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Pending,
    Running,
    Success,
    Error,
    Interrupted,
}

/// A run record.
#[derive(Debug, JsonSchema)]
pub struct Run {
    #[schemars(extend("format" = "uuid"))]
    pub run_id: String,
    #[schemars(extend("format" = "uuid"))]
    pub thread_id: String,
    #[schemars(extend("format" = "uuid"))]
    pub assistant_id: String,
    pub created_at: String,
    pub updated_at: String,
    pub status: RunStatus,
    pub metadata: Map<String, Value>,
    pub multitask_strategy: String,
    pub kwargs: Map<String, Value>,
    /// Trellis: when it started running.
    pub started_at: Option<String>,
    /// Trellis: when it ended.
    pub ended_at: Option<String>,
    /// Trellis: what it used and cost, subagents included.
    pub usage: Option<Map<String, Value>>,
    /// Trellis: one entry per `task` call.
    pub subagent_runs: Option<Vec<Map<String, Value>>>,
    /// Trellis: each finished tool call's timing (subagents' calls included).
    pub tool_runs: Option<Vec<Map<String, Value>>>,
}

/// A run's result (`wait`, `join`): the thread's values, or `{"__error__": …}`.
#[derive(Debug, JsonSchema)]
#[schemars(transparent)]
pub struct RunResult(pub Map<String, Value>);

/// One uploaded file.
#[derive(Debug, JsonSchema)]
pub struct Uploaded {
    pub path: String,
    pub name: String,
    pub size: u64,
    pub media_type: String,
}

/// `POST /threads/{thread_id}/files`.
#[derive(Debug, JsonSchema)]
pub struct Uploads {
    pub uploads: Vec<Uploaded>,
    pub checkpoint: Value,
}

/// A run's `input`: new human messages, and skills to pin for its next model call.
#[derive(Debug, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunInput {
    pub messages: Vec<InputMessage>,
    /// Trellis extension: skills whose instructions go with the next model call (as `/NAME` in
    /// `trellis chat`); names the user cannot see are ignored.
    #[schemars(length(max = 16))]
    pub pin_skills: Option<Vec<SkillName>>,
}

/// A skill's name.
#[derive(Debug, JsonSchema)]
pub struct SkillName(#[schemars(length(min = 1, max = 64))] pub String);

/// `GET /threads/{thread_id}/skills`: one skill a run of the thread sees.
#[derive(Debug, JsonSchema)]
pub struct Skill {
    pub name: String,
    pub description: String,
    /// The label of the source it comes from (`personal` for the user's own skills).
    pub source: String,
    /// Its `SKILL.md`, in the agent's view.
    pub path: String,
}

/// Who wrote an input message: a human (`role: "user"`, or LangChain's `type: "human"`).
#[derive(Debug, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HumanRole {
    User,
    Human,
}

/// One input message.
#[derive(Debug, JsonSchema)]
pub struct InputMessage {
    pub role: HumanRole,
    /// Text, or LangChain text blocks.
    pub content: String,
    /// Its id (1 to 128 bytes; one is made when missing).
    #[schemars(length(min = 1, max = 128))]
    pub id: Option<String>,
}

/// What a run does with a thread that already has runs in flight.
#[derive(Debug, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MultitaskStrategy {
    Reject,
    Interrupt,
    Rollback,
    Enqueue,
}

/// What a client hanging up does to its run.
#[derive(Debug, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnDisconnect {
    Continue,
    Cancel,
}

/// What a run does with a thread that does not exist.
#[derive(Debug, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum IfNotExists {
    Reject,
    Create,
}

/// What a stateless run does with its thread when it ends.
#[derive(Debug, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnCompletion {
    Delete,
    Keep,
}

/// A stream mode.
#[derive(Debug, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum StreamMode {
    Values,
    Updates,
    MessagesTuple,
    Tasks,
    Checkpoints,
    Debug,
    Custom,
}

/// `stream_mode`: one mode or several.
#[derive(Debug, JsonSchema)]
#[serde(untagged)]
pub enum StreamModes {
    One(StreamMode),
    Many(Vec<StreamMode>),
}
