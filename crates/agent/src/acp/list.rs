//! `session/list`: the Trellis threads of the state dir that an editor can load ([`list`]).
//!
//! A thread is listed when its run configuration was saved (`trellis acp`, `trellis run` and
//! `trellis chat` save one) with a working directory (`cwd` for `trellis acp`, `--workdir`
//! otherwise): ACP sessions always have a `cwd`. Threads without one are left out.
//!
//! * Order: the most recently active first (the thread's head checkpoint's modification time, or
//!   its saved configuration's when it has no checkpoint yet), then by id.
//! * `cwd` filter: only the threads whose working directory is exactly that path.
//! * Pages of [`PAGE`] sessions. `nextCursor` is opaque to the client: it names the last session
//!   of the page (its time and id), so a page goes on after it even when sessions were added in
//!   between. A cursor this function did not make is invalid params (-32602).
//! * `title`: the thread's first message from the person, on one line, cut at [`TITLE_CHARS`]
//!   characters; `updatedAt`: that time in RFC 3339, UTC.
//! * Bounds: at most [`MAX_THREADS`] saved configurations are read per call, each at most
//!   [`MAX_CONFIG_BYTES`]; only the page's threads are opened for their titles.

use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use agent_client_protocol::Error;
use agent_client_protocol::v1::schema::{ListSessionsResponse, SessionInfo};
use trellis_middleware::runtime::message::Message;
use trellis_middleware::{Checkpointer, ThreadId};

use crate::cli::config::RunConfig;
use crate::cli::state_dir::StateDir;

/// Sessions per page.
pub const PAGE: usize = 50;
/// Characters of a title.
pub const TITLE_CHARS: usize = 120;
/// Saved configurations read per call, at most.
pub const MAX_THREADS: usize = 100_000;
/// The largest saved configuration read.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;
const CURSOR_PREFIX: &str = "trellis1:";

/// One listed thread before its title is read.
struct Candidate {
    updated: u128,
    thread: ThreadId,
    cwd: PathBuf,
}

/// The page of sessions after `cursor` (the first page when `None`), only those rooted at `cwd`
/// when given.
pub async fn list(
    state_dir: &StateDir,
    cwd: Option<&Path>,
    cursor: Option<&str>,
) -> Result<ListSessionsResponse, Error> {
    let after = cursor.map(parse_cursor).transpose()?;
    let mut candidates = scan(state_dir, cwd);
    // Newest first, then by id: a total order the cursor can point into.
    candidates.sort_by(|a, b| {
        b.updated
            .cmp(&a.updated)
            .then_with(|| a.thread.as_str().cmp(b.thread.as_str()))
    });
    let start = match &after {
        None => 0,
        Some((updated, id)) => candidates
            .iter()
            .position(|c| c.updated < *updated || (c.updated == *updated && c.thread.as_str() > id.as_str()))
            .unwrap_or(candidates.len()),
    };
    let page: Vec<&Candidate> = candidates.iter().skip(start).take(PAGE).collect();
    let more = start + page.len() < candidates.len();
    let checkpointer = state_dir.checkpointer().map_err(internal)?;
    let mut sessions = Vec::with_capacity(page.len());
    for candidate in &page {
        let title = match checkpointer.load(&candidate.thread).await {
            Ok(Some(stored)) => title(stored.checkpoint.state.messages.iter()),
            _ => None,
        };
        sessions.push(
            SessionInfo::new(candidate.thread.to_string(), candidate.cwd.clone())
                .title(title)
                .updated_at(rfc3339(candidate.updated)),
        );
    }
    let next = match (more, page.last()) {
        (true, Some(last)) => Some(format!("{CURSOR_PREFIX}{}:{}", last.updated, last.thread)),
        _ => None,
    };
    Ok(ListSessionsResponse::new(sessions).next_cursor(next))
}

/// The threads with a saved configuration that has a working directory (`cwd` when given).
fn scan(state_dir: &StateDir, cwd: Option<&Path>) -> Vec<Candidate> {
    let Ok(entries) = std::fs::read_dir(state_dir.runs_dir()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten().take(MAX_THREADS) {
        let name = entry.file_name();
        let Some(thread) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".json"))
            .and_then(|id| ThreadId::new(id).ok())
        else {
            continue;
        };
        let path = entry.path();
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if !meta.is_file() || meta.len() > MAX_CONFIG_BYTES {
            continue;
        }
        let Some(workdir) = std::fs::read(&path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<RunConfig>(&bytes).ok())
            .and_then(|config| config.workdir)
            .filter(|w| w.is_absolute())
        else {
            continue;
        };
        if cwd.is_some_and(|cwd| cwd != workdir) {
            continue;
        }
        // The thread's last save: its file of steps, or the head of an older thread.
        let dir = state_dir.root().join("threads").join(thread.as_str());
        let updated = std::fs::metadata(dir.join("steps.log"))
            .or_else(|_| std::fs::metadata(dir.join("head.json")))
            .and_then(|m| m.modified())
            .or_else(|_| meta.modified())
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        out.push(Candidate {
            updated,
            thread,
            cwd: workdir,
        });
    }
    out
}

/// `trellis1:<nanos>:<thread id>`, or invalid params.
fn parse_cursor(cursor: &str) -> Result<(u128, String), Error> {
    let invalid = || {
        Error::invalid_params().data(serde_json::Value::String(format!(
            "not a cursor of session/list: {cursor:?}"
        )))
    };
    let rest = cursor.strip_prefix(CURSOR_PREFIX).ok_or_else(invalid)?;
    let (nanos, id) = rest.split_once(':').ok_or_else(invalid)?;
    let nanos = nanos.parse().map_err(|_| invalid())?;
    ThreadId::new(id).map_err(|_| invalid())?;
    Ok((nanos, id.to_owned()))
}

/// The first message from the person, on one line, cut at [`TITLE_CHARS`].
fn title<'a>(mut messages: impl Iterator<Item = &'a Message>) -> Option<String> {
    let first = messages.find(|m| matches!(m, Message::Human(_)) && m.source().is_none())?;
    let text = first.text().split_whitespace().collect::<Vec<_>>().join(" ");
    (!text.is_empty()).then(|| text.chars().take(TITLE_CHARS).collect())
}

fn rfc3339(nanos: u128) -> String {
    let time = UNIX_EPOCH + std::time::Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
    chrono::DateTime::<chrono::Utc>::from(time).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn internal(e: anyhow::Error) -> Error {
    Error::internal_error().data(serde_json::Value::String(format!("{e:#}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_foreign_ones_are_refused() {
        assert_eq!(
            parse_cursor("trellis1:17:t-abc").ok(),
            Some((17, "t-abc".to_owned()))
        );
        assert!(parse_cursor("17:t-abc").is_err());
        assert!(parse_cursor("trellis1:x:t-abc").is_err());
        assert!(parse_cursor("trellis1:17:../x").is_err());
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
    }
}
