// How agents and steps look: DOM only, no state of their own.

import { renderActions } from "./actions.js";
import { $, el, formatTime, plural, showError, span, text } from "./page.js";

/** The agent list: those WAITING for an approval first, then newest first, reusing the
 * rows already there. */
export function renderAgentList(agents, { selected, onSelect }) {
  const list = $("agents");
  const waits = (agent) => (agent.status === "WAITING" ? 0 : 1);
  const sorted = [...agents].sort((a, b) => waits(a) - waits(b)
    || (b.created_at || "").localeCompare(a.created_at || ""));
  const rows = new Map([...list.children].map((row) => [row.dataset.id, row]));
  sorted.forEach((agent, index) => {
    let row = rows.get(agent.id);
    if (!row) row = newAgentRow(agent.id, onSelect);
    rows.delete(agent.id);
    fillAgentRow(row, agent, selected);
    if (list.children[index] !== row) list.insertBefore(row, list.children[index] || null);
  });
  for (const stale of rows.values()) stale.remove();
  $("agents-empty").hidden = sorted.length > 0;
}

function newAgentRow(id, onSelect) {
  const row = document.createElement("li");
  row.className = "agent-row";
  row.dataset.id = id;
  row.dataset.testid = "agent-row";
  row.tabIndex = 0;
  row.setAttribute("role", "button");
  row.append(span("goal"), span("badge"), el("p", "meta"));
  row.addEventListener("click", () => onSelect(id));
  row.addEventListener("keydown", (event) => {
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      onSelect(id);
    }
  });
  return row;
}

function fillAgentRow(row, agent, selected) {
  row.dataset.status = agent.status;
  row.setAttribute("aria-selected", String(selected === agent.id));
  row.querySelector(".goal").textContent = agent.goal;
  row.querySelector(".goal").title = agent.goal;
  const badge = row.querySelector(".badge");
  badge.textContent = agent.status;
  badge.dataset.status = agent.status;
  row.querySelector(".meta").textContent =
    `${plural(agent.step_count || 0, "step")} · ${formatTime(agent.created_at)}`;
}

/** The selected agent's head: its status, goal, figures and answer; Cancel or Delete. */
export function renderSummary(id, agent) {
  const status = agent ? agent.status : "";
  const badge = $("agent-status");
  badge.textContent = status || "…";
  badge.dataset.status = status;
  $("agent-goal").textContent = agent ? agent.goal : id;
  renderActions(agent);
  const meta = [`id ${id}`];
  if (agent) {
    meta.push(agent.model, plural(agent.step_count || 0, "step"));
    if (agent.stop_reason) meta.push(agent.stop_reason.replace(/_/g, " "));
    if (agent.duration_ms !== null && agent.duration_ms !== undefined && TERMINAL.has(status)) {
      meta.push(`${(agent.duration_ms / 1000).toFixed(1)} s`);
    }
  }
  $("agent-meta").textContent = meta.join(" · ");
  const final = $("agent-final");
  final.hidden = !(agent && status === "COMPLETED" && agent.final_answer);
  final.textContent = agent && agent.final_answer ? `Answer: ${agent.final_answer}` : "";
}

/** Show a step event in the steps list, in seq order whatever order events arrive in. */
export function addStep(data) {
  const type = String(data.type || "").toUpperCase();
  const parts = [];
  if (type === "ACT") {
    parts.push(span("step-tool", data.tool || "?"), el("code", "step-input", data.content));
  } else if (type === "OBSERVE" && data.tool) {
    parts.push(span("step-tool", `${data.tool} →`), text(data.content));
  } else {
    parts.push(text(data.content));
  }
  const item = stepItem(type, data.seq, parts);
  const after = [...$("steps").children].find((li) => Number(li.dataset.seq) > data.seq);
  $("steps").insertBefore(item, after || null);
}

export function stepItem(type, seq, parts) {
  endWriting(); // the steps of the reply being written (or the end) replace its live text
  const item = el("li", "step");
  item.dataset.type = type;
  item.dataset.testid = "step";
  const label = el("div", "step-label", type);
  if (seq !== null && seq !== undefined) {
    item.dataset.seq = String(seq);
    label.append(span("seq", `#${seq}`));
  }
  const body = el("div", "step-body");
  body.append(...parts);
  item.append(label, body);
  return item;
}

/** Whether an ERROR step already shows this text (the executor writes a failure as one). */
export function errorStepShows(message) {
  return [...$("steps").querySelectorAll('.step[data-type="ERROR"] .step-body')]
    .some((body) => body.textContent.trim() === message.trim());
}

/** A FAILED agent's error, unless an ERROR step already shows it. */
export function renderFailure(agent) {
  const error = agent && agent.status === "FAILED" ? agent.error : null;
  showError("agent-failure", error && !errorStepShows(error) ? error : null);
}

const TERMINAL = new Set(["COMPLETED", "FAILED", "CANCELLED"]);

/** What an agent does after an event of its stream (`doing`, for activity()). */
export function doingAfter(name, data) {
  if (name === "token") return "Writing…";
  if (name === "act" && data.tool) return `Running ${data.tool}…`;
  if (name === "final") return ""; // nothing more, unless its answer is refused (an error)
  return "Thinking…";
}

/** The line under the steps: from the agent's status, and while it runs from what its
 * latest event said it does (`doing`). */
export function activity(agent, doing) {
  if (!agent || TERMINAL.has(agent.status)) return null;
  if (agent.status === "WAITING") {
    const onAgents = agent.waiting_for && agent.waiting_for.kind === "agents";
    return onAgents ? "Waiting on the agents it called…" : "Waiting for your approval…";
  }
  if (agent.status === "PENDING") return "Waiting for a worker…";
  return doing ?? "Thinking…";
}

/** The line under the steps that says what the agent is doing; hidden without a message. */
export function setWaiting(message) {
  $("agent-waiting").hidden = !message;
  if (message) $("agent-waiting-text").textContent = message;
}

/** The badge of the user-wide stream: live, or reconnecting. */
export function setConnection(value) {
  const badge = $("connection");
  badge.dataset.state = value;
  badge.textContent = value === "connected" ? "live" : "reconnecting…";
}

/** A piece of the reply the model is writing (a `token` event): shown live below the
 * steps until the iteration's steps arrive, which say it again, laid out. */
export function showToken(data) {
  let writing = $("steps").querySelector('[data-testid="writing"]');
  if (!writing || writing.dataset.step !== String(data.step)) {
    endWriting();
    writing = stepItem("WRITING", null, [text("")]);
    writing.dataset.testid = "writing";
    writing.dataset.step = String(data.step);
    $("steps").append(writing);
  }
  writing.querySelector(".step-body").append(String(data.delta || ""));
  return false;
}

export function endWriting() {
  const writing = $("steps").querySelector('[data-testid="writing"]');
  if (writing) writing.remove();
}
