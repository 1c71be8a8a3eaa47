//! API keys ([`ApiKeys`], `trellis serve --api-keys FILE`) and the layer that maps each request's
//! key to a [`User`] ([`authenticate`]).
//!
//! A key is sent as `x-api-key: KEY` (what the LangGraph clients send) or `Authorization: Bearer
//! KEY`. With keys configured, a request without a known key is 401, except `GET /ok` (health
//! checks). Without keys every request is the anonymous user (`User(None)`).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use trellis_middleware::backend::ScopeId;

use crate::server::error::ApiError;
use crate::server::extract::User;

/// Longest key line accepted, in bytes (a key file is not a place for anything bigger).
const MAX_LINE: usize = 4096;

/// Keys and the users they belong to. Parsed from lines `USER_ID KEY` (whitespace between; blank
/// lines and lines starting with `#` are skipped). A user id follows `trellis run --user`'s rule
/// (1-128 ASCII letters, digits, `-`, `_`, `.`, not starting with `.`); a user may have several
/// keys; a key may not appear twice.
#[derive(Clone, Default)]
pub struct ApiKeys {
    by_key: HashMap<String, String>,
}

impl std::fmt::Debug for ApiKeys {
    // Never print the keys.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKeys")
            .field("keys", &self.by_key.len())
            .finish()
    }
}

/// Why a key file was refused: the line (1-based) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct KeyFileError {
    /// The line.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl ApiKeys {
    /// Parse a key file (see the type's docs). A file with no keys is an error: a server started
    /// with `--api-keys` must not silently accept nobody.
    pub fn parse(text: &str) -> Result<Self, KeyFileError> {
        let mut by_key = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let err = |message: &str| KeyFileError {
                line: i + 1,
                message: message.to_owned(),
            };
            if line.len() > MAX_LINE {
                return Err(err("line too long"));
            }
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(user), Some(key), None) = (words.next(), words.next(), words.next()) else {
                return Err(err("expected `USER_ID KEY`"));
            };
            if ScopeId::user(user).is_err() {
                return Err(err(
                    "the user id must be 1-128 ASCII letters, digits, '-', '_' or '.', not starting with '.'",
                ));
            }
            if by_key.insert(key.to_owned(), user.to_owned()).is_some() {
                return Err(err("this key is given twice"));
            }
        }
        if by_key.is_empty() {
            return Err(KeyFileError {
                line: 0,
                message: "no keys in the file".into(),
            });
        }
        Ok(Self { by_key })
    }

    /// The user `key` belongs to.
    pub fn user(&self, key: &str) -> Option<&str> {
        self.by_key.get(key).map(String::as_str)
    }
}

/// The key a request carries: `x-api-key`, else `Authorization: Bearer`.
fn key_of(headers: &HeaderMap) -> Option<&str> {
    if let Some(key) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        return Some(key.trim());
    }
    let auth = headers.get(axum::http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, key) = auth.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| key.trim())
}

/// The authentication layer: puts the request's [`User`] into its extensions, or answers 401.
pub async fn authenticate(
    State(keys): State<Option<Arc<ApiKeys>>>,
    mut req: Request,
    next: Next,
) -> Response {
    let user = match &keys {
        None => User(None),
        Some(_) if req.uri().path() == "/ok" => User(None),
        Some(keys) => match key_of(req.headers()).and_then(|k| keys.user(k)) {
            Some(user) => User(Some(user.to_owned())),
            None => {
                let detail = if key_of(req.headers()).is_some() {
                    "unknown API key"
                } else {
                    "missing API key: send it as x-api-key or Authorization: Bearer"
                };
                return ApiError::unauthorized(detail).into_response();
            }
        },
    };
    req.extensions_mut().insert(user);
    next.run(req).await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn key_files_map_keys_to_users() {
        let keys = ApiKeys::parse("# team\nalice k-a\n\nbob   k-b\nalice k-a2\n").unwrap();
        assert_eq!(keys.user("k-a"), Some("alice"));
        assert_eq!(keys.user("k-a2"), Some("alice"));
        assert_eq!(keys.user("k-b"), Some("bob"));
        assert_eq!(keys.user("nope"), None);
        assert!(!format!("{keys:?}").contains("k-a"), "keys are never printed");
    }

    #[test]
    fn bad_key_files_name_the_line() {
        assert_eq!(ApiKeys::parse("alice\n").unwrap_err().line, 1);
        assert_eq!(ApiKeys::parse("# c\nalice k x\n").unwrap_err().line, 2);
        assert_eq!(ApiKeys::parse("../x k\n").unwrap_err().line, 1);
        assert_eq!(ApiKeys::parse("a k\nb k\n").unwrap_err().line, 2);
        assert!(ApiKeys::parse("# nothing\n").is_err());
    }

    #[test]
    fn keys_come_from_either_header() {
        let mut h = HeaderMap::new();
        assert_eq!(key_of(&h), None);
        h.insert("authorization", "Bearer abc".parse().unwrap());
        assert_eq!(key_of(&h), Some("abc"));
        h.insert("x-api-key", "xyz".parse().unwrap());
        assert_eq!(key_of(&h), Some("xyz"));
        let mut h = HeaderMap::new();
        h.insert("authorization", "Basic abc".parse().unwrap());
        assert_eq!(key_of(&h), None);
    }
}
