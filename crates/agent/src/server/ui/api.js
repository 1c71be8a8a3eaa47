// The server's public API, the only thing the page talks to. URLs are relative to the page's
// <base> (the prefix the router is mounted under); every request carries the tab's API key.
import { currentKey } from "./key.js";

/** An API answer that was not 2xx: `status` and the server's `detail`. */
export class ApiError extends Error {
  constructor(status, detail) {
    super(`${status}: ${detail}`);
    this.status = status;
    this.detail = detail;
  }
}

/** The absolute URL of API path `path` ("/threads/…"). */
export const url = (path) => new URL(path.replace(/^\//, ""), document.baseURI).href;

/** Headers for a request: the key, and `extra`. */
function headers(extra = {}) {
  const key = currentKey();
  return key ? { "x-api-key": key, ...extra } : { ...extra };
}

/** `fetch` of API `path`; throws ApiError on a non-2xx answer. Returns the Response. */
export async function raw(path, init = {}) {
  const response = await fetch(url(path), { ...init, headers: headers(init.headers) });
  if (!response.ok) {
    let detail = response.statusText;
    try {
      detail = (await response.json()).detail ?? detail;
    } catch {
      // not JSON: keep the status text
    }
    throw new ApiError(response.status, detail);
  }
  return response;
}

/** A JSON request: `body` (when given) sent as JSON; the answer's JSON (null when empty). */
export async function call(method, path, body) {
  const init = { method };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers = { "content-type": "application/json" };
  }
  const response = await raw(path, init);
  const text = await response.text();
  return text.trim() ? JSON.parse(text) : null;
}

/** The bytes of a thread's file, as a Blob (downloads need the key, so no plain link). */
export async function fileBlob(threadId, path) {
  const response = await raw(`/threads/${threadId}/files?path=${encodeURIComponent(path)}`);
  return response.blob();
}
