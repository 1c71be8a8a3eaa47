// The ACP client of the `trellis acp` tests: the official TypeScript SDK (@agentclientprotocol/sdk,
// pinned by `cargo xtask`), driving `trellis acp` as a child process over stdio. It runs the
// scenario named by argv[2] and prints one JSON object on stdout: what the agent answered and
// every message both ways. Every line on the wire is validated against the protocol's JSON schema
// (schema/v1/schema.json from the same package) with ajv; the list of failures is in `invalid`.
//
// Environment: TRELLIS_ACP_NODE_MODULES (the node_modules with the SDK and ajv), TRELLIS_BIN,
// TRELLIS_ARGS (JSON array of the arguments after `acp`), ACP_CWD (the session's cwd), ACP_TURNS or
// ACP_PROMPTS (a JSON array of prompt texts), ACP_ANSWERS (the permission answers, in order),
// ACP_SESSION (the session `load` loads), ACP_MCP (a JSON array: the mcpServers of session/new),
// ACP_FS=1 (advertise fs/read_text_file and fs/write_text_file, served from ACP_BUFFERS, a JSON
// object path → unsaved text, falling back to the disk; writes are kept in `written`, not saved),
// ACP_MARKER (scenario cancel_exec: cancel once ACP_MIN_MARKED processes whose command lines hold
// it run).
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { Readable, Writable } from "node:stream";
import path from "node:path";
import fs from "node:fs";

const modules = process.env.TRELLIS_ACP_NODE_MODULES;
const require = createRequire(path.join(modules, "noop.js"));
const acp = await import(path.join(modules, "@agentclientprotocol/sdk/dist/v1/stable/acp.js"));
const Ajv2020 = require("ajv/dist/2020").default;
const schema = JSON.parse(fs.readFileSync(path.join(modules, "@agentclientprotocol/sdk/schema/v1/schema.json"), "utf8"));
const ajv = new Ajv2020({ strict: false, allErrors: false, validateFormats: false });
ajv.addSchema(schema, "acp");
const def = (name) => {
  const v = ajv.getSchema(`acp#/$defs/${name}`);
  if (!v) throw new Error(`the schema has no ${name}`);
  return v;
};
// The schema's top level accepts any params for any method, so each message is checked against
// the definition of its method: requests' params, responses' results (matched by id), errors.
const requests = {
  initialize: ["InitializeRequest", "InitializeResponse"],
  "session/load": ["LoadSessionRequest", "LoadSessionResponse"],
  "session/new": ["NewSessionRequest", "NewSessionResponse"],
  "session/prompt": ["PromptRequest", "PromptResponse"],
  "session/request_permission": ["RequestPermissionRequest", "RequestPermissionResponse"],
  "session/list": ["ListSessionsRequest", "ListSessionsResponse"],
  "fs/read_text_file": ["ReadTextFileRequest", "ReadTextFileResponse"],
  "fs/write_text_file": ["WriteTextFileRequest", "WriteTextFileResponse"],
};
const notifications = {
  "session/update": "SessionNotification",
  "session/cancel": "CancelNotification",
  "$/cancel_request": "CancelRequestNotification",
};
const envelope = ajv.compile(schema);
const errorDef = def("Error");
const open = { agent: new Map(), client: new Map() };
function validate(direction, message) {
  const failures = [];
  const check = (name, value) => {
    const v = def(name);
    if (!v(value)) failures.push({ def: name, errors: v.errors.slice(0, 3) });
  };
  if (!envelope(message)) failures.push({ def: "(top level)", errors: envelope.errors.slice(0, 3) });
  if (message.method !== undefined && message.id !== undefined) {
    const pair = requests[message.method];
    if (!pair) failures.push({ def: `no request ${message.method} expected` });
    else {
      check(pair[0], message.params);
      open[direction].set(message.id, pair[1]);
    }
  } else if (message.method !== undefined) {
    const name = notifications[message.method];
    if (!name) failures.push({ def: `no notification ${message.method} expected` });
    else check(name, message.params);
  } else if (message.error !== undefined) {
    if (!errorDef(message.error)) failures.push({ def: "Error", errors: errorDef.errors });
  } else {
    // A response: to a request the other side sent.
    const other = direction === "agent" ? "client" : "agent";
    const name = open[other].get(message.id);
    if (!name) failures.push({ def: `a response to no request ${message.id}` });
    else check(name, message.result);
  }
  return failures;
}

const scenario = process.argv[2];
const args = JSON.parse(process.env.TRELLIS_ARGS ?? "[]");
const child = spawn(process.env.TRELLIS_BIN, ["acp", ...args], { stdio: ["pipe", "pipe", "inherit"] });

const wire = [];
const invalid = [];
function record(direction, line) {
  if (!line.trim()) return;
  let message;
  try {
    message = JSON.parse(line);
  } catch {
    invalid.push({ direction, line, error: "not JSON" });
    return;
  }
  wire.push({ direction, message });
  const failures = validate(direction, message);
  if (failures.length) invalid.push({ direction, message, failures });
}
function tap(direction) {
  let pending = "";
  return (chunk) => {
    pending += Buffer.from(chunk).toString("utf8");
    let i;
    while ((i = pending.indexOf("\n")) >= 0) {
      record(direction, pending.slice(0, i));
      pending = pending.slice(i + 1);
    }
  };
}
const fromAgent = tap("agent");
const toAgent = tap("client");
child.stdout.on("data", fromAgent);
const agentOut = Readable.toWeb(child.stdout);
const childIn = Writable.toWeb(child.stdin);
const writer = childIn.getWriter();
const output = new WritableStream({
  async write(chunk) {
    toAgent(chunk);
    await writer.write(chunk);
  },
  async close() {
    await writer.close();
  },
});

const updates = [];
const permissions = [];
// The answers to permission requests, in order: an option kind, or "cancel" to cancel the turn.
const answers = (process.env.ACP_ANSWERS ?? "").split(",").filter(Boolean);
let ctxRef;
let sessionRef;
const result = { scenario };
const useFs = process.env.ACP_FS === "1";
const buffers = JSON.parse(process.env.ACP_BUFFERS ?? "{}");
const fsCalls = [];
const written = {};
const mcpServers = JSON.parse(process.env.ACP_MCP ?? "[]");

const app = acp
  .client({ name: "trellis-test" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    updates.push(params.update);
  })
  .onRequest(acp.methods.client.session.requestPermission, async ({ params }) => {
    permissions.push(params);
    const answer = answers.shift() ?? "reject_once";
    if (answer === "cancel") {
      await ctxRef.notify(acp.methods.agent.session.cancel, { sessionId: sessionRef });
      return { outcome: { outcome: "cancelled" } };
    }
    const option = params.options.find((o) => o.kind === answer);
    return { outcome: { outcome: "selected", optionId: option.optionId } };
  })
  .onRequest(acp.methods.client.fs.readTextFile, async ({ params }) => {
    fsCalls.push({ method: "read", ...params });
    const text = written[params.path] ?? buffers[params.path] ?? fs.readFileSync(params.path, "utf8");
    return { content: text };
  })
  .onRequest(acp.methods.client.fs.writeTextFile, async ({ params }) => {
    fsCalls.push({ method: "write", ...params });
    written[params.path] = params.content;
    return {};
  });

// Host processes (not zombies) whose command line contains `marker`.
function marked(marker) {
  const pids = [];
  for (const d of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const cmd = fs.readFileSync(`/proc/${d}/cmdline`, "utf8").replaceAll("\0", " ");
      if (!cmd.includes(marker)) continue;
      const stat = fs.readFileSync(`/proc/${d}/stat`, "utf8");
      const state = stat.slice(stat.lastIndexOf(")") + 2).trim()[0];
      if (state !== "Z" && state !== "X") pids.push(Number(d));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

async function prompt(ctx, text) {
  const res = await ctx.request(acp.methods.agent.session.prompt, {
    sessionId: sessionRef,
    prompt: [{ type: "text", text }],
  });
  return res.stopReason;
}

try {
  await app.connectWith(acp.ndJsonStream(output, agentOut), async (ctx) => {
    ctxRef = ctx;
    result.initialize = await ctx.request(acp.methods.agent.initialize, {
      protocolVersion: 1,
      clientCapabilities: { fs: { readTextFile: useFs, writeTextFile: useFs }, terminal: false },
      clientInfo: { name: "trellis-test", version: "1" },
    });
    result.stops = [];
    if (scenario === "load") {
      try {
        await ctx.request(acp.methods.agent.session.load, { sessionId: "t-no-such-thread", cwd: process.env.ACP_CWD, mcpServers: [] });
      } catch (e) {
        result.unknownLoad = { code: e.code, message: e.message };
      }
      sessionRef = process.env.ACP_SESSION;
      result.load = await ctx.request(acp.methods.agent.session.load, {
        sessionId: sessionRef,
        cwd: process.env.ACP_CWD,
        mcpServers: [],
      });
      result.replayed = updates.length;
      result.stops.push(await prompt(ctx, "after loading"));
    } else {
      const session = await ctx.request(acp.methods.agent.session.new, {
        cwd: process.env.ACP_CWD,
        mcpServers,
      });
      sessionRef = session.sessionId;
      result.sessionId = session.sessionId;
    }
    if (scenario === "load") {
      // done above
    } else if (scenario === "cancel_exec") {
      // Cancel once the sandboxed command runs (a process whose command line holds ACP_MARKER),
      // then see how long its processes outlive the cancelled turn.
      const marker = process.env.ACP_MARKER;
      const turn = prompt(ctx, "run the long command");
      const deadline = Date.now() + 60000;
      let pids = [];
      // The command's own processes, not just bwrap (whose command line holds the command too).
      const enough = Number(process.env.ACP_MIN_MARKED ?? "1");
      while ((pids = marked(marker)).length < enough && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 50));
      }
      result.markedBeforeCancel = pids;
      await new Promise((r) => setTimeout(r, 500));
      const cancelAt = Date.now();
      await ctx.notify(acp.methods.agent.session.cancel, { sessionId: sessionRef });
      result.stops.push(await turn);
      result.replyAfterMs = Date.now() - cancelAt;
      result.markedAtReply = marked(marker);
      const gone = Date.now() + 5000;
      while (marked(marker).length && Date.now() < gone) await new Promise((r) => setTimeout(r, 50));
      result.goneAfterMs = Date.now() - cancelAt;
      result.markedAfter = marked(marker);
    } else if (scenario === "two") {
      // Session A allows always, session B asks again; then A again (not asked).
      const a = sessionRef;
      const b = (await ctx.request(acp.methods.agent.session.new, { cwd: process.env.ACP_CWD, mcpServers: [] })).sessionId;
      result.sessions = [a, b];
      result.stops.push(await prompt(ctx, "A: first"));
      sessionRef = b;
      result.stops.push(await prompt(ctx, "B: same call"));
      sessionRef = a;
      result.stops.push(await prompt(ctx, "A: same call again"));
      result.stops.push(await prompt(ctx, "A: another tool"));
      result.stops.push(await prompt(ctx, "A: another path"));
    } else if (scenario === "list") {
      // More sessions (one prompt each), then every page of session/list, then one cwd filter.
      const count = Number(process.env.ACP_SESSIONS ?? "1");
      result.sessions = [sessionRef];
      result.stops.push(await prompt(ctx, "title of session 1"));
      for (let i = 2; i <= count; i++) {
        sessionRef = (await ctx.request(acp.methods.agent.session.new, { cwd: process.env.ACP_CWD, mcpServers: [] })).sessionId;
        result.sessions.push(sessionRef);
        result.stops.push(await prompt(ctx, `title of session ${i}`));
      }
      result.pages = [];
      let cursor = undefined;
      do {
        const page = await ctx.request(acp.methods.agent.session.list, cursor ? { cursor } : {});
        result.pages.push(page);
        cursor = page.nextCursor ?? undefined;
      } while (cursor && result.pages.length < 20);
      result.otherCwd = await ctx.request(acp.methods.agent.session.list, { cwd: "/nonexistent-elsewhere" });
      try {
        await ctx.request(acp.methods.agent.session.list, { cursor: "not a cursor" });
      } catch (e) {
        result.badCursor = { code: e.code, message: e.message };
      }
    } else if (scenario === "cancel") {
      const turn = prompt(ctx, "wait");
      await new Promise((r) => setTimeout(r, 1500));
      await ctx.notify(acp.methods.agent.session.cancel, { sessionId: sessionRef });
      result.stops.push(await turn);
      result.stops.push(await prompt(ctx, "write c.txt"));
      result.stops.push(await prompt(ctx, "again"));
    } else {
      const turns = Number(process.env.ACP_TURNS ?? "1");
      const texts = JSON.parse(process.env.ACP_PROMPTS ?? "[]");
      for (let i = 0; i < Math.max(turns, texts.length); i++) {
        result.stops.push(await prompt(ctx, texts[i] ?? `prompt ${i + 1}`));
      }
    }
    try {
      await ctx.request(acp.methods.agent.session.prompt, { sessionId: "no-such-session", prompt: [] });
    } catch (e) {
      result.unknownSession = { code: e.code, message: e.message };
    }
  });
} catch (e) {
  result.error = String(e?.stack ?? e);
}
child.stdin.end();
await new Promise((r) => child.on("exit", (code) => { result.exit = code; r(); }));
result.updates = updates;
result.permissions = permissions;
result.fsCalls = fsCalls;
result.written = written;
result.wire = wire;
result.invalid = invalid;
process.stdout.write(JSON.stringify(result) + "\n");
