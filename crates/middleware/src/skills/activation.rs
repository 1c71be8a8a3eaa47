//! How skills become active in a conversation: a successful `read_file` of a skill's `SKILL.md`,
//! or a pin, which adds the skill's body as a tagged message.

use super::SkillMetadata;
use super::catalog::SkillCatalog;
use super::middleware::PINNED_SOURCE;
use crate::message::{ContentBlock, HumanMessage, Message, MessageMeta};

/// The message a pinned skill adds.
pub(super) fn pinned_message(skill: &SkillMetadata, body: &str) -> Message {
    let attr = |text: &str| super::render::escape_untrusted(text).replace('"', "&quot;");
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
pub(super) fn activations(
    messages: &crate::messages::Messages,
    from: usize,
    visible: &SkillCatalog,
) -> Vec<SkillMetadata> {
    let mut out: Vec<SkillMetadata> = Vec::new();
    for (i, message) in messages.iter().enumerate().skip(from.min(messages.len())) {
        let Some(ai) = message.as_ai() else { continue };
        for call in ai.calls().filter(|c| c.name == "read_file") {
            let Some(path) = call.file_path() else { continue };
            let Some(skill) = visible.skills().iter().find(|s| s.path == path) else {
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
