//! The names the model sees for MCP tools: `<server>__<tool>`, within the providers' tool-name charset
//! `[a-zA-Z0-9_-]{1,64}`.
//!
//! * Every character outside that set becomes `_` (`accounts.lookup` → `crm__accounts_lookup`).
//! * Server names are validated ([`validate_server_name`]): they contain no `__` and do not end with
//!   `_`, so the first `__` of a name always ends the prefix and two servers never produce the same
//!   name for the tools they do not shorten.
//! * A name that is too long, or that clashes after sanitizing with another tool of the same server
//!   or with a reserved name (the agent's own tools), is cut and gets `_` plus 8 hex digits of a
//!   hash of the server and original tool name. Which tool keeps the plain name is deterministic:
//!   tools whose names needed no change come first, then by original name.
//! * Built-in tools never contain `__`, so an MCP name never equals one; reserved names are checked
//!   anyway.

use std::collections::BTreeSet;

use super::error::McpError;

/// Separator between the server and the tool name.
pub const SEPARATOR: &str = "__";
/// Longest tool name providers accept.
pub const MAX_TOOL_NAME: usize = 64;
/// Longest server name.
pub const MAX_SERVER_NAME: usize = 32;
/// Length of the hash suffix (`_` + 8 hex digits).
const HASH_SUFFIX: usize = 9;

/// Check that `name` can prefix tool names: 1-32 ASCII letters, digits, `-` or `_`, starting with a
/// letter or digit, with no `__` and no trailing `_`.
pub fn validate_server_name(name: &str) -> Result<(), McpError> {
    let fail = |reason| {
        Err(McpError::InvalidName {
            name: name.to_owned(),
            reason,
        })
    };
    if name.is_empty() {
        return fail("it is empty");
    }
    if name.len() > MAX_SERVER_NAME {
        return fail("it is longer than 32 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return fail("it has a character other than a letter, digit, '-' or '_'");
    }
    if !name.as_bytes()[0].is_ascii_alphanumeric() {
        return fail("it does not start with a letter or digit");
    }
    if name.contains(SEPARATOR) || name.ends_with('_') {
        return fail(
            "'__' separates the server from the tool, so the name cannot contain it or end with '_'",
        );
    }
    Ok(())
}

/// `s` with every character outside `[a-zA-Z0-9_-]` replaced by `_`.
pub fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The names the model sees for `tools` (MCP names) of `server`, in the same order. Names are unique
/// among themselves and never in `reserved`; see the module docs for the rules.
pub fn assign_names(server: &str, tools: &[&str], reserved: &BTreeSet<String>) -> Vec<String> {
    let plain: Vec<String> = tools.iter().map(|t| format!("{server}{SEPARATOR}{t}")).collect();
    let mut order: Vec<usize> = (0..tools.len()).collect();
    // Names that need no change first, then by original name (then position, for duplicates).
    order.sort_by(|&a, &b| {
        let changed = |i: usize| sanitize(&plain[i]) != plain[i] || plain[i].len() > MAX_TOOL_NAME;
        (changed(a), tools[a], a).cmp(&(changed(b), tools[b], b))
    });
    let mut taken: BTreeSet<String> = BTreeSet::new();
    let mut names = vec![String::new(); tools.len()];
    for i in order {
        let base = sanitize(&plain[i]);
        let free = |n: &String| !taken.contains(n) && !reserved.contains(n);
        let mut name = base.clone();
        let mut round = 0_u32;
        while name.len() > MAX_TOOL_NAME || !free(&name) {
            name = with_hash(&base, short_hash(server, tools[i], round));
            round += 1;
        }
        taken.insert(name.clone());
        names[i] = name;
    }
    names
}

/// `base` cut to leave room for `_` + `hash` within [`MAX_TOOL_NAME`].
fn with_hash(base: &str, hash: String) -> String {
    // `base` is ASCII after sanitize, so byte cuts are character cuts.
    let keep = base.len().min(MAX_TOOL_NAME - HASH_SUFFIX);
    format!("{}_{hash}", &base[..keep])
}

/// 8 hex digits of FNV-1a over the server, the tool and a round number: stable across builds and
/// platforms (unlike `std`'s hasher).
fn short_hash(server: &str, tool: &str, round: u32) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let bytes = server
        .bytes()
        .chain([0])
        .chain(tool.bytes())
        .chain(round.to_le_bytes());
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{:08x}", (h ^ (h >> 32)) as u32)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn valid(name: &str) -> bool {
        name.len() <= MAX_TOOL_NAME
            && !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    }

    #[test]
    fn server_names() {
        for ok in ["crm", "CRM-2", "my_crm", "a", &"x".repeat(32)] {
            assert!(validate_server_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "a__b",
            "crm_",
            "_crm",
            "-crm",
            "c.rm",
            "crm/x",
            "ü",
            &"x".repeat(33),
        ] {
            assert!(validate_server_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn plain_names_are_prefixed() {
        let names = assign_names("crm", &["search_calls", "get-transcript"], &BTreeSet::new());
        assert_eq!(names, ["crm__search_calls", "crm__get-transcript"]);
    }

    #[test]
    fn sanitizing_collisions_are_resolved_deterministically() {
        let tools = ["a.b", "a_b", "a b"];
        let names = assign_names("crm", &tools, &BTreeSet::new());
        assert_eq!(names[1], "crm__a_b", "the name that needed no change keeps it");
        assert!(names[0].starts_with("crm__a_b_") && names[2].starts_with("crm__a_b_"));
        assert_ne!(names[0], names[2]);
        let mut reversed = tools;
        reversed.reverse();
        let again = assign_names("crm", &reversed, &BTreeSet::new());
        assert_eq!(
            again.iter().rev().collect::<Vec<_>>(),
            names.iter().collect::<Vec<_>>(),
            "independent of listing order"
        );
        assert!(names.iter().all(|n| valid(n)));
    }

    #[test]
    fn long_names_are_cut_with_a_hash() {
        let long = "x".repeat(100);
        let longer = format!("{long}y");
        let names = assign_names("crm", &[&long, &longer], &BTreeSet::new());
        assert!(names.iter().all(|n| valid(n)), "{names:?}");
        assert_eq!(names[0].len(), MAX_TOOL_NAME);
        assert_ne!(names[0], names[1]);
        assert_eq!(names, assign_names("crm", &[&long, &longer], &BTreeSet::new()));
    }

    #[test]
    fn reserved_names_are_avoided() {
        let reserved: BTreeSet<String> = ["crm__read_file".to_owned()].into();
        let names = assign_names("crm", &["read_file"], &reserved);
        assert_ne!(names[0], "crm__read_file");
        assert!(names[0].starts_with("crm__read_file_"));
    }

    #[test]
    fn servers_never_share_names() {
        // With `__` banned from server names, the prefix is unambiguous.
        let a = assign_names("a", &["b__c"], &BTreeSet::new());
        let b = assign_names("a-b", &["c"], &BTreeSet::new());
        assert_ne!(a, b);
        assert!(validate_server_name("a__b").is_err());
    }

    proptest::proptest! {
        #[test]
        fn names_are_always_valid_and_unique(tools in proptest::collection::vec(".{0,80}", 0..12)) {
            let refs: Vec<&str> = tools.iter().map(String::as_str).collect();
            let names = assign_names("srv", &refs, &BTreeSet::new());
            let unique: BTreeSet<&String> = names.iter().collect();
            proptest::prop_assert_eq!(unique.len(), names.len());
            for n in &names {
                proptest::prop_assert!(valid(n), "{}", n);
                proptest::prop_assert!(n.starts_with("srv__"));
            }
        }
    }
}
