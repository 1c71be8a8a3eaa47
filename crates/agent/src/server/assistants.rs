//! `GET /ok`, `GET /info` and the assistants: one "system" assistant per graph, with the
//! reference server's id scheme (`uuid5(6ba7b821-9dad-11d1-80b4-00c04fd430c8, graph_id)`), so a
//! client may name it by that UUID or by the graph id. Assistants cannot be created or changed.

use axum::Json;
use axum::extract::{Path, State};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::server::Shared;
use crate::server::error::{ApiError, ApiResult};
use crate::server::extract::{JsonBody, page};
use crate::server::threads::time;

/// The namespace of the system assistants' ids.
const ASSISTANT_NAMESPACE: Uuid = Uuid::from_u128(0x6ba7_b821_9dad_11d1_80b4_00c0_4fd4_30c8);

/// The system assistant id of `graph`.
pub fn assistant_id(graph: &str) -> Uuid {
    Uuid::new_v5(&ASSISTANT_NAMESPACE, graph.as_bytes())
}

/// The graph `id` names: a graph id, or the UUID of its system assistant. 404 otherwise.
pub fn resolve(server: &Shared, id: &str) -> ApiResult<String> {
    if server.graphs.contains_key(id) {
        return Ok(id.to_owned());
    }
    if let Ok(uuid) = Uuid::try_parse(id)
        && let Some(graph) = server.graphs.keys().find(|g| assistant_id(g) == uuid)
    {
        return Ok(graph.clone());
    }
    let shown: String = id.chars().take(64).collect();
    Err(ApiError::not_found(format!("assistant {shown:?}")))
}

fn assistant_json(server: &Shared, graph: &str) -> Value {
    json!({
        "assistant_id": assistant_id(graph),
        "graph_id": graph,
        "config": {},
        "context": {},
        "metadata": {"created_by": "system"},
        "version": 1,
        "name": graph,
        "description": null,
        "created_at": time(&server.started),
        "updated_at": time(&server.started),
    })
}

/// `GET /ok`.
pub async fn ok() -> Json<Value> {
    Json(json!({"ok": true}))
}

/// `GET /info`.
pub async fn info() -> Json<Value> {
    Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "flags": {"assistants": true, "crons": false, "langsmith": false},
        "host": {"kind": "trellis"},
    }))
}

/// `GET /assistants/{assistant_id}` (a UUID or a graph id).
pub async fn get_one(State(server): State<Shared>, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    let graph = resolve(&server, &id)?;
    Ok(Json(assistant_json(&server, &graph)))
}

/// `POST /assistants/search` body.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AssistantSearch {
    graph_id: Option<String>,
    name: Option<String>,
    #[serde(default)]
    metadata: Map<String, Value>,
    limit: Option<usize>,
    #[serde(default)]
    offset: usize,
    /// Accepted; assistants come in graph id order.
    #[serde(default)]
    #[allow(dead_code)]
    sort_by: Option<String>,
    /// Accepted; assistants come in graph id order.
    #[serde(default)]
    #[allow(dead_code)]
    sort_order: Option<String>,
    /// Accepted; every field is returned.
    #[serde(default)]
    #[allow(dead_code)]
    select: Option<Value>,
}

/// `POST /assistants/search`: the system assistants matching `graph_id`, `name` and `metadata`.
pub async fn search(
    State(server): State<Shared>,
    JsonBody(body): JsonBody<AssistantSearch>,
) -> ApiResult<Response> {
    let all: Vec<Value> = server
        .graphs
        .keys()
        .filter(|g| body.graph_id.as_ref().is_none_or(|want| want == *g))
        .filter(|g| body.name.as_ref().is_none_or(|want| want == *g))
        .map(|g| assistant_json(&server, g))
        .filter(|a| body.metadata.iter().all(|(k, v)| a["metadata"].get(k) == Some(v)))
        .collect();
    Ok(page(all, body.offset, body.limit.unwrap_or(10)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference server's id of the system assistant of graph `agent` (Python's
    /// `uuid.uuid5(uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8"), "agent")`).
    #[test]
    fn assistant_ids_match_the_reference_scheme() {
        assert_eq!(
            assistant_id("agent").to_string(),
            "fe096781-5601-53d2-b2f6-0d3403f7e9ca"
        );
    }
}
