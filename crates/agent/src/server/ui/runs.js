// The runs panel: the thread's run records (GET /threads/{id}/runs) with status, timings and
// usage (tokens, cache hit ratio, cost), and the thread's totals. Also hands each run's subagent
// records and tool timings to the message view, for the cards.
import { $, h, fill, short, clock } from "./dom.js";
import { call } from "./api.js";

/** Load and show the runs of `thread`; returns them (newest first). */
export async function loadRuns(thread) {
  const runs = thread ? await call("GET", `/threads/${thread}/runs?limit=100`) : [];
  renderRuns(runs);
  return runs;
}

const money = (usd) => (usd == null ? "n/a" : `$${Number(usd).toFixed(4)}`);

function renderRuns(runs) {
  const rows = runs.map((run) => {
    const u = run.usage ?? {};
    const ms = run.started_at && run.ended_at ? new Date(run.ended_at) - new Date(run.started_at) : null;
    return h(
      "tr",
      { "data-status": run.status },
      h("td", { title: run.run_id }, short(run.run_id)),
      h("td", {}, h("span", { class: `badge run-${run.status}` }, run.status)),
      h("td", { title: `started ${clock(run.started_at)}` }, ms !== null ? `${(ms / 1000).toFixed(1)} s` : "…"),
      h("td", {}, `${u.input_tokens ?? 0} / ${u.output_tokens ?? 0}`),
      h("td", {}, u.cache_hit_ratio == null ? "n/a" : `${Math.round(u.cache_hit_ratio * 100)}%`),
      h("td", {}, money(u.cost_usd)),
    );
  });
  fill($("runs").tBodies[0], rows);
  const sum = (key) => runs.reduce((total, run) => total + (run.usage?.[key] ?? 0), 0);
  const priced = runs.every((run) => run.usage?.cost_usd != null);
  $("usage-total").textContent = runs.length
    ? `This thread: ${runs.length} run${runs.length === 1 ? "" : "s"}, ${sum("model_calls")} model calls, ` +
      `${sum("input_tokens")} tokens in, ${sum("output_tokens")} out, ${sum("cache_read_tokens")} from cache, ` +
      `cost ${priced ? money(sum("cost_usd")) : "n/a (a model has no price)"}`
    : "No runs since the server started.";
}

/** The subagent records of `runs`, by the `task` call id that started each. */
export function subagentsOf(runs) {
  const map = new Map();
  for (const run of runs) for (const sub of run.subagent_runs ?? []) map.set(sub.call_id, sub);
  return map;
}

/** The timings of `runs`' finished tool calls (`tool_runs`), by call id. */
export function timingsOf(runs) {
  const map = new Map();
  for (const run of runs) for (const t of run.tool_runs ?? []) map.set(t.call_id, t);
  return map;
}
