// The API key of this tab: kept in sessionStorage (this tab only, gone when it closes), asked for
// when the server answers 401, sent by api.js as `x-api-key` (what every LangGraph client sends).

const SLOT = "trellis.api-key";

/** The key in use, or null. */
export const currentKey = () => sessionStorage.getItem(SLOT);

/** Use `key` from now on (null forgets it). */
export function setKey(key) {
  if (key) sessionStorage.setItem(SLOT, key);
  else sessionStorage.removeItem(SLOT);
}
