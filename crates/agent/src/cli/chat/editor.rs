//! The chat's line editor, on `rustyline`: history (kept in the state dir), `/` completion of
//! commands and skill names, multi-line input (end a line with `\` to go on on the next one),
//! and the approval prompt ([`Asker`]) with the arguments to edit in place.
//!
//! While the editor reads, the terminal is in raw mode: Ctrl-C is a key, not a signal. At the
//! chat prompt it clears the line; at an approval question it leaves the calls undecided.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::DefaultHistory;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Context, Editor, Helper};

use crate::cli::approvals::Asker;

/// What a read gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// A line (continuation lines joined with `\n`).
    Line(String),
    /// Ctrl-C.
    Interrupted,
    /// Ctrl-D on an empty line, or the end of input.
    End,
}

/// Completion and multi-line rules.
#[derive(Debug, Default)]
struct ChatHelper {
    /// The words a `/` completes to.
    words: Arc<Mutex<Vec<String>>>,
}

impl Completer for ChatHelper {
    type Candidate = Pair;

    fn complete(&self, line: &str, pos: usize, _cx: &Context<'_>) -> rustyline::Result<(usize, Vec<Pair>)> {
        let before = &line[..pos];
        let Some(word) = before
            .strip_prefix('/')
            .filter(|w| !w.contains(char::is_whitespace))
        else {
            return Ok((pos, Vec::new()));
        };
        let words = self.words.lock().map(|w| w.clone()).unwrap_or_default();
        let found = words
            .into_iter()
            .filter(|w| w.starts_with(word))
            .map(|w| Pair {
                display: format!("/{w}"),
                replacement: format!("/{w} "),
            })
            .collect();
        Ok((0, found))
    }
}

impl Hinter for ChatHelper {
    type Hint = String;
}

impl Highlighter for ChatHelper {}

impl Validator for ChatHelper {
    fn validate(&self, cx: &mut ValidationContext) -> rustyline::Result<ValidationResult> {
        Ok(if cx.input().ends_with('\\') {
            ValidationResult::Incomplete
        } else {
            ValidationResult::Valid(None)
        })
    }
}

impl Helper for ChatHelper {}

/// The line editor of one chat session.
pub struct LineEditor {
    editor: Editor<ChatHelper, DefaultHistory>,
    words: Arc<Mutex<Vec<String>>>,
    history: Option<PathBuf>,
}

impl std::fmt::Debug for LineEditor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineEditor")
            .field("history", &self.history)
            .finish()
    }
}

impl LineEditor {
    /// An editor whose history is read from and appended to `history` (when given).
    pub fn new(history: Option<PathBuf>) -> Result<Self> {
        let helper = ChatHelper::default();
        let words = helper.words.clone();
        let mut editor = Editor::new()?;
        editor.set_helper(Some(helper));
        if let Some(path) = &history {
            // A missing or unreadable history file is an empty history.
            let _ = editor.load_history(path);
        }
        Ok(Self {
            editor,
            words,
            history,
        })
    }

    /// The words `/` completes to from now on.
    pub fn set_words(&mut self, words: Vec<String>) {
        if let Ok(mut w) = self.words.lock() {
            *w = words;
        }
    }

    /// Read one input (with `initial` text to edit), keeping it in the history when `remember`.
    pub fn read(&mut self, prompt: &str, initial: &str, remember: bool) -> Result<Read> {
        match self.editor.readline_with_initial(prompt, (initial, "")) {
            Ok(line) => {
                if remember && !line.trim().is_empty() {
                    let _ = self.editor.add_history_entry(line.as_str());
                    if let Some(path) = &self.history {
                        let _ = self.editor.append_history(path);
                    }
                }
                Ok(Read::Line(join_continued(&line)))
            }
            Err(ReadlineError::Interrupted) => Ok(Read::Interrupted),
            Err(ReadlineError::Eof) => Ok(Read::End),
            Err(e) => Err(e.into()),
        }
    }
}

/// Lines ended by `\` joined to the next one with a newline.
fn join_continued(text: &str) -> String {
    text.replace("\\\n", "\n")
}

impl Asker for LineEditor {
    fn say(&mut self, text: &str) -> Result<()> {
        eprintln!("{text}");
        Ok(())
    }

    fn ask(&mut self, question: &str, initial: &str) -> Result<Option<String>> {
        Ok(match self.read(question, initial, false)? {
            Read::Line(line) => Some(line.trim().to_owned()),
            Read::Interrupted | Read::End => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continued_lines_join_with_newlines() {
        assert_eq!(join_continued("a\\\nb\\\nc"), "a\nb\nc");
        assert_eq!(join_continued("a \\ b"), "a \\ b");
    }
}
