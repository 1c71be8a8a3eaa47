// Rendering of the conversation: one list item per message, a tool call folded into a card with
// its name, status, duration (from the run records' `tool_runs`), arguments and result (the tool
// message answering it). Under a `task` call: the subagent's run record (type, status, time,
// tokens, cost) and its own activity — its messages and tool cards as they streamed
// (`stream_subgraphs`), or, when the page did not see them stream (opened after the run), its
// tool calls from the run records. Items are keyed by message id and only rebuilt when they
// change, so a card the user opened or closed stays so while the rest of the reply streams.
import { h, pretty } from "./dom.js";
import { textOf } from "./conversation.js";

const ROLE = { human: "You", ai: "Agent", system: "System", tool: "Tool" };

/** Renders messages into an <ol>. */
export class MessageView {
  constructor(list) {
    this.list = list;
    this.items = new Map(); // id → {key, li}
    this.subagents = new Map(); // task call id → subagent run record
    this.timings = new Map(); // tool call id → its `tool_runs` entry
    this.waiting = new Set(); // tool call ids waiting for approval
    this.subs = new Map(); // task call id → the subagent's streamed Conversation
  }

  /** What a card of `call` shows besides the call: [result, subagent record, waiting, timing, activity]. */
  facts(call, results) {
    const sub = this.subs.get(call.id);
    const children = [...this.timings.values()].filter((t) => t.parent_call_id && t.parent_call_id === call.id);
    return [
      results.get(call.id),
      this.subagents.get(call.id),
      this.waiting.has(call.id),
      this.timings.get(call.id),
      sub ? { messages: sub.messages() } : children.length ? { tools: children } : null,
    ];
  }

  /** Show `messages` (the tool messages go into their calls' cards). */
  render(messages) {
    const { shown, results } = fold(messages);
    const next = new Map();
    const items = shown.map((m, i) => {
      const id = m.id ?? `i-${i}`;
      const calls = (m.tool_calls ?? []).map((c) => [c, ...this.facts(c, results)]);
      const key = JSON.stringify([m.content, m.type, m.status, calls]);
      const old = this.items.get(id);
      const li = old && old.key === key ? old.li : this.item(m, calls, old?.li);
      next.set(id, { key, li });
      return li;
    });
    this.items = next;
    const current = [...this.list.children];
    if (current.length !== items.length || current.some((el, i) => el !== items[i])) {
      this.list.replaceChildren(...items);
    }
  }

  /** The list item of one message. `old` keeps the open state of its cards. */
  item(m, calls, old) {
    const closed = new Set();
    old?.querySelectorAll("details").forEach((d) => d.open || closed.add(d.dataset.call));
    return messageItem(m, calls, closed, (call, results) => this.facts(call, results));
  }
}

/** The messages to show (tool messages answering a shown call left out) and the results by call id. */
function fold(messages) {
  const results = new Map();
  for (const m of messages) if (m.type === "tool") results.set(m.tool_call_id, m);
  const answered = new Set();
  for (const m of messages) for (const c of m.tool_calls ?? []) answered.add(c.id);
  return { shown: messages.filter((m) => m.type !== "tool" || !answered.has(m.tool_call_id)), results };
}

/** One message: who, text, and its calls' cards. `facts(call, results)` for nested calls. */
function messageItem(m, calls, closed, facts) {
  const text = textOf(m.content);
  const role = m.type === "AIMessageChunk" ? "ai" : m.type;
  const source = m.additional_kwargs?.trellis_source;
  return h(
    "li",
    { class: `msg msg-${role}`, "data-id": m.id ?? "" },
    h("div", { class: "who" }, ROLE[role] ?? role, source ? ` (${source})` : "", m.partial ? " …" : ""),
    text ? h("div", { class: "text" }, text) : null,
    role === "tool" ? h("pre", { class: "result" }, text) : null,
    calls.map(([call, ...rest]) => card(call, rest, !closed.has(call.id), facts)),
  );
}

/** A duration in ms as people read it. */
export const took = (ms) => (ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`);

/** A tool call's card. */
function card(call, [result, subagent, waiting, timing, activity], open, facts) {
  const status = result
    ? result.status === "error" ? "error" : "done"
    : waiting ? "waiting for approval" : "running";
  return h(
    "details",
    { class: `card card-${status.split(" ")[0]}`, open, "data-call": call.id ?? "", "data-tool": call.name },
    h(
      "summary",
      {},
      h("span", { class: "tool" }, call.name || "tool"),
      " ",
      h("span", { class: "badge" }, status),
      timing ? h("span", { class: "took" }, ` took ${took(timing.duration_ms)}`) : null,
    ),
    h("div", { class: "label" }, "Arguments"),
    h("pre", { class: "args" }, pretty(call.args ?? {})),
    result ? [h("div", { class: "label" }, "Result"), h("pre", { class: "result" }, textOf(result.content))] : null,
    subagent ? subagentBlock(subagent) : null,
    activity ? activityBlock(activity, facts) : null,
  );
}

/** The subagent a `task` call started, from its run record. */
function subagentBlock(sub) {
  const u = sub.usage ?? {};
  const ms = sub.ended_at ? new Date(sub.ended_at) - new Date(sub.started_at) : null;
  return h(
    "div",
    { class: "subagent" },
    h("div", { class: "label" }, `Subagent ${sub.subagent_type ?? ""}`),
    h(
      "p",
      {},
      `${sub.status}` +
        (ms !== null ? `, ${(ms / 1000).toFixed(1)} s` : "") +
        `, ${u.model_calls ?? 0} model calls, ${u.tool_calls ?? 0} tool calls, ` +
        `${u.input_tokens ?? 0} in / ${u.output_tokens ?? 0} out tokens` +
        (u.cost_usd != null ? `, $${Number(u.cost_usd).toFixed(4)}` : ""),
    ),
  );
}

/** What the subagent did: its streamed messages with their cards, or its calls from the records. */
function activityBlock(activity, facts) {
  if (activity.messages) {
    const { shown, results } = fold(activity.messages);
    const items = shown.map((m) =>
      messageItem(m, (m.tool_calls ?? []).map((c) => [c, ...facts(c, results)]), new Set(), facts),
    );
    return h("div", { class: "activity" }, h("div", { class: "label" }, "Subagent activity"), h("ol", { class: "messages nested" }, items));
  }
  return h(
    "div",
    { class: "activity" },
    h("div", { class: "label" }, "Subagent tool calls"),
    h(
      "ul",
      { class: "nested-tools" },
      activity.tools.map((t) => h("li", { "data-tool": t.name }, h("span", { class: "tool" }, t.name), ` ${t.status}, took ${took(t.duration_ms)}`)),
    ),
  );
}
