// Server-sent events read from a fetch body (EventSource cannot send the API key header or POST a
// body). Yields {event, data, id} per event; comment lines (keep-alives) are skipped. Bounded:
// one event may not exceed MAX_EVENT characters.

const MAX_EVENT = 64 * 1024 * 1024;

/** The events of `response`'s body, in order; `data` parsed as JSON. */
export async function* events(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value.replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const parsed = parse(block);
      if (parsed) yield parsed;
    }
    if (buffer.length > MAX_EVENT) throw new Error("an event of the stream is too large");
  }
}

/** One event block → {event, data, id}, or null for a comment-only block. */
function parse(block) {
  let event = "message";
  let id = null;
  const data = [];
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") event = value;
    else if (field === "data") data.push(value);
    else if (field === "id") id = value;
  }
  if (!data.length) return null;
  const text = data.join("\n");
  let parsed;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = text;
  }
  return { event, data: parsed, id };
}
