// The thread list: the user's threads (POST /threads/search, newest first), searched by id (a
// whole UUID, or the start of one among the listed) or by `key=value` metadata; new and delete.
import { $, h, fill, short, say } from "./dom.js";
import { call } from "./api.js";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The search body for `query`, and a client-side filter for an id prefix. */
function searchOf(query) {
  const body = { limit: 100, sort_by: "updated_at", sort_order: "desc" };
  const q = query.trim();
  if (!q) return { body, keep: () => true };
  if (UUID.test(q)) return { body: { ...body, ids: [q.toLowerCase()] }, keep: () => true };
  const eq = q.indexOf("=");
  if (eq > 0) return { body: { ...body, metadata: { [q.slice(0, eq).trim()]: q.slice(eq + 1).trim() } }, keep: () => true };
  return { body: { ...body, limit: 1000 }, keep: (t) => t.thread_id.startsWith(q.toLowerCase()) };
}

/** A thread's name in the list: its title, else the start of its id. */
export const titleOf = (thread) => thread.metadata?.title || `Thread ${short(thread.thread_id)}`;

/**
 * Load and show the threads matching the search box. `selected` is the open thread's id;
 * `open(id)` opens one, `removed(id)` after a delete.
 */
export async function loadThreads(selected, open, removed) {
  const { body, keep } = searchOf($("thread-query").value);
  const threads = (await call("POST", "/threads/search", body)).filter(keep);
  if (!threads.length) return fill($("thread-list"), h("li", { class: "muted" }, "No threads."));
  fill(
    $("thread-list"),
    threads.map((t) =>
      h(
        "li",
        { class: "thread", "data-id": t.thread_id },
        h(
          "button",
          { type: "button", class: "open", "aria-current": t.thread_id === selected ? "true" : null, onclick: () => open(t.thread_id) },
          titleOf(t),
          h("span", { class: `badge thread-${t.status}` }, t.status),
        ),
        h(
          "button",
          {
            type: "button",
            class: "delete",
            "aria-label": `Delete ${titleOf(t)}`,
            onclick: async () => {
              try {
                await call("DELETE", `/threads/${t.thread_id}`);
                say(`Deleted ${titleOf(t)}`);
                removed(t.thread_id);
              } catch (e) {
                say(`Delete failed: ${e.detail ?? e.message}`);
              }
            },
          },
          "Delete",
        ),
      ),
    ),
  );
}

/** Create a thread titled `title`; its id. */
export async function newThread(title, graph) {
  const thread = await call("POST", "/threads", { metadata: { title }, graph_id: graph });
  return thread.thread_id;
}
