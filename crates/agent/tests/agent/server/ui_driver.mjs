// The browser tests of the page `trellis serve` serves at `/`: Debian's Chromium, headless, driven
// by playwright-core (pinned by `cargo xtask`), against a real `trellis serve` whose model is a
// scripted mock (ui.rs). One scenario per run: `node ui_driver.mjs SCENARIO`. It fails (exit 1,
// the reason on stderr) when the page does not show what the scenario expects, and prints one
// JSON report on stdout for the Rust side's own assertions. Screenshots of the panels go to SHOTS.
//
// Environment: TRELLIS_UI_NODE_MODULES (node_modules with playwright-core), TRELLIS_CHROMIUM (the
// browser), URL (the server), SHOTS (a folder), KEYS (for `users`: "KEY_A KEY_B").
import { createRequire } from "node:module";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const require = createRequire(path.join(process.env.TRELLIS_UI_NODE_MODULES, "noop.js"));
const { chromium } = require("playwright-core");

const URL = process.env.URL;
const SHOTS = process.env.SHOTS;
const scenario = process.argv[2];
const TIMEOUT = 30_000;

/** Fail the scenario with `message` unless `condition`. */
function check(condition, message) {
  if (!condition) throw new Error(message);
}

/** Chromium as the closed network needs it: no first-run, no background traffic, no QUIC. */
async function launch() {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "trellis-ui-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.TRELLIS_CHROMIUM,
    headless: true,
    acceptDownloads: true,
    viewport: { width: 1280, height: 860 },
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  context.setDefaultTimeout(TIMEOUT);
  const page = context.pages()[0] ?? (await context.newPage());
  const problems = [];
  // A 401 or 404 answer is logged by the browser as a failed resource; the page handles those.
  page.on("console", (m) => m.type() === "error" && !m.text().startsWith("Failed to load resource") && problems.push(`console: ${m.text()}`));
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  // The page may reach nothing but the server.
  page.on("request", (r) => r.url().startsWith(URL) || r.url().startsWith("blob:") || problems.push(`request to ${r.url()}`));
  return { context, page, problems, profile };
}

/** A screenshot of `selector` as SHOTS/NAME.png. */
async function shot(page, selector, name) {
  await page.locator(selector).first().screenshot({ path: path.join(SHOTS, `${name}.png`) });
}

/** Type `text` in the message box and send it with the keyboard (Ctrl+Enter). */
async function send(page, text) {
  await page.locator("#composer-text").fill(text);
  await page.locator("#composer-text").press("Control+Enter");
}

/** The page's conversation: each message item's role and text, and each card. */
async function transcript(page) {
  return page.locator("#messages").evaluate((list) =>
    [...list.children].map((li) => ({
      id: li.dataset.id,
      role: li.className,
      who: li.querySelector(":scope > .who")?.textContent ?? "",
      text: li.querySelector(":scope > .text")?.textContent ?? "",
      cards: [...li.querySelectorAll(":scope > .card")].map((c) => ({
        tool: c.dataset.tool,
        status: c.querySelector(":scope > summary .badge")?.textContent,
        took: c.querySelector(":scope > summary .took")?.textContent ?? null,
        args: c.querySelector(":scope > .args")?.textContent,
        result: c.querySelector(":scope > .result")?.textContent ?? null,
        // A subagent's own tool calls under a task card: streamed cards, or the records' list.
        nested: [...c.querySelectorAll(".activity .card, .activity .nested-tools li")].map((n) => ({
          tool: n.dataset.tool,
          took: n.querySelector(".took")?.textContent ?? n.textContent,
          result: n.querySelector(".result")?.textContent ?? null,
        })),
      })),
    })),
  );
}

/**
 * What keyboard and screen-reader users would miss, and WCAG AA contrast: every visible form
 * field has a label, every button a name, and every visible text is at least 4.5:1 against the
 * background it is drawn on. Returns the problems found.
 */
async function audit(page) {
  return page.evaluate(() => {
    const problems = [];
    for (const el of document.querySelectorAll("input, textarea, select")) {
      if (!el.checkVisibility()) continue;
      if (!el.labels?.length && !el.getAttribute("aria-label")) problems.push(`unlabelled ${el.outerHTML.slice(0, 80)}`);
    }
    for (const el of document.querySelectorAll("button")) {
      if (!el.textContent.trim() && !el.getAttribute("aria-label")) problems.push(`unnamed ${el.outerHTML.slice(0, 80)}`);
    }
    const parse = (c) => (c.match(/[\d.]+/g) ?? []).map(Number);
    const luminance = (rgb) => {
      const [r, g, b] = rgb.map((v) => {
        v /= 255;
        return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
      });
      return 0.2126 * r + 0.7152 * g + 0.0722 * b;
    };
    const background = (el) => {
      for (let e = el; e; e = e.parentElement) {
        const c = parse(getComputedStyle(e).backgroundColor);
        if (c.length === 3 || (c.length === 4 && c[3] > 0)) return c.slice(0, 3);
      }
      return [255, 255, 255];
    };
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const el = node.parentElement;
      if (!node.textContent.trim() || !el.checkVisibility()) continue;
      const [hi, lo] = [luminance(parse(getComputedStyle(el).color).slice(0, 3)), luminance(background(el))].sort((a, b) => b - a);
      const ratio = (hi + 0.05) / (lo + 0.05);
      if (ratio < 4.5) problems.push(`contrast ${ratio.toFixed(2)}:1 of "${node.textContent.trim().slice(0, 40)}"`);
    }
    return problems;
  });
}

/** A new thread, with data.csv (3 rows) uploaded into /uploads through the files panel. */
async function newThreadWithCsv(page) {
    await page.goto(URL);
    await page.getByRole("button", { name: "New thread" }).click();
    await page.locator("#thread-title", { hasText: "Thread " }).waitFor();
    await page.locator("#upload-input").setInputFiles({
      name: "data.csv",
      mimeType: "text/csv",
      buffer: Buffer.from("region,sales\nnorth,10\nsouth,20\neast,30\n"),
    });
    await page.getByRole("button", { name: "Upload", exact: true }).click();
    await page.locator('#files li[data-path="/uploads/data.csv"]').waitFor();
}

/** Wait until the run is over (the Send button is enabled again). */
const idle = (page) => page.locator("#send:enabled").waitFor();

const scenarios = {
  /** Send a message with the keyboard; the answer streams in; thread list, runs panel. */
  async stream(page) {
    await page.goto(URL);
    await page.locator("#composer-text").waitFor();
    // Keyboard only: the first Tab reaches the skip link, which leads to the message box.
    await page.keyboard.press("Tab");
    await page.keyboard.press("Enter");
    check(await page.evaluate(() => document.activeElement?.id) === "composer-text", "the skip link leads to the message box");
    await page.keyboard.type("S-STREAM hello");
    await page.keyboard.press("Control+Enter");
    await page.locator(".msg-ai .text", { hasText: "Streamed answer." }).waitFor();
    await idle(page);
    await page.locator("#runs tbody tr[data-status=success]").waitFor();
    const messages = await transcript(page);
    await shot(page, ".conversation", "conversation");
    await shot(page, ".threads", "threads");
    await shot(page, "#runs-panel", "runs");
    const threads = await page.locator("#thread-list .thread").count();
    const usage = await page.locator("#usage-total").textContent();
    return { messages, threads, usage, audit: await audit(page) };
  },

  /** Two calls wait; approve one, reject the other with a reason; both results show. */
  async approvals(page) {
    await page.goto(URL);
    await send(page, "S-APPROVE write and list");
    const form = page.locator("form.approvals");
    await form.waitFor();
    const waiting = await form.locator("fieldset").evaluateAll((fs) => fs.map((f) => f.dataset.tool));
    const problems = await audit(page);
    await shot(page, ".conversation", "approvals");
    // First call: approve (the default). Second: reject with a reason.
    const second = form.locator("fieldset").nth(1);
    await second.getByLabel("Reject", { exact: true }).check();
    await second.getByLabel("Reason or answer (Reject, Respond)").fill("not this time");
    await form.getByRole("button", { name: "Send decisions" }).click();
    await page.locator(".msg-ai .text", { hasText: "Both calls handled." }).waitFor();
    await idle(page);
    const messages = await transcript(page);
    await shot(page, ".conversation", "cards");
    return { waiting, messages, approvalsLeft: await page.locator("form.approvals").count(), audit: problems };
  },

  /** A `task` call's card shows the subagent's run record under it. */
  async subagent(page) {
    await page.goto(URL);
    await send(page, "S-TASK delegate the count");
    await page.locator(".msg-ai .text", { hasText: "The subagent answered." }).waitFor();
    await idle(page);
    await page.locator('.card[data-tool="task"] .subagent').waitFor();
    // The subagent's own ls call, streamed (stream_subgraphs) under the task card, with its time.
    await page.locator('.card[data-tool="task"] .activity .card[data-tool="ls"] .took').waitFor();
    await shot(page, '.card[data-tool="task"]', "subagent");
    const messages = await transcript(page);
    const subagent = await page.locator(".subagent").textContent();
    // After a reload the stream is not replayed: the records list the subagent's calls.
    await page.reload();
    await page.locator('.card[data-tool="task"] .nested-tools li[data-tool="ls"]').waitFor();
    return { messages, subagent, reloaded: await transcript(page), audit: await audit(page) };
  },

  /** The skills panel: listed, searched; a mistyped /NAME is refused; /NAME text pins it. */
  async skills(page) {
    await page.goto(URL);
    await page.getByRole("button", { name: "New thread" }).click();
    await page.locator('#skills li[data-name="csv-summary"]').waitFor();
    const listed = await page.locator("#skills li.skill").evaluateAll((l) => l.map((li) => li.dataset.name));
    await page.getByLabel("Search skills by words").fill("transcript");
    await page.getByLabel("Search skills by words").press("Enter");
    await page.locator("#skills li.skill").nth(1).waitFor({ state: "detached" });
    const found = await page.locator("#skills li.skill").evaluateAll((l) => l.map((li) => li.dataset.name));
    await send(page, "/csv-sumary S-PIN go");
    await page.locator("#run-error", { hasText: "no skill named" }).waitFor();
    const refused = await page.locator("#run-error").textContent();
    await page.locator("#composer-text").fill("");
    // Pinned from the panel with the keyboard, then sent with the next message.
    await page.getByLabel("Search skills by words").fill("");
    await page.getByLabel("Search skills by words").press("Enter");
    await page.getByRole("button", { name: "Pin csv-summary for the next message" }).focus();
    await page.keyboard.press("Enter");
    await page.locator('#pin-list li[data-name="csv-summary"]').waitFor();
    check(await page.evaluate(() => document.activeElement?.id) === "composer-text", "pinning leads to the message box");
    await shot(page, ".layout", "skills");
    await page.keyboard.type("S-PIN summarize it");
    await page.keyboard.press("Control+Enter");
    await page.locator(".msg-ai .text", { hasText: "Pinned skill seen." }).waitFor();
    await idle(page);
    const pinsLeft = await page.locator("#pin-list li").count();
    const pinsShown = await page.locator("#pins").isVisible();
    const folded = await page.locator(".msg details.pinned:not([open])").count();
    return { listed, found, refused, pinsLeft, pinsShown, folded, messages: await transcript(page), audit: await audit(page) };
  },

  /** Upload a CSV; the skill's script summarizes it under execute; the output is downloaded. */
  async csv(page) {
    await newThreadWithCsv(page);
    await send(page, "/csv-summary S-CSV summarize /uploads/data.csv");
    await page.locator('#files li[data-path="/outputs/summary.txt"]').waitFor();
    await idle(page);
    await page.locator('.card[data-tool="execute"] .took').waitFor();
    await shot(page, ".conversation", "execute");
    const messages = await transcript(page);
    const [download] = await Promise.all([
      page.waitForEvent("download"),
      page.getByRole("button", { name: "Download /outputs/summary.txt" }).click(),
    ]);
    const saved = fs.readFileSync(await download.path(), "utf8");
    return { downloaded: saved, name: download.suggestedFilename(), messages };
  },

  /** The other two decisions: edit one call's arguments, respond to the other with an answer. */
  async edit(page) {
    await page.goto(URL);
    await send(page, "S-APPROVE write and list");
    const form = page.locator("form.approvals");
    await form.waitFor();
    const first = form.locator("fieldset").nth(0);
    await first.getByLabel("Edit arguments", { exact: true }).check();
    await first.getByLabel("Arguments (used by Edit)").fill('{"file_path": "/edited.txt", "content": "edited\\n"}');
    const second = form.locator("fieldset").nth(1);
    await second.getByLabel("Respond", { exact: true }).check();
    await second.getByLabel("Reason or answer (Reject, Respond)").fill("pretend listing");
    await form.getByRole("button", { name: "Send decisions" }).click();
    await page.locator(".msg-ai .text", { hasText: "Both calls handled." }).waitFor();
    await idle(page);
    await page.locator('#files li[data-path="/edited.txt"]').waitFor();
    return { messages: await transcript(page), files: await page.locator("#files .path").allTextContents() };
  },

  /** Stop run cancels the run: its record says interrupted, the page is ready again. */
  async stop(page) {
    await page.goto(URL);
    await send(page, "S-SLOW look then stop");
    await page.locator('.card[data-tool="ls"] .result').waitFor();
    await page.getByRole("button", { name: "Stop run" }).click();
    await idle(page);
    await page.locator("#runs tbody tr[data-status=interrupted]").waitFor();
    return { messages: await transcript(page), stopHidden: await page.locator("#stop").isHidden() };
  },

  /** Threads: two made, found by the start of an id and by metadata, one deleted. */
  async threads(page) {
    await page.goto(URL);
    await send(page, "S-STREAM first thread");
    await page.locator(".msg-ai .text", { hasText: "Streamed answer." }).waitFor();
    await idle(page);
    const first = new URLSearchParams(new globalThis.URL(page.url()).hash.slice(1)).get("thread");
    await page.getByRole("button", { name: "New thread" }).click();
    await page.locator("#thread-list .thread").nth(1).waitFor();
    const all = await page.locator("#thread-list .thread").count();
    await page.getByLabel("Search by id or key=value").fill(first.slice(0, 8));
    await page.getByLabel("Search by id or key=value").press("Enter");
    await page.locator("#thread-list .thread").nth(1).waitFor({ state: "detached" });
    const byId = await page.locator("#thread-list .thread").evaluateAll((ts) => ts.map((t) => t.dataset.id));
    await page.getByLabel("Search by id or key=value").fill("title=New thread");
    await page.getByRole("button", { name: "Search", exact: true }).click();
    await page.locator(`#thread-list .thread[data-id="${first}"]`).waitFor({ state: "detached" });
    const byMetadata = await page.locator("#thread-list .thread").count();
    await page.getByLabel("Search by id or key=value").fill("");
    await page.getByRole("button", { name: "Search", exact: true }).click();
    await page.locator("#thread-list .thread").nth(1).waitFor();
    await page.getByRole("button", { name: "Delete S-STREAM first thread" }).click();
    await page.locator(`#thread-list .thread[data-id="${first}"]`).waitFor({ state: "detached" });
    return { first, all, byId, byMetadata, left: await page.locator("#thread-list .thread").count() };
  },

  /** A todo goes from in progress to completed while the run streams. */
  async todos(page) {
    await page.goto(URL);
    await send(page, "S-TODOS plan it");
    const seen = [];
    await page.locator("#todos li[data-status=in_progress]").waitFor();
    seen.push(await page.locator("#todos li").first().getAttribute("data-status"));
    await page.locator("#todos li[data-status=completed]").waitFor();
    seen.push(await page.locator("#todos li").first().getAttribute("data-status"));
    await idle(page);
    await shot(page, "#todos-panel", "todos");
    return { seen, text: await page.locator("#todos").textContent() };
  },

  /** Upload a CSV, the agent reads it and writes a summary, which is downloaded. */
  async files(page) {
    await newThreadWithCsv(page);
    await send(page, "S-FILES summarize the upload");
    await page.locator('#files li[data-path="/summary.txt"]').waitFor();
    await idle(page);
    await page.getByRole("button", { name: "View /uploads/data.csv" }).click();
    const viewed = await page.locator("#file-view-text").textContent();
    await shot(page, "#files-panel", "files");
    const [download] = await Promise.all([
      page.waitForEvent("download"),
      page.getByRole("button", { name: "Download /summary.txt" }).click(),
    ]);
    const saved = fs.readFileSync(await download.path(), "utf8");
    return { viewed, downloaded: saved, name: download.suggestedFilename() };
  },

  /** Reload while the run waits for the model; the page rejoins it; nothing missed or repeated. */
  async reload(page) {
    await page.goto(URL);
    await send(page, "S-SLOW look then answer");
    // The ls call has its result: the run now waits seconds for the model's next reply.
    await page.locator('.card[data-tool="ls"] .result').waitFor();
    const before = await transcript(page);
    const joins = [];
    page.on("request", (r) => {
      if (r.method() === "GET" && /\/runs\/[^/]+\/stream$/.test(new globalThis.URL(r.url()).pathname)) {
        joins.push(r.headers()["last-event-id"] ?? null);
      }
    });
    await page.reload();
    // Record every render after the reload until the answer is there.
    const renders = [];
    for (let i = 0; i < 600; i++) {
      const now = await transcript(page);
      renders.push(now);
      if (now.some((m) => m.text.includes("Final answer after the wait."))) break;
      await page.waitForTimeout(50);
    }
    await idle(page);
    const after = await transcript(page);
    for (const render of renders) {
      const ids = render.map((m) => m.id);
      check(new Set(ids).size === ids.length, `a message shown twice: ${JSON.stringify(render)}`);
    }
    return { before, after, renders: renders.length, url: page.url(), joins };
  },

  /** The network drops mid-run: the page rejoins from the last event it saw. */
  async cut(page) {
    await page.goto(URL);
    const joins = [];
    page.on("request", (r) => {
      if (r.method() === "GET" && /\/runs\/[^/]+\/stream$/.test(new globalThis.URL(r.url()).pathname)) {
        joins.push(r.headers()["last-event-id"] ?? null);
      }
    });
    await send(page, "S-SLOW look then answer");
    await page.locator('.card[data-tool="ls"] .result').waitFor();
    // ui.rs's proxy drops the connection now; the page has to rejoin to see the answer.
    await page.locator(".msg-ai .text", { hasText: "Final answer after the wait." }).waitFor();
    await idle(page);
    return { joins, after: await transcript(page) };
  },

  /** With keys: the page asks for one; the second user sees none of the first user's threads. */
  async users(page) {
    const [first, second] = process.env.KEYS.split(" ");
    await page.goto(URL);
    await page.locator("#key-form").waitFor();
    await shot(page, "#key-form", "key");
    await page.getByLabel("API key").fill(first);
    await page.getByRole("button", { name: "Use key" }).click();
    // The page refreshes the thread when the run ends; hold that refresh's first answer so the
    // key changes in the middle of it, and the rest of it is refused (401) without a page error.
    // (The first read of the state is the new thread's, the second the refresh's.)
    let reads = 0;
    let holding;
    const held = new Promise((resolve) => (holding = resolve));
    await page.route("**/threads/*/state", async (route) => {
      if (++reads === 2) {
        holding();
        await new Promise((resolve) => setTimeout(resolve, 1500));
      }
      await route.continue();
    });
    await send(page, "S-STREAM from the first user");
    await page.locator(".msg-ai .text", { hasText: "Streamed answer." }).waitFor();
    await idle(page);
    await held;
    const firstThreads = await page.locator("#thread-list .thread").count();
    const firstUrl = page.url();
    await page.getByRole("button", { name: "Change API key" }).click();
    await page.waitForTimeout(2000);
    await page.unroute("**/threads/*/state");
    await page.getByLabel("API key").fill(second);
    await page.getByRole("button", { name: "Use key" }).click();
    await page.locator("#thread-list li.muted", { hasText: "No threads." }).waitFor();
    const secondThreads = await page.locator("#thread-list .thread").count();
    // The first user's thread, opened by its address with the second key: not there.
    await page.goto(firstUrl);
    await page.reload();
    await page.locator("#status", { hasText: "does not exist" }).waitFor();
    const shown = await transcript(page);
    return { firstThreads, secondThreads, shown };
  },
};

const { context, page, problems, profile } = await launch();
let report;
try {
  check(scenarios[scenario], `unknown scenario ${scenario}`);
  report = await scenarios[scenario](page);
  check(!problems.length, `the page had problems: ${problems.join("; ")}`);
} catch (e) {
  const html = await page.content().catch(() => "");
  console.error(`${scenario}: ${e.stack}\nproblems: ${problems.join("\n")}\n--- page\n${html.slice(0, 20000)}`);
  process.exitCode = 1;
} finally {
  await context.close();
  fs.rmSync(profile, { recursive: true, force: true });
}
if (report) console.log(JSON.stringify(report));
