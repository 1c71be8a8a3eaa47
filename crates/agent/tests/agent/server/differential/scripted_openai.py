"""A scripted OpenAI-compatible chat-completions server for the differential test of `trellis serve`
against the reference server (`langgraph dev` with a Deep Agents graph). Both servers' models talk
to it, so both see the same replies.

The conversation is chosen by a marker in the first user message (`SCENARIO:<name>`), and the
step by how many assistant messages the request already holds. A subagent's conversation starts
with its task description, which carries the marker `SUBTASK`.

Usage: python scripted_openai.py PORT_FILE — listens on 127.0.0.1 (a free port, written to
PORT_FILE), answers `POST /v1/chat/completions` (streamed or not), and logs one line per request
to stderr.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def text(content):
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def call(name, args):
    return {"tool": name, "args": args}


# scenario -> replies by step. A reply is a list of text deltas, a tool call, or an error.
SCRIPTS = {
    "plain": [["Hello ", "there."]],
    "tools": [call("ls", {"path": "/"}), ["Listed ", "the files."]],
    "approval": [call("write_file", {"file_path": "/notes.md", "content": "hi\n"}), ["Written."]],
    "subagent": [
        call("task", {"description": "SUBTASK: count to three", "subagent_type": "general-purpose"}),
        ["The subagent ", "counted."],
    ],
    "subtask": [["One, two, ", "three."]],
    "error": [{"error": "scripted failure"}],
}


def choose(body):
    messages = body.get("messages", [])
    users = [text(m.get("content")) for m in messages if m.get("role") == "user"]
    first = users[0] if users else ""
    if "SUBTASK" in first:
        scenario = "subtask"
    else:
        scenario = next((s for s in SCRIPTS if f"SCENARIO:{s}" in first), None)
    if scenario is None:
        return None, None
    step = sum(1 for m in messages if m.get("role") == "assistant")
    script = SCRIPTS[scenario]
    return scenario, script[min(step, len(script) - 1)]


def chunk(delta, finish=None):
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "scripted",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def send_json(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        if not self.path.endswith("/chat/completions"):
            self.send_json(404, {"error": {"message": f"no route {self.path}"}})
            return
        scenario, reply = choose(body)
        sys.stderr.write(f"scripted: {scenario} stream={body.get('stream')} messages={len(body.get('messages', []))}\n")
        sys.stderr.flush()
        if reply is None:
            self.send_json(400, {"error": {"message": "no SCENARIO marker", "type": "invalid_request_error"}})
            return
        if isinstance(reply, dict) and "error" in reply:
            # 400: OpenAI clients retry 5xx, and the scenario is one failed call.
            self.send_json(400, {"error": {"message": reply["error"], "type": "invalid_request_error"}})
            return
        if body.get("stream"):
            self.stream(reply, body)
        else:
            self.whole(reply)

    def whole(self, reply):
        if isinstance(reply, dict):
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [{
                    "id": f"call_{reply['tool']}",
                    "type": "function",
                    "function": {"name": reply["tool"], "arguments": json.dumps(reply["args"])},
                }],
            }
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": "".join(reply)}
            finish = "stop"
        self.send_json(200, {
            "id": "chatcmpl-scripted", "object": "chat.completion", "created": 0, "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": USAGE,
        })

    def stream(self, reply, body):
        events = [chunk({"role": "assistant", "content": ""})]
        if isinstance(reply, dict):
            arguments = json.dumps(reply["args"])
            half = len(arguments) // 2
            events.append(chunk({"tool_calls": [{
                "index": 0, "id": f"call_{reply['tool']}", "type": "function",
                "function": {"name": reply["tool"], "arguments": arguments[:half]},
            }]}))
            events.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[half:]}}]}))
            events.append(chunk({}, "tool_calls"))
        else:
            events.extend(chunk({"content": piece}) for piece in reply)
            events.append(chunk({}, "stop"))
        if (body.get("stream_options") or {}).get("include_usage"):
            last = chunk({})
            last["choices"] = []
            last["usage"] = USAGE
            events.append(last)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        for event in events:
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    import os
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        sys.stdin.read()  # until the test closes our stdin (or dies)
    finally:
        server.shutdown()


if __name__ == "__main__":
    main()
