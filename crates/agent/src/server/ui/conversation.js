// The conversation of the open thread: the thread's last `values` (authoritative, from the state
// or a stream's `values` event) plus what is still streaming (token deltas of a reply and tool
// results of the `messages-tuple` mode, and the message the user just sent), kept by message id.
// A streamed message whose id is in the values is dropped, so a message never shows twice, and a
// stream replayed from its start after a reload rebuilds what the page had missed exactly once.
// A subagent's events (`stream_subgraphs`: `values|tools:<task id>`, `messages|tools:<task id>`)
// go to a Conversation of its own, kept under the `task` call that started it (the `tasks` mode
// names the call of each task id).

export class Conversation {
  constructor() {
    this.reset();
  }

  /** Forget everything (another thread was opened). */
  reset() {
    this.values = { messages: [] };
    this.streaming = new Map();
    this.tasks = new Map(); // task id → tool call id
    this.subs = new Map(); // task call id → Conversation
  }

  /** A `tasks` event: a tool task names the call it runs. */
  task(data) {
    const call = data?.input;
    if (data?.id && call?.id && call.name === "task") this.tasks.set(data.id, call.id);
  }

  /**
   * The Conversation of the subagent of namespace `ns` (`tools:<task id>`, or a nested
   * `tools:<id>|tools:<id>`: kept under the outermost call), or null when its call is not known.
   */
  sub(ns) {
    const call = this.tasks.get(ns.split("|")[0].replace(/^tools:/, ""));
    if (!call) return null;
    if (!this.subs.has(call)) this.subs.set(call, new Conversation());
    return this.subs.get(call);
  }

  /** The ids in the values. */
  known() {
    return new Set((this.values.messages ?? []).map((m) => m.id));
  }

  /** A `values` event or a state's values: they replace what streamed for the same messages. */
  setValues(values) {
    this.values = values && typeof values === "object" ? values : { messages: [] };
    const known = this.known();
    for (const id of [...this.streaming.keys()]) if (known.has(id)) this.streaming.delete(id);
  }

  /** The user's message, shown before the server has saved it (same id: the server keeps it). */
  addLocal(message) {
    this.streaming.set(message.id, message);
  }

  /** One `messages` event's message: an AIMessageChunk delta or a whole (tool) message. */
  chunk(message) {
    if (!message || !message.id || this.known().has(message.id)) return;
    if (message.type !== "AIMessageChunk") {
      this.streaming.set(message.id, message);
      return;
    }
    let reply = this.streaming.get(message.id);
    if (!reply) {
      reply = { id: message.id, type: "ai", content: "", tool_calls: [], partial: true, calls: new Map() };
      this.streaming.set(message.id, reply);
    }
    if (typeof message.content === "string") reply.content += message.content;
    // A chunk's `index` is the block's place in the reply (text blocks count too), so calls are
    // kept by index and listed in the order they started.
    for (const piece of message.tool_call_chunks ?? []) {
      const index = piece.index ?? reply.calls.size;
      let call = reply.calls.get(index);
      if (!call) {
        call = { id: null, name: "", argsText: "", args: {} };
        reply.calls.set(index, call);
        reply.tool_calls.push(call);
      }
      if (piece.id) call.id = piece.id;
      if (piece.name) call.name = piece.name;
      if (piece.args) {
        call.argsText += piece.args;
        try {
          call.args = JSON.parse(call.argsText);
        } catch {
          call.args = call.argsText; // still arriving
        }
      }
    }
  }

  /** Every message to show, in order: the values', then what is still streaming. */
  messages() {
    const known = this.known();
    const rest = [...this.streaming.values()].filter((m) => !known.has(m.id));
    return [...(this.values.messages ?? []), ...rest];
  }

  /** The interrupt the thread waits on, from the values (`__interrupt__`), or null. */
  interrupt() {
    const list = this.values.__interrupt__;
    return Array.isArray(list) && list.length ? list[0] : null;
  }
}

/** The text of a message's content: a string, or the text of its blocks. */
export function textOf(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .map((block) => (typeof block === "string" ? block : block?.text ?? ""))
    .join("");
}
