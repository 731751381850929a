// jarvis-agents dashboard: plain JavaScript, no build step, no dependencies.
//
// EventSource cannot send an Authorization header, so the event streams are read
// with fetch() and a small SSE parser. A dropped stream reconnects with backoff,
// sending Last-Event-ID = the last seq received; steps are keyed by seq, so a
// replayed step is never shown twice and none is lost.
"use strict";

(() => {
  const KEY_STORAGE = "jarvis.apiKey";
  const STEP_EVENTS = new Set(["think", "act", "observe", "final", "error"]);
  const TERMINAL = new Set(["COMPLETED", "FAILED", "CANCELLED"]);
  const BACKOFF_MS = [500, 1000, 2000, 4000, 8000, 15000];
  // The server sends a keepalive at least every 15 s: longer silence is a dead link.
  const IDLE_TIMEOUT_MS = 45000;
  const PAGE_SIZE = 50;

  const $ = (id) => document.getElementById(id);

  const state = {
    apiKey: null,
    agents: new Map(), // id -> agent JSON, kept current by the user-wide stream
    nextCursor: null,
    fetching: new Set(), // ids of agents being fetched after an unknown status event
    userStream: null,
    selected: null,
    agentStream: null,
    steps: new Map(), // seq -> step event data, of the selected agent
    lastSeq: 0,
  };

  // --- the API ------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  async function api(method, path, body) {
    const headers = { Authorization: `Bearer ${state.apiKey}`, Accept: "application/json" };
    const init = { method, headers, cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (_) {
      throw new ApiError(0, "unreachable", "Cannot reach the API. Is jarvis-agents running?");
    }
    let payload = null;
    try {
      payload = await response.json();
    } catch (_) {
      payload = null;
    }
    if (!response.ok) {
      const error = (payload && payload.error) || {};
      throw new ApiError(
        response.status,
        error.code || "http_error",
        error.message || `The API answered ${response.status}.`,
      );
    }
    return payload;
  }

  // --- server-sent events over fetch() ------------------------------------------------

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  /** One SSE stream that reconnects until closed or until onEvent returns true. */
  class SseConnection {
    constructor(path, { onEvent, onOpen, onState, onFatal, lastEventId }) {
      this.path = path;
      this.onEvent = onEvent;
      this.onOpen = onOpen || (() => {});
      this.onState = onState || (() => {});
      this.onFatal = onFatal || (() => {});
      this.lastEventId = lastEventId || (() => null);
      this.closed = false;
      this.controller = null;
      this.opens = 0;
    }

    start() {
      this.run();
      return this;
    }

    close() {
      this.closed = true;
      if (this.controller) this.controller.abort();
    }

    async run() {
      let failures = 0;
      while (!this.closed) {
        this.controller = new AbortController();
        try {
          const headers = { Authorization: `Bearer ${state.apiKey}`, Accept: "text/event-stream" };
          const last = this.lastEventId();
          if (last !== null && last !== undefined) headers["Last-Event-ID"] = String(last);
          const response = await fetch(this.path, {
            headers, cache: "no-store", signal: this.controller.signal,
          });
          if (response.status === 401 || response.status === 404) {
            let message = `The API answered ${response.status}.`;
            try {
              message = (await response.json()).error.message || message;
            } catch (_) { /* not JSON */ }
            if (!this.closed) this.onFatal(response.status, message);
            return;
          }
          if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
          this.onState("connected");
          this.onOpen(this.opens++);
          if (await this.read(response.body, () => { failures = 0; })) return;
        } catch (_) {
          // A network error, an abort by the watchdog, or a 5xx: try again below.
        }
        if (this.closed) return;
        this.onState("reconnecting");
        const delay = BACKOFF_MS[Math.min(failures, BACKOFF_MS.length - 1)];
        failures += 1;
        await sleep(delay / 2 + Math.random() * delay / 2);
      }
    }

    /** Read events until the body ends (false) or onEvent asks to stop (true). */
    async read(body, onData) {
      const reader = body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      let event = { name: "", data: [], id: null };
      let watchdog = null;
      const arm = () => {
        clearTimeout(watchdog);
        watchdog = setTimeout(() => this.controller.abort(), IDLE_TIMEOUT_MS);
      };
      arm();
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done || this.closed) return this.closed;
          arm();
          buffer += decoder.decode(value, { stream: true });
          let newline;
          while ((newline = buffer.indexOf("\n")) >= 0) {
            let line = buffer.slice(0, newline);
            buffer = buffer.slice(newline + 1);
            if (line.endsWith("\r")) line = line.slice(0, -1);
            if (line === "") {
              if (event.data.length) {
                onData();
                if (this.dispatch(event)) return true;
              }
              event = { name: "", data: [], id: null };
              continue;
            }
            if (line.startsWith(":")) continue; // a comment: keepalive
            const colon = line.indexOf(":");
            const field = colon < 0 ? line : line.slice(0, colon);
            let text = colon < 0 ? "" : line.slice(colon + 1);
            if (text.startsWith(" ")) text = text.slice(1);
            if (field === "data") event.data.push(text);
            else if (field === "event") event.name = text;
            else if (field === "id") event.id = text;
          }
        }
      } finally {
        clearTimeout(watchdog);
        reader.cancel().catch(() => {});
      }
    }

    dispatch(event) {
      if (this.closed) return true;
      let data;
      try {
        data = JSON.parse(event.data.join("\n"));
      } catch (_) {
        return false;
      }
      return this.onEvent(event.name || "message", data, event.id) === true;
    }
  }

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
    $("app-view").hidden = false;
    $("sign-out").hidden = false;
    $("connection").hidden = false;
    startUserStream();
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
    for (const agent of page.agents) state.agents.set(agent.id, agent);
    state.nextCursor = page.next_cursor || null;
    renderAgents();
  }

  function startUserStream() {
    if (state.userStream) state.userStream.close();
    state.userStream = new SseConnection("/api/v1/events", {
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

  function setConnection(value) {
    const badge = $("connection");
    badge.dataset.state = value;
    badge.textContent = value === "connected" ? "live" : "reconnecting…";
  }

  function applyStatus(data) {
    const agent = state.agents.get(data.agent_id);
    if (!agent) {
      fetchAgent(data.agent_id);
      return;
    }
    if (TERMINAL.has(agent.status) && !TERMINAL.has(data.status)) return; // a late message
    if (agent.updated_at && data.updated_at && data.updated_at < agent.updated_at) return;
    Object.assign(agent, {
      status: data.status,
      stop_reason: data.stop_reason,
      step_count: data.step_count,
      updated_at: data.updated_at,
    });
    renderAgents();
    if (state.selected === agent.id) {
      renderAgentHead();
      if (TERMINAL.has(agent.status)) refreshSelected();
    }
  }

  async function fetchAgent(id) {
    if (state.fetching.has(id)) return;
    state.fetching.add(id);
    try {
      const agent = await api("GET", `/api/v1/agents/${id}`);
      state.agents.set(agent.id, agent);
      renderAgents();
    } catch (_) {
      // Gone or unreachable: the next list load shows the truth.
    } finally {
      state.fetching.delete(id);
    }
  }

  function renderAgents() {
    const list = $("agents");
    const sorted = [...state.agents.values()].sort((a, b) =>
      (b.created_at || "").localeCompare(a.created_at || ""));
    const rows = new Map([...list.children].map((row) => [row.dataset.id, row]));
    sorted.forEach((agent, index) => {
      let row = rows.get(agent.id);
      if (!row) row = newAgentRow(agent.id);
      rows.delete(agent.id);
      fillAgentRow(row, agent);
      if (list.children[index] !== row) list.insertBefore(row, list.children[index] || null);
    });
    for (const stale of rows.values()) stale.remove();
    $("agents-empty").hidden = sorted.length > 0;
    $("load-more").hidden = !state.nextCursor;
  }

  function newAgentRow(id) {
    const row = document.createElement("li");
    row.className = "agent-row";
    row.dataset.id = id;
    row.dataset.testid = "agent-row";
    row.tabIndex = 0;
    row.setAttribute("role", "button");
    row.append(span("goal"), span("badge"), el("p", "meta"));
    row.addEventListener("click", () => select(id));
    row.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        select(id);
      }
    });
    return row;
  }

  function fillAgentRow(row, agent) {
    row.dataset.status = agent.status;
    row.setAttribute("aria-selected", String(state.selected === agent.id));
    row.querySelector(".goal").textContent = agent.goal;
    row.querySelector(".goal").title = agent.goal;
    const badge = row.querySelector(".badge");
    badge.textContent = agent.status;
    badge.dataset.status = agent.status;
    row.querySelector(".meta").textContent =
      `${plural(agent.step_count || 0, "step")} · ${formatTime(agent.created_at)}`;
  }

  // --- starting an agent --------------------------------------------------------------

  async function startAgent(event) {
    event.preventDefault();
    const goal = $("goal").value.trim();
    const rawSteps = $("max-steps").value.trim();
    if (!goal) {
      showError("start-error", "Write a goal for the agent first.");
      return;
    }
    const body = { goal };
    if (rawSteps) {
      const maxSteps = Number(rawSteps);
      if (!Number.isInteger(maxSteps) || maxSteps < 1 || maxSteps > 50) {
        showError("start-error", "Max steps must be a whole number from 1 to 50.");
        return;
      }
      body.max_steps = maxSteps;
    }
    $("start").disabled = true;
    try {
      const agent = await api("POST", "/api/v1/agents", body);
      showError("start-error", null);
      $("goal").value = "";
      state.agents.set(agent.id, { ...agent, ...(state.agents.get(agent.id) || {}) });
      renderAgents();
      select(agent.id);
    } catch (error) {
      if (error.status === 401) keyRefused();
      else showError("start-error", error.message);
    } finally {
      $("start").disabled = false;
    }
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
    if (!state.agents.has(id)) fetchAgent(id).then(renderAgentHead);
    renderAgentHead();
    state.agentStream = new SseConnection(`/api/v1/agents/${id}/events`, {
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
    $("steps").replaceChildren();
    $("agent-view").hidden = true;
    $("agent-placeholder").hidden = false;
    $("app-view").classList.remove("showing-agent");
    if (location.hash) history.replaceState(null, "", location.pathname + location.search);
  }

  function onAgentEvent(id, name, data) {
    if (state.selected !== id) return true;
    if (STEP_EVENTS.has(name)) {
      const seq = Number(data.seq);
      if (!Number.isInteger(seq) || state.steps.has(seq)) return false; // replayed: seen
      state.steps.set(seq, data);
      state.lastSeq = Math.max(state.lastSeq, seq);
      addStep(data);
      const agent = state.agents.get(id);
      if (agent && agent.status === "PENDING") {
        agent.status = "RUNNING";
        renderAgents();
      }
      setWaiting(name === "act" && data.tool ? `Running ${data.tool}…` : "Thinking…");
      renderAgentHead();
      return false;
    }
    if (name === "cancelled") {
      if (!$("steps").querySelector('.step[data-type="CANCELLED"]')) {
        $("steps").append(stepItem("CANCELLED", null, [text("The agent was cancelled.")]));
      }
      return false;
    }
    if (name === "done") {
      const agent = state.agents.get(id);
      if (agent) {
        agent.status = data.status;
        agent.stop_reason = data.stop_reason;
      }
      renderAgents();
      renderAgentHead();
      refreshSelected();
      return true; // the stream is over: do not reconnect
    }
    return false;
  }

  async function refreshSelected() {
    const id = state.selected;
    if (!id) return;
    try {
      const agent = await api("GET", `/api/v1/agents/${id}`);
      state.agents.set(agent.id, agent);
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
    const status = agent ? agent.status : "";
    const badge = $("agent-status");
    badge.textContent = status || "…";
    badge.dataset.status = status;
    $("agent-goal").textContent = agent ? agent.goal : id;
    $("cancel").hidden = !agent || TERMINAL.has(status);
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
    if (agent && status === "FAILED" && agent.error) showError("agent-error", agent.error);
    if (TERMINAL.has(status)) setWaiting(null);
    else if ($("agent-waiting").hidden) setWaiting(status === "PENDING" ? "Waiting for a worker…" : "Thinking…");
  }

  function setWaiting(message) {
    $("agent-waiting").hidden = !message;
    if (message) $("agent-waiting-text").textContent = message;
  }

  function addStep(data) {
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
    // In seq order, whatever order the events arrived in.
    const after = [...$("steps").children].find((li) => Number(li.dataset.seq) > data.seq);
    $("steps").insertBefore(item, after || null);
  }

  function stepItem(type, seq, parts) {
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

  async function cancelSelected() {
    const id = state.selected;
    if (!id) return;
    $("cancel").disabled = true;
    try {
      const agent = await api("DELETE", `/api/v1/agents/${id}`);
      state.agents.set(agent.id, agent);
      renderAgents();
      renderAgentHead();
    } catch (error) {
      if (error.status === 401) keyRefused();
      else if (error.status === 409) refreshSelected();
      else showError("agent-error", error.message);
    } finally {
      $("cancel").disabled = false;
    }
  }

  // --- small DOM helpers (textContent only: agent output is never HTML) ----------------

  function el(tag, className, content) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (content !== undefined && content !== null) node.textContent = content;
    return node;
  }

  function span(className, content) {
    return el("span", className, content);
  }

  function text(content) {
    return document.createTextNode(content === null || content === undefined ? "" : String(content));
  }

  function showError(id, message) {
    const node = $(id);
    node.hidden = !message;
    node.textContent = message || "";
  }

  function plural(n, word) {
    return `${n} ${word}${n === 1 ? "" : "s"}`;
  }

  function formatTime(iso) {
    if (!iso) return "";
    const when = new Date(iso);
    const sameDay = when.toDateString() === new Date().toDateString();
    return sameDay ? when.toLocaleTimeString() : when.toLocaleString();
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
    $("cancel").addEventListener("click", cancelSelected);
    $("back").addEventListener("click", deselect);
    $("load-more").addEventListener("click", () =>
      loadAgents({ more: true }).catch((error) => showError("start-error", error.message)));
    const saved = localStorage.getItem(KEY_STORAGE);
    if (saved) signIn(saved, { remember: false });
    else showSignIn(null);
  }

  init();
})();
