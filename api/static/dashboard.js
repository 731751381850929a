// jarvis-agents dashboard: plain JavaScript modules, no build step, no dependencies.
//
// The list of the user's agents is kept current by the user-wide stream (status changes);
// the selected agent's steps, and its replies as they are written, arrive on its own stream
// (sse.js). Both are merged by `updated_at`: an answer read before an event never undoes it.

import { initActions } from "./actions.js";
import { initApproval, renderApproval, waitingFor } from "./approval.js";
import { formBody, initAssistants, loadTools } from "./form.js";
import { $, callApi, showError, text } from "./page.js";
import { startSchedules } from "./schedules.js";
import { SseConnection } from "./sse.js";
import { addChildLink, addRerunButton, forgetThread, initFollowUp, renderThread } from "./thread.js";
import {
  activity, addStep, doingAfter, renderAgentList, renderFailure, renderSummary, setConnection,
  setWaiting, showToken, stepItem,
} from "./views.js";

const KEY_STORAGE = "jarvis.apiKey";
const STEP_EVENTS = new Set(["think", "act", "observe", "final", "error"]);
const TERMINAL = new Set(["COMPLETED", "FAILED", "CANCELLED"]);
const STATUS_FIELDS = ["status", "stop_reason", "step_count", "updated_at"];
const PAGE_SIZE = 50;

const state = {
  apiKey: null,
  agents: new Map(), // id -> agent JSON, kept current by the user-wide stream
  nextCursor: null,
  fetching: new Map(), // id -> status events that came while that unknown agent was fetched
  userStream: null,
  selected: null,
  agentStream: null,
  steps: new Map(), // seq -> step event data, of the selected agent
  lastSeq: 0,
  doing: null, // what the selected agent does while RUNNING, as its latest event says
};

const api = (method, path, body) => callApi(state.apiKey, method, path, body);
const authorization = () => ({ Authorization: `Bearer ${state.apiKey}` });

// --- signing in and out -------------------------------------------------------------

function showSignIn(message) {
  $("sign-in-view").hidden = false;
  $("app-view").hidden = true;
  $("sign-out").hidden = true;
  $("connection").hidden = true;
  showError("sign-in-error", message);
  $("api-key").focus();
}

async function signIn(key, { remember }) {
  state.apiKey = key;
  try {
    await loadAgents();
  } catch (error) {
    state.apiKey = null;
    if (error.status === 401) {
      localStorage.removeItem(KEY_STORAGE);
      showSignIn("That API key was refused. Check it and try again.");
    } else {
      showSignIn(error.message);
    }
    return;
  }
  if (remember) localStorage.setItem(KEY_STORAGE, key);
  $("api-key").value = "";
  showError("sign-in-error", null);
  $("sign-in-view").hidden = true;
  for (const id of ["app-view", "sign-out", "connection"]) $(id).hidden = false;
  startUserStream();
  loadTools(api);
  startSchedules(api, select);
  const fromHash = /^#agent=([0-9a-f-]{36})$/i.exec(location.hash);
  if (fromHash) select(fromHash[1]);
}

function signOut(message) {
  localStorage.removeItem(KEY_STORAGE);
  if (state.userStream) state.userStream.close();
  deselect();
  state.apiKey = null;
  state.userStream = null;
  state.agents.clear();
  state.nextCursor = null;
  $("agents").replaceChildren();
  showSignIn(message || null);
}

function keyRefused() {
  signOut("The API key was refused. Sign in again.");
}

// --- the agent list -----------------------------------------------------------------

async function loadAgents({ more = false } = {}) {
  const params = new URLSearchParams({ limit: String(PAGE_SIZE) });
  if (more && state.nextCursor) params.set("cursor", state.nextCursor);
  const page = await api("GET", `/api/v1/agents?${params}`);
  // Merged, never cleared: agents are not deleted, and later pages stay loaded.
  for (const agent of page.agents) remember(agent);
  state.nextCursor = page.next_cursor || null;
  renderAgents();
}

function startUserStream() {
  if (state.userStream) state.userStream.close();
  state.userStream = new SseConnection("/api/v1/events", {
    headers: authorization,
    onState: setConnection,
    // Live only: after a reconnect, re-read the list for what happened meanwhile.
    onOpen: (n) => { if (n > 0) loadAgents().catch(() => {}); },
    onFatal: (status) => { if (status === 401) keyRefused(); },
    onEvent: (name, data) => {
      if (name === "status") applyStatus(data);
      return false;
    },
  }).start();
}

/** Whether status `a` (an agent or a status event) is later than `b`'s. */
function isLater(a, b) {
  if (TERMINAL.has(a.status) !== TERMINAL.has(b.status)) return TERMINAL.has(a.status);
  return (a.updated_at || "") > (b.updated_at || "");
}

/** Keep an agent as the API answered it, but never with a status older than one known. */
function remember(agent) {
  const known = state.agents.get(agent.id);
  const fresh = { ...agent };
  if (known && isLater(known, agent)) {
    for (const name of STATUS_FIELDS) fresh[name] = known[name];
  }
  if (known && !TERMINAL.has(fresh.status)) {
    fresh.step_count = Math.max(fresh.step_count || 0, known.step_count || 0);
  }
  state.agents.set(agent.id, fresh);
  return fresh;
}

function applyStatus(data) {
  const agent = state.agents.get(data.agent_id);
  if (!agent) {
    // Kept for when the fetch answers: it may have read the agent before this change.
    if (state.fetching.has(data.agent_id)) state.fetching.get(data.agent_id).push(data);
    else fetchAgent(data.agent_id, [data]);
    return;
  }
  if (isLater(agent, data)) return; // a late message
  const stepCount = TERMINAL.has(data.status)
    ? data.step_count : Math.max(data.step_count || 0, agent.step_count || 0);
  Object.assign(agent, {
    status: data.status,
    stop_reason: data.stop_reason,
    step_count: stepCount,
    updated_at: data.updated_at,
  });
  renderAgents();
  if (data.status === "WAITING") fetchAgent(agent.id); // for its `waiting_for`
  if (state.selected === agent.id) {
    if (data.status !== "RUNNING") state.doing = null; // its next run starts afresh
    renderAgentHead();
    if (TERMINAL.has(agent.status)) refreshSelected();
  }
}

async function fetchAgent(id, events = []) {
  if (state.fetching.has(id)) return;
  state.fetching.set(id, events);
  try {
    remember(await api("GET", `/api/v1/agents/${id}`));
  } catch (_) {
    // Gone or unreachable: the next list load shows the truth.
  } finally {
    const missed = state.fetching.get(id);
    state.fetching.delete(id);
    if (state.agents.has(id)) for (const data of missed) applyStatus(data);
    renderAgents();
    if (state.selected === id) renderAgentHead();
  }
}

function showAgent() {
  renderAgents();
  renderAgentHead();
}

function renderAgents() {
  renderAgentList(state.agents.values(), { selected: state.selected, onSelect: select });
  $("load-more").hidden = !state.nextCursor;
}

// --- starting an agent --------------------------------------------------------------

async function startAgent(event) {
  event.preventDefault();
  const { body, error } = formBody();
  if (error) {
    showError("start-error", error);
    return;
  }
  $("start").disabled = true;
  try {
    const agent = await api("POST", "/api/v1/agents", body);
    showError("start-error", null);
    $("goal").value = "";
    started(agent);
  } catch (error) {
    if (error.status === 401) keyRefused();
    else showError("start-error", error.message);
  } finally {
    $("start").disabled = false;
  }
}

/** An agent started here (a new one, a follow-up or a re-run): listed and selected. */
function started(agent) {
  remember(agent); // the stream may have told of it first
  renderAgents();
  select(agent.id);
}

// --- watching one agent -------------------------------------------------------------

function select(id) {
  if (state.selected === id && state.agentStream) return;
  deselect();
  state.selected = id;
  history.replaceState(null, "", `#agent=${id}`);
  $("agent-view").hidden = false;
  $("agent-placeholder").hidden = true;
  $("app-view").classList.add("showing-agent");
  showError("agent-error", null);
  renderAgents();
  if (!state.agents.has(id)) fetchAgent(id);
  renderAgentHead();
  state.agentStream = new SseConnection(`/api/v1/agents/${id}/events?tokens=1`, {
    headers: authorization,
    lastEventId: () => (state.lastSeq > 0 ? state.lastSeq : null),
    onFatal: (status, message) => {
      if (status === 401) keyRefused();
      else showError("agent-error", status === 404 ? `No agent with id ${id}.` : message);
    },
    onEvent: (name, data) => onAgentEvent(id, name, data),
  }).start();
  if (window.matchMedia("(max-width: 759px)").matches) window.scrollTo(0, 0);
}

function deselect() {
  if (state.agentStream) state.agentStream.close();
  state.agentStream = null;
  state.selected = null;
  state.steps.clear();
  state.lastSeq = 0;
  state.doing = null;
  $("steps").replaceChildren();
  forgetThread();
  showError("agent-failure", null);
  $("agent-view").hidden = true;
  $("agent-placeholder").hidden = false;
  $("app-view").classList.remove("showing-agent");
  if (location.hash) history.replaceState(null, "", location.pathname + location.search);
}

/** An agent event says it runs (a PENDING agent shown is RUNNING: the user-wide stream
 * may tell it later) and what it does now; whether its status changed. */
function running(agent, name, data) {
  state.doing = doingAfter(name, data);
  if (!agent || agent.status !== "PENDING") return false;
  agent.status = "RUNNING";
  return true;
}

function onAgentEvent(id, name, data) {
  if (state.selected !== id) return true;
  if (name === "token") { // the reply as it is written
    const agent = state.agents.get(id);
    if (running(agent, name, data)) showAgent();
    else setWaiting(activity(agent, state.doing));
    return showToken(data);
  }
  if (STEP_EVENTS.has(name)) {
    const seq = Number(data.seq);
    if (!Number.isInteger(seq) || state.steps.has(seq)) return false; // replayed: seen
    state.steps.set(seq, data);
    state.lastSeq = Math.max(state.lastSeq, seq);
    onStep(data);
    const agent = state.agents.get(id);
    if (agent && !TERMINAL.has(agent.status)) {
      // The user-wide stream tells of status changes, not of each step: count them here.
      // An iteration counts from its first step, as the API's step_count does.
      agent.step_count = Math.max(agent.step_count || 0, Number(data.step) + 1);
      running(agent, name, data);
      renderAgents();
    }
    renderAgentHead();
    return false;
  }
  if (name === "waiting") {
    const agent = state.agents.get(id);
    if (agent && !TERMINAL.has(agent.status)) Object.assign(agent, { status: "WAITING", waiting_for: waitingFor(data) });
    state.doing = null;
    showAgent();
    return false;
  }
  if (name === "cancelled") {
    if (!$("steps").querySelector('.step[data-type="CANCELLED"]')) {
      const when = state.steps.size ? "" : " before its first step";
      $("steps").append(stepItem("CANCELLED", null, [text(`The agent was cancelled${when}.`)]));
    }
    return false;
  }
  if (name === "done") {
    const agent = state.agents.get(id);
    if (agent) {
      agent.status = data.status;
      agent.stop_reason = data.stop_reason;
    }
    showAgent();
    refreshSelected();
    return true; // the stream is over: do not reconnect
  }
  return false;
}

async function refreshSelected() {
  const id = state.selected;
  if (!id) return;
  try {
    remember(await api("GET", `/api/v1/agents/${id}`));
    renderAgents();
    if (state.selected === id) renderAgentHead();
  } catch (_) {
    // The stream already told us the outcome; details can wait.
  }
}

function renderAgentHead() {
  const id = state.selected;
  if (!id) return;
  const agent = state.agents.get(id);
  renderSummary(id, agent);
  renderFailure(agent);
  renderApproval(agent);
  renderThread(agent, { api, onSelect: select });
  setWaiting(activity(agent, state.doing));
}

function onStep(data) {
  addStep(data);
  addRerunButton(data, { agentId: state.selected, api, onCreated: started });
  addChildLink(data, { onSelect: select });
  if (String(data.type).toUpperCase() === "ERROR") renderFailure(state.agents.get(state.selected));
}

// --- start ----------------------------------------------------------------------------

function init() {
  $("sign-in-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = $("api-key").value.trim();
    if (!key) {
      showError("sign-in-error", "Enter an API key.");
      return;
    }
    signIn(key, { remember: true });
  });
  $("sign-out").addEventListener("click", () => signOut());
  $("start-form").addEventListener("submit", startAgent);
  $("goal").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) startAgent(event);
  });
  initActions({
    api, selected: () => state.selected, onRefused: keyRefused, onConflict: refreshSelected,
    onCancelled: (agent) => { remember(agent); showAgent(); },
    onDeleted: (id) => { state.agents.delete(id); deselect(); renderAgents(); },
  });
  initAssistants({ api, onRefused: keyRefused });
  initApproval({ api, onRefused: keyRefused, onAnswered: (agent) => showAgent(remember(agent)) });
  initFollowUp({ api, selected: () => state.agents.get(state.selected), onCreated: started });
  $("back").addEventListener("click", deselect);
  $("load-more").addEventListener("click", () =>
    loadAgents({ more: true }).catch((error) => showError("start-error", error.message)));
  const saved = localStorage.getItem(KEY_STORAGE);
  if (saved) signIn(saved, { remember: false });
  else showSignIn(null);
}

init();
