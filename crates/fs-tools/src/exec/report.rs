//! How an [`ExecOutput`] reads for the model: the output, then a footer of facts — exit code,
//! whether the output was cut and where the whole of it is, which files were saved and which were
//! not, and why.

use trellis_backend::sandbox::{ExecOutput, FileChangeKind, NotWrittenReason};

/// Most file paths listed per footer line; the rest are counted.
const LISTED: usize = 20;

/// The tool result text for `out`, killed at `timeout_secs` if it timed out.
pub(crate) fn render(out: &ExecOutput, timeout_secs: u64) -> String {
    let mut text = if out.output.is_empty() {
        "(no output)\n".to_owned()
    } else {
        let mut t = out.output.clone();
        if !t.ends_with('\n') {
            t.push('\n');
        }
        t
    };
    text.push_str("---\n");
    match (out.timed_out, out.exit_code) {
        (true, _) => text.push_str(&format!(
            "killed at the timeout ({timeout_secs} s), with every process it started\n"
        )),
        (false, Some(code)) => text.push_str(&format!("exit code {code}\n")),
        (false, None) => text.push_str("killed by a signal\n"),
    }
    if out.out_of_memory {
        text.push_str(
            "a process was killed: the command's processes together used more memory than its limit\n",
        );
    }
    if out.truncated {
        match &out.full_output_path {
            Some(path) => text.push_str(&format!(
                "output: {} bytes, cut in the middle; read {path} for all of it\n",
                out.output_bytes
            )),
            None => text.push_str(&format!(
                "output: {} bytes, cut in the middle\n",
                out.output_bytes
            )),
        }
    }
    if !out.changes.is_empty() {
        let items: Vec<String> = out
            .changes
            .iter()
            .map(|c| {
                let kind = match c.kind {
                    FileChangeKind::Created => "created",
                    FileChangeKind::Modified => "modified",
                    FileChangeKind::Deleted => "deleted",
                };
                format!("{} ({kind})", c.path)
            })
            .collect();
        text.push_str(&format!("saved: {}\n", list(&items)));
    }
    for n in out.not_written.iter().take(LISTED) {
        let why = match &n.reason {
            NotWrittenReason::Conflict { kept_at: Some(kept) } => {
                format!("changed by someone else while the command ran; the command's version is at {kept}")
            }
            NotWrittenReason::Conflict { kept_at: None } => {
                "changed by someone else while the command ran; left as they wrote it".to_owned()
            }
            NotWrittenReason::Denied => "writing there is not allowed".to_owned(),
            NotWrittenReason::Protected(what) => format!("protected: {what}; a command may not change it"),
            NotWrittenReason::NotARegularFile => "not a regular file (links are not saved)".to_owned(),
            NotWrittenReason::InvalidName => "the name is not a valid path".to_owned(),
            NotWrittenReason::Failed(why) => format!("the storage refused it: {why}"),
            NotWrittenReason::TooLarge(why) => format!("over a limit: {why}"),
        };
        text.push_str(&format!("not saved: {} — {why}\n", n.path));
    }
    if out.not_written.len() > LISTED {
        text.push_str(&format!("not saved: {} more\n", out.not_written.len() - LISTED));
    }
    text.truncate(text.trim_end().len());
    text
}

fn list(items: &[String]) -> String {
    let mut shown = items.iter().take(LISTED).cloned().collect::<Vec<_>>().join(", ");
    if items.len() > LISTED {
        shown.push_str(&format!(" and {} more", items.len() - LISTED));
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_killed_for_its_memory_says_so() {
        let mut out = ExecOutput::new("partial\n", None);
        out.out_of_memory = true;
        assert_eq!(
            render(&out, 60),
            "partial\n---\nkilled by a signal\n\
             a process was killed: the command's processes together used more memory than its limit"
        );
        out.out_of_memory = false;
        assert!(!render(&out, 60).contains("memory"));
    }
}
