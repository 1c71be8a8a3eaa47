//! The scripted model of the serve bench's paced wave (included by `serve.rs` with `#[path]`; not
//! a bench target): [`scripted`](super::scripted)'s script on an axum server whose replies take
//! as long as a served model's.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::scripted;

/// The scripted model of the paced wave: [`scripted::reply`]'s script, each reply sent `latency`
/// plus up to `jitter` after its request, as a served model answers. A step's latency runs from
/// the moment the reply is handed to the HTTP server (after the wait, so a timer firing late is
/// not counted as the agent's) to the same thread's next request.
pub struct PacedModel {
    pub latency: Duration,
    pub jitter: Duration,
    pub seen: scripted::Seen,
}

impl PacedModel {
    /// Serve it on a loopback port; its base URL.
    pub async fn start(latency: Duration, jitter: Duration) -> (String, Arc<Self>) {
        let model = Arc::new(Self {
            latency,
            jitter,
            seen: scripted::Seen::default(),
        });
        let app = axum::Router::new()
            .route("/v1/chat/completions", axum::routing::post(Self::answer))
            .with_state(model.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, model)
    }

    /// Reply `n`'s wait: the latency plus a share of the jitter, spread evenly over [0, jitter)
    /// by a multiplicative hash of `n` (varied, and the same on every run of the bench).
    fn delay(&self, n: usize) -> Duration {
        let spread = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 44;
        self.latency + self.jitter.mul_f64(spread as f64 / f64::from(1u32 << 20))
    }

    async fn answer(
        axum::extract::State(model): axum::extract::State<Arc<Self>>,
        body: axum::body::Bytes,
    ) -> axum::response::Response {
        use axum::response::IntoResponse;
        let arrived = Instant::now();
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let thread = scripted::thread_of(&body);
        if let Some(thread) = &thread {
            model.seen.arrived(thread, arrived);
        }
        let reply = scripted::reply(&body);
        let n = model.seen.requests.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(model.delay(n)).await;
        if let Some(thread) = thread {
            model.seen.replied(thread, Instant::now());
        }
        match reply {
            Some(reply) => (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                reply.to_string(),
            )
                .into_response(),
            None => {
                model.seen.crossed.fetch_add(1, Ordering::Relaxed);
                (
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                    "a request named another thread",
                )
                    .into_response()
            }
        }
    }
}
