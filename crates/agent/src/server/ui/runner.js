// Runs of the open thread, streamed: a new run (POST /threads/{id}/runs/stream, resumable, modes
// values + messages-tuple + tasks, with stream_subgraphs for the subagents' own steps), or joining one already going (GET …/runs/{run}/stream). Joining after
// a reload asks for the whole stream (Last-Event-ID: -1): the Conversation drops what it already
// has by message id, so nothing is missed or shown twice. A connection lost mid-run is rejoined
// from the last event id seen.
import { raw, call, ApiError } from "./api.js";
import { events } from "./sse.js";

const MODES = ["values", "messages-tuple", "tasks"];
const REJOINS = 3;

export class Runner {
  /**
   * `conversation`: the Conversation to feed; `changed()` after every event; `started()` once the
   * run's id is known; `ended(error)` when the run's stream ends (error: the run's `error` event
   * or a failure, else null). A run that was detached from ends silently.
   */
  constructor(conversation, changed, started, ended) {
    this.conversation = conversation;
    this.changed = changed;
    this.started = started;
    this.ended = ended;
    this.active = null; // {thread, run, last, abort}
  }

  /** Whether a run is being followed. */
  busy() {
    return this.active !== null;
  }

  /** Start a run on `thread` with `body` (input or command, assistant_id) and follow it. */
  async start(thread, body) {
    const abort = new AbortController();
    const active = { thread, run: null, last: null, abort };
    this.active = active;
    const request = { ...body, stream_mode: MODES, stream_resumable: true, stream_subgraphs: true };
    try {
      const response = await raw(`/threads/${thread}/runs/stream`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(request),
        signal: abort.signal,
      });
      await this.follow(response);
    } catch (e) {
      return this.finish(active, e);
    }
  }

  /** Follow run `run` of `thread`, already going, from the start of its stream. */
  async join(thread, run) {
    const abort = new AbortController();
    this.active = { thread, run, last: "-1", abort };
    await this.follow(null);
  }

  /** Read `response` (or a join of the active run when null), rejoining when cut. */
  async follow(response) {
    const active = this.active;
    let error = null;
    for (let attempt = 0; attempt <= REJOINS; attempt++) {
      try {
        if (!response) {
          response = await raw(`/threads/${active.thread}/runs/${active.run}/stream`, {
            headers: { "last-event-id": active.last ?? "-1" },
            signal: active.abort.signal,
          });
        }
        for await (const event of events(response)) {
          if (event.id !== null) active.last = event.id;
          error = this.handle(active, event) ?? error;
        }
        return this.finish(active, error);
      } catch (e) {
        if (active.abort.signal.aborted || !active.run || e instanceof ApiError) return this.finish(active, e);
        response = null; // cut: rejoin from the last event seen, after a pause that grows
        await new Promise((resolve) => setTimeout(resolve, 1000 * (attempt + 1)));
      }
    }
    return this.finish(active, new Error("the run's stream was cut and could not be rejoined"));
  }

  /** One event; returns an error when the run reports one. */
  handle(active, { event, data }) {
    const bar = event.indexOf("|");
    if (bar > 0) {
      // A subagent's part: `values|tools:<task id>` or `messages|tools:<task id>`.
      const sub = this.conversation.sub(event.slice(bar + 1));
      const mode = event.slice(0, bar);
      if (sub && mode === "values") sub.setValues(data);
      else if (sub && mode === "messages" && Array.isArray(data)) sub.chunk(data[0]);
    } else if (event === "tasks") this.conversation.task(data);
    else if (event === "metadata") {
      active.run = data.run_id;
      this.started();
    } else if (event === "values") this.conversation.setValues(data);
    else if (event === "messages" && Array.isArray(data)) this.conversation.chunk(data[0]);
    else if (event === "error") return new Error(`${data.error}: ${data.message}`);
    this.changed();
    return null;
  }

  /** `active`'s stream ended; nothing to tell when it was detached (another thread opened). */
  finish(active, error) {
    if (this.active !== active || active.abort.signal.aborted) return;
    this.active = null;
    this.ended(error);
  }

  /** Ask the server to stop the active run (its stream then ends by itself). */
  async cancel() {
    const active = this.active;
    if (!active?.run) return;
    await call("POST", `/threads/${active.thread}/runs/${active.run}/cancel`);
  }

  /** Stop following (another thread was opened); the run goes on on the server. */
  detach() {
    this.active?.abort.abort();
    this.active = null;
  }
}
