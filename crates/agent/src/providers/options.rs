//! [`ModelOptions`]: settings written after the model in a model string,
//! `<provider>:<model>?<key>=<value>&…` (e.g. `anthropic:claude-sonnet-4-5?cache=off`).
//!
//! Options start at the last `?` of the string, so a model name never holds one; a base URL in
//! `openai-compatible:<model>@<base_url>` cannot carry a query of its own. Keys:
//!
//! | key | values | effect |
//! |---|---|---|
//! | `cache` | `on` (default), `off` | `off` sends no `cache_control` at all and declares no prompt caching, for proxies that reject the field (LiteLLM, Databricks; langchain-ai/deepagents#2881). The Chat Completions providers never send `cache_control`, so there it changes nothing. |
//! | `context_window` | tokens (a positive integer) | the context window the provider declares, for models and servers whose window is not known (summarization triggers from it). |
//!
//! An unknown key, a key given twice or a value that does not parse is a
//! [`ProviderError::InvalidModelString`] naming it.

use super::ProviderError;

/// Settings from the `?…` part of a model string (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelOptions {
    /// Send prompt-caching markers (`cache=on`, the default).
    pub cache: bool,
    /// Declared context window (`context_window=N`).
    pub context_window: Option<u64>,
}

impl Default for ModelOptions {
    fn default() -> Self {
        Self {
            cache: true,
            context_window: None,
        }
    }
}

impl ModelOptions {
    /// Split `input` into the model string proper and its options.
    pub fn split(input: &str) -> Result<(&str, ModelOptions), ProviderError> {
        let mut options = ModelOptions::default();
        let Some((spec, query)) = input.rsplit_once('?') else {
            return Ok((input, options));
        };
        let invalid = |reason: String| ProviderError::InvalidModelString {
            input: input.to_owned(),
            reason,
        };
        let mut seen = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let Some((key, value)) = pair.split_once('=') else {
                return Err(invalid(format!("option `{pair}` is not of the form key=value")));
            };
            if seen.contains(&key) {
                return Err(invalid(format!("option `{key}` is given twice")));
            }
            seen.push(key);
            match key {
                "cache" => {
                    options.cache = match value {
                        "on" => true,
                        "off" => false,
                        _ => return Err(invalid(format!("cache must be on or off, not `{value}`"))),
                    }
                }
                "context_window" => match value.parse::<u64>() {
                    Ok(tokens) if tokens > 0 => options.context_window = Some(tokens),
                    _ => {
                        return Err(invalid(format!(
                            "context_window must be a positive number of tokens, not `{value}`"
                        )));
                    }
                },
                _ => {
                    return Err(invalid(format!(
                        "unknown option `{key}`; known options: cache, context_window"
                    )));
                }
            }
        }
        Ok((spec, options))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn options_follow_the_last_question_mark() {
        let (spec, options) = ModelOptions::split("anthropic:claude-sonnet-4-5").unwrap();
        assert_eq!(spec, "anthropic:claude-sonnet-4-5");
        assert_eq!(options, ModelOptions::default());
        let (spec, options) =
            ModelOptions::split("openai-compatible:m@http://h:8000/v1?cache=off&context_window=32768")
                .unwrap();
        assert_eq!(spec, "openai-compatible:m@http://h:8000/v1");
        assert!(!options.cache);
        assert_eq!(options.context_window, Some(32768));
    }

    #[test]
    fn bad_options_are_named() {
        for (input, needle) in [
            ("anthropic:m?cache=maybe", "cache must be on or off"),
            ("anthropic:m?cach=off", "unknown option `cach`"),
            ("anthropic:m?cache", "key=value"),
            ("anthropic:m?cache=on&cache=off", "given twice"),
            ("anthropic:m?context_window=0", "positive"),
            ("anthropic:m?context_window=lots", "positive"),
        ] {
            let err = ModelOptions::split(input).unwrap_err();
            assert!(err.to_string().contains(needle), "{input}: {err}");
        }
    }
}
