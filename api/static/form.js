// The new-agent form: the assistant (its defaults filled in: assistants.js), goal, model
// (the server's default filled in), max steps, and the tools the agent may use (from
// GET /api/v1/tools, all of them unless some are unticked).

import { chosenAssistant, loadAssistants } from "./assistants.js";
import { $, el, span } from "./page.js";

export { initAssistants } from "./assistants.js";

/** Fill the tools list, then the assistants (whose choice ticks tools); on failure, say
 * so (the agent then gets every tool). */
export async function loadTools(call) {
  const list = $("tools");
  try {
    const { tools } = await call("GET", "/api/v1/tools");
    list.replaceChildren(...tools.map(toolChoice));
    $("tools-error").hidden = true;
  } catch (error) {
    list.replaceChildren();
    $("tools-error").hidden = false;
    $("tools-error").textContent = `The tools could not be listed (${error.message}); an agent gets all of them.`;
  }
  summarizeTools();
  await loadAssistants(call);
}

function toolChoice(tool) {
  const box = el("input");
  box.type = "checkbox";
  box.value = tool.name;
  box.checked = true;
  box.dataset.testid = "tool";
  box.addEventListener("change", summarizeTools);
  const label = el("label", "tool");
  label.title = tool.description || "";
  label.append(box, span("tool-name", tool.name));
  if (tool.source && tool.source !== "builtin") label.append(span("tool-source", tool.source));
  return label;
}

function toolBoxes() {
  return [...$("tools").querySelectorAll("input[type=checkbox]")];
}

function summarizeTools() {
  const boxes = toolBoxes();
  const ticked = boxes.filter((box) => box.checked).length;
  let summary = "Tools: all";
  if (ticked === 0 && boxes.length) summary = "Tools: none";
  else if (ticked < boxes.length) summary = `Tools: ${ticked} of ${boxes.length}`;
  $("tools-summary").textContent = summary;
}

/** The create body the form says, or {error} with what to fix. Only what differs from
 * the assistant's defaults is sent: its model, and its tools (the default one's: every tool). */
export function formBody() {
  const goal = $("goal").value.trim();
  if (!goal) return { error: "Write a goal for the agent first." };
  const body = { goal };
  const assistant = chosenAssistant();
  if (assistant && assistant.name !== "agent") body.assistant = assistant.name;
  const rawSteps = $("max-steps").value.trim();
  if (rawSteps) {
    const maxSteps = Number(rawSteps);
    if (!Number.isInteger(maxSteps) || maxSteps < 1 || maxSteps > 50) {
      return { error: "Max steps must be a whole number from 1 to 50." };
    }
    body.max_steps = maxSteps;
  }
  const model = $("model").value.trim();
  if (/\s/.test(model)) return { error: "A model's name has no spaces, e.g. llama3.2." };
  if (model && model !== $("model").defaultValue) body.model = model;
  const boxes = toolBoxes();
  const ticked = boxes.filter((box) => box.checked).map((box) => box.value);
  const given = assistant && assistant.tools !== null
    ? boxes.filter((box) => assistant.tools.includes(box.value)).map((box) => box.value)
    : boxes.map((box) => box.value);
  if (ticked.join("\n") !== given.join("\n")) body.tools = ticked;
  return { body };
}
