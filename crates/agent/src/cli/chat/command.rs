//! What a chat line means: a command (`/help`, `/skills`, …), a skill pin (`/NAME [text]`), or
//! text for the model. See `docs/cli.md` (`## trellis chat`) for the table a user reads.
//!
//! Commands win over skill names: a skill named like a command (`help`) cannot be pinned from
//! the chat line (the model can still read it when it needs it). An unknown
//! `/word` is [`Line::Unknown`] with the closest commands and skills, never text for the model;
//! `//text` sends `/text`.

use trellis_middleware::skills::SkillCatalog;

use crate::cli::pin;

/// The chat's own commands, with their one-line help.
pub const COMMANDS: [(&str, &str); 9] = [
    ("/skills [SEARCH]", "list the skills, or those matching SEARCH"),
    (
        "/NAME [TEXT]",
        "pin skill NAME for the next model call (and send TEXT, if given)",
    ),
    (
        "/reload",
        "pick up new or changed skills before the next model call",
    ),
    ("/memory", "show the memory files loaded into the system prompt"),
    (
        "/thread",
        "show this thread's id, its size and how to come back to it",
    ),
    (
        "/fork",
        "continue in a copy of this thread (the original stays as it is)",
    ),
    ("/help", "show this list"),
    ("/quit", "leave (also /exit or Ctrl-D); the thread is kept"),
    ("//TEXT", "send TEXT with its leading /"),
];

/// The command words (without the `/`).
const WORDS: [&str; 8] = [
    "skills", "reload", "memory", "thread", "fork", "help", "quit", "exit",
];

/// One line of input, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// Nothing but white space.
    Empty,
    /// Text for the model.
    Say(String),
    /// `/skills [SEARCH]`.
    Skills(Option<String>),
    /// `/reload`.
    Reload,
    /// `/memory`.
    Memory,
    /// `/thread`.
    Thread,
    /// `/fork`.
    Fork,
    /// `/help`.
    Help,
    /// `/quit` or `/exit`.
    Quit,
    /// `/NAME [TEXT]` for a skill NAME.
    Pin {
        /// The skill.
        skill: String,
        /// The text to send with it (may be empty: then the pin waits for the next message).
        text: String,
    },
    /// `/WORD` that is neither a command nor a skill.
    Unknown {
        /// The word.
        word: String,
        /// The closest commands (with their `/`) and skills.
        close: Vec<String>,
    },
}

/// Read `input` (one line, or several joined by the editor) against the skills of `catalog`.
pub fn parse(input: &str, catalog: &SkillCatalog) -> Line {
    let line = input.trim();
    if line.is_empty() {
        return Line::Empty;
    }
    if let Some(escaped) = line.strip_prefix("//") {
        return Line::Say(format!("/{escaped}"));
    }
    let Some((word, rest)) = pin::leading_word(line) else {
        return Line::Say(line.to_owned());
    };
    let rest = rest.to_owned();
    match word {
        "skills" => Line::Skills((!rest.is_empty()).then_some(rest)),
        "reload" => Line::Reload,
        "memory" => Line::Memory,
        "thread" => Line::Thread,
        "fork" => Line::Fork,
        "help" => Line::Help,
        "quit" | "exit" => Line::Quit,
        skill if catalog.get(skill).is_some() => Line::Pin {
            skill: skill.to_owned(),
            text: rest,
        },
        other => {
            let commands = WORDS.iter().copied();
            let skills = catalog.skills().iter().map(|s| s.name.as_str());
            let close = pin::close_names(other, commands.chain(skills))
                .into_iter()
                .map(|name| {
                    if WORDS.contains(&name.as_str()) {
                        format!("/{name} (command)")
                    } else {
                        format!("/{name} (skill)")
                    }
                })
                .collect();
            Line::Unknown {
                word: other.to_owned(),
                close,
            }
        }
    }
}

/// Every `/word` a line may start with: the commands, then the skills (for completion).
pub fn words(catalog: &SkillCatalog) -> Vec<String> {
    WORDS
        .iter()
        .map(|w| (*w).to_owned())
        .chain(catalog.skills().iter().map(|s| s.name.clone()))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::cli::pin::test_catalog as catalog;

    #[test]
    fn commands_pins_text_and_unknown_words() {
        let c = catalog(&["meeting-prep", "help"]);
        assert_eq!(parse("  ", &c), Line::Empty);
        assert_eq!(parse("hello /there", &c), Line::Say("hello /there".into()));
        assert_eq!(parse("//skills now", &c), Line::Say("/skills now".into()));
        assert_eq!(parse("/tmp/x is full", &c), Line::Say("/tmp/x is full".into()));
        assert_eq!(parse("/skills", &c), Line::Skills(None));
        assert_eq!(
            parse("/skills crm notes", &c),
            Line::Skills(Some("crm notes".into()))
        );
        assert_eq!(parse("/help", &c), Line::Help, "commands win over skill names");
        assert_eq!(parse("/exit", &c), Line::Quit);
        assert_eq!(
            parse("/meeting-prep Acme\nmore", &c),
            Line::Pin {
                skill: "meeting-prep".into(),
                text: "Acme\nmore".into()
            }
        );
        let Line::Unknown { word, close } = parse("/relaod", &c) else {
            panic!("unknown")
        };
        assert_eq!(word, "relaod");
        assert_eq!(close.first().map(String::as_str), Some("/reload (command)"));
        let Line::Unknown { close, .. } = parse("/meeting", &c) else {
            panic!("unknown")
        };
        assert!(close.contains(&"/meeting-prep (skill)".to_owned()), "{close:?}");
    }
}
