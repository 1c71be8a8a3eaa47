//! Attachments: stored under /attachments/, recorded in a public slot, listed by name and path (not
//! content) in a system block, read with read_file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::json;
use trellis_middleware::attachments::{ATTACHMENTS, Attachment, AttachmentStore, Upload};
use trellis_middleware::attachments::{AttachmentError, NEW_ATTACHMENTS};
use trellis_middleware::backend::{BackendExt, StateBackend, VirtualPath};
use trellis_middleware::runtime::scripted_model::ScriptedModel;
use trellis_middleware::*;

use crate::common::*;

fn section(req: &ModelRequest) -> Option<&SystemBlock> {
    req.system
        .iter()
        .find(|b| b.source.as_deref() == Some("attachments"))
}

const CSV: &str = "region,revenue\nnorth,120\nsouth,95\n";

#[tokio::test]
async fn attached_files_are_listed_not_inlined_and_read_with_read_file() {
    let backend = Arc::new(StateBackend::new());
    let store = AttachmentStore::new(backend.clone());
    let input = store
        .attach(
            RunInput::human("Summarize the sales file.").thread(ThreadId::new("a1").unwrap()),
            [
                Upload::new("Q3 sales.csv", CSV),
                Upload::new("notes.md", "Call Ana on Monday.").with_media_type("text/markdown"),
            ],
        )
        .await
        .unwrap();
    let model = Arc::new(
        ScriptedModel::new()
            .then_tool_calls([call(
                "r1",
                "read_file",
                json!({"file_path": "/attachments/Q3_sales.csv"}),
            )])
            .then_text("North leads with 120."),
    );
    let agent = Agent::builder(model.clone())
        .middleware(FilesystemMiddleware::new(backend.clone()))
        .middleware(AttachmentsMiddleware::new())
        .build()
        .unwrap();
    let out = agent.run(input).await.unwrap();

    let requests = model.requests();
    let block = section(&requests[0]).unwrap();
    assert!(
        block
            .text
            .contains("- Q3 sales.csv: `/attachments/Q3_sales.csv` (text/csv, 34 bytes)")
    );
    assert!(
        block
            .text
            .contains("- notes.md: `/attachments/notes.md` (text/markdown, 19 bytes)")
    );
    assert!(!block.text.contains("north,120"), "content is never inlined");
    assert_eq!(section(&requests[1]), Some(block), "byte-identical on every call");
    insta::assert_snapshot!("attachments_section", block.text);

    // The model read the file with read_file.
    let read = Message::Tool(tool_result(&out.state.messages, "r1").clone()).text();
    assert!(read.contains("north,120"), "{read}");

    // Recorded in the public slot; the hand-over slot is gone.
    let list = out.state.get(&ATTACHMENTS).unwrap().unwrap();
    assert_eq!(
        list,
        vec![
            Attachment {
                name: "Q3 sales.csv".into(),
                path: "/attachments/Q3_sales.csv".into(),
                size: CSV.len() as u64,
                media_type: "text/csv".into(),
            },
            Attachment {
                name: "notes.md".into(),
                path: "/attachments/notes.md".into(),
                size: 19,
                media_type: "text/markdown".into(),
            },
        ]
    );
    assert!(out.state.get(&NEW_ATTACHMENTS).unwrap().is_none());
    assert_eq!(
        backend
            .read_to_string(&VirtualPath::parse("/attachments/Q3_sales.csv").unwrap())
            .await
            .unwrap(),
        CSV
    );

    // A later run adds to the list; a clashing name never replaces the earlier file.
    let model2 = Arc::new(ScriptedModel::new().then_text("ok"));
    let agent2 = Agent::builder(model2.clone())
        .checkpointer(agent.checkpointer().unwrap().clone())
        .middleware(AttachmentsMiddleware::new())
        .build()
        .unwrap();
    let input = store
        .attach(
            RunInput::human("And this one.").thread(out.thread_id.clone()),
            [Upload::new("notes.md", "Second notes.")],
        )
        .await
        .unwrap();
    let out2 = agent2.run(input).await.unwrap();
    let list = out2.state.get(&ATTACHMENTS).unwrap().unwrap();
    let paths: Vec<&str> = list.iter().map(|a| a.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/attachments/Q3_sales.csv",
            "/attachments/notes.md",
            "/attachments/notes-2.md"
        ]
    );
    assert_eq!(
        backend
            .read_to_string(&VirtualPath::parse("/attachments/notes.md").unwrap())
            .await
            .unwrap(),
        "Call Ana on Monday."
    );
    assert!(
        section(&model2.last_request().unwrap())
            .unwrap()
            .text
            .contains("notes-2.md")
    );
}

#[tokio::test]
async fn no_attachments_no_section_and_limits_hold() {
    let model = Arc::new(ScriptedModel::new().then_text("ok"));
    let agent = Agent::builder(model.clone())
        .middleware(AttachmentsMiddleware::new())
        .build()
        .unwrap();
    agent.run(RunInput::human("hi")).await.unwrap();
    assert!(section(&model.last_request().unwrap()).is_none());

    let store = AttachmentStore::new(Arc::new(StateBackend::new())).with_max_bytes(4);
    let err = store.store(Upload::new("big.txt", "12345")).await.unwrap_err();
    assert!(
        matches!(
            err,
            AttachmentError::TooLarge {
                size: 5,
                limit: 4,
                ..
            }
        ),
        "{err}"
    );

    // Records handed over as JSON (files uploaded elsewhere) are listed too.
    let model = Arc::new(ScriptedModel::new().then_text("ok"));
    let agent = Agent::builder(model.clone())
        .middleware(AttachmentsMiddleware::new())
        .build()
        .unwrap();
    agent
        .run(RunInput::human("hi").slot_json(
            "new_attachments",
            json!([{"name": "scan\nof id.png", "path": "/uploads/scan.png", "size": 2048, "media_type": "image/png"}]),
        ))
        .await
        .unwrap();
    let text = section(&model.last_request().unwrap()).unwrap().text.clone();
    assert!(
        text.ends_with("- scan of id.png: `/uploads/scan.png` (image/png, 2.0 KB)"),
        "{text}"
    );
}
