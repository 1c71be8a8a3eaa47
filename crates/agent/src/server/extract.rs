//! The request side of the handlers: [`JsonBody`] (a JSON body whose every failure is a
//! `{"detail"}` 4xx, an empty body read as `{}`), [`parse_uuid`] for ids in paths and bodies, and
//! [`User`], who is asking.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::Value;
use uuid::Uuid;

use crate::server::error::ApiError;

/// A JSON request body deserialized into `T`. An empty body (some clients send none on POST) is
/// read as `{}`. A body over the router's limit is 413; one that is not JSON is 400; JSON of the
/// wrong shape (unknown field, wrong type, missing field) is 422, with serde's message.
#[derive(Debug, Clone)]
pub struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            let status = rejection.status();
            let status = if status.is_client_error() {
                status
            } else {
                StatusCode::BAD_REQUEST
            };
            ApiError::new(status, rejection.body_text())
        })?;
        let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &bytes
        };
        parse_json(text).map(JsonBody)
    }
}

/// `text` as a `T`: 400 when it is not JSON, 422 when the JSON has the wrong shape.
pub fn parse_json<T: DeserializeOwned>(text: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(text).map_err(|e| {
        use serde_json::error::Category;
        match e.classify() {
            Category::Data => ApiError::unprocessable(format!("invalid request body: {e}")),
            Category::Syntax | Category::Eof | Category::Io => {
                ApiError::new(StatusCode::BAD_REQUEST, format!("request body is not JSON: {e}"))
            }
        }
    })
}

/// `text` as a UUID (`what` names it in the 422 that a non-UUID gets, as the reference server
/// answers).
pub fn parse_uuid(what: &str, text: &str) -> Result<Uuid, ApiError> {
    Uuid::try_parse(text).map_err(|_| {
        let shown: String = text.chars().take(64).collect();
        ApiError::unprocessable(format!("invalid {what}: {shown:?} is not a UUID"))
    })
}

/// One page (`offset`, `limit`) of `all` as a JSON array, with the reference server's
/// `X-Pagination-Total` header and `X-Pagination-Next` (the next offset) when more remain.
pub fn page(all: Vec<Value>, offset: usize, limit: usize) -> Response {
    let total = all.len();
    let page: Vec<Value> = all.into_iter().skip(offset).take(limit).collect();
    let mut headers = HeaderMap::new();
    headers.insert("x-pagination-total", total.into());
    if offset + page.len() < total {
        headers.insert("x-pagination-next", (offset + page.len()).into());
    }
    (headers, Json(Value::Array(page))).into_response()
}

/// Who sent a request: the user id its API key maps to, or nobody when the server runs without
/// keys (then every thread belongs to the one anonymous owner). Put into the request's extensions
/// by the authentication layer ([`crate::server::auth`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct User(pub Option<String>);

impl User {
    /// The user id, `None` without keys.
    pub fn id(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn ids_must_be_uuids() {
        assert!(parse_uuid("thread_id", "1b4e28ba-2fa1-11d2-883f-0016d3cca427").is_ok());
        for bad in ["", "x", "../etc", "1b4e28ba-2fa1-11d2-883f-0016d3cca42"] {
            let e = parse_uuid("thread_id", bad).unwrap_err();
            assert_eq!(e.status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
        }
    }

    #[test]
    fn bodies_of_the_wrong_shape_are_422_and_non_json_400() {
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct B {
            a: Option<u32>,
        }
        assert!(parse_json::<B>(b"{\"a\": 1}").is_ok());
        assert_eq!(parse_json::<B>(b"{\"b\": 1}").unwrap_err().status, 422);
        assert_eq!(parse_json::<B>(b"{\"a\": \"x\"}").unwrap_err().status, 422);
        assert_eq!(parse_json::<B>(b"{\"a\": ").unwrap_err().status, 400);
        assert_eq!(parse_json::<B>(b"nope").unwrap_err().status, 400);
    }
}
