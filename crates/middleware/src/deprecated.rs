//! Root paths that the docs named before the root was curated, kept so code written against them
//! still compiles. Each one points at its new home; none of them is used inside the workspace.
//!
//! Only documented paths are kept here (docs/*.md, the crate READMEs). Types are kept as
//! deprecated type aliases, slots as deprecated references to the slot, functions as deprecated
//! wrappers, and modules as deprecated modules re-exporting the new one (rustc ignores
//! `#[deprecated]` on a `pub use`, so a plain re-export could not warn).

use std::sync::Arc;

use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::runtime::state::Slot;

/// Moved to `trellis_middleware::attachments::AttachmentStore`.
#[deprecated(note = "moved to `trellis_middleware::attachments::AttachmentStore`")]
pub type AttachmentStore = crate::attachments::AttachmentStore;
/// Moved to `trellis_middleware::rubric::Rubric`.
#[deprecated(note = "moved to `trellis_middleware::rubric::Rubric`")]
pub type Rubric = crate::rubric::Rubric;
/// Moved to `trellis_middleware::rubric::RubricResult`.
#[deprecated(note = "moved to `trellis_middleware::rubric::RubricResult`")]
pub type RubricResult = crate::rubric::RubricResult;
/// Moved to `trellis_middleware::skills::BoundTools`.
#[deprecated(note = "moved to `trellis_middleware::skills::BoundTools`")]
pub type BoundTools = crate::skills::BoundTools;
/// Moved to `trellis_middleware::skills::SkillSource`.
#[deprecated(note = "moved to `trellis_middleware::skills::SkillSource`")]
pub type SkillSource = crate::skills::SkillSource;
/// Moved to `trellis_middleware::subagents::SubAgent`.
#[deprecated(note = "moved to `trellis_middleware::subagents::SubAgent`")]
pub type SubAgent = crate::subagents::SubAgent;
/// Moved to `trellis_middleware::summarization::SummarizationConfig`.
#[deprecated(note = "moved to `trellis_middleware::summarization::SummarizationConfig`")]
pub type SummarizationConfig = crate::summarization::SummarizationConfig;
/// Moved to `trellis_middleware::summarization::Threshold`.
#[deprecated(note = "moved to `trellis_middleware::summarization::Threshold`")]
pub type Threshold = crate::summarization::Threshold;
/// Moved to `trellis_middleware::runtime::context::RunContext`.
#[deprecated(note = "moved to `trellis_middleware::runtime::context::RunContext`")]
pub type RunContext = crate::runtime::context::RunContext;
/// Moved to `trellis_middleware::runtime::model::ModelCapabilities`.
#[deprecated(note = "moved to `trellis_middleware::runtime::model::ModelCapabilities`")]
pub type ModelCapabilities = crate::runtime::model::ModelCapabilities;
/// Moved to `trellis_middleware::runtime::stream::ModelDelta`.
#[deprecated(note = "moved to `trellis_middleware::runtime::stream::ModelDelta`")]
pub type ModelDelta = crate::runtime::stream::ModelDelta;
/// Moved to `trellis_middleware::runtime::events::EventSink`.
#[deprecated(note = "moved to `trellis_middleware::runtime::events::EventSink`")]
pub type EventSink = crate::runtime::events::EventSink;
/// Moved to `trellis_middleware::runtime::scripted_model::ScriptedModel`.
#[deprecated(note = "moved to `trellis_middleware::runtime::scripted_model::ScriptedModel`")]
pub type ScriptedModel = crate::runtime::scripted_model::ScriptedModel;

/// Moved to `trellis_middleware::rubric::RUBRIC`.
#[deprecated(note = "moved to `trellis_middleware::rubric::RUBRIC`")]
pub static RUBRIC: &Slot<crate::rubric::Rubric> = &crate::rubric::RUBRIC;
/// Moved to `trellis_middleware::rubric::RUBRIC_RESULT`.
#[deprecated(note = "moved to `trellis_middleware::rubric::RUBRIC_RESULT`")]
pub static RUBRIC_RESULT: &Slot<crate::rubric::RubricEvaluation> = &crate::rubric::RUBRIC_RESULT;

/// Moved to `trellis_middleware::tools::parse_args`.
#[deprecated(note = "moved to `trellis_middleware::tools::parse_args`")]
pub fn parse_args<T: serde::de::DeserializeOwned>(args: Value) -> Result<T, crate::tools::ToolError> {
    crate::tools::parse_args(args)
}

/// Moved to `trellis_middleware::runtime::checkpoint::serialize_by_content`.
#[deprecated(note = "moved to `trellis_middleware::runtime::checkpoint::serialize_by_content`")]
pub fn serialize_by_content<T, S>(value: &Arc<T>, serializer: S) -> Result<S::Ok, S::Error>
where
    T: Serialize + Send + Sync + 'static,
    S: Serializer,
{
    crate::runtime::checkpoint::serialize_by_content(value, serializer)
}

/// Moved to `trellis_middleware::runtime::interrupt`.
#[deprecated(note = "moved to `trellis_middleware::runtime::interrupt`")]
pub mod interrupt {
    pub use crate::runtime::interrupt::*;
}

/// Moved to `trellis_middleware::runtime::telemetry`.
#[deprecated(note = "moved to `trellis_middleware::runtime::telemetry`")]
pub mod telemetry {
    pub use crate::runtime::telemetry::*;
}
