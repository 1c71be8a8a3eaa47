//! `trellis_agent::server::router` mounted under a prefix of a larger axum app, with a graph of
//! the app's own (a scripted model, an in-memory checkpointer): the API answers under the prefix,
//! the app's own routes still answer, the web page names the prefix as its `<base>`, and a run's
//! result comes back through `/wait`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use trellis_agent::backend::{Backend, StateBackend};
use trellis_agent::middleware::runtime::scripted_model::ScriptedModel;
use trellis_agent::middleware::{Agent, Checkpointer, InMemoryCheckpointer, RunInput, ThreadId};
use trellis_agent::server::{self, Graph, Server};

/// A graph over one agent, whoever asks.
#[derive(Debug)]
struct OneAgent(Agent);

#[async_trait]
impl Graph for OneAgent {
    async fn prepare(
        &self,
        _user: Option<&str>,
        _thread: &ThreadId,
        input: RunInput,
    ) -> anyhow::Result<(Agent, RunInput)> {
        Ok((self.0.clone(), input))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_mounts_under_a_prefix_of_another_app() {
    let checkpointer: Arc<dyn Checkpointer> = Arc::new(InMemoryCheckpointer::new());
    let model = Arc::new(ScriptedModel::new().then_text("mounted answer"));
    let agent = Agent::builder(model)
        .checkpointer(checkpointer.clone())
        .build()
        .unwrap();
    let store: Arc<dyn Backend> = Arc::new(StateBackend::new());
    let api = Server::open(checkpointer, store)
        .await
        .unwrap()
        .graph("helper", Arc::new(OneAgent(agent)));
    let app = axum::Router::new()
        .route("/health", axum::routing::get(|| async { "app ok" }))
        .nest("/agents", server::router(api));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let base = format!("http://{addr}");
    let c = super::harness::http();

    assert_eq!(
        c.get(format!("{base}/health"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "app ok"
    );
    // The page, with a <base> that points its relative URLs under the prefix.
    let page = c.get(format!("{base}/agents")).send().await.unwrap();
    assert_eq!(page.status().as_u16(), 200);
    let html = page.text().await.unwrap();
    assert!(html.contains("<base href=\"/agents/\">"), "{html}");
    let module = c.get(format!("{base}/agents/ui/app.js")).send().await.unwrap();
    assert_eq!(module.status().as_u16(), 200);
    let ok: Value = json_of(c.get(format!("{base}/agents/ok"))).await;
    assert_eq!(ok, json!({"ok": true}));
    let assistant: Value = json_of(c.get(format!("{base}/agents/assistants/helper"))).await;
    assert_eq!(assistant["graph_id"], "helper");
    let thread: Value = json_of(c.post(format!("{base}/agents/threads")).json(&json!({}))).await;
    let tid = thread["thread_id"].as_str().unwrap();
    let response = c
        .post(format!("{base}/agents/threads/{tid}/runs/wait"))
        .json(&json!({"assistant_id": assistant["assistant_id"], "input": {"messages": [{"role": "user", "content": "hi"}]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let location = response.headers()["content-location"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        location.starts_with(&format!("/threads/{tid}/runs/")),
        "{location}"
    );
    let result: Value = response.json().await.unwrap();
    assert_eq!(result["messages"][1]["content"], "mounted answer", "{result}");
    assert_eq!(result["messages"][1]["type"], "ai");
}

/// The JSON body of the answer to `request`.
async fn json_of(request: reqwest::RequestBuilder) -> Value {
    request.send().await.unwrap().json().await.unwrap()
}
