//! `GET /openapi.json`: the OpenAPI 3.1 document of the routes, built from the same table the
//! router is built from ([`crate::server::routes`]), so a route cannot be served undocumented or
//! documented unserved.
//!
//! Request bodies are the handlers' own `Deserialize` types, their JSON Schemas derived by
//! schemars (already a dependency, for the agent file's schema; OpenAPI 3.1 takes JSON Schema
//! 2020-12 as it is). Responses are built as JSON by the handlers, so their shapes are the
//! schema-only types of [`crate::server::shapes`]; schemathesis checks every response against
//! them (`tests/agent/server/openapi.rs`). Operations Trellis adds to the Agent Server API carry
//! `x-trellis-extension: true`.

use axum::http::Method;
use axum::routing::MethodRouter;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::{JsonSchema, Schema};
use serde_json::{Map, Value, json};

use crate::server::Shared;
use crate::server::shapes::ErrorBody;

/// A schema, made when the document is built.
type MakeSchema = fn(&mut SchemaGenerator) -> Schema;

/// What a route answers when it succeeds.
#[derive(Debug, Clone, Copy)]
enum Reply {
    /// JSON of this schema.
    Json(u16, MakeSchema),
    /// A `text/event-stream`.
    Events,
    /// No body.
    Empty(u16),
    /// A file's bytes.
    File,
}

/// What a route takes as its body.
#[derive(Debug, Clone, Copy)]
enum Body {
    Json(MakeSchema),
    /// Multipart form data or the file's raw bytes.
    Upload,
}

/// One query parameter.
#[derive(Debug, Clone, Copy)]
struct Param {
    name: &'static str,
    schema: fn() -> Value,
    description: &'static str,
}

/// One operation: a method on a path, its handler and its documentation.
pub struct Route {
    pub(crate) method: Method,
    pub(crate) path: &'static str,
    pub(crate) handler: MethodRouter<Shared>,
    summary: &'static str,
    tag: &'static str,
    body: Option<Body>,
    query: Vec<Param>,
    headers: Vec<Param>,
    reply: Reply,
    /// Other successful answers: a status and its JSON.
    also: Vec<(u16, MakeSchema)>,
    extension: bool,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.method, self.path)
    }
}

/// `METHOD path`, answered by `handler` (a [`MethodRouter`] for that method alone), described by
/// `summary`; it answers `{}`-shaped JSON until told otherwise.
pub(crate) fn route(
    tag: &'static str,
    method: Method,
    path: &'static str,
    handler: MethodRouter<Shared>,
    summary: &'static str,
) -> Route {
    Route {
        method,
        path,
        handler,
        summary,
        tag,
        body: None,
        query: Vec::new(),
        headers: Vec::new(),
        reply: Reply::Json(200, |g| g.subschema_for::<Map<String, Value>>()),
        also: Vec::new(),
        extension: false,
    }
}

impl Route {
    /// Takes a JSON body of type `T` (the handler's own).
    pub(crate) fn body<T: JsonSchema>(mut self) -> Self {
        self.body = Some(Body::Json(|g| g.subschema_for::<T>()));
        self
    }

    /// Takes an upload: multipart form data or raw bytes.
    pub(crate) fn upload(mut self) -> Self {
        self.body = Some(Body::Upload);
        self
    }

    /// Answers `status` with JSON of type `T`.
    pub(crate) fn reply<T: JsonSchema>(mut self, status: u16) -> Self {
        self.reply = Reply::Json(status, |g| g.subschema_for::<T>());
        self
    }

    /// May also answer `status` with JSON of type `T`.
    pub(crate) fn also<T: JsonSchema>(mut self, status: u16) -> Self {
        self.also.push((status, |g| g.subschema_for::<T>()));
        self
    }

    /// Answers a server-sent event stream.
    pub(crate) fn events(mut self) -> Self {
        self.reply = Reply::Events;
        self
    }

    /// Answers `status` with no body.
    pub(crate) fn empty(mut self, status: u16) -> Self {
        self.reply = Reply::Empty(status);
        self
    }

    /// Answers a file's bytes.
    pub(crate) fn file(mut self) -> Self {
        self.reply = Reply::File;
        self
    }

    /// Takes the query parameter `name` of `schema`.
    pub(crate) fn query(
        mut self,
        name: &'static str,
        schema: fn() -> Value,
        description: &'static str,
    ) -> Self {
        self.query.push(Param {
            name,
            schema,
            description,
        });
        self
    }

    /// Takes the header `name`.
    pub(crate) fn header(mut self, name: &'static str, description: &'static str) -> Self {
        self.headers.push(Param {
            name,
            schema: string,
            description,
        });
        self
    }

    /// Marks an operation Trellis adds to the Agent Server API.
    pub(crate) fn extension(mut self) -> Self {
        self.extension = true;
        self
    }

    /// The operation object.
    fn operation(&self, generator: &mut SchemaGenerator, secured: bool) -> Value {
        let error = json!({
            "description": "`{\"detail\": …}`",
            "content": {"application/json": {"schema": generator.subschema_for::<ErrorBody>()}},
        });
        let mut responses = Map::new();
        let (status, ok) = match self.reply {
            Reply::Json(status, schema) => (
                status,
                json!({"description": "OK", "content": {"application/json": {"schema": schema(generator)}}}),
            ),
            Reply::Events => (
                200,
                json!({"description": "Server-sent events: `metadata` first, then the run's parts in the modes asked for, `error` if it failed", "content": {"text/event-stream": {"schema": {
                    "type": "object",
                    "required": ["data"],
                    "properties": {"event": {"type": "string"}, "data": {"type": "string"}, "id": {"type": "string"}},
                }}}}),
            ),
            Reply::Empty(status) => (status, json!({"description": "No content"})),
            Reply::File => (
                200,
                json!({"description": "The file's bytes (a directory: its listing as JSON)", "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}),
            ),
        };
        responses.insert(status.to_string(), ok);
        for (status, schema) in &self.also {
            responses.insert(
                status.to_string(),
                json!({"description": "OK", "content": {"application/json": {"schema": schema(generator)}}}),
            );
        }
        let mut errors = vec![400, 404, 405, 409, 413, 422];
        if secured {
            errors.push(401);
        }
        if matches!(self.body, Some(Body::Upload)) {
            errors.push(415);
        }
        errors.push(403);
        for code in errors {
            responses.insert(code.to_string(), error.clone());
        }
        let mut parameters: Vec<Value> = path_params(self.path)
            .map(|name| {
                let schema = if name == "assistant_id" {
                    json!({"type": "string", "minLength": 1, "maxLength": 128})
                } else {
                    json!({"type": "string", "format": "uuid"})
                };
                json!({"name": name, "in": "path", "required": true, "schema": schema})
            })
            .collect();
        for (place, list) in [("query", &self.query), ("header", &self.headers)] {
            parameters.extend(list.iter().map(|p| {
                json!({"name": p.name, "in": place, "required": false, "schema": (p.schema)(), "description": p.description})
            }));
        }
        let mut op = json!({
            "tags": [self.tag],
            "summary": self.summary,
            "operationId": operation_id(&self.method, self.path),
            "responses": responses,
        });
        if !parameters.is_empty() {
            op["parameters"] = Value::Array(parameters);
        }
        match self.body {
            Some(Body::Json(schema)) => {
                op["requestBody"] =
                    json!({"required": true, "content": {"application/json": {"schema": schema(generator)}}});
            }
            Some(Body::Upload) => {
                op["requestBody"] = json!({"required": true, "content": {
                    "multipart/form-data": {"schema": {"type": "object", "additionalProperties": {"type": "string", "format": "binary"}}},
                    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
                }});
            }
            None => {}
        }
        if self.extension {
            op["x-trellis-extension"] = Value::Bool(true);
        }
        if secured && self.path == "/ok" {
            op["security"] = json!([]);
        }
        op
    }
}

/// A string parameter.
pub(crate) fn string() -> Value {
    json!({"type": "string"})
}

/// A boolean parameter as the clients send it (`true`/`false` or `1`/`0`).
pub(crate) fn flag() -> Value {
    json!({"type": "string", "enum": ["true", "false", "1", "0"]})
}

/// A non-negative integer parameter.
pub(crate) fn count() -> Value {
    json!({"type": "integer", "minimum": 0})
}

/// The `{name}` segments of `path`.
fn path_params(path: &str) -> impl Iterator<Item = &str> {
    path.split('/')
        .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
}

/// `post_threads_thread_id_runs`: unique per method and path.
fn operation_id(method: &Method, path: &str) -> String {
    let mut id = method.as_str().to_ascii_lowercase();
    for segment in path.split('/').filter(|s| !s.is_empty()) {
        id.push('_');
        id.extend(
            segment
                .chars()
                .filter(|c| *c != '{' && *c != '}')
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }),
        );
    }
    id
}

/// OpenAPI links from what creates a thread or a run to every operation on it, so a client
/// generator (schemathesis's stateful phase) can follow the ids it gets back.
fn add_links(paths: &mut Map<String, Value>) {
    let creators = [
        ("/threads", "post", vec!["thread_id"]),
        ("/threads/{thread_id}/runs", "post", vec!["thread_id", "run_id"]),
    ];
    let mut links: Vec<(usize, String, Value)> = Vec::new();
    for (i, (_, _, ids)) in creators.iter().enumerate() {
        for (path, item) in paths.iter() {
            let params: Vec<&str> = path_params(path).collect();
            if params.is_empty() || params.iter().any(|p| !ids.contains(p)) || params.len() != ids.len() {
                continue;
            }
            let Value::Object(methods) = item else { continue };
            for (method, op) in methods {
                let parameters: Map<String, Value> = params
                    .iter()
                    .map(|p| ((*p).to_owned(), Value::String(format!("$response.body#/{p}"))))
                    .collect();
                links.push((
                    i,
                    op["operationId"].as_str().unwrap_or(method).to_owned(),
                    json!({"operationId": op["operationId"], "parameters": parameters}),
                ));
            }
        }
    }
    for (i, name, link) in links {
        let (path, method, _) = &creators[i];
        if let Some(ok) = paths
            .get_mut(*path)
            .and_then(|item| item.get_mut(*method))
            .and_then(|op| op["responses"].get_mut("200"))
        {
            ok["links"][name] = link;
        }
    }
}

/// The document of `routes`; `secured`: the server takes API keys (every operation but `/ok`
/// then needs one).
pub(crate) fn document(routes: &[Route], secured: bool) -> Value {
    let mut generator = SchemaSettings::draft2020_12()
        .with(|s| s.definitions_path = "#/components/schemas/".into())
        .for_deserialize()
        .into_generator();
    let mut paths: Map<String, Value> = Map::new();
    for route in routes {
        let op = route.operation(&mut generator, secured);
        let item = paths
            .entry(route.path)
            .or_insert_with(|| Value::Object(Map::new()));
        item[route.method.as_str().to_ascii_lowercase()] = op;
    }
    add_links(&mut paths);
    let schemas = generator.take_definitions(true);
    let mut doc = json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Trellis Agent Server API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The LangGraph Agent Server API subset `trellis serve` speaks; operations marked x-trellis-extension are Trellis's own. See docs/server.md.",
        },
        "paths": paths,
        "components": {"schemas": schemas},
    });
    if secured {
        doc["components"]["securitySchemes"] = json!({
            "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"},
            "bearer": {"type": "http", "scheme": "bearer"},
        });
        doc["security"] = json!([{"apiKey": []}, {"bearer": []}]);
    }
    doc
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn operation_ids_name_the_method_and_the_path() {
        assert_eq!(
            operation_id(&Method::POST, "/threads/{thread_id}/runs/{run_id}/cancel"),
            "post_threads_thread_id_runs_run_id_cancel"
        );
        assert_eq!(
            path_params("/threads/{thread_id}/runs/{run_id}").collect::<Vec<_>>(),
            ["thread_id", "run_id"]
        );
    }
}
