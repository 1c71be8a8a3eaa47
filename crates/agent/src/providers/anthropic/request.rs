//! [`ModelRequest`] → Anthropic Messages request body.
//!
//! The mapping, in the order Anthropic builds its cache prefix (tools → system → messages):
//!
//! * `tools`: the request's tools, then the structured-output tool (when a
//!   [`ResponseFormat`](trellis_middleware::runtime::model::ResponseFormat) is set), then tools disclosed by
//!   [`Message::System`] messages, in conversation order, skipping names already listed.
//! * `system`: one text block per [`SystemBlock`](trellis_middleware::SystemBlock), with
//!   `cache_control` where the block has a breakpoint.
//! * `messages`: human and tool messages are `user` turns, AI messages `assistant` turns; consecutive
//!   turns of one role are merged into one message (so tool results of one step share a `user`
//!   message), with `tool_result` blocks kept before any other block of that message as the API
//!   requires. A [`Message::System`] has no Anthropic equivalent: its text becomes a `user` text block
//!   wrapped in `<system-reminder>` … `</system-reminder>`, its tools join `tools` (above).
//!   A message's breakpoint goes on its last block that can carry one (not on thinking blocks).
//!   Empty text blocks are dropped (the API rejects them).
//!
//! Cache breakpoints are capped at [`MAX_CACHE_BREAKPOINTS`]: the earliest ones (system blocks, then
//! messages) are kept, later ones dropped; and since the API wants 1-hour entries before 5-minute
//! ones, a 1-hour breakpoint after a 5-minute one is sent as a 5-minute one.

use std::borrow::Cow;
use std::collections::HashSet;

use serde_json::Value;
use trellis_middleware::runtime::message::{CacheTtl, ContentBlock, ImageSource};
use trellis_middleware::runtime::model::{ModelError, ToolChoice};
use trellis_middleware::{Message, ModelRequest};

use super::wire::{self, Block, Role};
use crate::providers::{f32_to_f64, system_reminder};

/// Most `cache_control` markers one Anthropic request may carry.
pub const MAX_CACHE_BREAKPOINTS: usize = 4;

/// How a [`ContentBlock::Reasoning`] signature marks an Anthropic `redacted_thinking` block: the
/// signature is this prefix followed by the block's opaque `data`. (The conversation vocabulary has one
/// reasoning block kind; the signature is opaque to everyone but the provider that wrote it.)
pub const REDACTED_THINKING_PREFIX: &str = "redacted_thinking:";

/// The description of the tool that carries structured output.
pub const STRUCTURED_OUTPUT_TOOL_DESCRIPTION: &str = "Give your final answer by calling this tool once, \
     with the answer as its input. The input must match the tool's schema.";

/// What building a request noticed, for logging.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BuildNotes {
    /// Breakpoints over the limit that were not sent.
    pub dropped_breakpoints: usize,
    /// 1-hour breakpoints sent as 5-minute ones because a 5-minute one came first.
    pub shortened_breakpoints: usize,
}

/// Hands out `cache_control` markers in request order.
struct Budget {
    left: usize,
    seen_five_minutes: bool,
    notes: BuildNotes,
}

impl Budget {
    fn take(&mut self, ttl: CacheTtl) -> Option<wire::CacheControl> {
        if self.left == 0 {
            self.notes.dropped_breakpoints += 1;
            return None;
        }
        self.left -= 1;
        let ttl = match ttl {
            CacheTtl::OneHour if self.seen_five_minutes => {
                self.notes.shortened_breakpoints += 1;
                CacheTtl::FiveMinutes
            }
            other => other,
        };
        if ttl == CacheTtl::FiveMinutes {
            self.seen_five_minutes = true;
        }
        Some(wire::CacheControl::new(ttl))
    }

    /// Put a marker on the last block of `blocks` that can carry one.
    fn mark_last(&mut self, blocks: &mut [Block<'_>], ttl: CacheTtl) {
        if let Some(slot) = blocks.iter_mut().rev().find_map(Block::cache_control_mut) {
            *slot = self.take(ttl);
        }
    }
}

/// Build the request body for `model`. Fails only when the structured-output tool's name collides
/// with a request tool.
pub(crate) fn build<'a>(
    request: &'a ModelRequest,
    model: &'a str,
    default_max_tokens: u32,
) -> Result<(wire::Request<'a>, BuildNotes), ModelError> {
    let mut budget = Budget {
        left: MAX_CACHE_BREAKPOINTS,
        seen_five_minutes: false,
        notes: BuildNotes::default(),
    };

    let system = request
        .system
        .iter()
        .filter(|b| !b.text.is_empty())
        .map(|b| Block::Text {
            text: Cow::Borrowed(b.text.as_str()),
            cache_control: b.cache_breakpoint.and_then(|ttl| budget.take(ttl)),
        })
        .collect();

    let mut messages: Vec<wire::Message<'a>> = Vec::new();
    let mut disclosed = Vec::new();
    for message in request.messages.iter() {
        let (role, mut blocks) = match message {
            Message::Human(m) => (Role::User, user_blocks(&m.content)),
            Message::Ai(m) => (Role::Assistant, assistant_blocks(&m.content)),
            Message::Tool(m) => (Role::User, vec![tool_result(&m.content, &m.call_id, m.is_error)]),
            Message::System(m) => {
                disclosed.extend(m.tools.iter());
                (Role::User, system_message_blocks(&m.content))
            }
        };
        if let Some(ttl) = message.meta().cache_breakpoint {
            budget.mark_last(&mut blocks, ttl);
        }
        push_merged(&mut messages, role, blocks);
    }

    let mut tools: Vec<wire::Tool<'a>> = Vec::new();
    let mut names: HashSet<&str> = HashSet::new();
    for spec in &request.tools {
        names.insert(spec.name.as_str());
        tools.push(wire::Tool {
            name: &spec.name,
            description: &spec.description,
            input_schema: &spec.parameters,
        });
    }
    let other_tools = !tools.is_empty() || !disclosed.is_empty();
    if let Some(format) = &request.response_format {
        if !names.insert(format.name.as_str()) {
            return Err(ModelError::BadRequest {
                message: format!(
                    "the response format `{}` has the name of a tool; structured output is sent as a \
                     tool of that name, so pick another name",
                    format.name
                ),
                http: None,
            });
        }
        tools.push(wire::Tool {
            name: &format.name,
            description: STRUCTURED_OUTPUT_TOOL_DESCRIPTION,
            input_schema: &format.schema,
        });
    }
    for spec in disclosed {
        if names.insert(spec.name.as_str()) {
            tools.push(wire::Tool {
                name: &spec.name,
                description: &spec.description,
                input_schema: &spec.parameters,
            });
        }
    }

    let tool_choice = match (&request.tool_choice, &request.response_format) {
        _ if tools.is_empty() => None,
        (Some(choice), _) => Some(map_choice(choice)),
        // Structured output alone: force the answer tool. With other tools the model must be free to
        // use them first, so it is only required to call *some* tool (the answer being one of them).
        (None, Some(format)) if !other_tools => Some(wire::ToolChoice::Tool { name: &format.name }),
        (None, Some(_)) => Some(wire::ToolChoice::Any),
        (None, None) => None,
    };

    let max_tokens = request.max_output_tokens.unwrap_or(default_max_tokens);
    let thinking = thinking(request, max_tokens)?;
    let body = wire::Request {
        model,
        max_tokens,
        system,
        messages,
        tools,
        tool_choice,
        temperature: request.temperature.map(f32_to_f64),
        top_p: request.top_p.map(f32_to_f64),
        stop_sequences: &request.stop_sequences,
        thinking,
    };
    Ok((body, budget.notes))
}

/// Least `budget_tokens` the Messages API accepts for extended thinking.
pub const MIN_THINKING_BUDGET: u32 = 1024;

/// The `thinking` setting, checked as the API checks it (at least [`MIN_THINKING_BUDGET`], below
/// `max_tokens`); `reasoning_effort` is OpenAI's and is refused, not dropped.
fn thinking(request: &ModelRequest, max_tokens: u32) -> Result<Option<wire::Thinking>, ModelError> {
    let refuse = |message: String| Err(ModelError::BadRequest { message, http: None });
    if let Some(effort) = request.reasoning_effort {
        return refuse(format!(
            "reasoning_effort ({}) is an OpenAI setting; Anthropic models take thinking_budget",
            effort.as_str()
        ));
    }
    let Some(budget) = request.thinking_budget else {
        return Ok(None);
    };
    if budget < MIN_THINKING_BUDGET {
        return refuse(format!(
            "thinking_budget {budget} is below Anthropic's minimum of {MIN_THINKING_BUDGET} tokens"
        ));
    }
    if budget >= max_tokens {
        return refuse(format!(
            "thinking_budget {budget} must be below the output cap (max_tokens {max_tokens})"
        ));
    }
    Ok(Some(wire::Thinking {
        kind: "enabled",
        budget_tokens: budget,
    }))
}

fn map_choice(choice: &ToolChoice) -> wire::ToolChoice<'_> {
    match choice {
        ToolChoice::Auto => wire::ToolChoice::Auto,
        ToolChoice::None => wire::ToolChoice::None,
        ToolChoice::Required => wire::ToolChoice::Any,
        ToolChoice::Tool { name } => wire::ToolChoice::Tool { name },
    }
}

/// Append `blocks` as a `role` turn, merging into the previous turn when it has the same role.
/// Tool results go after the previous turn's last tool result, ahead of any other block.
fn push_merged<'a>(messages: &mut Vec<wire::Message<'a>>, role: Role, blocks: Vec<Block<'a>>) {
    if blocks.is_empty() {
        return;
    }
    match messages.last_mut() {
        Some(last) if last.role == role => {
            for block in blocks {
                if block.is_tool_result() {
                    let at = last
                        .content
                        .iter()
                        .rposition(Block::is_tool_result)
                        .map_or(0, |i| i + 1);
                    last.content.insert(at, block);
                } else {
                    last.content.push(block);
                }
            }
        }
        _ => messages.push(wire::Message {
            role,
            content: blocks,
        }),
    }
}

fn image(source: &ImageSource) -> Block<'_> {
    let source = match source {
        ImageSource::Base64 { media_type, data } => wire::ImageSource::Base64 { media_type, data },
        ImageSource::Url { url } => wire::ImageSource::Url { url },
    };
    Block::Image {
        source,
        cache_control: None,
    }
}

/// Text and images (anything else is not user content and is skipped).
fn user_blocks(content: &[ContentBlock]) -> Vec<Block<'_>> {
    content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } if !text.is_empty() => Some(Block::text(text.as_str())),
            ContentBlock::Image { source } => Some(image(source)),
            _ => None,
        })
        .collect()
}

fn assistant_blocks(content: &[ContentBlock]) -> Vec<Block<'_>> {
    content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } if !text.is_empty() => Some(Block::text(text.as_str())),
            ContentBlock::Text { .. } | ContentBlock::Image { .. } => None,
            ContentBlock::ToolUse(call) => Some(Block::ToolUse {
                id: &call.id,
                name: &call.name,
                input: tool_input(&call.args),
                cache_control: None,
            }),
            ContentBlock::Reasoning { text, signature } => match signature.as_deref() {
                Some(sig) => match sig.strip_prefix(REDACTED_THINKING_PREFIX) {
                    Some(data) => Some(Block::RedactedThinking { data }),
                    None => Some(Block::Thinking {
                        thinking: text,
                        signature: sig,
                    }),
                },
                // Unsigned reasoning (from another provider) would be rejected: not sent.
                None => None,
            },
        })
        .collect()
}

/// `tool_use.input` must be an object; other values (arguments that were not JSON, kept as a string)
/// are wrapped as `{"_raw": value}`.
fn tool_input(args: &Value) -> Cow<'_, Value> {
    if args.is_object() {
        Cow::Borrowed(args)
    } else {
        let mut wrapped = serde_json::Map::new();
        wrapped.insert("_raw".to_owned(), args.clone());
        Cow::Owned(Value::Object(wrapped))
    }
}

/// A `tool_result`: content as a string when it is one text block, as blocks otherwise.
fn tool_result<'a>(content: &'a [ContentBlock], call_id: &'a str, is_error: bool) -> Block<'a> {
    let content = match content {
        [] => None,
        [ContentBlock::Text { text }] if text.is_empty() => None,
        [ContentBlock::Text { text }] => Some(wire::ToolResultContent::Text(Cow::Borrowed(text))),
        blocks => {
            let blocks = user_blocks(blocks);
            (!blocks.is_empty()).then_some(wire::ToolResultContent::Blocks(blocks))
        }
    };
    Block::ToolResult {
        tool_use_id: call_id,
        content,
        is_error,
        cache_control: None,
    }
}

/// A mid-conversation system message as user content: its text in one marked block, then images.
fn system_message_blocks(content: &[ContentBlock]) -> Vec<Block<'_>> {
    let text: String = content.iter().filter_map(ContentBlock::as_text).collect();
    let mut blocks = Vec::new();
    if !text.is_empty() {
        blocks.push(Block::text(system_reminder(&text)));
    }
    blocks.extend(content.iter().filter_map(|block| match block {
        ContentBlock::Image { source } => Some(image(source)),
        _ => None,
    }));
    blocks
}
