//! [`StderrTail`]: the last lines a stdio MCP server wrote to stderr, for error messages.
//!
//! A server's stderr is remote input to Trellis: each line is read with a cap
//! ([`STDERR_LINE_BYTES`]) and the rest of a longer line is read and dropped, never stored, so a
//! server that writes one endless line costs no memory (security review F14: `lines()` buffered it
//! whole before the 300-character cut).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, BufReader};

/// Lines of the server's stderr kept for error messages.
const STDERR_LINES: usize = 8;
/// Longest stderr line kept, in characters.
const STDERR_LINE_CHARS: usize = 300;
/// Longest stderr line read (and logged at debug level), in bytes; the rest of it is skipped.
const STDERR_LINE_BYTES: usize = 8 * 1024;

/// The last lines a stdio server wrote to stderr (each line is also logged at debug level).
#[derive(Debug, Default)]
pub(super) struct StderrTail {
    lines: Mutex<VecDeque<String>>,
}

impl StderrTail {
    /// Read `stderr` in the background until it ends, keeping the last lines.
    pub(super) fn follow(self: &Arc<Self>, stderr: impl AsyncRead + Unpin + Send + 'static, server: String) {
        let tail = self.clone();
        tokio::spawn(async move {
            let reader = BufReader::new(stderr);
            // A read error ends the tail like the end of the stream: there is nothing to report it to.
            let _ = for_each_line_capped(reader, STDERR_LINE_BYTES, |bytes| {
                let line = String::from_utf8_lossy(bytes);
                tracing::debug!(server = %server, "{line}");
                tail.keep(line.chars().take(STDERR_LINE_CHARS).collect());
            })
            .await;
        });
    }

    fn keep(&self, line: String) {
        let mut kept = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() == STDERR_LINES {
            kept.pop_front();
        }
        kept.push_back(line);
    }

    /// The kept lines, trimmed, blank ones left out, joined by ` | `.
    pub(super) fn text(&self) -> String {
        let kept = self.lines.lock().unwrap_or_else(|p| p.into_inner());
        kept.iter()
            .map(|l| l.trim())
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" | ")
    }
}

/// Call `each` with every line of `reader` (without its `\n`), each cut to at most `max` bytes. The
/// part of a line past `max` is read and dropped, so memory stays at `max` plus the reader's buffer
/// however long a line is. A last line without `\n` counts.
async fn for_each_line_capped<R: AsyncBufRead + Unpin>(
    mut reader: R,
    max: usize,
    mut each: impl FnMut(&[u8]),
) -> std::io::Result<()> {
    let mut line = Vec::with_capacity(max.min(1024));
    let mut started = false;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            if started {
                each(&line);
            }
            return Ok(());
        }
        let (part, ends_line, used) = match buf.iter().position(|&b| b == b'\n') {
            Some(at) => (&buf[..at], true, at + 1),
            None => (buf, false, buf.len()),
        };
        let room = max - line.len();
        line.extend_from_slice(&part[..part.len().min(room)]);
        started = true;
        reader.consume(used);
        if ends_line {
            each(&line);
            line.clear();
            started = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    async fn lines_of(reader: impl AsyncBufRead + Unpin, max: usize) -> Vec<Vec<u8>> {
        let mut lines = Vec::new();
        for_each_line_capped(reader, max, |line| lines.push(line.to_vec()))
            .await
            .unwrap_or_default();
        lines
    }

    #[tokio::test]
    async fn lines_are_split_at_newlines_and_cut_at_the_cap() {
        let text: &[u8] = b"one\n\ntwo three\nfour";
        let lines = lines_of(BufReader::with_capacity(3, text), 5).await;
        assert_eq!(
            lines,
            vec![b"one".to_vec(), b"".to_vec(), b"two t".to_vec(), b"four".to_vec()]
        );
    }

    #[tokio::test]
    async fn an_endless_line_is_read_through_without_being_kept() {
        // 64 MiB without a newline, then one more line: both arrive, the first cut to the cap.
        let endless = tokio::io::repeat(b'a').take(64 * 1024 * 1024);
        let reader = BufReader::new(endless.chain(&b"\nafter\n"[..]));
        let lines = lines_of(reader, STDERR_LINE_BYTES).await;
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].len(), STDERR_LINE_BYTES);
        assert_eq!(lines[1], b"after");
    }

    #[tokio::test]
    async fn the_tail_keeps_the_last_lines_cut_to_300_characters() {
        let tail = Arc::new(StderrTail::default());
        let mut text = String::new();
        for i in 0..20 {
            text.push_str(&format!("line {i}\n"));
        }
        text.push_str(&"x".repeat(100_000));
        let (mut writer, reader) = tokio::io::duplex(4096);
        tail.follow(reader, "test".into());
        tokio::io::AsyncWriteExt::write_all(&mut writer, text.as_bytes())
            .await
            .unwrap_or_default();
        drop(writer);
        for _ in 0..200 {
            if tail.text().ends_with('x') {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let text = tail.text();
        let kept: Vec<&str> = text.split(" | ").collect();
        assert_eq!(kept.len(), STDERR_LINES);
        assert_eq!(kept[0], "line 13");
        assert_eq!(kept[STDERR_LINES - 1], "x".repeat(STDERR_LINE_CHARS));
    }
}
