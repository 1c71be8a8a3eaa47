// Small DOM helpers: build elements without innerHTML (every text the server sends is shown as
// text, never parsed as HTML), and find the page's fixed elements by id.

/** The element with this id (the page's fixed parts). */
export const $ = (id) => document.getElementById(id);

/**
 * `h("button", {type: "button", onclick: f}, "Label", child…)`: an element with attributes
 * (`on…` keys become listeners, `class` the class name, `false`/`null` values are left out) and
 * children (strings become text nodes; arrays are flattened; `null` is skipped).
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === false || value === null || value === undefined) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

/** Replace the children of `el` with `children`. */
export function fill(el, ...children) {
  el.replaceChildren();
  for (const child of children.flat(Infinity)) {
    if (child !== null && child !== undefined && child !== false) el.append(child);
  }
}

/** A short form of a UUID for lists (its first 8 digits). */
export const short = (id) => String(id ?? "").slice(0, 8);

/** `value` as pretty JSON, or as is when it is a string already. */
export const pretty = (value) =>
  typeof value === "string" ? value : JSON.stringify(value, null, 2);

/** A time as the browser's local time of day, or "" without one. */
export const clock = (iso) => (iso ? new Date(iso).toLocaleTimeString() : "");

/** Tell the user what happened, in the live status line. */
export function say(text) {
  $("status").textContent = text;
}
