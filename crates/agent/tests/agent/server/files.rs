//! A thread's files over the API: `values.files` in Deep Agents' file-data shape (text inline,
//! large and binary files with a download link), `update_state` with `files` (version-checked,
//! through the Python client), and Trellis's upload / download routes: an upload the agent reads
//! on the next run, the download of a file the agent wrote, and hostile paths refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};

use super::harness::{Served, http};
use super::sdk::script;
use crate::cli::harness::calls_then_done;
use crate::support::skip_unless_langgraph;

/// The status and JSON body (or text) of a response.
async fn answer(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// `url?path=PATH`, the path percent-encoded.
fn q(url: &str, path: &str) -> String {
    let encoded: String = url::form_urlencoded::byte_serialize(path.as_bytes()).collect();
    format!("{url}?path={encoded}")
}

/// A server on `model` (in a new temporary folder) and a new thread's id.
async fn with_thread(model: &wiremock::MockServer) -> (tempfile::TempDir, Served, String) {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), model, None);
    let response = http()
        .post(format!("{}/threads", served.url))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    let (_, thread) = answer(response).await;
    let tid = thread["thread_id"].as_str().unwrap().to_owned();
    (dir, served, tid)
}

/// `POST /threads/{tid}/runs/wait` with one user message: the status and the result.
async fn wait(url: &str, tid: &str, text: &str) -> (u16, Value) {
    let run = json!({"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": text}]}});
    let response = http()
        .post(format!("{url}/threads/{tid}/runs/wait"))
        .json(&run)
        .send()
        .await
        .unwrap();
    answer(response).await
}

/// A model whose first reply writes `/report.md`, then answers `done`.
async fn writes_report() -> wiremock::MockServer {
    calls_then_done(vec![
        json!({"type": "tool_use", "id": "toolu_w", "name": "write_file",
        "input": {"file_path": "/report.md", "content": "# Report\nall good\n"}}),
    ])
    .await
}

/// A file the agent wrote is in the state as Deep Agents file data; large and binary files are
/// listed without content but with a link that downloads their exact bytes; an update with the
/// version the client read writes, one with a stale version is a 409 and changes nothing; the
/// whole listing sent back (as deep-agents-ui's file panel does) leaves the omitted files as they
/// were; `null` deletes; bad paths, encodings and shapes are 422.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_in_state_and_version_checked_updates() {
    let py = skip_unless_langgraph!();
    script(&py, writes_report().await, None, r##"
import base64, httpx

async def main():
    c = get_client(url=URL, api_key=None)
    tid = (await c.threads.create())["thread_id"]
    await c.runs.wait(tid, "agent", input={"messages": [{"role": "user", "content": "write the report"}]})
    files = (await c.threads.get_state(tid))["values"]["files"]
    rep = files["/report.md"]
    assert rep["content"] == "# Report\nall good\n" and rep["encoding"] == "utf-8", rep
    assert rep["modified_at"] and rep["created_at"] and rep["version"] and rep["size"] == 18, rep
    assert "download_url" not in rep, rep
    big = "x" * (300 * 1024)
    blob = bytes(range(256))
    await c.threads.update_state(tid, {"files": {
        "/big.txt": {"content": big},
        "/bin/blob.bin": {"content": base64.b64encode(blob).decode(), "encoding": "base64"},
        "/lines.md": {"content": ["a", "b"]},
    }})
    files = (await c.threads.get_state(tid))["values"]["files"]
    assert files["/big.txt"]["omitted"] == "too_large" and files["/big.txt"]["content"] == "", files["/big.txt"]
    assert files["/big.txt"]["size"] == len(big)
    assert files["/bin/blob.bin"]["omitted"] == "binary", files["/bin/blob.bin"]
    assert files["/lines.md"]["content"] == "a\nb", files["/lines.md"]
    async with httpx.AsyncClient(base_url=URL) as raw:
        for path, want in [("/big.txt", big.encode()), ("/bin/blob.bin", blob)]:
            r = await raw.get(files[path]["download_url"])
            assert r.status_code == 200 and r.content == want, (path, r.status_code)
    v = files["/report.md"]["version"]
    await c.threads.update_state(tid, {"files": {"/report.md": {"content": "v2", "version": v}}})
    await expect_status(409, c.threads.update_state(tid, {"files": {"/report.md": {"content": "stale", "version": v}}}))
    files = (await c.threads.get_state(tid))["values"]["files"]
    assert files["/report.md"]["content"] == "v2", files["/report.md"]
    await c.threads.update_state(tid, {"files": files})
    async with httpx.AsyncClient(base_url=URL) as raw:
        r = await raw.get(f"/threads/{tid}/files", params={"path": "/big.txt"})
        assert r.content == big.encode(), "an omitted file sent back is left alone"
    await c.threads.update_state(tid, {"files": {"/report.md": None}})
    files = (await c.threads.get_state(tid))["values"]["files"]
    assert "/report.md" not in files and "/big.txt" in files, list(files)
    for bad in [{"rel.md": {"content": "x"}}, {"/../x": {"content": "x"}}, {"/a\u0000b": {"content": "x"}},
                {"/a": {"content": "x", "encoding": "rot13"}}, {"/a": {"content": "!!", "encoding": "base64"}},
                {"/a": {"encoding": "utf-8"}}, {"/a": "text"}, {"/": {"content": "x"}}]:
        await expect_status(422, c.threads.update_state(tid, {"files": bad}))
    await expect_status(422, c.threads.update_state(tid, {"files": ["x"]}))
    assert "/a" not in (await c.threads.get_state(tid))["values"]["files"]
    print("ok")

asyncio.run(main())
"##).await;
}

/// A file uploaded into the thread's `/uploads` is listed to the model on the next run (the
/// attachments middleware puts its path in the request) and the agent reads it with `read_file`;
/// a multipart form uploads several files at once, and a taken name gets a new one; the upload
/// downloads as it was sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_is_read_by_the_agent_on_the_next_run() {
    let model = calls_then_done(vec![
        json!({"type": "tool_use", "id": "toolu_r", "name": "read_file",
        "input": {"file_path": "/uploads/notes.txt"}}),
    ])
    .await;
    let (_dir, served, tid) = with_thread(&model).await;
    let (u, c) = (&served.url, http());
    let upload = |name: &str, body: &'static [u8]| {
        c.post(q(&format!("{u}/threads/{tid}/files"), name))
            .header("content-type", "text/plain")
            .body(body)
            .send()
    };
    let (status, up) = answer(upload("notes.txt", b"secret plan: 42\n").await.unwrap()).await;
    assert_eq!(status, 200, "{up}");
    let up = &up["uploads"][0];
    assert_eq!(up["path"], "/uploads/notes.txt", "{up}");
    assert_eq!(
        (up["size"].as_u64(), up["media_type"].as_str()),
        (Some(16), Some("text/plain"))
    );
    // A form with two files, one of them named as the first upload.
    let boundary = "trellis-test-boundary";
    let form = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"notes.txt\"\r\n\
         Content-Type: text/plain\r\n\r\nanother\n\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"data.csv\"\r\n\r\na,b\n1,2\n\r\n\
         --{boundary}--\r\n"
    );
    let response = c
        .post(format!("{u}/threads/{tid}/files"))
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(form)
        .send()
        .await
        .unwrap();
    let (status, form) = answer(response).await;
    assert_eq!(status, 200, "{form}");
    let paths: Vec<&str> = form["uploads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["/uploads/notes-2.txt", "/uploads/data.csv"], "{form}");
    assert_eq!(form["uploads"][1]["media_type"], "text/csv", "{form}");

    let (status, out) = wait(u, &tid, "what is in my notes?").await;
    assert_eq!(status, 200, "{out}");
    let messages = out["messages"].as_array().unwrap();
    let kinds: Vec<&str> = messages.iter().map(|m| m["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["human", "ai", "tool", "ai"], "{out}");
    assert_eq!(messages[2]["status"], "success", "{}", messages[2]);
    assert!(
        messages[2]["content"].to_string().contains("secret plan: 42"),
        "the agent read the upload: {}",
        messages[2]
    );
    let first = &model.received_requests().await.unwrap()[0];
    let request = String::from_utf8_lossy(&first.body);
    assert!(
        ["/uploads/notes.txt", "/uploads/notes-2.txt", "/uploads/data.csv"]
            .iter()
            .all(|p| request.contains(p)),
        "the model was told about every upload: {request}"
    );

    let download = c.get(q(&format!("{u}/threads/{tid}/files"), "/uploads/notes.txt"));
    let response = download.send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let disposition = response.headers()["content-disposition"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(disposition, "attachment; filename=\"notes.txt\"");
    assert_eq!(response.bytes().await.unwrap().as_ref(), b"secret plan: 42\n");
}

/// Hostile names and paths are 4xx with a `detail` (never a 5xx), an oversized upload is 413, and
/// nothing lands outside the thread's own files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_paths_and_oversized_uploads_are_refused() {
    let model = writes_report().await;
    let (dir, served, tid) = with_thread(&model).await;
    let (u, c) = (&served.url, http());
    let (status, _) = wait(u, &tid, "report").await;
    assert_eq!(status, 200);
    let files = format!("{u}/threads/{tid}/files");
    for name in [
        "../escape.txt",
        "/etc/passwd",
        "a\0b.txt",
        "a/b.txt",
        "..",
        "",
        "a\\b.txt",
        "..\\x",
    ] {
        let (status, body) = answer(c.post(q(&files, name)).body("x").send().await.unwrap()).await;
        assert_eq!(status, 422, "upload {name:?}: {body}");
        assert!(body["detail"].is_string(), "{body}");
    }
    let (status, body) = answer(c.post(&files).body("x").send().await.unwrap()).await;
    assert_eq!(status, 422, "no path: {body}");
    let multipart = "multipart/form-data; boundary=b";
    for part in [
        "Content-Disposition: form-data; name=\"f\"; filename=\"../escape.txt\"",
        "Content-Disposition: form-data; name=\"f\"; filename=\"/etc/passwd\"",
        "Content-Disposition: form-data; name=\"f\"",
    ] {
        let form = format!("--b\r\n{part}\r\n\r\nx\r\n--b--\r\n");
        let response = c.post(&files).header("content-type", multipart).body(form).send();
        let (status, body) = answer(response.await.unwrap()).await;
        assert_eq!(status, 422, "form part {part:?}: {body}");
    }
    let response = c
        .post(&files)
        .header("content-type", multipart)
        .body("--b\r\nbroken");
    let (status, body) = answer(response.send().await.unwrap()).await;
    assert!(status == 400 || status == 422, "a broken form: {status} {body}");
    for path in [
        "/../etc/passwd",
        "report.md",
        "/a\0b",
        "/",
        "/uploads/%2e%2e/x",
        "C:\\x",
    ] {
        let (status, body) = answer(c.get(q(&files, path)).send().await.unwrap()).await;
        assert_eq!(status, 422, "download {path:?}: {body}");
        assert!(body["detail"].is_string(), "{body}");
    }
    let (status, _) = answer(c.get(q(&files, "/nope.md")).send().await.unwrap()).await;
    assert_eq!(status, 404);
    // Paths that pass as paths but not against the files there: under a file, onto a directory.
    for path in ["/report.md/inner", "/report.md/inner/deeper.md"] {
        let (status, body) = answer(c.get(q(&files, path)).send().await.unwrap()).await;
        assert!(matches!(status, 404 | 422), "download {path:?}: {status} {body}");
    }
    let state = format!("{u}/threads/{tid}/state");
    for path in ["/report.md/inner", "/report.md/a/b"] {
        let update = json!({"values": {"files": {path: {"content": "x"}}}});
        let (status, body) = answer(c.post(&state).json(&update).send().await.unwrap()).await;
        assert!(matches!(status, 409 | 422), "update {path:?}: {status} {body}");
    }
    let onto_dir = json!({"values": {"files": {"/uploads": {"content": "x"}}}});
    let (_, _) = answer(c.post(q(&files, "first.txt")).body("x").send().await.unwrap()).await;
    let (status, body) = answer(c.post(&state).json(&onto_dir).send().await.unwrap()).await;
    assert_eq!(status, 422, "a directory: {body}");
    let (status, body) = answer(
        c.post(q(&files, "big.bin"))
            .body(vec![0u8; 26 * 1024 * 1024])
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 413, "{body}");
    // The server closed that connection without reading the rest of the body: a new client.
    let c = http();
    let (status, body) = answer(c.get(q(&files, "/report.md")).send().await.unwrap()).await;
    assert_eq!(
        (status, body),
        (200, Value::String("# Report\nall good\n".into()))
    );
    let (status, _) = answer(
        c.get(q(
            &format!("{u}/threads/00000000-0000-4000-8000-000000000000/files"),
            "/report.md",
        ))
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 404);
    // Everything the server wrote is under the state dir, and no hostile name made a file.
    let mut names = Vec::new();
    let mut stack = vec![dir.path().to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            names.push(path.file_name().unwrap().to_string_lossy().into_owned());
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    for bad in ["escape.txt", "passwd", "big.bin", "a_b.txt"] {
        assert!(!names.iter().any(|n| n == bad), "{bad} was written: {names:?}");
    }
}

/// Malformed bodies and parameters on every state, history, update, file and copy route: each a
/// 4xx with a `detail`, never a 5xx, and the thread is as it was afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_on_state_routes_is_4xx_and_changes_nothing() {
    let model = writes_report().await;
    let (_dir, served, tid) = with_thread(&model).await;
    let (u, c) = (&served.url, http());
    assert_eq!(wait(u, &tid, "report").await.0, 200);
    let t = format!("{u}/threads/{tid}");
    let (_, before) = answer(c.get(format!("{t}/state")).send().await.unwrap()).await;
    let nested = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let posts: Vec<(&str, String)> = vec![
        ("history", r#"{"limit": -1}"#.into()),
        ("history", r#"{"limit": "ten"}"#.into()),
        ("history", r#"{"before": 5}"#.into()),
        ("history", r#"{"before": {"checkpoint_id": "x"}}"#.into()),
        ("history", r#"{"checkpoint": {"checkpoint_ns": "tools:1"}}"#.into()),
        ("history", r#"{"metadata": []}"#.into()),
        ("history", r#"{"unknown": 1}"#.into()),
        ("history", nested.clone()),
        ("state", r#"{"values": 5}"#.into()),
        ("state", r#"{"values": [["messages", []]]}"#.into()),
        ("state", r#"{"values": {"messages": 5}}"#.into()),
        ("state", r#"{"values": {"messages": [{"type": "ai", "tool_calls": 5}]}}"#.into()),
        ("state", r#"{"values": {"messages": [{"type": "tool", "tool_call_id": 5}]}}"#.into()),
        ("state", r#"{"values": {"messages": [{"type": "human", "content": 5}]}}"#.into()),
        ("state", r#"{"values": {"files": {"/a": {"content": 5}}}}"#.into()),
        ("state", r#"{"values": {"files": {"/a": {"content": "x", "version": 5}}}}"#.into()),
        ("state", r#"{"values": {"todos": [{"content": "x", "status": "done"}]}}"#.into()),
        ("state", r#"{"as_node": 5}"#.into()),
        ("state", r#"{"checkpoint": "x"}"#.into()),
        ("state", r#"{"checkpoint_id": "00000000-0000-4000-8000-000000000000"}"#.into()),
        ("state", r#"{"checkpoint": {"checkpoint_id": "00000000-0000-4000-8000-000000000000", "thread_id": "00000000-0000-4000-8000-000000000001"}}"#.into()),
        ("state", "{\"values\": ".into()),
        ("state", nested),
        ("state/checkpoint", r#"{}"#.into()),
        ("state/checkpoint", r#"{"checkpoint": {"checkpoint_id": 1}}"#.into()),
        ("copy", r#"{"x": "#.into()),
    ];
    for (route, body) in posts {
        let response = c
            .post(format!("{t}/{route}"))
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        let (status, answer) = answer(response).await;
        let shown: String = body.chars().take(80).collect();
        assert!((400..500).contains(&status), "{route} {shown}: {status} {answer}");
        assert!(answer["detail"].is_string(), "{route} {shown}: {answer}");
    }
    for path in [
        "state/not-a-uuid",
        "state/00000000-0000-4000-8000-000000000000",
        "history?limit=-1",
    ] {
        let (status, answer) = answer(c.get(format!("{t}/{path}")).send().await.unwrap()).await;
        assert!((400..500).contains(&status), "{path}: {status} {answer}");
    }
    let (_, after) = answer(c.get(format!("{t}/state")).send().await.unwrap()).await;
    assert_eq!(after, before, "no bad request changed the thread");
}

/// An update, an upload and a copy outlive a `kill -9` of the server: after a restart on the same
/// state dir the history (ids and values), the files, the copy and the upload's listing are as
/// they were, and the next run names the upload to the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_uploads_and_copies_survive_a_kill() {
    let model = writes_report().await;
    let (dir, served, tid) = with_thread(&model).await;
    let c = http();
    let u = served.url.clone();
    assert_eq!(wait(&u, &tid, "report").await.0, 200);
    let t = format!("{u}/threads/{tid}");
    let update = json!({"values": {"todos": [{"content": "ship", "status": "pending"}],
        "files": {"/notes.md": {"content": "kept"}}}});
    assert_eq!(
        answer(c.post(format!("{t}/state")).json(&update).send().await.unwrap())
            .await
            .0,
        200
    );
    let (status, _) = answer(
        c.post(q(&format!("{t}/files"), "plan.txt"))
            .body("the plan")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    let (_, copy) = answer(c.post(format!("{t}/copy")).send().await.unwrap()).await;
    let copy_id = copy["thread_id"].as_str().unwrap().to_owned();
    let history = |base: String| {
        let c = http();
        async move {
            let body = json!({"limit": 100});
            answer(
                c.post(format!("{base}/history"))
                    .json(&body)
                    .send()
                    .await
                    .unwrap(),
            )
            .await
            .1
        }
    };
    let before = (
        history(t.clone()).await,
        history(format!("{u}/threads/{copy_id}")).await,
    );
    served.kill();

    let served = Served::start(dir.path(), &model, None);
    let u = served.url.clone();
    let t = format!("{u}/threads/{tid}");
    let after = (
        history(t.clone()).await,
        history(format!("{u}/threads/{copy_id}")).await,
    );
    assert_eq!(
        after, before,
        "the histories of the thread and its copy are as they were"
    );
    let files = &after.0[0]["values"]["files"];
    assert_eq!(files["/notes.md"]["content"], "kept", "{files}");
    assert_eq!(files["/uploads/plan.txt"]["content"], "the plan", "{files}");
    assert_eq!(after.0[0]["values"]["todos"][0]["content"], "ship");
    let (status, _) = wait(&u, &tid, "go on").await;
    assert_eq!(status, 200);
    let requests = model.received_requests().await.unwrap();
    let last = String::from_utf8_lossy(&requests.last().unwrap().body).into_owned();
    assert!(
        last.contains("/uploads/plan.txt"),
        "the upload is still listed to the model: {last}"
    );
}
