// What can be done to the selected agent from its view: cancel it while it may end, and
// delete it once it has ended (README, Deleting and retention), asked for once.

import { $, showError } from "./page.js";

const TERMINAL = new Set(["COMPLETED", "FAILED", "CANCELLED"]);

/** Show Cancel while the agent may end, Delete once it has. */
export function renderActions(agent) {
  const ended = Boolean(agent) && TERMINAL.has(agent.status);
  $("cancel").hidden = !agent || ended;
  $("delete").hidden = !ended;
}

/**
 * `selected()` is the selected agent's id; `onCancelled(agent)` gets it CANCELLED,
 * `onConflict()` is called when it had ended meanwhile, `onDeleted(id)` once it is gone.
 */
export function initActions({ api, selected, onCancelled, onConflict, onDeleted, onRefused }) {
  const act = async (button, run) => {
    const id = selected();
    if (!id) return;
    $(button).disabled = true;
    try {
      await run(id);
    } catch (error) {
      if (error.status === 401) onRefused();
      else if (error.status === 409) onConflict();
      else if (error.status === 404 && button === "delete") onDeleted(id);
      else showError("agent-error", error.message);
    } finally {
      $(button).disabled = false;
    }
  };
  $("cancel").addEventListener("click", () =>
    act("cancel", async (id) => onCancelled(await api("DELETE", `/api/v1/agents/${id}`))));
  $("delete").addEventListener("click", () =>
    act("delete", async (id) => {
      if (!window.confirm("Delete this agent with its steps? This cannot be undone.")) return;
      await api("DELETE", `/api/v1/agents/${id}?purge=true`);
      onDeleted(id);
    }));
}
