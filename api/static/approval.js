// A person in the loop: the selected agent's pending tool call, with Approve / Deny / Edit.

import { $, showError } from "./page.js";

let current = null; // { agentId, callId, input } of the call shown

/** Show the call a WAITING agent waits on (agent JSON's `waiting_for`), or hide the panel. */
export function renderApproval(agent) {
  // A caller waiting on the agents it called has no call to approve.
  const waiting = agent && agent.status === "WAITING" && agent.waiting_for
    && agent.waiting_for.call_id ? agent.waiting_for : null;
  const panel = $("approval");
  if (!waiting) {
    panel.hidden = true;
    current = null;
    return;
  }
  if (current && current.agentId === agent.id && current.callId === waiting.call_id) return;
  current = { agentId: agent.id, callId: waiting.call_id, input: waiting.input };
  $("approval-call").textContent = `${waiting.tool}(${JSON.stringify(waiting.input)})`;
  $("approval-input").value = waiting.input;
  $("approval-input").hidden = true;
  showError("approval-error", null);
  panel.hidden = false;
}

/** A `waiting` event of the agent stream, as `waiting_for` (it has no `since`). */
export function waitingFor(data) {
  if (data.agent_ids) return { kind: "agents", agent_ids: data.agent_ids };
  return { call_id: data.call_id, tool: data.tool, input: data.input };
}

/** Wire the buttons: `api` calls the API, `onAnswered(agent)` takes the agent it answers. */
export function initApproval({ api, onAnswered, onRefused }) {
  const answer = async (approve) => {
    if (!current) return;
    const { agentId, callId, input } = current;
    const body = { call_id: callId, approve };
    const edited = $("approval-input").value;
    if (approve && !$("approval-input").hidden && edited !== input) body.input = edited;
    if (!approve) body.reason = "denied from the dashboard";
    for (const id of ["approve", "deny", "edit"]) $(id).disabled = true;
    try {
      onAnswered(await api("POST", `/api/v1/agents/${agentId}/approval`, body));
    } catch (error) {
      if (error.status === 401) onRefused();
      else showError("approval-error", error.message);
    } finally {
      for (const id of ["approve", "deny", "edit"]) $(id).disabled = false;
    }
  };
  $("approve").addEventListener("click", () => answer(true));
  $("deny").addEventListener("click", () => answer(false));
  $("edit").addEventListener("click", () => {
    $("approval-input").hidden = false;
    $("approval-input").focus();
  });
}
