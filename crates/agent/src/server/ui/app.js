// The page's entry: asks for the API key when the server wants one, then wires the thread list,
// the conversation (streamed runs, approvals, `/NAME` skill pins) and the side panels (todos,
// files, skills, runs) to the open thread. The open thread is in the URL's hash (#thread=ID), so a reload reopens it and rejoins
// its running run.
import { $, say } from "./dom.js";
import { call, ApiError } from "./api.js";
import { currentKey, setKey } from "./key.js";
import { Conversation } from "./conversation.js";
import { MessageView } from "./cards.js";
import { Runner } from "./runner.js";
import { renderApprovals } from "./approvals.js";
import { renderTodos } from "./todos.js";
import { renderFiles, wireFiles } from "./files.js";
import { loadRuns, subagentsOf, timingsOf } from "./runs.js";
import { loadSkills, wireSkills, readMessage, clearPins } from "./skills.js";
import { loadThreads, newThread } from "./threads.js";

const conversation = new Conversation();
const view = new MessageView($("messages"));
let thread = null; // the open thread's id
let frame = 0;

/** Redraw the conversation, approvals and panels from the conversation (once per frame). */
function draw() {
  if (frame) return;
  frame = requestAnimationFrame(() => {
    frame = 0;
    const interrupt = runner.busy() ? null : conversation.interrupt();
    view.waiting = new Set((interrupt?.value?.action_requests ?? []).map((_, i) => waitingCall(i)).filter(Boolean));
    view.subs = conversation.subs;
    view.render(conversation.messages());
    renderApprovals($("approvals"), interrupt, resume);
    renderTodos(conversation.values.todos);
    renderFiles(thread, conversation.values.files);
  });
}

/** The id of the i-th call without a result (the calls an interrupt waits on, in order). */
function waitingCall(i) {
  const messages = conversation.messages();
  const done = new Set(messages.filter((m) => m.type === "tool").map((m) => m.tool_call_id));
  const open = messages.flatMap((m) => m.tool_calls ?? []).filter((c) => !done.has(c.id));
  return open[i]?.id;
}

/** Hand the run records' subagents and tool timings to the cards. */
function showRuns(runs) {
  view.subagents = subagentsOf(runs);
  view.timings = timingsOf(runs);
}

/** The open thread's runs and the thread list, again (a run started: both show it running). */
async function reloadRuns() {
  if (thread) showRuns(await loadRuns(thread));
  await listThreads();
}

const runner = new Runner(conversation, draw, () => reloadRuns().catch(() => {}), async (error) => {
  $("run-error").textContent = error ? `The run failed: ${error.detail ?? error.message}` : "";
  busy(false);
  await upkeep("Refresh", refresh);
});

/**
 * Run `work`, which the page does on its own or for a click, and say why it failed. A 401 means
 * the key was refused: ask for another, unless the key changed while `work` ran (then `boot`,
 * which the change started, has asked already). Nothing is left to reject unseen.
 */
async function upkeep(what, work) {
  const key = currentKey();
  try {
    await work();
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) {
      if (currentKey() === key) askForKey();
    } else {
      say(`${what} failed: ${e.detail ?? e.message}`);
    }
  }
}

/** Show whether a run is being followed. */
function busy(on) {
  $("send").disabled = on;
  $("stop").hidden = !on;
  say(on ? "Running…" : "");
}

/** Reload the open thread's state, its runs and the thread list. */
async function refresh() {
  if (thread && !runner.busy()) {
    const state = await call("GET", `/threads/${thread}/state`);
    conversation.setValues(state.values);
    if (state.interrupts?.length && !conversation.values.__interrupt__) {
      conversation.values.__interrupt__ = state.interrupts;
    }
  }
  const runs = thread ? await loadRuns(thread) : [];
  showRuns(runs);
  draw();
  await listThreads();
  return runs;
}

const listThreads = () => loadThreads(thread, openThread, removed);

/** Open thread `id` (or none): its state, panels, and its running run if any. */
async function openThread(id) {
  runner.detach();
  busy(false);
  thread = id;
  history.replaceState(null, "", id ? `#thread=${id}` : "#");
  conversation.reset();
  $("run-error").textContent = "";
  $("thread-title").textContent = id ? `Thread ${id}` : "No thread selected.";
  clearPins();
  loadSkills(id, $("graph").value).catch((e) => say(`Skills failed: ${e.message}`));
  const runs = await refresh();
  const going = runs.find((r) => r.status === "running") ?? runs.find((r) => r.status === "pending");
  if (id && going) {
    busy(true);
    await runner.join(id, going.run_id);
  }
}

function removed(id) {
  upkeep("Refresh", () => (id === thread ? openThread(null) : listThreads()));
}

/** Send the message box's text as a new run (on a new thread when none is open). */
async function send() {
  const typed = $("composer-text").value.trim();
  if (!typed || runner.busy()) return;
  if (!thread) await openThread(await newThread(typed.slice(0, 60), $("graph").value));
  const read = await readMessage(thread, $("graph").value, typed);
  $("run-error").textContent = read.error ?? "";
  if (read.error) return;
  $("composer-text").value = "";
  if (!read.text) return; // only pinned a skill, for the next message
  const message = { type: "human", content: read.text, id: crypto.randomUUID() };
  conversation.addLocal(message);
  draw();
  busy(true);
  const input = { messages: [message], ...(read.pins.length ? { pin_skills: read.pins } : {}) };
  await runner.start(thread, { assistant_id: $("graph").value, input });
}

/** Send the approvals' decisions as `command.resume`. */
async function resume(answer) {
  if (runner.busy()) return;
  conversation.values.__interrupt__ = undefined;
  busy(true);
  draw();
  await runner.start(thread, { assistant_id: $("graph").value, command: { resume: answer } });
}

/** Show the key form instead of the page (the key in use, if any, was refused). */
function askForKey() {
  $("key-error").textContent = currentKey() ? "That key was refused." : "";
  $("key-form").hidden = false;
  $("app").hidden = true;
  $("key-input").focus();
}

/** Check the key (401: ask for one), then load the graphs and the threads. */
async function boot() {
  try {
    await call("GET", "/info");
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) return askForKey();
    throw e;
  }
  $("key-form").hidden = true;
  $("app").hidden = false;
  $("change-key").hidden = !currentKey();
  const assistants = await call("POST", "/assistants/search", { limit: 100 });
  $("graph").replaceChildren(...assistants.map((a) => new Option(a.graph_id, a.graph_id)));
  const id = new URLSearchParams(location.hash.slice(1)).get("thread");
  try {
    await openThread(id);
  } catch (e) {
    if (!(e instanceof ApiError && e.status === 404)) throw e;
    await openThread(null); // not a thread of this key's user
    say("That thread does not exist for this key.");
  }
}

$("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  setKey($("key-input").value.trim());
  $("key-input").value = "";
  start();
});
$("change-key").addEventListener("click", () => {
  setKey(null);
  runner.detach();
  thread = null;
  history.replaceState(null, "", "#");
  start();
});
$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  upkeep("Sending", send);
});
$("composer-text").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
    event.preventDefault();
    upkeep("Sending", send);
  }
});
$("stop").addEventListener("click", () => runner.cancel().catch((e) => say(`Stop failed: ${e.message}`)));
$("new-thread").addEventListener("click", () =>
  upkeep("New thread", async () => {
    if (runner.busy()) runner.detach();
    await openThread(await newThread("New thread", $("graph").value));
    $("composer-text").focus();
  }),
);
$("thread-search").addEventListener("submit", (event) => {
  event.preventDefault();
  listThreads().catch((e) => say(`Search failed: ${e.message}`));
});
wireFiles(() => thread, refresh);
wireSkills(() => thread, () => $("graph").value);

/** Boot, saying why when the server cannot be reached. */
function start() {
  boot().catch((e) => say(`Cannot reach the server: ${e.message}`));
}

start();
