// Agents that call agents (README, Agents that call agents): a child's head links to its
// caller, and each `ask_<name>` ACT step of a caller links to the child it started.

import { $, el } from "./page.js";

let loaded = null; // "id:status" of the agent whose children are known
let children = new Map(); // the call_id of a call → the id of the child it started

export function agentLink(id, onSelect, label = id.slice(0, 8)) {
  const link = el("a", "", label);
  link.href = `#agent=${id}`;
  link.addEventListener("click", (event) => { event.preventDefault(); onSelect(id); });
  return link;
}

/** Learn the agent's children (again when its status changes) and link its calls to them. */
export function loadChildren(agent, { api, onSelect }) {
  const key = `${agent.id}:${agent.status}`;
  if (loaded === key) return;
  loaded = key;
  api("GET", `/api/v1/agents?caller_id=${agent.id}&limit=100`).then((page) => {
    if (loaded !== key) return; // another agent was selected meanwhile
    children = new Map(page.agents.map((child) => [child.caller_call_id, child.id]));
    for (const item of $("steps").querySelectorAll(".step[data-call-id]")) linkChild(item, onSelect);
  }).catch(() => {});
}

export function forgetChildren() {
  loaded = null;
  children = new Map();
}

/** Mark an ACT step of an `ask_<name>` call, and link it to its child once known. */
export function addChildLink(data, { onSelect }) {
  if (String(data.type).toUpperCase() !== "ACT" || !String(data.tool || "").startsWith("ask_")) return;
  const item = $("steps").querySelector(`.step[data-seq="${data.seq}"]`);
  if (!item || !data.call_id) return;
  item.dataset.callId = data.call_id;
  linkChild(item, onSelect);
}

function linkChild(item, onSelect) {
  const child = children.get(item.dataset.callId);
  if (!child || item.querySelector(".child-link")) return;
  const link = agentLink(child, onSelect, `→ agent ${child.slice(0, 8)}`);
  link.className = "child-link";
  link.dataset.testid = "child-link";
  item.querySelector(".step-body").append(" ", link);
}
