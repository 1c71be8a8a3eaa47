//! [`ScopeId`]: a thread or user id that is safe to use as one path segment.
//!
//! Ids come from outside (a CLI flag, a request, a checkpoint) and end up inside paths and object
//! keys: `/threads/<id>`, `users/<id>/…`. So an id is checked once, when it is made, against a
//! deliberately small alphabet, and from then on it can only ever name exactly one segment below the
//! directory it is placed under ([`ScopeId::under`]): it cannot hold a `/`, a `\`, a `..`, a
//! percent-escape, a control character or any non-ASCII character, and it is short enough to be a
//! segment on every store.

use std::fmt;

use crate::path::VirtualPath;

/// Longest accepted id, in bytes.
const MAX_ID_BYTES: usize = 128;

/// What an id names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScopeKind {
    /// A conversation thread: its files live in their own scope.
    Thread,
    /// A user: their workspace is shared by their threads and invisible to other users.
    User,
}

impl fmt::Display for ScopeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Thread => "thread",
            Self::User => "user",
        })
    }
}

/// An id that is safe as one path segment / object-key segment: 1..=128 ASCII letters, digits, '-',
/// '_' or '.', not starting with '.'.
///
/// So `.`, `..` and hidden names (`.git`) are refused, while `a.b` and `a..b` (ordinary names) are
/// accepted. Ids are compared byte for byte: `A` and `a` are different ids, which a case-insensitive
/// file system (the macOS and Windows defaults) would store in the same directory, so on such a disk
/// pick ids that differ in more than case.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScopeId {
    kind: ScopeKind,
    id: String,
}

/// An id that [`ScopeId::new`] refused; names the id (as given) and what it was meant to identify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} id {id:?}: use 1-128 ASCII letters, digits, '-', '_' or '.', not starting with '.'")]
pub struct InvalidScopeId {
    /// What the id was meant to identify.
    pub kind: ScopeKind,
    /// The refused id, unchanged.
    pub id: String,
}

impl ScopeId {
    /// Check `id`; an id outside the alphabet (see [`ScopeId`]) is an [`InvalidScopeId`] naming it.
    /// Nothing is trimmed or normalized: the id is accepted as given or refused.
    pub fn new(kind: ScopeKind, id: impl Into<String>) -> Result<Self, InvalidScopeId> {
        let id = id.into();
        if is_valid(&id) {
            Ok(Self { kind, id })
        } else {
            Err(InvalidScopeId { kind, id })
        }
    }

    /// A thread id; see [`ScopeId::new`].
    pub fn thread(id: impl Into<String>) -> Result<Self, InvalidScopeId> {
        Self::new(ScopeKind::Thread, id)
    }

    /// A user id; see [`ScopeId::new`].
    pub fn user(id: impl Into<String>) -> Result<Self, InvalidScopeId> {
        Self::new(ScopeKind::User, id)
    }

    /// What the id names.
    pub fn kind(&self) -> ScopeKind {
        self.kind
    }

    /// The id, as given to [`ScopeId::new`].
    pub fn as_str(&self) -> &str {
        &self.id
    }

    /// `base/<id>` as a VirtualPath (the id is always exactly one segment below base).
    ///
    /// Never fails: only a `base` within 129 bytes of
    /// [`MAX_PATH_BYTES`](crate::path::MAX_PATH_BYTES) makes a result longer than a parsed path may
    /// be, and then the result is still `base/<id>` (it does not drop the id or reach elsewhere);
    /// a [`ScopedBackend`](crate::ScopedBackend) at such a prefix refuses every path with
    /// `InvalidPath`.
    pub fn under(&self, base: &VirtualPath) -> VirtualPath {
        let root = VirtualPath::root();
        // A valid id is a valid segment of at most 128 bytes, so this join cannot fail.
        let leaf = root
            .join(&self.id)
            .unwrap_or_else(|e| unreachable!("scope id {:?} is not a segment: {e}", self.id));
        // Rebasing from the root always succeeds: every path lies below it.
        leaf.rebase(&root, base)
            .unwrap_or_else(|| unreachable!("{leaf} is not below the root"))
    }
}

fn is_valid(id: &str) -> bool {
    (1..=MAX_ID_BYTES).contains(&id.len())
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::path::MAX_PATH_BYTES;

    fn p(s: &str) -> VirtualPath {
        VirtualPath::parse(s).unwrap()
    }

    #[test]
    fn accepts_plain_ids() {
        for id in [
            "a",
            "A",
            "0",
            "thread-42",
            "u_1",
            "a.b",
            "a..b",
            "x.",
            "-",
            "_",
            &"z".repeat(128),
        ] {
            let scope = ScopeId::thread(id).unwrap();
            assert_eq!((scope.as_str(), scope.kind()), (id, ScopeKind::Thread));
            assert_eq!(scope.under(&p("/threads")).as_str(), format!("/threads/{id}"));
        }
        let user = ScopeId::user("alice").unwrap();
        assert_eq!(user.kind(), ScopeKind::User);
        assert_eq!(user.under(&VirtualPath::root()), p("/alice"));
        assert_ne!(
            user,
            ScopeId::thread("alice").unwrap(),
            "the kind is part of the id"
        );
    }

    #[test]
    fn refuses_and_names_unsafe_ids() {
        let long = "z".repeat(129);
        let refused = [
            "",
            ".",
            "..",
            ".git",
            "a/b",
            "/a",
            "a\\b",
            "..\\x",
            "a\0b",
            "a\nb",
            " a",
            "a b",
            "%2e%2e",
            "a%2Fb",
            "ü",
            "ａ",
            "a\u{2215}b",
            "\u{FF0E}\u{FF0E}",
            "~",
            "c:",
            "a*",
            &long,
        ];
        for id in refused {
            let err = ScopeId::user(id).unwrap_err();
            assert_eq!(
                err,
                InvalidScopeId {
                    kind: ScopeKind::User,
                    id: id.to_owned()
                }
            );
            let message = err.to_string();
            assert!(
                message.starts_with(&format!("invalid user id {id:?}: ")),
                "{message}"
            );
        }
        assert!(
            ScopeId::thread("..")
                .unwrap_err()
                .to_string()
                .starts_with("invalid thread id \"..\"")
        );
    }

    #[test]
    fn an_id_under_a_base_at_the_limit_stays_one_segment_below_it() {
        let base = p(&vec!["b".repeat(200); 20].join("/"));
        assert_eq!(base.as_str().len(), MAX_PATH_BYTES - 76);
        let id = "x".repeat(128);
        let under = ScopeId::thread(id.as_str()).unwrap().under(&base);
        assert!(under.starts_with(&base));
        assert_eq!(under.depth(), base.depth() + 1);
        assert_eq!(under.file_name(), Some(id.as_str()));
        assert!(
            under.as_str().len() > MAX_PATH_BYTES,
            "longer than a parsed path may be"
        );
    }

    /// Strings an attacker would try, then anything at all (including very long strings).
    fn hostile_id() -> impl Strategy<Value = String> {
        let pieces = prop::sample::select(vec![
            "..", ".", "/", "\\", "\0", "%2e", "%2F", "%", "a", "Z", "9", "-", "_", "ü", "日本", "\u{FF0E}",
            "\u{2215}", "\u{202E}", " ", "\n", "~", ":",
        ]);
        prop_oneof![
            prop::collection::vec(pieces, 0..8).prop_map(|v| v.concat()),
            "[A-Za-z0-9._-]{0,140}",
            any::<String>(),
            (1usize..400).prop_map(|n| "a".repeat(n)),
        ]
    }

    fn base() -> impl Strategy<Value = VirtualPath> {
        "/([a-z.]{1,12}/){0,4}".prop_filter_map("a valid path", |s| VirtualPath::parse(&s).ok())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        #[test]
        fn an_id_is_refused_by_name_or_is_exactly_one_segment(
            id in hostile_id(),
            base in base(),
            user in any::<bool>(),
        ) {
            let kind = if user { ScopeKind::User } else { ScopeKind::Thread };
            // The documented rule, restated independently of `is_valid`.
            let allowed = !id.is_empty()
                && id.len() <= 128
                && !id.starts_with('.')
                && id.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
            match ScopeId::new(kind, id.clone()) {
                Err(err) => {
                    prop_assert!(!allowed, "refused a valid id {:?}", id);
                    prop_assert_eq!(&err.id, &id);
                    prop_assert_eq!(err.kind, kind);
                    let prefix = format!("invalid {kind} id {id:?}: ");
                    prop_assert!(err.to_string().starts_with(&prefix));
                }
                Ok(scope) => {
                    prop_assert!(allowed, "accepted {:?}", id);
                    prop_assert_eq!(scope.as_str(), id.as_str());
                    let under = scope.under(&base);
                    prop_assert!(under.starts_with(&base));
                    prop_assert_eq!(under.depth(), base.depth() + 1);
                    prop_assert_eq!(under.file_name(), Some(id.as_str()));
                    prop_assert_eq!(under.relative_to(&base), Some(id.as_str()));
                    // A parsed path of its own: nothing a later parse would read differently.
                    prop_assert_eq!(VirtualPath::parse(under.as_str()), Ok(under.clone()));
                }
            }
        }
    }
}
