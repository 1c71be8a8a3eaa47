//! What a tool call does to the world ([`SideEffects`]) and the stable key of one call
//! ([`idempotency_key`]): what a run resumed after a crash needs to decide whether a call that
//! started but left no recorded result may run again.

use serde::{Deserialize, Serialize};

/// What calling a tool does besides returning its result, as the tool declares it
/// ([`Tool::side_effects`](crate::Tool::side_effects)).
///
/// The agent loop records each call's result as it completes; when a run resumed after a crash
/// finds a call that started but has no recorded result, its class decides:
///
/// * [`ReadOnly`](Self::ReadOnly) and [`Idempotent`](Self::Idempotent) calls run again;
/// * an [`External`](Self::External) call is never run again blindly: the model is told its outcome
///   is unknown (or, when approvals are configured for the tool, a person decides).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SideEffects {
    /// Changes nothing (`ls`, `read_file`, `glob`, `grep`): running it twice is harmless.
    ReadOnly,
    /// Running it twice leaves the world as running it once did (`write_file` of the same
    /// content, `delete`); the second result may differ (the file exists, or is already gone).
    Idempotent,
    /// Anything else (`execute`, `edit_file`, a call to another service): running it twice may do
    /// twice what it does. The safe default for a tool that declares nothing.
    #[default]
    External,
}

impl SideEffects {
    /// True when a call that may already have run can run again without harm.
    pub fn may_repeat(self) -> bool {
        !matches!(self, Self::External)
    }

    /// The class's name: `read_only`, `idempotent` or `external`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadOnly => "read_only",
            Self::Idempotent => "idempotent",
            Self::External => "external",
        }
    }
}

/// The idempotency key of call `call_id` of thread `thread_id`: the same for every attempt of the
/// call (a run resumed after a crash, in any process), different for every other call of any
/// thread. `{thread_id}:{call_id}`, where every byte of the call id outside `[A-Za-z0-9._~-]` is
/// written `%XX` (so the key is printable ASCII, holds no `:` of its own and fits an environment
/// variable); thread ids are already restricted to such characters.
pub fn idempotency_key(thread_id: &str, call_id: &str) -> String {
    let mut key = String::with_capacity(thread_id.len() + 1 + call_id.len());
    key.push_str(thread_id);
    key.push(':');
    for byte in call_id.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'~' | b'-') {
            key.push(char::from(byte));
        } else {
            key.push_str(&format!("%{byte:02X}"));
        }
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_stable_printable_and_distinct() {
        assert_eq!(idempotency_key("t-1", "call_7"), "t-1:call_7");
        assert_eq!(idempotency_key("t-1", "a:b/\0é"), "t-1:a%3Ab%2F%00%C3%A9");
        // A call id cannot forge another thread's key.
        assert_ne!(idempotency_key("t-1", "x:y"), idempotency_key("t-1:x", "y"));
    }

    #[test]
    fn only_external_calls_may_not_repeat() {
        assert!(SideEffects::ReadOnly.may_repeat());
        assert!(SideEffects::Idempotent.may_repeat());
        assert!(!SideEffects::External.may_repeat());
        assert_eq!(SideEffects::default(), SideEffects::External);
    }
}
