//! How skills become active in a conversation — a successful `read_file` of a skill's `SKILL.md`,
//! or a pin, which adds the skill's body as a tagged message — and how the tools they bind are
//! shown to models that take tools mid-conversation.

use std::sync::Arc;

use crate::runtime::message::{ContentBlock, HumanMessage, Message, MessageMeta, SystemMessage};
use crate::runtime::model::{ModelRequest, ToolSpec};
use crate::skills::SkillMetadata;
use crate::skills::catalog::layers::LayeredCatalog;
use crate::skills::middleware::{DISCLOSURE_SOURCE, Disclosure, PINNED_SOURCE};

/// Move the `disclosed` tools out of the request's tool list into system messages placed where
/// each was disclosed (one message per position), so nothing before that point changes.
pub(in crate::skills) fn disclose_in_messages(request: &mut ModelRequest, disclosed: &[Disclosure]) {
    let mut groups: Vec<(usize, Vec<Arc<ToolSpec>>)> = Vec::new();
    for d in disclosed {
        if let Some(pos) = request.tools.iter().position(|t| t.name == d.tool) {
            let spec = request.tools.remove(pos);
            match groups.iter_mut().find(|(at, _)| *at == d.at_message) {
                Some((_, specs)) => specs.push(spec),
                None => groups.push((d.at_message, vec![spec])),
            }
        }
    }
    groups.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
    for (at, specs) in groups {
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        let message = Message::System(SystemMessage {
            content: vec![ContentBlock::text(format!(
                "These tools are now available: {}.",
                names.join(", ")
            ))],
            tools: specs.iter().map(|s| (**s).clone()).collect(),
            meta: MessageMeta {
                source: Some(DISCLOSURE_SOURCE.to_owned()),
                ..MessageMeta::default()
            },
        });
        let at = at.min(request.messages.len());
        request.messages.insert(at, message);
    }
}

/// The message a pinned skill adds.
pub(in crate::skills) fn pinned_message(skill: &SkillMetadata, body: &str) -> Message {
    let attr = |text: &str| crate::untrusted::escape_untrusted(text).replace('"', "&quot;");
    let text = format!(
        "<pinned_skill name=\"{}\" path=\"{}\">\nThe user asked for this skill; follow it.\n\n{}\n</pinned_skill>",
        attr(&skill.name),
        attr(skill.path.as_str()),
        body.trim_end()
    );
    Message::Human(HumanMessage {
        content: vec![ContentBlock::text(text)],
        meta: MessageMeta {
            source: Some(PINNED_SOURCE.to_owned()),
            display_name: Some(format!("/{}", skill.name)),
            ..MessageMeta::default()
        },
    })
}

/// Skills activated by messages from `from` on: a `read_file` call naming a skill's `SKILL.md` whose
/// result is not an error (a partial read counts).
pub(in crate::skills) fn activations(
    messages: &crate::runtime::message_list::Messages,
    from: usize,
    visible: &LayeredCatalog,
) -> Vec<SkillMetadata> {
    let mut out: Vec<SkillMetadata> = Vec::new();
    for (i, message) in messages.iter().enumerate().skip(from.min(messages.len())) {
        let Some(ai) = message.as_ai() else { continue };
        for call in ai.calls().filter(|c| c.name == "read_file") {
            let Some(path) = call.file_path() else { continue };
            let Some((_, skill)) = visible.by_path(&path) else {
                continue;
            };
            let succeeded = messages
                .iter()
                .skip(i + 1)
                .filter_map(|m| m.as_tool())
                .any(|t| t.call_id == call.id && !t.is_error);
            if succeeded && !out.iter().any(|s| s.name == skill.name) {
                out.push(skill.clone());
            }
        }
    }
    out
}
