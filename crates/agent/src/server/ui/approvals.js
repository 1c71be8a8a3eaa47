// Approvals inline: when the thread waits on an interrupt (LangChain's human-in-the-loop shape:
// `action_requests` and `review_configs`), one fieldset per waiting call — approve, edit the
// arguments, reject with a reason, or respond with an answer, as its `allowed_decisions` permit —
// and one button that sends every decision of the step at once as `command.resume`, keyed by the
// interrupt's id.
import { h, fill, pretty } from "./dom.js";

const LABELS = { approve: "Approve", edit: "Edit arguments", reject: "Reject", respond: "Respond" };

/**
 * Show `interrupt` (or nothing when null) in `box`; `send(resume)` sends the decisions. The form
 * of an interrupt already shown is left as it is, so a redraw never loses what was typed.
 */
export function renderApprovals(box, interrupt, send) {
  if (!interrupt) {
    delete box.dataset.interrupt;
    return fill(box);
  }
  if (box.dataset.interrupt === interrupt.id) return;
  box.dataset.interrupt = interrupt.id;
  const requests = interrupt.value?.action_requests ?? [];
  const reviews = interrupt.value?.review_configs ?? [];
  const rows = requests.map((request, i) => row(request, reviews[i], i));
  const error = h("p", { class: "error", role: "alert" });
  const form = h(
    "form",
    { class: "approvals", "aria-label": "Approvals" },
    h("h3", {}, `The agent waits for your decision on ${requests.length} call${requests.length === 1 ? "" : "s"}`),
    rows.map((r) => r.el),
    error,
    h("button", { type: "submit" }, "Send decisions"),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    try {
      const decisions = rows.map((r) => r.decision());
      send({ [interrupt.id]: { decisions } });
    } catch (e) {
      error.textContent = e.message;
    }
  });
  fill(box, form);
}

/** One waiting call: its fieldset and how to read its decision. */
function row(request, review, i) {
  const allowed = review?.allowed_decisions ?? ["approve", "reject"];
  const name = `decision-${i}`;
  const radios = allowed.map((kind, k) =>
    h(
      "label",
      { class: "choice" },
      h("input", { type: "radio", name, value: kind, checked: k === 0 }),
      LABELS[kind] ?? kind,
    ),
  );
  const argsId = `args-${i}`;
  const textId = `message-${i}`;
  const args = h("textarea", { id: argsId, rows: 4, spellcheck: "false" });
  args.value = pretty(request.args ?? {});
  const message = h("input", { id: textId, type: "text" });
  const el = h(
    "fieldset",
    { class: "approval", "data-tool": request.name },
    h("legend", {}, request.name),
    request.description ? h("p", { class: "description" }, request.description) : null,
    h("div", { class: "choices", role: "radiogroup", "aria-label": `Decision on ${request.name}` }, radios),
    h("label", { for: argsId }, "Arguments (used by Edit)"),
    args,
    h("label", { for: textId }, "Reason or answer (Reject, Respond)"),
    message,
  );
  const decision = () => {
    const kind = el.querySelector(`input[name="${name}"]:checked`)?.value ?? "approve";
    if (kind === "approve") return { type: "approve" };
    if (kind === "edit") {
      let parsed;
      try {
        parsed = JSON.parse(args.value);
      } catch {
        throw new Error(`the arguments of ${request.name} are not valid JSON`);
      }
      return { type: "edit", edited_action: { name: request.name, args: parsed } };
    }
    const text = message.value.trim();
    if (kind === "respond" && !text) throw new Error(`write an answer for ${request.name}`);
    return text ? { type: kind, message: text } : { type: kind };
  };
  return { el, decision };
}
