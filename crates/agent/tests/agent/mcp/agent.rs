//! MCP servers bound to skills, through the real agent loop (`deep_agent`, the skills middleware, a
//! scripted model) against a real MCP server (tests/mcp_server/server.py, official Python SDK):
//! hidden until the skill is read, then offered and run for real; withheld from users without the
//! role; both transports; no name collisions between servers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::json;
use trellis_agent::mcp::McpServerConfig;
use trellis_middleware::runtime::model::ToolSpec;
use trellis_middleware::skills::Viewer;
use trellis_middleware::tools::UserIdentity;
use trellis_middleware::{ModelRequest, RunInput, ToolCall};

use crate::mcp::common::{agent_on, http_server, library, scripted, started, stdio, tool_results};
use crate::support::skip_unless_python;

const SKILL: &str = "/skills/call-transcripts/SKILL.md";

fn read_skill(id: &str) -> ToolCall {
    ToolCall::new(id, "read_file", json!({"file_path": SKILL}))
}

fn names(r: &ModelRequest) -> Vec<String> {
    r.tools.iter().map(|t| t.name.clone()).collect()
}

fn mcp_names(r: &ModelRequest) -> Vec<String> {
    names(r).into_iter().filter(|n| n.contains("__")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_are_hidden_until_the_skill_is_read_then_run_for_real() {
    let python = skip_unless_python!();
    let dir = tempfile::tempdir().unwrap();
    let started_file = dir.path().join("started");
    let backend = library("mcp:crm").await;
    let model = Arc::new(
        scripted()
            .then_tool_calls([ToolCall::new(
                "c1",
                "crm__search_calls",
                json!({"account": "Acme"}),
            )])
            .then_tool_calls([read_skill("c2")])
            .then_tool_calls([ToolCall::new(
                "c3",
                "crm__search_calls",
                json!({"account": "Acme"}),
            )])
            .then_text("Found the Acme calls."),
    );
    let agent = agent_on(model.clone(), &backend)
        .mcp_server(stdio(&python, "crm", Some(&started_file)))
        .build()
        .unwrap();
    let out = agent.run(RunInput::human("find the Acme calls")).await.unwrap();
    let results = tool_results(&out);
    let requests = model.requests();

    assert!(
        results[0].1 && results[0].0.contains("no tool named \"crm__search_calls\""),
        "before disclosure a call fails like an unknown tool: {:?}",
        results[0]
    );
    assert!(mcp_names(&requests[0]).is_empty() && mcp_names(&requests[1]).is_empty());
    assert!(!results[1].1, "{:?}", results[1]);
    assert_eq!(
        results[2],
        (
            "[crm] call-1: Acme call 1; call-2: Acme call 2; call-3: Acme call 3".to_owned(),
            false
        ),
        "the call reached the server and its answer came back"
    );

    let after = names(&requests[2]);
    let before = names(&requests[1]);
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "the earlier tool list is a prefix"
    );
    let disclosed: Vec<&ToolSpec> = requests[2].tools[before.len()..].iter().map(|t| &**t).collect();
    let disclosed_names: Vec<&str> = disclosed.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        disclosed_names.iter().copied().collect::<BTreeSet<_>>(),
        BTreeSet::from([
            "crm__search_calls",
            "crm__get_transcript",
            "crm__accounts_lookup",
            "crm__fail",
            "crm__protocol_error",
            "crm__slow",
            "crm__crash",
        ])
    );
    let search = disclosed.iter().find(|t| t.name == "crm__search_calls").unwrap();
    assert_eq!(
        search.parameters["required"],
        json!(["account"]),
        "the server's schema"
    );
    insta::assert_yaml_snapshot!("mcp_disclosed_tools", disclosed);
    assert_eq!(
        started(&started_file).len(),
        1,
        "one server process for the whole run"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_without_the_role_never_see_or_run_the_tools() {
    let python = skip_unless_python!();
    let dir = tempfile::tempdir().unwrap();
    let started_file = dir.path().join("started");
    let backend = library("mcp:crm").await;
    let config = stdio(&python, "crm", Some(&started_file)).required_roles(["sales"]);
    let run = |input: RunInput| {
        let (backend, config) = (backend.clone(), config.clone());
        async move {
            let model = Arc::new(
                scripted()
                    .then_tool_calls([read_skill("c1")])
                    .then_tool_calls([ToolCall::new(
                        "c2",
                        "crm__get_transcript",
                        json!({"call_id": "call-1"}),
                    )])
                    .then_text("done"),
            );
            let agent = agent_on(model.clone(), &backend)
                .mcp_server(config)
                .build()
                .unwrap();
            let out = agent.run(input).await.unwrap();
            (model.requests(), tool_results(&out))
        }
    };

    let (requests, results) =
        run(RunInput::human("transcript?").extension(Viewer::new("guest", ["support"]))).await;
    assert!(
        requests.iter().all(|r| mcp_names(r).is_empty()),
        "never in the tool list"
    );
    assert!(!results[0].1, "the skill itself is readable: {:?}", results[0]);
    assert!(
        results[1].1 && results[1].0.contains("no tool named \"crm__get_transcript\""),
        "a forced call fails like an unknown tool: {:?}",
        results[1]
    );
    assert!(
        started(&started_file).is_empty(),
        "the server was not even started"
    );

    let (_, anonymous) = run(RunInput::human("transcript?")).await;
    assert!(anonymous[1].1, "no identity, no roles: {:?}", anonymous[1]);
    assert!(started(&started_file).is_empty());

    let rep = UserIdentity {
        user_id: "rep".to_owned(),
        roles: vec!["sales".to_owned()],
    };
    let (requests, results) = run(RunInput::human("transcript?").extension(rep)).await;
    assert!(mcp_names(&requests[1]).contains(&"crm__get_transcript".to_owned()));
    assert_eq!(
        results[1],
        (
            "[crm] Transcript of call-1: the customer asked about pricing.".to_owned(),
            false
        )
    );
    assert_eq!(started(&started_file).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_servers_work_and_labels_can_name_one_tool() {
    let python = skip_unless_python!();
    let server = http_server(&python, "docs").await;
    let backend = library("mcp:docs/get_transcript").await;
    let model = Arc::new(
        scripted()
            .then_tool_calls([read_skill("c1")])
            .then_tool_calls([ToolCall::new(
                "c2",
                "docs__get_transcript",
                json!({"call_id": "call-7"}),
            )])
            .then_text("done")
            .then_tool_calls([ToolCall::new(
                "c3",
                "docs__get_transcript",
                json!({"call_id": "call-8"}),
            )])
            .then_text("the server is gone"),
    );
    let agent = agent_on(model.clone(), &backend)
        .mcp_server(McpServerConfig::http("docs", &server.url).unwrap())
        .build()
        .unwrap();
    let out = agent.run(RunInput::human("transcript of call-7")).await.unwrap();
    let requests = model.requests();
    assert_eq!(
        mcp_names(&requests[1]),
        ["docs__get_transcript"],
        "only the named tool"
    );
    assert_eq!(
        tool_results(&out)[1],
        (
            "[docs] Transcript of call-7: the customer asked about pricing.".to_owned(),
            false
        )
    );

    drop(server);
    let out = agent
        .run(RunInput::human("and call-8?").thread(out.thread_id))
        .await
        .unwrap();
    let (text, is_error) = tool_results(&out).pop().unwrap();
    assert!(
        is_error
            && text.contains(
                "the connection to the MCP server was lost (\"docs\") while running \"get_transcript\""
            )
            && text.contains("connected again on the next call"),
        "a server that went away is an error result, not a hang: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_with_the_same_tools_never_collide() {
    let python = skip_unless_python!();
    let backend = library("\"mcp:crm mcp:crm-eu\"").await;
    let model = Arc::new(
        scripted()
            .then_tool_calls([read_skill("c1")])
            .then_tool_calls([
                ToolCall::new("c2", "crm__search_calls", json!({"account": "Acme", "limit": 1})),
                ToolCall::new(
                    "c3",
                    "crm-eu__search_calls",
                    json!({"account": "Acme", "limit": 1}),
                ),
                ToolCall::new("c4", "crm-eu__accounts_lookup", json!({"account": "Acme"})),
            ])
            .then_text("done"),
    );
    let agent = agent_on(model.clone(), &backend)
        .mcp_server(stdio(&python, "crm", None).allow_tools(["search_calls", "accounts.lookup"]))
        .mcp_server(stdio(&python, "crm-eu", None))
        .build()
        .unwrap();
    let out = agent.run(RunInput::human("Acme in both regions")).await.unwrap();
    let all = names(&model.requests()[1]);
    let unique: BTreeSet<&String> = all.iter().collect();
    assert_eq!(unique.len(), all.len(), "no duplicate names: {all:?}");
    for name in &all {
        assert!(
            name.len() <= 64
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
            "{name}"
        );
    }
    let mcp = mcp_names(&model.requests()[1]);
    assert_eq!(
        mcp.iter()
            .filter(|n| n.starts_with("crm__"))
            .collect::<BTreeSet<_>>(),
        BTreeSet::from([
            &"crm__accounts_lookup".to_owned(),
            &"crm__search_calls".to_owned()
        ]),
        "the allow-list applies"
    );
    assert!(mcp.contains(&"crm-eu__search_calls".to_owned()) && mcp.contains(&"crm-eu__crash".to_owned()));
    let results = tool_results(&out);
    assert_eq!(results[1], ("[crm] call-1: Acme call 1".to_owned(), false));
    assert_eq!(results[2], ("[crm-eu] call-1: Acme call 1".to_owned(), false));
    assert_eq!(
        results[3],
        ("[crm-eu] Acme: 120 seats, renewal in March.".to_owned(), false)
    );
}
