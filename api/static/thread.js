// Conversations and forks (docs/api.md §8): the selected agent's thread shown together,
// "Ask a follow-up" on an ended agent, and "Re-run from here" on a step that ends an
// iteration. DOM and API calls only; the caller owns the state.

import { addChildLink, agentLink, forgetChildren, loadChildren } from "./delegation.js";
import { $, el, showError, span } from "./page.js";

export { addChildLink };

const TERMINAL = new Set(["COMPLETED", "FAILED", "CANCELLED"]);
let loaded = null; // "id:status" of the agent whose thread is on screen

/** The thread panel of the selected agent: its origin, the thread's agents oldest first
 * (when there are several), and the follow-up form once the agent has ended. */
export function renderThread(agent, { api, onSelect }) {
  const ended = Boolean(agent && TERMINAL.has(agent.status));
  $("agent-view").dataset.ended = String(ended);
  $("follow-up").hidden = !ended;
  const origin = $("agent-origin");
  const fork = agent && agent.forked_from;
  const caller = agent && agent.caller_id;
  origin.hidden = !fork && !caller;
  origin.replaceChildren();
  if (fork) origin.append(`Re-run of `, agentLink(fork.agent_id, onSelect), ` from step #${fork.seq}`);
  else if (caller) origin.append("Called by ", agentLink(caller, onSelect), ` (depth ${agent.depth})`);
  if (!agent) return;
  loadChildren(agent, { api, onSelect });
  const key = `${agent.id}:${agent.status}`;
  if (loaded === key) return;
  loaded = key;
  loadThread(agent, { api, onSelect }).catch(() => { $("thread").hidden = true; });
}

export function forgetThread() {
  loaded = null;
  forgetChildren();
  $("thread").hidden = true;
  $("thread-agents").replaceChildren();
  showError("follow-up-error", null);
}

async function loadThread(agent, { api, onSelect }) {
  const page = await api("GET", `/api/v1/agents?thread_id=${agent.thread_id}&limit=100`);
  if (!loaded || !loaded.startsWith(agent.id)) return; // another agent was selected meanwhile
  const agents = page.agents.slice().reverse(); // oldest first
  $("thread").hidden = agents.length < 2;
  $("thread-agents").replaceChildren(...agents.map((one) => threadItem(one, agent.id, onSelect)));
}

function threadItem(agent, selectedId, onSelect) {
  const item = el("li", "thread-agent");
  item.dataset.testid = "thread-agent";
  item.dataset.id = agent.id;
  item.setAttribute("aria-current", String(agent.id === selectedId));
  const goal = el("a", "goal", agent.goal);
  goal.href = `#agent=${agent.id}`;
  goal.addEventListener("click", (event) => { event.preventDefault(); onSelect(agent.id); });
  const said = agent.status === "COMPLETED" ? agent.final_answer
    : TERMINAL.has(agent.status) ? `(${agent.status.toLowerCase()})` : `(${agent.status.toLowerCase()}…)`;
  item.append(goal, el("p", "thread-answer", said));
  return item;
}

/** The follow-up form asks in the thread of the agent `selected()` gives. */
export function initFollowUp({ api, selected, onCreated }) {
  $("follow-up").addEventListener("submit", (event) => {
    event.preventDefault();
    const agent = selected();
    if (agent) askFollowUp(agent, { api, onCreated });
  });
}

/** Ask a follow-up in the agent's thread; `onCreated` gets the new agent. */
async function askFollowUp(agent, { api, onCreated }) {
  const goal = $("follow-up-goal").value.trim();
  if (!goal) {
    showError("follow-up-error", "Write your follow-up first.");
    return;
  }
  $("ask").disabled = true;
  try {
    const created = await api("POST", "/api/v1/agents", { goal, thread_id: agent.thread_id, model: agent.model });
    $("follow-up-goal").value = "";
    showError("follow-up-error", null);
    onCreated(created);
  } catch (error) {
    showError("follow-up-error", error.message);
  } finally {
    $("ask").disabled = false;
  }
}

/** A "Re-run from here" button on a step that may end an iteration (an observation):
 * a fork of the agent after it. Shown only once the agent has ended (CSS). */
export function addRerunButton(data, { agentId, api, onCreated }) {
  if (String(data.type).toUpperCase() !== "OBSERVE") return;
  const item = $("steps").querySelector(`.step[data-seq="${data.seq}"] .step-label`);
  if (!item || item.querySelector(".rerun")) return;
  const button = el("button", "link-button rerun", "Re-run from here");
  button.type = "button";
  button.dataset.testid = "rerun";
  button.title = `A new agent starts from a copy of steps #1–#${data.seq} and goes on from there.`;
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      onCreated(await api("POST", `/api/v1/agents/${agentId}/fork`, { after_seq: Number(data.seq) }));
    } catch (error) {
      showError("agent-error", error.message);
    } finally {
      button.disabled = false;
    }
  });
  item.append(span("sep", " "), button);
}
