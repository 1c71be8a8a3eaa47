//! Skills (a Trellis extension): `GET /threads/{id}/skills` lists the skills a run of that thread
//! sees for its user — the graph's skill sources, and with API keys the user's personal skills,
//! which win over a shared skill of the same name, as in the agent — and a run's
//! `input.pin_skills` pins skills for its next model call, as `/NAME` does in `trellis chat`.
//!
//! What a pin does is the skills middleware's ([`PIN_SKILLS`]): before the run's next model call
//! the pinned skill's body is added to the conversation, once per thread; a name the user cannot
//! see is ignored (logged). The page at `/` sends a pin for a message starting `/NAME` when NAME
//! is one of the listed skills.
//!
//! Bounds: a listing holds at most [`MAX_LIMIT`] skills (`limit`, default [`DEFAULT_LIMIT`]); a
//! search query is cut at [`MAX_QUERY`] characters; `pin_skills` takes at most [`MAX_PINS`]
//! names of 1 to [`MAX_NAME`] bytes.
//!
//! [`PIN_SKILLS`]: trellis_middleware::skills::PIN_SKILLS

use axum::Json;
use axum::extract::{Extension, Path, RawQuery, State};
use serde_json::{Value, json};
use trellis_middleware::skills::{SkillCatalog, SkillIndex};

use crate::server::Shared;
use crate::server::assistants::resolve;
use crate::server::error::{ApiError, ApiResult};
use crate::server::extract::{User, parse_uuid};
use crate::server::threads::ThreadRecord;

/// The key of a run's input that pins skills.
pub const PIN_KEY: &str = "pin_skills";
/// At most this many names in `pin_skills`.
pub const MAX_PINS: usize = 16;
/// A skill name is at most this many bytes (the Agent Skills limit).
pub const MAX_NAME: usize = 64;
/// Skills listed when `limit` is not given.
pub const DEFAULT_LIMIT: usize = 50;
/// The most skills one listing holds.
pub const MAX_LIMIT: usize = 500;
/// A search query is cut at this many characters.
pub const MAX_QUERY: usize = 256;

/// The names `input.pin_skills` pins (none when absent or null); a 422 when it is not a list of
/// at most [`MAX_PINS`] names of 1 to [`MAX_NAME`] bytes.
pub fn input_pins(input: &serde_json::Map<String, Value>) -> ApiResult<Vec<String>> {
    let bad = || {
        ApiError::unprocessable(format!(
            "input.{PIN_KEY} must be a list of at most {MAX_PINS} skill names of 1 to {MAX_NAME} bytes"
        ))
    };
    match input.get(PIN_KEY) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(names)) if names.len() <= MAX_PINS => names
            .iter()
            .map(|n| match n {
                Value::String(s) if !s.is_empty() && s.len() <= MAX_NAME => Ok(s.clone()),
                _ => Err(bad()),
            })
            .collect(),
        Some(_) => Err(bad()),
    }
}

/// The pins of a run's `input` as its kwargs keep it (checked when the run was created; a value
/// that does not check pins nothing).
pub fn pins_of(input: &Value) -> Vec<String> {
    input
        .as_object()
        .and_then(|i| input_pins(i).ok())
        .unwrap_or_default()
}

/// `GET /threads/{thread_id}/skills?q=&limit=&assistant_id=`: the skills the thread's runs see for
/// the caller, by name, or the best matches of `q` first. The graph is `assistant_id`,
/// else the thread's `graph_id` metadata, else the only graph served (422 when several are served
/// and neither names one). Another user's thread is a 404.
pub async fn list(
    State(server): State<Shared>,
    Extension(user): Extension<User>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> ApiResult<Json<Vec<Value>>> {
    let record = server.threads.get(&user, &parse_uuid("thread_id", &id)?)?;
    let params = Params::parse(query.as_deref())?;
    let graph = graph_of(&server, &record, params.assistant.as_deref())?;
    let Some(graph) = server.graphs.get(&graph) else {
        return Err(ApiError::not_found(format!("graph {graph:?}")));
    };
    let catalog = graph
        .skills(user.id())
        .await
        .map_err(|e| ApiError::internal("listing the skills", format!("{e:#}")))?;
    Ok(Json(listing(&catalog, params.query.as_deref(), params.limit)))
}

/// The query parameters of [`list`].
struct Params {
    query: Option<String>,
    limit: usize,
    assistant: Option<String>,
}

impl Params {
    fn parse(query: Option<&str>) -> ApiResult<Self> {
        let mut params = Self {
            query: None,
            limit: DEFAULT_LIMIT,
            assistant: None,
        };
        for (key, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            match &*key {
                "q" => {
                    let q: String = value.chars().take(MAX_QUERY).collect();
                    params.query = Some(q).filter(|q| !q.trim().is_empty());
                }
                "limit" => {
                    let n: usize = value
                        .parse()
                        .map_err(|_| ApiError::unprocessable("limit must be a non-negative integer"))?;
                    params.limit = n.min(MAX_LIMIT);
                }
                "assistant_id" => params.assistant = Some(value.into_owned()),
                _ => {}
            }
        }
        Ok(params)
    }
}

/// The graph a listing is for (see [`list`]).
fn graph_of(server: &Shared, record: &ThreadRecord, asked: Option<&str>) -> ApiResult<String> {
    if let Some(id) = asked {
        return resolve(server, id);
    }
    if let Some(Value::String(graph)) = record.metadata.get("graph_id")
        && server.graphs.contains_key(graph)
    {
        return Ok(graph.clone());
    }
    let mut graphs = server.graphs.keys();
    match (graphs.next(), graphs.next()) {
        (Some(only), None) => Ok(only.clone()),
        _ => Err(ApiError::unprocessable(
            "several graphs are served: name one with assistant_id",
        )),
    }
}

/// At most `limit` skills of `catalog`: all by name, or the matches of `query`, best first.
fn listing(catalog: &SkillCatalog, query: Option<&str>, limit: usize) -> Vec<Value> {
    let skills = catalog.skills();
    let chosen: Vec<usize> = match query {
        None => {
            let mut all: Vec<usize> = (0..skills.len()).collect();
            all.sort_by(|a, b| skills[*a].name.cmp(&skills[*b].name));
            all.truncate(limit);
            all
        }
        Some(q) => SkillIndex::new(catalog)
            .search(catalog, q, limit)
            .into_iter()
            .map(|hit| hit.index)
            .collect(),
    };
    chosen
        .into_iter()
        .filter_map(|i| skills.get(i))
        .map(|s| {
            let source = catalog
                .sources()
                .get(s.source)
                .map(|source| source.label.as_str());
            json!({
                "name": s.name,
                "description": s.description,
                "source": source.unwrap_or_default(),
                "path": s.path.to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pins(input: Value) -> ApiResult<Vec<String>> {
        input_pins(input.as_object().unwrap())
    }

    #[test]
    fn pins_are_a_short_list_of_names() {
        assert_eq!(pins(json!({})).unwrap(), Vec::<String>::new());
        assert_eq!(pins(json!({"pin_skills": null})).unwrap(), Vec::<String>::new());
        assert_eq!(pins(json!({"pin_skills": ["csv"]})).unwrap(), ["csv"]);
        let many: Vec<String> = (0..=MAX_PINS).map(|i| format!("s{i}")).collect();
        for bad in [
            json!("csv"),
            json!([""]),
            json!([1]),
            json!(["x".repeat(MAX_NAME + 1)]),
            json!(many),
        ] {
            assert_eq!(pins(json!({"pin_skills": bad})).unwrap_err().status, 422, "{bad}");
        }
    }

    #[test]
    fn limits_and_queries_are_bounded() {
        let p = Params::parse(Some("limit=100000&q=a%20b")).unwrap();
        assert_eq!(p.limit, MAX_LIMIT);
        assert_eq!(p.query.as_deref(), Some("a b"));
        let long = format!("q={}", "x".repeat(MAX_QUERY * 2));
        assert_eq!(
            Params::parse(Some(&long)).unwrap().query.unwrap().len(),
            MAX_QUERY
        );
        assert!(Params::parse(Some("q=%20")).unwrap().query.is_none());
        assert_eq!(Params::parse(Some("limit=-1")).err().unwrap().status, 422);
    }
}
