// The JS client test of `trellis serve`: the official `@langchain/langgraph-sdk` (pinned by
// `cargo xtask`) and its React hook `useStream`, rendered under Node by react-test-renderer, the
// way deep-agents-ui and agent-chat-ui use it. It sends one message on a new thread and prints one
// JSON object on stdout: what the hook held on each render while the run streamed, what it held
// once the run finished, and what the plain client reads back. The Rust side (js_client.rs)
// asserts on it.
//
// Environment: TRELLIS_LANGGRAPH_NODE_MODULES (the node_modules with the SDK and React), URL.
import { createRequire } from "node:module";
import path from "node:path";

const modules = process.env.TRELLIS_LANGGRAPH_NODE_MODULES;
const require = createRequire(path.join(modules, "noop.js"));
const React = require("react");
const TestRenderer = require("react-test-renderer");
const { useStream } = await import(path.join(modules, "@langchain/langgraph-sdk/dist/react/index.js"));
const { Client } = await import(path.join(modules, "@langchain/langgraph-sdk/dist/index.js"));

globalThis.IS_REACT_ACT_ENVIRONMENT = true;
const url = process.env.URL;

const plain = (messages) =>
  (messages ?? []).map((m) => ({
    id: m.id,
    type: m.type,
    content: m.content,
    tool_calls: (m.tool_calls ?? []).map((c) => ({ id: c.id, name: c.name, args: c.args })),
    tool_call_id: m.tool_call_id ?? null,
  }));

const renders = [];
let hook = null;
let threadId = null;
function App() {
  const stream = useStream({
    apiUrl: url,
    assistantId: "agent",
    messagesKey: "messages",
    onThreadId: (id) => {
      threadId = id;
    },
  });
  hook = stream;
  renders.push({ loading: stream.isLoading, messages: plain(stream.messages) });
  return null;
}

const settle = async (done, what) => {
  for (let i = 0; i < 600; i++) {
    if (done()) return;
    await TestRenderer.act(() => new Promise((resolve) => setTimeout(resolve, 50)));
  }
  throw new Error(`timed out waiting for ${what}`);
};

let root;
await TestRenderer.act(async () => {
  root = TestRenderer.create(React.createElement(App));
});
await TestRenderer.act(async () => {
  await hook.submit({ messages: [{ type: "human", content: "list files", id: "human-1" }] });
});
await settle(() => !hook.isLoading && threadId != null, "the run to finish");
// After a run the hook reads the thread's state back; wait for it to show the final answer.
await settle(
  () => hook.messages.length >= 4 && hook.messages.at(-1).content === "Streamed answer.",
  "the final state"
);
const error = hook.error ? String(hook.error) : null;
const final = plain(hook.messages);
const values = hook.values ?? {};
root.unmount();

const client = new Client({ apiUrl: url });
const state = await client.threads.getState(threadId);

process.stdout.write(
  JSON.stringify({
    thread_id: threadId,
    error,
    while_streaming: renders.filter((r) => r.loading).map((r) => r.messages),
    final,
    value_keys: Object.keys(values).sort(),
    state_messages: plain(state.values?.messages),
  }) + "\n"
);
