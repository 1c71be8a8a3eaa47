// Rendering of the conversation: one list item per message, a tool call folded into a card with
// its name, arguments and result (the tool message answering it), and under a `task` call the
// subagent's own record (type, status, time, tokens, cost) from the run records. Items are keyed
// by message id and only rebuilt when they change, so a card the user opened or closed stays so
// while the rest of the reply streams.
import { h, pretty } from "./dom.js";
import { textOf } from "./conversation.js";

const ROLE = { human: "You", ai: "Agent", system: "System", tool: "Tool" };

/** Renders messages into an <ol>. */
export class MessageView {
  constructor(list) {
    this.list = list;
    this.items = new Map(); // id → {key, li}
    this.subagents = new Map(); // task call id → subagent run record
    this.waiting = new Set(); // tool call ids waiting for approval
  }

  /** Show `messages` (the tool messages go into their calls' cards). */
  render(messages) {
    const results = new Map();
    for (const m of messages) if (m.type === "tool") results.set(m.tool_call_id, m);
    const answered = new Set();
    for (const m of messages) for (const c of m.tool_calls ?? []) answered.add(c.id);
    const shown = messages.filter((m) => m.type !== "tool" || !answered.has(m.tool_call_id));
    const next = new Map();
    const items = shown.map((m, i) => {
      const id = m.id ?? `i-${i}`;
      const calls = (m.tool_calls ?? []).map((c) => [c, results.get(c.id), this.subagents.get(c.id), this.waiting.has(c.id)]);
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
    const opened = new Set();
    old?.querySelectorAll("details").forEach((d) => d.open || opened.add(d.dataset.call));
    const text = textOf(m.content);
    const role = m.type === "AIMessageChunk" ? "ai" : m.type;
    const source = m.additional_kwargs?.trellis_source;
    return h(
      "li",
      { class: `msg msg-${role}`, "data-id": m.id ?? "" },
      h("div", { class: "who" }, ROLE[role] ?? role, source ? ` (${source})` : "", m.partial ? " …" : ""),
      text ? h("div", { class: "text" }, text) : null,
      role === "tool" ? h("pre", { class: "result" }, text) : null,
      calls.map(([call, result, sub, waiting]) => card(call, result, sub, waiting, !opened.has(call.id))),
    );
  }
}

/** A tool call's card. */
function card(call, result, subagent, waiting, open) {
  const status = result
    ? result.status === "error" ? "error" : "done"
    : waiting ? "waiting for approval" : "running";
  return h(
    "details",
    { class: `card card-${status.split(" ")[0]}`, open, "data-call": call.id ?? "", "data-tool": call.name },
    h("summary", {}, h("span", { class: "tool" }, call.name || "tool"), " ", h("span", { class: "badge" }, status)),
    h("div", { class: "label" }, "Arguments"),
    h("pre", { class: "args" }, pretty(call.args ?? {})),
    result ? [h("div", { class: "label" }, "Result"), h("pre", { class: "result" }, textOf(result.content))] : null,
    subagent ? subagentBlock(subagent) : null,
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
