//! `cargo xtask live`: an opt-in contract check against the real providers. Never part of
//! `cargo xtask test`, and it reads no key it is not given in the environment.
//!
//! For each provider whose credentials are set (`ANTHROPIC_API_KEY`; `OPENAI_API_KEY` for Chat
//! Completions and the Responses API; `OLLAMA_HOST`; `AWS_ACCESS_KEY_ID` and `AWS_REGION` for
//! Bedrock; `GOOGLE_APPLICATION_CREDENTIALS` and `CLOUD_ML_REGION` for Vertex AI), it runs `trellis run --json` twice on one thread with the example skills: the
//! task makes the model read a skill (a `read_file` tool call), and the second run's first model
//! call should read the system prompt from the provider's cache. It prints one line per provider:
//! what passed, what failed, or why it was not run; it fails when a run or a check failed.
//! The model of each provider can be changed with `TRELLIS_LIVE_<PROVIDER>_MODEL`.
//!
//! Prompt caching is checked where the provider reports it: Claude always (Anthropic, Bedrock,
//! Vertex AI); OpenAI only caches
//! prompts of 1,024 tokens and more, and ollama has no cache, so there a miss is reported, not
//! failed.

use std::path::Path;
use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::layout::Layout;

/// One provider `live` knows.
struct Provider {
    name: &'static str,
    /// The variables that must all be set for it to run.
    needs: &'static [&'static str],
    default_model: &'static str,
    /// A cache hit is required (false: reported only).
    cache_required: bool,
}

const PROVIDERS: &[Provider] = &[
    Provider {
        name: "anthropic",
        needs: &["ANTHROPIC_API_KEY"],
        default_model: "anthropic:claude-haiku-4-5",
        cache_required: true,
    },
    Provider {
        name: "openai",
        needs: &["OPENAI_API_KEY"],
        default_model: "openai:gpt-4.1-mini",
        cache_required: false,
    },
    Provider {
        name: "openai-responses",
        needs: &["OPENAI_API_KEY"],
        default_model: "openai-responses:gpt-4.1-mini",
        cache_required: false,
    },
    Provider {
        name: "ollama",
        needs: &["OLLAMA_HOST"],
        default_model: "ollama:qwen3:8b",
        cache_required: false,
    },
    Provider {
        name: "bedrock",
        needs: &["AWS_ACCESS_KEY_ID", "AWS_REGION"],
        default_model: "bedrock:us.anthropic.claude-haiku-4-5-20251001-v1:0",
        cache_required: true,
    },
    Provider {
        name: "vertex",
        needs: &["GOOGLE_APPLICATION_CREDENTIALS", "CLOUD_ML_REGION"],
        default_model: "vertex:claude-haiku-4-5@20251001",
        cache_required: true,
    },
];

const TASK: &str = "Read the SKILL.md of the meeting-prep skill with read_file, then answer in one \
                    sentence: what is the skill for?";

/// A provider to run with its model, or the reason it is not run.
#[derive(Debug, PartialEq, Eq)]
enum Plan {
    Run {
        name: &'static str,
        model: String,
        cache_required: bool,
    },
    Skip {
        name: &'static str,
        why: String,
    },
}

fn plan(env: impl Fn(&str) -> Option<String>) -> Vec<Plan> {
    let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    PROVIDERS
        .iter()
        .map(|p| match p.needs.iter().find(|var| set(var).is_none()) {
            Some(missing) => Plan::Skip {
                name: p.name,
                why: format!("{missing} is not set"),
            },
            None => Plan::Run {
                name: p.name,
                model: set(&format!(
                    "TRELLIS_LIVE_{}_MODEL",
                    p.name.to_ascii_uppercase().replace('-', "_")
                ))
                .unwrap_or_else(|| p.default_model.to_owned()),
                cache_required: p.cache_required,
            },
        })
        .collect()
}

/// What one `--json` event stream showed.
#[derive(Debug, Default, PartialEq, Eq)]
struct Seen {
    read_file_calls: usize,
    tool_calls: usize,
    /// Cache-read tokens of the first model call.
    first_cache_read: u64,
    failed: Option<String>,
}

fn seen(events: &str) -> Seen {
    let mut seen = Seen::default();
    let mut first_model = true;
    for event in events
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    {
        match event["event"].as_str() {
            Some("tool_started") => {
                seen.tool_calls += 1;
                if event["name"] == "read_file" {
                    seen.read_file_calls += 1;
                }
            }
            Some("model_finished") if first_model => {
                first_model = false;
                seen.first_cache_read = event["usage"]["cache_read_tokens"].as_u64().unwrap_or(0);
            }
            Some("run_failed") => seen.failed = Some(event["error"].as_str().unwrap_or("").to_owned()),
            _ => {}
        }
    }
    seen
}

/// The verdict on two runs: `Ok(summary)` or `Err(what failed)`.
fn verdict(first: &Seen, second: &Seen, cache_required: bool) -> Result<String, String> {
    if let Some(error) = first.failed.as_ref().or(second.failed.as_ref()) {
        return Err(format!("the run failed: {error}"));
    }
    if first.read_file_calls == 0 {
        return Err("the model read no skill (no read_file call)".into());
    }
    let cache = match second.first_cache_read {
        0 if cache_required => return Err("the second run read nothing from the prompt cache".into()),
        0 => "no cache hit (not required here)".to_owned(),
        n => format!("cache hit of {n} tokens"),
    };
    Ok(format!("skill read, {} tool call(s), {cache}", first.tool_calls))
}

pub fn run(layout: &Layout, args: &[String]) -> Result<ExitCode> {
    if !args.is_empty() {
        bail!("`live` takes no arguments (choose models with TRELLIS_LIVE_<PROVIDER>_MODEL)");
    }
    let plans = plan(|name| std::env::var(name).ok());
    if plans.iter().all(|p| matches!(p, Plan::Skip { .. })) {
        for p in &plans {
            if let Plan::Skip { name, why } = p {
                println!("{name}: not run: {why}");
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let exe = crate::trellis::build(layout)?;
    let mut failed = false;
    for p in plans {
        match p {
            Plan::Skip { name, why } => println!("{name}: not run: {why}"),
            Plan::Run {
                name,
                model,
                cache_required,
            } => {
                let state = std::env::temp_dir().join(format!("trellis-live-{name}-{}", std::process::id()));
                let outcome = two_runs(&exe, layout, &model, &state)
                    .map_err(|e| format!("{e:#}"))
                    .and_then(|(a, b)| verdict(&a, &b, cache_required));
                let _ = std::fs::remove_dir_all(&state);
                match outcome {
                    Ok(summary) => println!("{name} ({model}): ok: {summary}"),
                    Err(why) => {
                        failed = true;
                        println!("{name} ({model}): FAILED: {why}");
                    }
                }
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn two_runs(exe: &str, layout: &Layout, model: &str, state: &Path) -> Result<(Seen, Seen)> {
    let skills = layout.workspace.join("examples/sales-assistant/skills");
    let once = || -> Result<Seen> {
        let out = Command::new(exe)
            .args(["run", "--json", "--model", model, "--thread", "live", "--skills"])
            .arg(&skills)
            .arg("--state-dir")
            .arg(state)
            .arg(TASK)
            .output()
            .with_context(|| format!("running {exe}"))?;
        let mut seen = seen(&String::from_utf8_lossy(&out.stdout));
        if !out.status.success() && seen.failed.is_none() {
            seen.failed = Some(String::from_utf8_lossy(&out.stderr).trim().to_owned());
        }
        Ok(seen)
    };
    Ok((once()?, once()?))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn only_providers_with_credentials_run_and_the_rest_say_why() {
        let plans = plan(|name| match name {
            "ANTHROPIC_API_KEY" => Some("k".into()),
            "OPENAI_API_KEY" => Some(" ".into()),
            "TRELLIS_LIVE_ANTHROPIC_MODEL" => Some("anthropic:claude-sonnet-4-5".into()),
            _ => None,
        });
        assert_eq!(
            plans,
            [
                Plan::Run {
                    name: "anthropic",
                    model: "anthropic:claude-sonnet-4-5".into(),
                    cache_required: true
                },
                Plan::Skip {
                    name: "openai",
                    why: "OPENAI_API_KEY is not set".into()
                },
                Plan::Skip {
                    name: "openai-responses",
                    why: "OPENAI_API_KEY is not set".into()
                },
                Plan::Skip {
                    name: "ollama",
                    why: "OLLAMA_HOST is not set".into()
                },
                Plan::Skip {
                    name: "bedrock",
                    why: "AWS_ACCESS_KEY_ID is not set".into()
                },
                Plan::Skip {
                    name: "vertex",
                    why: "GOOGLE_APPLICATION_CREDENTIALS is not set".into()
                },
            ]
        );
    }

    #[test]
    fn cloud_platforms_need_credentials_and_a_region() {
        let plans = plan(|name| match name {
            "AWS_ACCESS_KEY_ID" => Some("AKIA".into()),
            "GOOGLE_APPLICATION_CREDENTIALS" => Some("/k.json".into()),
            "CLOUD_ML_REGION" => Some("us-east5".into()),
            _ => None,
        });
        assert!(plans.contains(&Plan::Skip {
            name: "bedrock",
            why: "AWS_REGION is not set".into()
        }));
        assert!(plans.contains(&Plan::Run {
            name: "vertex",
            model: "vertex:claude-haiku-4-5@20251001".into(),
            cache_required: true
        }));
        let plans = plan(|name| match name {
            "OPENAI_API_KEY" => Some("k".into()),
            "TRELLIS_LIVE_OPENAI_RESPONSES_MODEL" => Some("openai-responses:gpt-5".into()),
            _ => None,
        });
        assert!(plans.contains(&Plan::Run {
            name: "openai-responses",
            model: "openai-responses:gpt-5".into(),
            cache_required: false
        }));
    }

    #[test]
    fn the_event_stream_decides_the_verdict() {
        let first = seen(concat!(
            "{\"event\":\"run_started\"}\n",
            "{\"event\":\"model_finished\",\"usage\":{\"cache_read_tokens\":0}}\n",
            "{\"event\":\"tool_started\",\"name\":\"read_file\"}\n",
            "not json\n",
            "{\"event\":\"model_finished\",\"usage\":{\"cache_read_tokens\":900}}\n",
        ));
        assert_eq!(first.read_file_calls, 1);
        assert_eq!(first.first_cache_read, 0, "only the first call counts");
        let second = seen("{\"event\":\"model_finished\",\"usage\":{\"cache_read_tokens\":1500}}\n");
        assert_eq!(
            verdict(&first, &second, true).unwrap(),
            "skill read, 1 tool call(s), cache hit of 1500 tokens"
        );
        let cold = Seen::default();
        assert!(verdict(&first, &cold, true).unwrap_err().contains("prompt cache"));
        assert!(verdict(&first, &cold, false).unwrap().contains("not required"));
        assert!(verdict(&cold, &second, false).unwrap_err().contains("no skill"));
        let failed = seen("{\"event\":\"run_failed\",\"error\":\"auth\"}\n");
        assert!(verdict(&failed, &second, false).unwrap_err().contains("auth"));
    }
}
