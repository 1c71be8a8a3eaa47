//! Capturing a command's output under a cap: the start and the end are kept, the middle is left
//! out with a marker, and the whole of it (up to its own cap) goes to a spill file on local disk, so
//! a command printing 200 MB costs a bounded amount of memory.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Seek, Write};

/// A command's output as it arrives.
#[derive(Debug)]
pub(crate) struct Capture {
    cap: usize,
    spill_cap: u64,
    /// Everything, while the output fits in `cap`; afterwards the first `cap / 2` bytes.
    head: Vec<u8>,
    /// The last `cap - cap / 2` bytes, once the output no longer fits.
    tail: VecDeque<u8>,
    total: u64,
    /// True once the output did not fit in `cap`.
    cut: bool,
    spill: Option<File>,
    spilled: u64,
    spill_error: Option<std::io::Error>,
}

/// The captured output, cut as needed.
#[derive(Debug)]
pub(crate) struct Captured {
    /// Head, marker and tail (or the whole output).
    pub head: String,
    /// The tail, when cut (the marker goes between `head` and `tail`).
    pub tail: Option<String>,
    /// Bytes written in all.
    pub total: u64,
    /// The spill file (rewound), holding up to the spill cap, when the output was cut.
    pub spill: Option<(File, u64)>,
}

impl Captured {
    /// The output for the model, with `note` (where the whole output is) in the marker line.
    pub fn text(&self, note: Option<&str>) -> String {
        match &self.tail {
            None => self.head.clone(),
            Some(tail) => {
                let kept = (self.head.len() + tail.len()) as u64;
                let left_out = self.total.saturating_sub(kept);
                let mut out = String::with_capacity(self.head.len() + tail.len() + 160);
                out.push_str(&self.head);
                if !out.ends_with('\n') {
                    out.push('\n');
                }
                out.push_str(&format!("[... {left_out} bytes of output left out"));
                if let Some(note) = note {
                    out.push_str("; ");
                    out.push_str(note);
                }
                out.push_str(" ...]\n");
                out.push_str(tail);
                out
            }
        }
    }
}

impl Capture {
    /// Keep at most `cap` bytes for the result (at least 64), and up to `spill_cap` in the spill
    /// file.
    pub fn new(cap: usize, spill_cap: u64) -> Self {
        Self {
            cap: cap.max(64),
            spill_cap,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
            cut: false,
            spill: None,
            spilled: 0,
            spill_error: None,
        }
    }

    /// Take the next bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        if !self.cut {
            if self.head.len() + bytes.len() <= self.cap {
                self.head.extend_from_slice(bytes);
                return;
            }
            // The output no longer fits: from here on, keep the first half and a moving tail.
            self.cut = true;
            self.start_spill();
            self.write_spill(bytes);
            let mut all = std::mem::take(&mut self.head);
            all.extend_from_slice(bytes);
            let rest = all.split_off((self.cap / 2).min(all.len()));
            self.head = all;
            self.tail.extend(rest);
        } else {
            self.write_spill(bytes);
            self.tail.extend(bytes.iter().copied());
        }
        let tail_cap = self.cap - self.cap / 2;
        if self.tail.len() > tail_cap {
            let excess = self.tail.len() - tail_cap;
            self.tail.drain(..excess);
        }
    }

    fn start_spill(&mut self) {
        match tempfile::tempfile() {
            Ok(file) => {
                self.spill = Some(file);
                let head = std::mem::take(&mut self.head);
                self.write_spill(&head);
                self.head = head;
            }
            Err(e) => self.spill_error = Some(e),
        }
    }

    fn write_spill(&mut self, bytes: &[u8]) {
        let Some(file) = self.spill.as_mut() else { return };
        let room = self.spill_cap.saturating_sub(self.spilled);
        let take = bytes.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        if take == 0 {
            return;
        }
        match file.write_all(&bytes[..take]) {
            Ok(()) => self.spilled += take as u64,
            Err(e) => self.spill_error = Some(e),
        }
    }

    /// Stop capturing.
    pub fn finish(mut self) -> Captured {
        if !self.cut {
            return Captured {
                head: String::from_utf8_lossy(&self.head).into_owned(),
                tail: None,
                total: self.total,
                spill: None,
            };
        };
        let file = self.spill.take();
        let tail: Vec<u8> = self.tail.into_iter().collect();
        // Cut at line breaks where that keeps at least half of each end, else at characters.
        let head = &self.head[..utf8_prefix(&self.head)];
        let head = match head.iter().rposition(|b| *b == b'\n') {
            Some(i) if i + 1 >= head.len() / 2 => &head[..=i],
            _ => head,
        };
        let tail = &tail[utf8_suffix_start(&tail)..];
        let tail = match tail.iter().position(|b| *b == b'\n') {
            Some(i) if i < tail.len() / 2 => &tail[i + 1..],
            _ => tail,
        };
        let spill = match (self.spill_error, file) {
            (None, Some(mut file)) => file.rewind().ok().map(|()| (file, self.spilled)),
            _ => None,
        };
        Captured {
            head: String::from_utf8_lossy(head).into_owned(),
            tail: Some(String::from_utf8_lossy(tail).into_owned()),
            total: self.total,
            spill,
        }
    }
}

/// Length of `bytes` without a UTF-8 sequence cut at its end.
fn utf8_prefix(bytes: &[u8]) -> usize {
    match std::str::from_utf8(bytes) {
        Ok(_) => bytes.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => bytes.len(),
    }
}

/// Where `bytes` starts once continuation bytes of a sequence cut at its start are dropped.
fn utf8_suffix_start(bytes: &[u8]) -> usize {
    bytes.iter().take(3).take_while(|b| (**b & 0xC0) == 0x80).count()
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn short_output_is_kept_whole() {
        let mut c = Capture::new(100, 1000);
        c.push(b"hello ");
        c.push(b"world\n");
        let got = c.finish();
        assert_eq!(got.text(None), "hello world\n");
        assert!(got.spill.is_none());
        assert_eq!(got.total, 12);
    }

    #[test]
    fn long_output_keeps_both_ends_and_spills_the_whole() {
        let mut c = Capture::new(64, 1 << 20);
        for i in 0..1000 {
            c.push(format!("line {i}\n").as_bytes());
        }
        let got = c.finish();
        let text = got.text(Some("see /x"));
        assert!(text.starts_with("line 0\nline 1\n"), "{text}");
        assert!(text.ends_with("line 999\n"), "{text}");
        assert!(text.contains("bytes of output left out; see /x"), "{text}");
        let (mut file, len) = got.spill.expect("spilled");
        let mut all = String::new();
        file.read_to_string(&mut all).expect("read spill");
        assert_eq!(all.len() as u64, len);
        assert_eq!(all.lines().count(), 1000);
    }

    #[test]
    fn a_first_chunk_larger_than_the_cap_still_keeps_the_start() {
        let mut c = Capture::new(64, 1 << 20);
        let big: String = (0..100).map(|i| format!("{i:03}\n")).collect();
        c.push(big.as_bytes());
        let got = c.finish();
        assert!(got.head.starts_with("000\n001\n"), "{}", got.head);
        assert!(got.tail.as_deref().is_some_and(|t| t.ends_with("099\n")));
    }

    #[test]
    fn the_spill_stops_at_its_cap_and_cuts_never_split_a_character() {
        let mut c = Capture::new(64, 100);
        for _ in 0..100 {
            c.push("é".repeat(10).as_bytes());
        }
        let got = c.finish();
        assert!(!got.head.contains('\u{FFFD}') && !got.tail.as_deref().unwrap_or("").contains('\u{FFFD}'));
        assert_eq!(got.spill.as_ref().map(|s| s.1), Some(100));
        assert_eq!(got.total, 2000);
    }
}
