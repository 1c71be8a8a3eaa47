//! Model-provider transport faults through the real agent loop: `Agent` with
//! `ModelRetryMiddleware` on the real Anthropic provider (`AnthropicModel`, reqwest, `HttpConfig`
//! timeouts), whose base URL is the fault-injecting proxy in front of a wiremock server that answers
//! like the Messages API. Overload bursts (529, 503), replies cut off or reset mid-body, and stalls
//! (before the head or mid-body) are retried a bounded number of times; a stall ends as a
//! transport timeout after `HttpConfig::request_timeout`. Request counts come from the proxy's log
//! (every request the provider sent) and from wiremock (every request that reached the "provider").
//!
//! No emulator is needed: everything runs on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use trellis_agent::providers::HttpConfig;
use trellis_agent::providers::anthropic::{AnthropicConfig, AnthropicModel};
use trellis_middleware::{
    Agent, AgentError, EventSink, ModelError, ModelRetryMiddleware, RetryConfig, RunEvent, RunInput,
    RunOutput,
};
use trellis_tests::fault_proxy::{Fault, FaultProxy, Rule};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// Only a guard against a hang: no assertion here is about speed.
const HANG_GUARD: Duration = Duration::from_secs(120);

/// The proxy's target for the Messages API.
const MESSAGES: &str = "/v1/messages";

/// A Messages API answer, long enough to be cut mid-body.
fn answer() -> serde_json::Value {
    json!({
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "The answer, delivered whole."}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 10, "output_tokens": 6}
    })
}

/// The Messages API's overload error body.
fn overloaded(status: u16) -> Fault {
    Fault::Respond {
        status,
        body: json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
            .to_string(),
    }
}

/// A wiremock "provider" and the proxy in front of it.
struct Provider {
    server: MockServer,
    proxy: FaultProxy,
}

impl Provider {
    async fn start() -> Self {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path(MESSAGES))
            .respond_with(ResponseTemplate::new(200).set_body_json(answer()))
            .mount(&server)
            .await;
        let proxy = FaultProxy::start(&server.uri()).await.unwrap();
        Self { server, proxy }
    }

    /// POSTs the provider client sent (each attempt is a new connection through the proxy).
    fn sent(&self) -> usize {
        self.proxy.count("POST", MESSAGES)
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
            .and(path(MESSAGES))
            .respond_with(ResponseTemplate::new(200).set_body_json(answer()))
            .mount(&self.server)
            .await;
    }

    /// Run an agent on the real Anthropic provider (through the proxy) with `retries` retries of
    /// 10 ms, no jitter. Returns the run's result and how many `retry` events it emitted.
    async fn run(&self, http: HttpConfig, retries: u32) -> (Result<RunOutput, AgentError>, usize) {
        let model = AnthropicModel::new(
            AnthropicConfig::new("claude-sonnet-4-5", "test-key")
                .with_base_url(self.proxy.url())
                .with_http(http),
        )
        .unwrap();
        let agent = Agent::builder(Arc::new(model))
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
    assert_eq!(
        out.final_text().as_deref(),
        Some("The answer, delivered whole."),
        "{what}"
    );
    assert_eq!(out.model_calls, 1, "{what}: retries are inside one model call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_bursts_are_retried_then_answered() {
    let provider = Provider::start().await;
    for status in [529, 503] {
        provider.reset().await;
        provider
            .proxy
            .add(Rule::new(overloaded(status)).method("POST").times(2));
        let (result, retries) = provider.run(HttpConfig::default(), 3).await;
        assert_answered(result, &format!("{status}"));
        assert_eq!(provider.sent(), 3, "{status}: {:?}", provider.proxy.seen());
        assert_eq!(provider.arrived().await, 1, "{status}");
        assert_eq!(retries, 2, "{status}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_overload_is_retried_a_bounded_number_of_times() {
    let provider = Provider::start().await;
    provider.proxy.add(Rule::new(overloaded(529)).method("POST"));
    let (result, retries) = provider.run(HttpConfig::default(), 2).await;
    let error = model_error(result);
    assert!(matches!(error, ModelError::Overloaded { .. }), "{error:?}");
    assert!(error.to_string().contains("HTTP 529"), "{error}");
    assert_eq!(provider.sent(), 3, "{:?}", provider.proxy.seen());
    assert_eq!(provider.arrived().await, 0);
    assert_eq!(retries, 2);

    // Retries off: one request, the same typed error.
    provider.proxy.reset_log();
    let (result, retries) = provider.run(HttpConfig::default(), 0).await;
    assert!(matches!(model_error(result), ModelError::Overloaded { .. }));
    assert_eq!((provider.sent(), retries), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_cut_mid_body_is_a_transport_error_and_is_retried() {
    let provider = Provider::start().await;
    // Head and 20 of the body's bytes, then a close (FIN) or a reset (RST).
    for fault in [Fault::CutReply(20), Fault::ResetMidReply(20)] {
        // Once: the retry gets the whole answer. Both requests reached the provider.
        provider.reset().await;
        provider
            .proxy
            .add(Rule::new(fault.clone()).method("POST").times(1));
        let (result, retries) = provider.run(HttpConfig::default(), 3).await;
        assert_answered(result, fault.name());
        assert_eq!(provider.sent(), 2, "{fault:?}: {:?}", provider.proxy.seen());
        assert_eq!(provider.arrived().await, 2, "{fault:?}");
        assert_eq!(retries, 1, "{fault:?}");

        // Always: bounded, and the error says the body could not be read.
        provider.reset().await;
        provider.proxy.add(Rule::new(fault.clone()).method("POST"));
        let (result, retries) = provider.run(HttpConfig::default(), 2).await;
        let error = model_error(result);
        let ModelError::Transport { message } = &error else {
            panic!("{fault:?}: {error:?}");
        };
        // The head arrived: the failure is in reading the body, not in sending the request.
        assert!(message.contains("error reading a body"), "{fault:?}: {message}");
        assert!(error.is_transient());
        assert_eq!(provider.sent(), 3, "{fault:?}: {:?}", provider.proxy.seen());
        assert_eq!(provider.arrived().await, 3, "{fault:?}");
        assert_eq!(retries, 2, "{fault:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_provider_times_out_per_the_request_timeout() {
    let provider = Provider::start().await;
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
        let ModelError::Transport { message } = &error else {
            panic!("{fault:?}: {error:?}");
        };
        assert!(
            message.starts_with("timed out") && message.contains(phase),
            "{fault:?}: {message}"
        );
        assert_eq!(provider.sent(), 2, "{fault:?}: {:?}", provider.proxy.seen());
        assert_eq!(retries, 1, "{fault:?}");

        // A single stall: the retry is answered.
        provider.reset().await;
        provider
            .proxy
            .add(Rule::new(fault.clone()).method("POST").times(1));
        let (result, retries) = provider.run(http, 1).await;
        assert_answered(result, fault.name());
        assert_eq!(provider.sent(), 2, "{fault:?}: {:?}", provider.proxy.seen());
        assert_eq!(retries, 1, "{fault:?}");
    }
}
