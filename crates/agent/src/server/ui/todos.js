// The todos panel: the agent's `todos` from the thread's values, each with its status.
import { $, h, fill } from "./dom.js";

const STATUS = { pending: "pending", in_progress: "in progress", completed: "completed" };

/** Show `todos` (the values' list, or nothing). */
export function renderTodos(todos) {
  const list = Array.isArray(todos) ? todos : [];
  if (!list.length) return fill($("todos"), h("li", { class: "muted" }, "No todos."));
  fill(
    $("todos"),
    list.map((todo) =>
      h(
        "li",
        { class: `todo todo-${todo.status}`, "data-status": todo.status },
        h("span", { class: "badge" }, STATUS[todo.status] ?? todo.status),
        " ",
        todo.content,
      ),
    ),
  );
}
