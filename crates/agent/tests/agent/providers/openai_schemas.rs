//! OpenAI schemas: a Rust type's schemars schema made acceptable to strict Structured Outputs, and
//! tool parameters (as MCP servers write them) made acceptable to Chat Completions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use trellis_middleware::runtime::model::ResponseFormat;
use trellis_middleware::{Message, ModelRequest};
use wiremock::ResponseTemplate;

use crate::providers::common::*;
use crate::providers::openai::{exchange, openai_at, text_response};

/// A Rust type's schemars schema under `strict: true` is made what Structured Outputs documents
/// (platform.openai.com/docs/guides/structured-outputs#supported-schemas): every object closed
/// with all its properties required, optional ones nullable; a map cannot be strict and is sent
/// with `strict: false`. Tool parameters without `items` on an array (common in MCP servers) get
/// `items: {}`, and a tool whose parameters are not an object schema is left out.
#[tokio::test]
async fn schemas_are_made_acceptable_to_openai() {
    #[allow(dead_code)]
    #[derive(schemars::JsonSchema)]
    struct Step {
        title: String,
        note: Option<String>,
    }
    #[allow(dead_code)]
    #[derive(schemars::JsonSchema)]
    struct Plan {
        steps: Vec<Step>,
        owner: Option<String>,
    }
    #[allow(dead_code)]
    #[derive(schemars::JsonSchema)]
    struct Scores {
        by_name: std::collections::BTreeMap<String, u32>,
    }
    let tools = vec![
        tool(
            "mcp__list",
            "Lists.",
            json!({"type": "object", "properties": {"ids": {"type": "array"}}}),
        ),
        tool("mcp__odd", "Bad schema.", json!({"type": "string"})),
    ];
    let strict_request = ModelRequest {
        messages: vec![Message::human("plan")].into(),
        tools: tools.clone(),
        response_format: Some(ResponseFormat::for_type::<Plan>("plan")),
        ..ModelRequest::default()
    };
    let mut response = text_response();
    response["choices"][0]["message"]["content"] = json!("{\"steps\": [], \"owner\": null}");
    let (sent, _) = exchange(
        openai_at,
        strict_request,
        ResponseTemplate::new(200).set_body_json(response.clone()),
    )
    .await;
    let body = body_json(&sent);
    let format = &body["response_format"]["json_schema"];
    assert_eq!(format["strict"], true);
    assert_eq!(format["schema"]["additionalProperties"], false);
    assert_eq!(format["schema"]["required"], json!(["owner", "steps"]));
    assert_eq!(
        format["schema"]["properties"]["owner"]["type"],
        json!(["string", "null"])
    );
    let step = &format["schema"]["$defs"]["Step"];
    assert_eq!(step["additionalProperties"], false);
    assert_eq!(step["required"], json!(["note", "title"]));
    let names: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["mcp__list"],
        "the tool without an object schema is left out"
    );
    assert_eq!(
        body["tools"][0]["function"]["parameters"]["properties"]["ids"]["items"],
        json!({})
    );

    let map_request = ModelRequest {
        messages: vec![Message::human("score")].into(),
        response_format: Some(ResponseFormat::for_type::<Scores>("scores")),
        ..ModelRequest::default()
    };
    let (sent, _) = exchange(
        openai_at,
        map_request,
        ResponseTemplate::new(200).set_body_json(response),
    )
    .await;
    assert_eq!(
        body_json(&sent)["response_format"]["json_schema"]["strict"],
        false
    );
}
