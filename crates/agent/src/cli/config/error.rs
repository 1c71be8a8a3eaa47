//! [`AgentFileError`]: what is wrong with an agent file, naming the key and the line, with a
//! "did you mean" for unknown keys and values.

use std::path::{Path, PathBuf};

use super::restricted::Restricted;

/// A problem with the agent file or with the flags that override it.
#[derive(Debug, thiserror::Error)]
pub enum AgentFileError {
    /// The file could not be read (`--agent` naming a missing file, permissions).
    #[error("cannot read the agent file {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A key the agent file does not have.
    #[error("{}: unknown key `{key}`{}{}", path.display(), at(*line), hint(suggestion))]
    UnknownKey {
        /// The file.
        path: PathBuf,
        /// The key, dotted from the top (`model_settings.temprature`).
        key: String,
        /// Its line (1-based).
        line: Option<usize>,
        /// The closest known key.
        suggestion: Option<String>,
    },
    /// A key with a value that is not allowed (wrong type, out of range, unknown choice), or a
    /// file that is not TOML.
    #[error("{}: {}{}: {message}", path.display(), key.as_deref().map_or("".to_owned(), |k| format!("`{k}`")), at(*line))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The key, dotted from the top, when known.
        key: Option<String>,
        /// Its line (1-based).
        line: Option<usize>,
        /// What is wrong.
        message: String,
    },
    /// A command-line flag with a value that is not allowed.
    #[error("{flag}: {message}")]
    Flag {
        /// The flag.
        flag: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A `trellis.toml` found in a folder the user has not trusted sets keys that need trust
    /// (security review F1): nothing was sent or run.
    #[error("{}", untrusted(path, folder, keys, config.as_deref()))]
    Untrusted {
        /// The file.
        path: PathBuf,
        /// Its folder (canonical).
        folder: PathBuf,
        /// The keys that need trust.
        keys: Vec<Restricted>,
        /// The user config whose `trusted_projects` would trust the folder, if there is a home.
        config: Option<PathBuf>,
    },
    /// Neither `--model` nor the file's `model`.
    #[error("no model: pass --model, or set `model` in an agent file (trellis.toml or --agent FILE)")]
    NoModel,
}

fn untrusted(path: &Path, folder: &Path, keys: &[Restricted], config: Option<&Path>) -> String {
    let mut text = format!(
        "{} was found in {}, a folder you have not trusted, and sets keys that could send your keys \
         or files elsewhere or run commands on this host:\n",
        path.display(),
        folder.display()
    );
    for key in keys {
        text.push_str(&format!("  {key}\n"));
    }
    let list = match config {
        Some(config) => format!("trusted_projects in {}", config.display()),
        None => "trusted_projects in the user config (set HOME or TRELLIS_CONFIG_HOME)".to_owned(),
    };
    text.push_str(&format!(
        "Nothing was sent or run. If you trust this folder's files: run `trellis trust` in it (adds it \
         to {list}), or name the file explicitly with `--agent {}`; or override these keys with flags.",
        path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned()
        )
    ));
    text
}

fn at(line: Option<usize>) -> String {
    line.map_or(String::new(), |l| format!(" at line {l}"))
}

fn hint(suggestion: &Option<String>) -> String {
    suggestion
        .as_ref()
        .map_or(String::new(), |s| format!("; did you mean `{s}`?"))
}

/// The closest of `known` to `given`, when it is close enough to be a typo.
pub(crate) fn closest<'a>(given: &str, known: impl IntoIterator<Item = &'a str>) -> Option<String> {
    known
        .into_iter()
        .map(|k| (strsim::jaro_winkler(given, k), k))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k.to_owned())
}

/// The 1-based line of byte `offset` in `text`.
pub(crate) fn line_of_offset(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The table a line is in: the last `[header]` or `[[header]]` at or above `line` (1-based).
fn table_at(text: &str, line: usize) -> Option<String> {
    text.lines().take(line).filter_map(header).last()
}

fn header(line: &str) -> Option<String> {
    let t = line.trim();
    let inner = t
        .strip_prefix("[[")
        .and_then(|r| r.split_once("]]"))
        .map(|(h, _)| h);
    let inner = inner.or_else(|| {
        t.strip_prefix('[')
            .and_then(|r| r.split_once(']'))
            .map(|(h, _)| h)
    })?;
    Some(inner.trim().to_owned())
}

/// The key assigned on `line` (1-based): the text before `=`, dotted with its table.
fn key_at(text: &str, line: usize) -> Option<String> {
    let content = text.lines().nth(line.checked_sub(1)?)?;
    if content.trim_start().starts_with('[') {
        return None;
    }
    let (key, _) = content.split_once('=')?;
    let key = key.trim().trim_matches('"');
    Some(match table_at(text, line) {
        Some(table) => format!("{table}.{key}"),
        None => key.to_owned(),
    })
}

/// The line (1-based) where `key` is set in `table` (`""` for the top level); for an array of
/// tables, in its `index`-th entry. `None` when it is not written as `key = …` on a line of its own.
pub(crate) fn line_of_key(text: &str, table: &str, index: usize, key: &str) -> Option<usize> {
    let mut current = String::new();
    let mut seen = 0usize;
    for (i, line) in text.lines().enumerate() {
        if let Some(h) = header(line) {
            if h == table {
                seen += 1;
            }
            current = h;
            continue;
        }
        let here = current == table && (table.is_empty() || seen == index + 1);
        if here
            && let Some((k, _)) = line.split_once('=')
            && k.trim().trim_matches('"') == key
        {
            return Some(i + 1);
        }
    }
    None
}

/// Turn a TOML or serde error into one that names the key and the line, with a suggestion for
/// unknown keys and values.
pub(crate) fn from_toml(path: &Path, text: &str, err: &toml::de::Error) -> AgentFileError {
    let message = err.message().trim().to_owned();
    let line = err.span().map(|s| line_of_offset(text, s.start));
    let quoted: Vec<&str> = message.split('`').skip(1).step_by(2).collect();
    if let Some(rest) = message.strip_prefix("unknown field ")
        && let Some((given, known)) = quoted.split_first()
    {
        let _ = rest;
        let table = line.and_then(|l| table_at(text, l));
        let key = match &table {
            Some(t) => format!("{t}.{given}"),
            None => (*given).to_owned(),
        };
        return AgentFileError::UnknownKey {
            path: path.to_owned(),
            key,
            line,
            suggestion: closest(given, known.iter().copied()),
        };
    }
    let key = line.and_then(|l| key_at(text, l));
    let message = match (message.starts_with("unknown variant "), quoted.split_first()) {
        (true, Some((given, known))) => {
            let choices = known
                .iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", ");
            match closest(given, known.iter().copied()) {
                Some(s) => format!("unknown value `{given}`; did you mean `{s}`? (one of {choices})"),
                None => format!("unknown value `{given}` (one of {choices})"),
            }
        }
        _ => message,
    };
    AgentFileError::Invalid {
        path: path.to_owned(),
        key,
        line,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_found_in_their_tables() {
        let text = "model = \"m\"\n[sandbox]\nnetwork = true\n[[subagents]]\nname = \"a\"\n[[subagents]]\nname = \"b\"\n";
        assert_eq!(line_of_key(text, "", 0, "model"), Some(1));
        assert_eq!(line_of_key(text, "sandbox", 0, "network"), Some(3));
        assert_eq!(line_of_key(text, "subagents", 1, "name"), Some(7));
        assert_eq!(line_of_key(text, "sandbox", 0, "kind"), None);
        assert_eq!(key_at(text, 3).as_deref(), Some("sandbox.network"));
        assert_eq!(key_at(text, 2), None);
    }

    #[test]
    fn only_near_names_are_suggested() {
        assert_eq!(closest("modle", ["model", "memory"]).as_deref(), Some("model"));
        assert_eq!(closest("zzz", ["model", "memory"]), None);
    }
}
