//! Model strings → providers, keys from the environment.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use trellis_agent::providers::{ModelSpec, ProviderError, from_model_string_with_env};

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| map.get(name).cloned()
}

#[test]
fn model_strings_parse() {
    assert_eq!(
        ModelSpec::parse("anthropic:claude-sonnet-4-5").unwrap(),
        ModelSpec::Anthropic {
            model: "claude-sonnet-4-5".into()
        }
    );
    assert_eq!(
        ModelSpec::parse("openai:gpt-4.1").unwrap(),
        ModelSpec::OpenAi {
            model: "gpt-4.1".into()
        }
    );
    assert_eq!(
        ModelSpec::parse("ollama:qwen3:8b").unwrap(),
        ModelSpec::Ollama {
            model: "qwen3:8b".into()
        }
    );
    let spec =
        ModelSpec::parse("openai-compatible:meta-llama/Llama-3.1-8B@http://localhost:8000/v1").unwrap();
    assert_eq!(
        spec,
        ModelSpec::OpenAiCompatible {
            model: "meta-llama/Llama-3.1-8B".into(),
            base_url: Some("http://localhost:8000/v1".into()),
        }
    );
    assert_eq!(
        spec.to_string(),
        "openai-compatible:meta-llama/Llama-3.1-8B@http://localhost:8000/v1"
    );
    assert_eq!(
        ModelSpec::parse("openai-compatible:model@v2").unwrap(),
        ModelSpec::OpenAiCompatible {
            model: "model@v2".into(),
            base_url: None
        }
    );
}

#[test]
fn a_missing_key_names_the_variable() {
    let error = from_model_string_with_env("anthropic:claude-sonnet-4-5", env(&[])).unwrap_err();
    assert!(
        matches!(
            error,
            ProviderError::MissingApiKey {
                var: "ANTHROPIC_API_KEY",
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("export ANTHROPIC_API_KEY="), "{error}");

    let error = from_model_string_with_env("openai:gpt-4.1", env(&[("OPENAI_API_KEY", "  ")])).unwrap_err();
    assert!(
        matches!(
            error,
            ProviderError::MissingApiKey {
                var: "OPENAI_API_KEY",
                ..
            }
        ),
        "an empty variable counts as unset: {error:?}"
    );
}

#[test]
fn unknown_providers_list_the_known_ones() {
    let error = from_model_string_with_env("gemini:gemini-2.5-pro", env(&[])).unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, ProviderError::UnknownProvider { .. }));
    for known in ["anthropic", "openai", "openai-compatible", "ollama"] {
        assert!(text.contains(known), "{text}");
    }
    let error = from_model_string_with_env("claude-sonnet-4-5", env(&[])).unwrap_err();
    assert!(
        matches!(error, ProviderError::InvalidModelString { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("anthropic"), "{error}");
    assert!(from_model_string_with_env("openai:", env(&[])).is_err());
}

#[test]
fn providers_are_built_with_keys_and_base_urls() {
    let model = from_model_string_with_env(
        "anthropic:claude-sonnet-4-5",
        env(&[
            ("ANTHROPIC_API_KEY", "k"),
            ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/"),
        ]),
    )
    .unwrap();
    assert_eq!(model.id(), "claude-sonnet-4-5");
    assert!(model.capabilities().prompt_caching);

    let model = from_model_string_with_env("openai:gpt-4.1", env(&[("OPENAI_API_KEY", "k")])).unwrap();
    assert_eq!(model.id(), "gpt-4.1");
    assert!(!model.capabilities().prompt_caching);

    // Local servers need no key.
    let model =
        from_model_string_with_env("openai-compatible:llama3@http://localhost:8080/v1", env(&[])).unwrap();
    assert_eq!(model.id(), "llama3");
    let model =
        from_model_string_with_env("ollama:qwen3:8b", env(&[("OLLAMA_HOST", "127.0.0.1:11434")])).unwrap();
    assert_eq!(model.id(), "qwen3:8b");

    let error = from_model_string_with_env("openai-compatible:llama3", env(&[])).unwrap_err();
    assert!(error.to_string().contains("OPENAI_BASE_URL"), "{error}");
    let model = from_model_string_with_env(
        "openai-compatible:llama3",
        env(&[("OPENAI_BASE_URL", "http://localhost:8080/v1")]),
    )
    .unwrap();
    assert_eq!(model.id(), "llama3");

    let error = from_model_string_with_env(
        "anthropic:claude-sonnet-4-5",
        env(&[("ANTHROPIC_API_KEY", "k"), ("ANTHROPIC_BASE_URL", "not a url")]),
    )
    .unwrap_err();
    assert!(matches!(error, ProviderError::InvalidConfig { .. }), "{error:?}");
}

/// `ollama:` sends the output cap as `max_tokens`, the field ollama's OpenAI-compatible endpoint
/// reads (docs.ollama.com/api/openai-compatibility); `max_completion_tokens` would be ignored.
/// `OLLAMA_HOST` without a scheme keeps ollama's port.
#[tokio::test]
async fn ollama_gets_max_tokens_and_its_own_port() {
    use trellis_middleware::ModelRequest;
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .and(wiremock::matchers::path("/v1/chat/completions"))
        .respond_with(wiremock::ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "model": "qwen3:8b",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]
        })))
        .mount(&server)
        .await;
    let host = server.uri().trim_start_matches("http://").to_owned();
    let model = from_model_string_with_env("ollama:qwen3:8b", env(&[("OLLAMA_HOST", &host)])).unwrap();
    let request = ModelRequest {
        max_output_tokens: Some(100),
        ..ModelRequest::default()
    };
    model.invoke(request).await.unwrap();
    let body: serde_json::Value =
        serde_json::from_slice(&server.received_requests().await.unwrap()[0].body).unwrap();
    assert_eq!(body["max_tokens"], 100);
    assert!(body.get("max_completion_tokens").is_none(), "{body}");
}

/// `?cache=off` sends no `cache_control` anywhere: LiteLLM and Databricks proxies in front of
/// Claude reject the field (langchain-ai/deepagents#2881). Anthropic's reference puts it on
/// system, message and tool blocks (`cache_control: {"type": "ephemeral"}`).
#[tokio::test]
async fn cache_off_sends_no_cache_control_and_declares_no_caching() {
    use trellis_middleware::runtime::message::CacheTtl;
    use trellis_middleware::{Message, ModelRequest, SystemBlock};
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .and(wiremock::matchers::path("/v1/messages"))
        .respond_with(
            wiremock::ResponseTemplate::new(200).set_body_json(serde_json::json!({
                "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
                "usage": {"input_tokens": 1, "output_tokens": 1}
            })),
        )
        .mount(&server)
        .await;
    let keys = [("ANTHROPIC_API_KEY", "k"), ("ANTHROPIC_BASE_URL", &server.uri())];
    let mut message = Message::human("hello");
    message.meta_mut().cache_breakpoint = Some(CacheTtl::FiveMinutes);
    let request = ModelRequest {
        system: vec![SystemBlock::new("You are terse.").with_cache_breakpoint(CacheTtl::OneHour)],
        messages: vec![message].into(),
        ..ModelRequest::default()
    };
    for (string, cached) in [
        ("anthropic:claude-sonnet-4-5", true),
        ("anthropic:claude-sonnet-4-5?cache=on", true),
        ("anthropic:claude-sonnet-4-5?cache=off", false),
    ] {
        let model = from_model_string_with_env(string, env(&keys)).unwrap();
        assert_eq!(model.id(), "claude-sonnet-4-5", "{string}");
        assert_eq!(model.capabilities().prompt_caching, cached, "{string}");
        assert_eq!(
            model.capabilities().max_cache_breakpoints,
            if cached { 4 } else { 0 }
        );
        model.invoke(request.clone()).await.unwrap();
        let requests = server.received_requests().await.unwrap();
        let body = String::from_utf8(requests.last().unwrap().body.clone()).unwrap();
        assert_eq!(body.contains("cache_control"), cached, "{string}: {body}");
        assert!(body.contains("You are terse."));
    }
}

#[test]
fn context_window_option_declares_the_window_and_bad_options_are_typed() {
    let model = from_model_string_with_env(
        "openai-compatible:llama@http://localhost:8000/v1?context_window=32768",
        env(&[]),
    )
    .unwrap();
    assert_eq!(model.capabilities().context_window, Some(32768));
    assert_eq!(model.id(), "llama");
    let model = from_model_string_with_env("ollama:qwen3:8b?context_window=8192", env(&[])).unwrap();
    assert_eq!(model.capabilities().context_window, Some(8192));
    let err = from_model_string_with_env("ollama:qwen3:8b?cache=sometimes", env(&[])).unwrap_err();
    assert!(
        matches!(&err, ProviderError::InvalidModelString { reason, .. } if reason.contains("on or off")),
        "{err}"
    );
    assert_eq!(
        ModelSpec::parse("anthropic:claude-sonnet-4-5?cache=off").unwrap(),
        ModelSpec::Anthropic {
            model: "claude-sonnet-4-5".into()
        }
    );
}

/// `ollama:` asks the server for the model's window (`POST /api/show`, docs.ollama.com/api "Show
/// model information": `parameters` holds `num_ctx`, `model_info` the `<arch>.context_length`), so
/// summarization runs before ollama truncates the prompt silently. Before, the window was unknown.
#[tokio::test]
async fn ollama_models_declare_the_window_the_server_reports() {
    use trellis_agent::providers::connect_model_string_with_env;
    use wiremock::matchers::{body_json, method, path};
    let server = wiremock::MockServer::start().await;
    for (model, show) in [
        (
            "qwen3:8b",
            serde_json::json!({"parameters": "num_ctx 8192\nstop \"<|im_end|>\"",
                               "model_info": {"general.architecture": "qwen3", "qwen3.context_length": 40960}}),
        ),
        (
            "llama3.2",
            serde_json::json!({"parameters": "stop \"<|eot_id|>\"", "model_info": {"llama.context_length": 131072}}),
        ),
    ] {
        wiremock::Mock::given(method("POST"))
            .and(path("/api/show"))
            .and(body_json(serde_json::json!({"model": model})))
            .respond_with(wiremock::ResponseTemplate::new(200).set_body_json(show))
            .mount(&server)
            .await;
    }
    let host = server.uri();
    let vars = [("OLLAMA_HOST", host.as_str())];
    let window = |s: &'static str| async move {
        connect_model_string_with_env(s, env(&vars))
            .await
            .unwrap()
            .capabilities()
            .context_window
    };
    assert_eq!(
        window("ollama:qwen3:8b").await,
        Some(8192),
        "num_ctx is what the server loads"
    );
    assert_eq!(window("ollama:llama3.2").await, Some(131072));
    let asked = server.received_requests().await.unwrap().len();
    assert_eq!(window("ollama:qwen3:8b?context_window=4096").await, Some(4096));
    assert_eq!(
        server.received_requests().await.unwrap().len(),
        asked,
        "the option wins; no request"
    );
    // A model the server does not know (wiremock answers 404): the window stays unknown.
    assert_eq!(window("ollama:missing").await, None);
}
