//! Model-provider transport faults through the real agent loop, for both wire formats: `Agent`
//! with `ModelRetryMiddleware` on the real providers (`AnthropicModel` and `OpenAiModel`: reqwest,
//! `HttpConfig` timeouts), whose base URL is the fault-injecting proxy in front of a wiremock server
//! that answers like the Messages API or Chat Completions. Overload bursts (529, 503, 429),
//! replies cut off or reset mid-body, and stalls (before the head or mid-body) are retried a
//! bounded number of times; a stall ends as a transport timeout after
//! `HttpConfig::request_timeout`. Request counts come from the proxy's log (every request the
//! provider sent) and from wiremock (every request that reached the "provider").
//!
//! No emulator is needed: everything runs on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use trellis_agent::providers::HttpConfig;
use trellis_agent::providers::anthropic::{AnthropicConfig, AnthropicModel};
use trellis_agent::providers::openai::{OpenAiConfig, OpenAiModel};
use trellis_middleware::core_stack::RetryConfig;
use trellis_middleware::runtime::events::{EventSink, RunEvent};
use trellis_middleware::runtime::model::ModelError;
use trellis_middleware::{Agent, AgentError, ChatModel, ModelRetryMiddleware, RunInput, RunOutput};
use trellis_tests::fault_proxy::{Fault, FaultProxy, Rule};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// Only a guard against a hang: no assertion here is about speed.
const HANG_GUARD: Duration = Duration::from_secs(120);

/// What the "provider" answers when no fault is injected.
const ANSWER: &str = "The answer, delivered whole.";

/// The two provider wire formats.
#[derive(Debug, Clone, Copy)]
enum Api {
    /// Anthropic Messages API.
    Anthropic,
    /// OpenAI Chat Completions.
    OpenAi,
}

const APIS: [Api; 2] = [Api::Anthropic, Api::OpenAi];

impl Api {
    /// The path the provider POSTs to (the base URL is the proxy's root).
    fn path(self) -> &'static str {
        match self {
            Api::Anthropic => "/v1/messages",
            Api::OpenAi => "/chat/completions",
        }
    }

    /// A successful answer in the API's documented shape, long enough to be cut mid-body.
    fn answer(self) -> serde_json::Value {
        match self {
            Api::Anthropic => json!({
                "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                "content": [{"type": "text", "text": ANSWER}],
                "stop_reason": "end_turn", "stop_sequence": null,
                "usage": {"input_tokens": 10, "output_tokens": 6}
            }),
            Api::OpenAi => json!({
                "id": "chatcmpl-01", "object": "chat.completion", "created": 1_764_000_000,
                "model": "gpt-4.1",
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": ANSWER, "refusal": null},
                    "logprobs": null, "finish_reason": "stop"
                }],
                "usage": {"prompt_tokens": 10, "completion_tokens": 6, "total_tokens": 16}
            }),
        }
    }

    /// The statuses that mean "busy, try again": both APIs send 503 and 429; Anthropic also 529.
    fn busy_statuses(self) -> &'static [u16] {
        match self {
            Api::Anthropic => &[529, 503],
            Api::OpenAi => &[503, 429],
        }
    }

    /// The API's error body for a busy `status`.
    fn busy(self, status: u16) -> Fault {
        let body = match (self, status) {
            (Api::Anthropic, 429) => {
                json!({"type": "error", "error": {"type": "rate_limit_error", "message": "Rate limited"}})
            }
            (Api::Anthropic, _) => {
                json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
            }
            (Api::OpenAi, 429) => json!({"error": {
                "message": "Rate limit reached", "type": "requests", "param": null,
                "code": "rate_limit_exceeded"
            }}),
            (Api::OpenAi, _) => json!({"error": {
                "message": "The server is overloaded", "type": "server_error", "param": null,
                "code": null
            }}),
        };
        Fault::Respond {
            status,
            body: body.to_string(),
        }
    }

    /// The real provider client, pointed at `base_url`.
    fn model(self, base_url: String, http: HttpConfig) -> Arc<dyn ChatModel> {
        match self {
            Api::Anthropic => Arc::new(
                AnthropicModel::new(
                    AnthropicConfig::new("claude-sonnet-4-5", "test-key")
                        .with_base_url(base_url)
                        .with_http(http),
                )
                .unwrap(),
            ),
            Api::OpenAi => Arc::new(
                OpenAiModel::new(
                    OpenAiConfig::openai("gpt-4.1", "test-key")
                        .with_base_url(base_url)
                        .with_http(http),
                )
                .unwrap(),
            ),
        }
    }
}

/// A wiremock "provider" and the proxy in front of it.
struct Provider {
    api: Api,
    server: MockServer,
    proxy: FaultProxy,
}

impl Provider {
    async fn start(api: Api) -> Self {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path(api.path()))
            .respond_with(ResponseTemplate::new(200).set_body_json(api.answer()))
            .mount(&server)
            .await;
        let proxy = FaultProxy::start(&server.uri()).await.unwrap();
        Self { api, server, proxy }
    }

    /// POSTs the provider client sent (each attempt is a new connection through the proxy).
    fn sent(&self) -> usize {
        self.proxy.count("POST", self.api.path())
    }

    /// POSTs that reached the wiremock server.
    async fn arrived(&self) -> usize {
        self.server.received_requests().await.unwrap().len()
    }

    async fn reset(&self) {
        self.proxy.clear_rules();
        self.proxy.reset_log();
        self.server.reset().await;
        Mock::given(method("POST"))
            .and(path(self.api.path()))
            .respond_with(ResponseTemplate::new(200).set_body_json(self.api.answer()))
            .mount(&self.server)
            .await;
    }

    /// Run an agent on the real provider client (through the proxy) with `retries` retries of
    /// 10 ms, no jitter. Returns the run's result and how many `retry` events it emitted.
    async fn run(&self, http: HttpConfig, retries: u32) -> (Result<RunOutput, AgentError>, usize) {
        let model = self.api.model(self.proxy.url(), http);
        let agent = Agent::builder(model)
            .middleware(ModelRetryMiddleware::new(RetryConfig {
                max_retries: retries,
                initial_delay: Duration::from_millis(10),
                max_delay: Duration::from_millis(50),
                jitter: 0.0,
                ..RetryConfig::default()
            }))
            .build()
            .unwrap();
        let (sink, mut events) = EventSink::channel();
        let result = tokio::time::timeout(HANG_GUARD, agent.run(RunInput::human("hi").events(sink)))
            .await
            .expect("hung");
        let mut retry_events = 0;
        while let Ok(event) = events.try_recv() {
            if let RunEvent::Middleware { middleware, kind, .. } = event
                && middleware == "model_retry"
                && kind == "retry"
            {
                retry_events += 1;
            }
        }
        (result, retry_events)
    }
}

fn model_error(result: Result<RunOutput, AgentError>) -> ModelError {
    match result {
        Err(AgentError::Model(error)) => error,
        other => panic!("expected a model error, got {other:?}"),
    }
}

fn assert_answered(result: Result<RunOutput, AgentError>, what: &str) {
    let out = result.unwrap_or_else(|e| panic!("{what}: {e:?}"));
    assert_eq!(out.final_text().as_deref(), Some(ANSWER), "{what}");
    assert_eq!(out.model_calls, 1, "{what}: retries are inside one model call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_bursts_are_retried_then_answered() {
    for api in APIS {
        let provider = Provider::start(api).await;
        for &status in api.busy_statuses() {
            provider.reset().await;
            provider
                .proxy
                .add(Rule::new(api.busy(status)).method("POST").times(2));
            let (result, retries) = provider.run(HttpConfig::default(), 3).await;
            let what = format!("{api:?} {status}");
            assert_answered(result, &what);
            assert_eq!(provider.sent(), 3, "{what}: {:?}", provider.proxy.seen());
            assert_eq!(provider.arrived().await, 1, "{what}");
            assert_eq!(retries, 2, "{what}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_overload_is_retried_a_bounded_number_of_times() {
    for api in APIS {
        let provider = Provider::start(api).await;
        let status = api.busy_statuses()[0];
        provider.proxy.add(Rule::new(api.busy(status)).method("POST"));
        let (result, retries) = provider.run(HttpConfig::default(), 2).await;
        let error = model_error(result);
        assert!(
            matches!(error, ModelError::Overloaded { .. }),
            "{api:?}: {error:?}"
        );
        assert!(
            error.to_string().contains(&format!("HTTP {status}")),
            "{api:?}: {error}"
        );
        assert_eq!(provider.sent(), 3, "{api:?}: {:?}", provider.proxy.seen());
        assert_eq!(provider.arrived().await, 0, "{api:?}");
        assert_eq!(retries, 2, "{api:?}");

        // Retries off: one request, the same typed error.
        provider.proxy.reset_log();
        let (result, retries) = provider.run(HttpConfig::default(), 0).await;
        assert!(
            matches!(model_error(result), ModelError::Overloaded { .. }),
            "{api:?}"
        );
        assert_eq!((provider.sent(), retries), (1, 0), "{api:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_cut_mid_body_is_a_transport_error_and_is_retried() {
    for api in APIS {
        let provider = Provider::start(api).await;
        // Head and 20 of the body's bytes, then a close (FIN) or a reset (RST).
        for fault in [Fault::CutReply(20), Fault::ResetMidReply(20)] {
            // Once: the retry gets the whole answer. Both requests reached the provider.
            provider.reset().await;
            provider
                .proxy
                .add(Rule::new(fault.clone()).method("POST").times(1));
            let (result, retries) = provider.run(HttpConfig::default(), 3).await;
            assert_answered(result, &format!("{api:?} {}", fault.name()));
            assert_eq!(
                provider.sent(),
                2,
                "{api:?} {fault:?}: {:?}",
                provider.proxy.seen()
            );
            assert_eq!(provider.arrived().await, 2, "{api:?} {fault:?}");
            assert_eq!(retries, 1, "{api:?} {fault:?}");

            // Always: bounded, and the error says the body could not be read.
            provider.reset().await;
            provider.proxy.add(Rule::new(fault.clone()).method("POST"));
            let (result, retries) = provider.run(HttpConfig::default(), 2).await;
            let error = model_error(result);
            let ModelError::Transport { message, .. } = &error else {
                panic!("{api:?} {fault:?}: {error:?}");
            };
            // The head arrived: the failure is in reading the body, not in sending the request.
            assert!(
                message.contains("error reading a body"),
                "{api:?} {fault:?}: {message}"
            );
            assert!(error.is_transient());
            assert_eq!(
                provider.sent(),
                3,
                "{api:?} {fault:?}: {:?}",
                provider.proxy.seen()
            );
            assert_eq!(provider.arrived().await, 3, "{api:?} {fault:?}");
            assert_eq!(retries, 2, "{api:?} {fault:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_provider_times_out_per_the_request_timeout() {
    for api in APIS {
        let provider = Provider::start(api).await;
        let http = HttpConfig {
            request_timeout: Duration::from_millis(300),
            ..HttpConfig::default()
        };
        // No answer at all, or the head and 20 body bytes and then nothing: the timeout covers both.
        for (fault, phase) in [
            (Fault::Stall, "error sending request"),
            (Fault::StallMidReply(20), "response body"),
        ] {
            provider.reset().await;
            provider.proxy.add(Rule::new(fault.clone()).method("POST"));
            let (result, retries) = provider.run(http, 1).await;
            let error = model_error(result);
            let ModelError::Transport { message, .. } = &error else {
                panic!("{api:?} {fault:?}: {error:?}");
            };
            assert!(
                message.starts_with("timed out") && message.contains(phase),
                "{api:?} {fault:?}: {message}"
            );
            assert_eq!(
                provider.sent(),
                2,
                "{api:?} {fault:?}: {:?}",
                provider.proxy.seen()
            );
            assert_eq!(retries, 1, "{api:?} {fault:?}");

            // A single stall: the retry is answered.
            provider.reset().await;
            provider
                .proxy
                .add(Rule::new(fault.clone()).method("POST").times(1));
            let (result, retries) = provider.run(http, 1).await;
            assert_answered(result, &format!("{api:?} {}", fault.name()));
            assert_eq!(
                provider.sent(),
                2,
                "{api:?} {fault:?}: {:?}",
                provider.proxy.seen()
            );
            assert_eq!(retries, 1, "{api:?} {fault:?}");
        }
    }
}
