// The files panel: the thread's own files from the values (`files`: path → FileData), each to
// view (text) and download (fetched with the key, saved through a blob link), and uploads into
// /uploads (multipart, POST /threads/{id}/files).
import { $, h, fill, say } from "./dom.js";
import { raw, fileBlob } from "./api.js";

/** Show `files` of thread `thread`. */
export function renderFiles(thread, files) {
  const paths = Object.keys(files ?? {}).sort();
  if (!paths.length) return fill($("files"), h("li", { class: "muted" }, "No files."));
  fill(
    $("files"),
    paths.map((path) => {
      const data = files[path] ?? {};
      return h(
        "li",
        { class: "file", "data-path": path },
        h("span", { class: "path" }, path),
        h("span", { class: "muted" }, ` ${data.size ?? ""} B `),
        data.omitted === "binary"
          ? null
          : h("button", { type: "button", "aria-label": `View ${path}`, onclick: () => view(thread, path, data) }, "View"),
        h("button", { type: "button", "aria-label": `Download ${path}`, onclick: () => download(thread, path) }, "Download"),
      );
    }),
  );
}

/** Show a text file: inline content, else fetched. */
async function view(thread, path, data) {
  const text = data.omitted ? await (await fileBlob(thread, path)).text() : String(data.content ?? "");
  $("file-view-title").textContent = path;
  $("file-view-text").textContent = text;
  $("file-view").hidden = false;
  $("file-view-text").focus();
}

/** Save a file through a temporary blob link. */
async function download(thread, path) {
  const blob = await fileBlob(thread, path);
  const link = h("a", { href: URL.createObjectURL(blob), download: path.split("/").pop() });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 10000);
}

/** Wire the upload form and the viewer; `thread()` is the open thread, `done()` after an upload. */
export function wireFiles(thread, done) {
  $("file-view-close").addEventListener("click", () => ($("file-view").hidden = true));
  $("upload-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const input = $("upload-input");
    const id = thread();
    if (!id || !input.files.length) return say("Choose a thread and a file first.");
    const form = new FormData();
    for (const file of input.files) form.append("file", file, file.name);
    try {
      const answer = await (await raw(`/threads/${id}/files`, { method: "POST", body: form })).json();
      say(`Uploaded ${answer.uploads.map((u) => u.path).join(", ")}`);
      input.value = "";
      await done();
    } catch (e) {
      say(`Upload failed: ${e.message}`);
    }
  });
}
