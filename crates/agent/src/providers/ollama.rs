//! What an ollama server says about a model's context: `POST /api/show` (docs.ollama.com/api,
//! "Show model information"), so `ollama:` models declare the window the server will actually
//! use and summarization runs before ollama drops the start of the prompt silently.
//!
//! The window is the model's `num_ctx` parameter when its Modelfile sets one (what the server
//! loads it with), else the `<architecture>.context_length` of `model_info` (what the model was
//! trained for). A server started with a smaller `OLLAMA_CONTEXT_LENGTH` does not say so through
//! the API; pass `?context_window=N` in the model string then.

use serde_json::Value;
use trellis_middleware::runtime::model::ModelError;

use super::http::{HttpClient, HttpConfig, JsonBody};
use super::snippet;

/// The context window `/api/show` reports for `model` on the server at `host` (no `/v1`);
/// `Ok(None)` when the answer names none. Errors: the server could not be reached or answered
/// something other than a model description.
pub async fn context_window(host: &str, model: &str, http: &HttpConfig) -> Result<Option<u64>, ModelError> {
    let client = HttpClient::new(http, reqwest::header::HeaderMap::new()).map_err(|e| ModelError::Other {
        message: e.to_string(),
        http: None,
    })?;
    let body = JsonBody::encode(&serde_json::json!({ "model": model }))?;
    let reply = client.post_json(&format!("{host}/api/show"), body).await?;
    if !reply.is_success() {
        return Err(ModelError::Other {
            message: format!(
                "ollama /api/show for `{model}` answered HTTP {}: {}",
                reply.status,
                snippet(&reply.body)
            ),
            http: None,
        });
    }
    let show: Value = serde_json::from_slice(&reply.body).map_err(|e| ModelError::Other {
        message: format!("ollama /api/show answered something that is not JSON ({e})"),
        http: None,
    })?;
    Ok(window_of(&show))
}

/// `num_ctx` from `parameters`, else a `*.context_length` of `model_info`.
pub(crate) fn window_of(show: &Value) -> Option<u64> {
    let num_ctx = show
        .get("parameters")
        .and_then(Value::as_str)
        .into_iter()
        .flat_map(str::lines)
        .find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("num_ctx")).then(|| words.next()?.parse::<u64>().ok())?
        });
    num_ctx.filter(|n| *n > 0).or_else(|| {
        show.get("model_info")?
            .as_object()?
            .iter()
            .find(|(key, _)| key.ends_with(".context_length"))?
            .1
            .as_u64()
            .filter(|n| *n > 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn num_ctx_wins_over_the_trained_length() {
        let show = json!({"parameters": "stop \"<|im_end|>\"\nnum_ctx 8192", "model_info": {"qwen3.context_length": 40960}});
        assert_eq!(window_of(&show), Some(8192));
        let show = json!({"parameters": "temperature 0.6", "model_info": {"general.architecture": "qwen3", "qwen3.context_length": 40960}});
        assert_eq!(window_of(&show), Some(40960));
        assert_eq!(window_of(&json!({"parameters": "num_ctx lots"})), None);
        assert_eq!(window_of(&json!([1, 2])), None);
    }
}
