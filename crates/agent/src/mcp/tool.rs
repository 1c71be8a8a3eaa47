//! [`McpTool`]: one MCP tool as an [`Tool`] the loop can offer and run.
//!
//! * **Definition.** The name is the prefixed, sanitized one ([`super::naming`]); the description is
//!   the server's (or its title, or a generated line), cut at [`MAX_DESCRIPTION_CHARS`]; the
//!   parameters are the server's `inputSchema`, unchanged except that `"type": "object"` is added
//!   when missing.
//! * **Results.** Text comes back as text, images as images; audio, binary resources and resource
//!   links become a one-line note; embedded text resources are shown with their URI. A result
//!   without content shows its `structuredContent` as JSON. Text past the server's
//!   `max_result_chars` is cut with a note. An `isError` result is an error result, its text starting
//!   with `Error: ` unless it already starts with "error".
//! * **Side effects.** The server's tool annotations decide what a run resumed after a crash may
//!   do with a call left without a result ([`SideEffects`]): `readOnlyHint: true` is read-only,
//!   else `idempotentHint: true` is idempotent, else (both are hints that default to false in
//!   MCP) external.
//! * **Failures** (server down, crash, timeout, protocol error, bad arguments) are error results
//!   whose text says what happened and what to do; nothing panics or hangs.

use std::sync::Weak;

use async_trait::async_trait;
use rmcp::model::{CallToolResult, ContentBlock as McpContent, JsonObject, ResourceContents};
use serde_json::Value;
use trellis_middleware::ToolContextExt;
use trellis_middleware::tools::{
    ImageSource, SideEffects, Tool, ToolContent, ToolContext, ToolError, ToolOutput,
};

/// Image types both providers accept in tool results (Anthropic's vision docs and OpenAI's image
/// inputs list the same four); any other MCP image becomes a note saying it was not shown.
pub const PROVIDER_IMAGE_TYPES: &[&str] = &["image/jpeg", "image/png", "image/gif", "image/webp"];

use super::connection::{CallOutcome, McpConnection};

/// Longest tool description sent to the model, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 4_096;

/// The class MCP's annotations give a tool: `readOnlyHint`, then `idempotentHint`, else external.
fn side_effects(annotations: Option<&rmcp::model::ToolAnnotations>) -> SideEffects {
    match annotations {
        Some(a) if a.read_only_hint == Some(true) => SideEffects::ReadOnly,
        Some(a) if a.idempotent_hint == Some(true) => SideEffects::Idempotent,
        _ => SideEffects::External,
    }
}

/// A tool of an MCP server.
#[derive(Debug)]
pub struct McpTool {
    connection: Weak<McpConnection>,
    server: String,
    mcp_name: String,
    name: String,
    description: String,
    parameters: Value,
    side_effects: SideEffects,
}

impl McpTool {
    pub(crate) fn new(
        connection: Weak<McpConnection>,
        server: &str,
        name: String,
        tool: &rmcp::model::Tool,
    ) -> Self {
        let description = tool
            .description
            .as_deref()
            .or(tool.title.as_deref())
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .map(|d| d.chars().take(MAX_DESCRIPTION_CHARS).collect())
            .unwrap_or_else(|| format!("The tool {:?} of the MCP server {server:?}.", tool.name));
        let mut parameters = (*tool.input_schema).clone();
        parameters
            .entry("type")
            .or_insert_with(|| Value::String("object".to_owned()));
        Self {
            connection,
            server: server.to_owned(),
            mcp_name: tool.name.to_string(),
            name,
            description,
            parameters: Value::Object(parameters),
            side_effects: side_effects(tool.annotations.as_ref()),
        }
    }

    /// The server this tool belongs to.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The tool's name on its server (the model sees [`Tool::name`]).
    pub fn mcp_name(&self) -> &str {
        &self.mcp_name
    }
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    fn side_effects(&self) -> SideEffects {
        self.side_effects
    }

    async fn call(&self, args: Value, cx: &ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        let Some(connection) = self.connection.upgrade() else {
            return Ok(ToolOutput::error(format!(
                "the MCP server {:?} was shut down; {:?} is no longer available.",
                self.server, self.name
            )));
        };
        let Some(run) = cx.run() else {
            return Ok(ToolOutput::error(format!(
                "the MCP tool {:?} runs only inside an agent run.",
                self.name
            )));
        };
        // The resolver already withholds the tool from users without a role; this guards tools
        // that reached a run some other way.
        if !connection.config().admits_run(run) {
            return Ok(ToolOutput::error(format!(
                "the tool {:?} is not available to this user.",
                self.name
            )));
        }
        let args = match arguments(args) {
            Ok(args) => args,
            Err(text) => return Ok(ToolOutput::error(text)),
        };
        let max_chars = connection.config().max_result_chars();
        Ok(match connection.call(&self.mcp_name, args, run).await {
            CallOutcome::Answered(result) => convert(result, max_chars),
            CallOutcome::Failed(text) => ToolOutput::error(text),
        })
    }
}

/// The arguments as a JSON object: an object, `null` (no arguments) or a string holding an object.
fn arguments(args: Value) -> Result<JsonObject, String> {
    let args = match args {
        Value::String(raw) => {
            serde_json::from_str(&raw).map_err(|e| format!("the arguments must be a JSON object ({e})"))?
        }
        other => other,
    };
    match args {
        Value::Object(map) => Ok(map),
        Value::Null => Ok(JsonObject::new()),
        other => Err(format!(
            "the arguments must be a JSON object, not {}",
            kind(&other)
        )),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// An MCP result as a tool output; see the module docs.
pub(crate) fn convert(result: CallToolResult, max_chars: usize) -> ToolOutput {
    let mut blocks: Vec<ToolContent> = Vec::new();
    let mut budget = Budget::new(max_chars);
    let mut push_text = |blocks: &mut Vec<ToolContent>, text: String| {
        let Some(text) = budget.take(&text) else {
            return;
        };
        match blocks.last_mut() {
            Some(ToolContent::Text { text: last }) => {
                last.push('\n');
                last.push_str(&text);
            }
            _ => blocks.push(ToolContent::text(text)),
        }
    };
    for content in result.content {
        match content {
            McpContent::Text(t) => push_text(&mut blocks, t.text),
            McpContent::Image(image)
                if PROVIDER_IMAGE_TYPES.contains(&image.mime_type.to_ascii_lowercase().as_str()) =>
            {
                blocks.push(ToolContent::Image {
                    source: ImageSource::Base64 {
                        media_type: image.mime_type.to_ascii_lowercase(),
                        data: image.data,
                    },
                })
            }
            McpContent::Image(image) => push_text(
                &mut blocks,
                format!(
                    "[image ({}) not shown: models accept only JPEG, PNG, GIF and WebP images]",
                    image.mime_type
                ),
            ),
            McpContent::Audio(audio) => {
                push_text(&mut blocks, format!("[audio ({}) not shown]", audio.mime_type))
            }
            McpContent::Resource(embedded) => match embedded.resource {
                ResourceContents::TextResourceContents { uri, text, .. } => {
                    push_text(&mut blocks, format!("[resource {uri}]\n{text}"))
                }
                ResourceContents::BlobResourceContents { uri, mime_type, .. } => push_text(
                    &mut blocks,
                    format!(
                        "[binary resource {uri} ({}) not shown]",
                        mime_type.as_deref().unwrap_or("unknown type")
                    ),
                ),
                _ => push_text(&mut blocks, "[resource of an unknown kind not shown]".to_owned()),
            },
            McpContent::ResourceLink(link) => push_text(
                &mut blocks,
                format!("[resource link {} ({})]", link.uri, link.name),
            ),
            _ => push_text(&mut blocks, "[content of an unknown kind not shown]".to_owned()),
        }
    }
    if blocks.is_empty() {
        let text = match &result.structured_content {
            Some(value) => trellis_middleware::tools::canonical::Sorted(value).to_string(),
            None => "(the tool returned nothing)".to_owned(),
        };
        push_text(&mut blocks, text);
    }
    if let Some(note) = budget.note() {
        push_text_unbudgeted(&mut blocks, note);
    }
    let is_error = result.is_error.unwrap_or(false);
    if is_error {
        match blocks.iter_mut().find_map(|b| match b {
            ToolContent::Text { text } => Some(text),
            _ => None,
        }) {
            // The failure must be visible in the text too (providers without an error flag).
            Some(text) if !starts_with_error(text) => text.insert_str(0, "Error: "),
            Some(_) => {}
            None => blocks.insert(0, ToolContent::text("Error: the tool reported a failure.")),
        }
    }
    ToolOutput {
        content: blocks,
        is_error,
        ..ToolOutput::default()
    }
}

/// True when `text` already opens with the word "error" (any case), e.g. "Error executing tool …".
fn starts_with_error(text: &str) -> bool {
    text.get(..5).is_some_and(|w| w.eq_ignore_ascii_case("error"))
}

fn push_text_unbudgeted(blocks: &mut Vec<ToolContent>, text: String) {
    match blocks.last_mut() {
        Some(ToolContent::Text { text: last }) => {
            last.push('\n');
            last.push_str(&text);
        }
        _ => blocks.push(ToolContent::text(text)),
    }
}

/// Characters of text left for one result.
struct Budget {
    left: usize,
    cut: usize,
}

impl Budget {
    fn new(max: usize) -> Self {
        Self { left: max, cut: 0 }
    }

    /// The part of `text` that fits (None when nothing does).
    fn take(&mut self, text: &str) -> Option<String> {
        let n = text.chars().count();
        if n <= self.left {
            self.left -= n;
            return Some(text.to_owned());
        }
        let kept: String = text.chars().take(self.left).collect();
        self.cut += n - self.left;
        self.left = 0;
        (!kept.is_empty()).then_some(kept)
    }

    fn note(&self) -> Option<String> {
        (self.cut > 0).then(|| {
            format!(
                "[cut: {} more characters not shown; ask the tool for less, e.g. a narrower query]",
                self.cut
            )
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use rmcp::model::{ContentBlock as C, TextContent};
    use serde_json::json;

    use super::*;

    fn text(out: &ToolOutput) -> String {
        out.content.iter().filter_map(ToolContent::as_text).collect()
    }

    fn result(content: Vec<C>, is_error: Option<bool>) -> CallToolResult {
        let mut r: CallToolResult = serde_json::from_value(json!({"content": []})).unwrap();
        r.content = content;
        r.is_error = is_error;
        r
    }

    #[test]
    fn text_images_and_errors() {
        let out = convert(
            result(
                vec![
                    C::Text(TextContent::new("a")),
                    C::Text(TextContent::new("b")),
                    C::image("aGk=", "image/png"),
                ],
                None,
            ),
            100,
        );
        assert!(!out.is_error);
        assert_eq!(out.content.len(), 2);
        assert_eq!(text(&out), "a\nb");
        let err = convert(
            result(vec![C::Text(TextContent::new("refused"))], Some(true)),
            100,
        );
        assert!(err.is_error);
        assert_eq!(text(&err), "Error: refused");
        let empty = convert(result(vec![], Some(true)), 100);
        assert!(empty.is_error && text(&empty).starts_with("Error: "));
    }

    #[test]
    fn only_images_the_providers_accept_become_images() {
        let out = convert(
            result(
                vec![
                    C::image("aGk=", "IMAGE/PNG"),
                    C::image("aGk=", "image/svg+xml"),
                    C::image("aGk=", "image/tiff"),
                ],
                None,
            ),
            1_000,
        );
        assert_eq!(out.content.len(), 2, "one image, one note");
        assert!(matches!(
            &out.content[0],
            ToolContent::Image { source: ImageSource::Base64 { media_type, .. } } if media_type == "image/png"
        ));
        let note = text(&out);
        assert!(
            note.contains("image (image/svg+xml) not shown") && note.contains("image (image/tiff) not shown"),
            "{note}"
        );
    }

    #[test]
    fn long_text_is_cut_with_a_note() {
        let out = convert(result(vec![C::Text(TextContent::new("x".repeat(50)))], None), 10);
        let t = text(&out);
        assert!(t.starts_with("xxxxxxxxxx\n[cut: 40 more characters"), "{t}");
    }

    #[test]
    fn structured_content_when_there_is_no_content() {
        let mut r = result(vec![], None);
        r.structured_content = Some(json!({"seats": 120}));
        assert_eq!(text(&convert(r, 100)), "{\"seats\":120}");
    }

    #[test]
    fn arguments_must_be_objects() {
        assert!(arguments(json!({"a": 1})).is_ok());
        assert!(arguments(Value::Null).unwrap().is_empty());
        assert_eq!(arguments(json!("{\"a\": 1}")).unwrap()["a"], 1);
        assert!(arguments(json!([1])).unwrap_err().contains("an array"));
        assert!(arguments(json!("{oops")).is_err());
    }
}
