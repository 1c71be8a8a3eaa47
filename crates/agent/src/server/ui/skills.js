// The skills panel and `/NAME` pinning, as `trellis chat` does it: the skills the open thread's
// runs see (GET /threads/{id}/skills, a Trellis extension), searched by words; *Pin* (or a
// message that is just `/NAME`) keeps NAME for the next message, and a message `/NAME text` sends
// `text` with NAME pinned (the run's `input.pin_skills`): the skill's instructions go with the
// next model call. `//text` sends `/text` as it is; `/NAME` for a name that is no skill is refused
// and names the closest skills, so a typo never reaches the model.
import { $, h, fill, say } from "./dom.js";
import { call } from "./api.js";

const pins = []; // names pinned for the next message

/** The skills route of `thread` with query `params`. */
const route = (thread, params) => `/threads/${thread}/skills?${new URLSearchParams(params)}`;

/** Load and show the skills of `thread` matching the search box (none without a thread). */
export async function loadSkills(thread, graph) {
  if (!thread) return fill($("skills"), h("li", { class: "muted" }, "Open a thread to see its skills."));
  const q = $("skill-query").value.trim();
  const skills = await call("GET", route(thread, { q, limit: 100, assistant_id: graph }));
  if (!skills.length) return fill($("skills"), h("li", { class: "muted" }, q ? "No skill matches." : "No skills."));
  fill(
    $("skills"),
    skills.map((s) =>
      h(
        "li",
        { class: "skill", "data-name": s.name },
        h("div", {}, h("span", { class: "path" }, `/${s.name}`), " ", h("span", { class: "badge" }, s.source)),
        h("div", { class: "description" }, s.description),
        h("button", { type: "button", "aria-label": `Pin ${s.name} for the next message`, onclick: () => pin(s.name) }, "Pin"),
      ),
    ),
  );
}

/** Keep `name` for the next message. */
function pin(name) {
  if (!pins.includes(name)) pins.push(name);
  renderPins();
  say(`Pinned ${name}: its instructions go with your next message.`);
  $("composer-text").focus();
}

function renderPins() {
  $("pins").hidden = !pins.length;
  fill(
    $("pin-list"),
    pins.map((name) =>
      h(
        "li",
        { "data-name": name },
        h("span", { class: "path" }, `/${name}`),
        " ",
        h("button", { type: "button", class: "delete", "aria-label": `Unpin ${name}`, onclick: () => unpin(name) }, "Unpin"),
      ),
    ),
  );
}

function unpin(name) {
  pins.splice(pins.indexOf(name), 1);
  renderPins();
}

/** Forget the pins (another thread was opened). */
export function clearPins() {
  pins.length = 0;
  renderPins();
}

/**
 * Read a message box text: `{text, pins}` to send (pins taken: they go with this message), or
 * `{text: ""}` when it only pinned a skill, or `{error}` for `/NAME` naming no skill of `thread`.
 */
export async function readMessage(thread, graph, text) {
  if (text.startsWith("//")) return take(text.slice(1));
  const word = /^\/([^\s/]+)(?:\s+([\s\S]*))?$/.exec(text);
  if (!word) return take(text);
  const [, name, rest = ""] = word;
  const hits = await call("GET", route(thread, { q: name, limit: 5, assistant_id: graph }));
  if (!hits.some((s) => s.name === name)) {
    const close = hits.map((s) => s.name);
    return {
      error:
        `There is no skill named "${name}"` +
        (close.length ? `; did you mean ${close.join(", ")}?` : ".") +
        " Start the message with // to send a leading / as it is.",
    };
  }
  if (!pins.includes(name)) pins.push(name);
  if (!rest.trim()) {
    renderPins();
    say(`Pinned ${name}: its instructions go with your next message.`);
    return { text: "" };
  }
  return take(rest.trim());
}

/** `text` with the pins, which are then cleared. */
function take(text) {
  const taken = pins.splice(0);
  renderPins();
  return { text, pins: taken };
}

/** Wire the search form; `thread()` and `graph()` are the open thread and the chosen graph. */
export function wireSkills(thread, graph) {
  $("skill-search").addEventListener("submit", (event) => {
    event.preventDefault();
    loadSkills(thread(), graph()).catch((e) => say(`Skills failed: ${e.message}`));
  });
}
