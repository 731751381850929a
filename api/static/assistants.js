// Assistants (README, Assistants): the New agent form's picker, whose choice fills the
// form's defaults, and the Assistants view: the list, one with its versions, and a JSON or
// YAML text to create or edit one, with a clear error for text that is neither.

import { dump, load } from "./vendor/js-yaml/js-yaml.esm.min.mjs";
import { $, el, formatTime, showError, span } from "./page.js";

const DEFAULT = "agent";
// What a version holds: what the edit text shows, and what a PATCH may change.
const EDITABLE = ["description", "model", "mode", "tools", "instructions", "approve_tools",
  "output_schema", "max_steps", "delegates", "metadata"];
const READ_ONLY = ["assistant_id", "name", "version", "created_at", "updated_at"];
const TEMPLATE = `name: researcher
description: Finds things out and says where it read them.
instructions: |
  Cite your sources.
max_steps: 8
`;

const view = { api: null, onRefused: () => {}, assistants: [], shown: null, editing: null, hid: [] };

/** The user's assistants, in the picker (the choice kept) and the view. The form's tools
 * must be listed first: the choice ticks them. */
export async function loadAssistants(api) {
  view.api = api;
  try {
    view.assistants = (await api("GET", "/api/v1/assistants")).assistants;
  } catch (error) {
    if (error.status === 401) view.onRefused();
    return;
  }
  fillPicker();
  if (!$("assistants-view").hidden) renderList();
}

/** The assistant chosen in the form (null until the list is loaded). */
export function chosenAssistant() {
  return view.assistants.find((a) => a.name === $("assistant").value) || null;
}

export function initAssistants({ api, onRefused }) {
  view.api = api;
  view.onRefused = onRefused;
  $("assistant").addEventListener("change", applyChoice);
  $("assistants-link").addEventListener("click", openView);
  $("assistants-close").addEventListener("click", closeView);
  $("assistant-new").addEventListener("click", () => startEditing(null));
  $("assistant-edit").addEventListener("click", () => startEditing(view.shown));
  $("assistant-delete").addEventListener("click", deleteShown);
  $("assistant-cancel").addEventListener("click", stopEditing);
  $("assistant-form").addEventListener("submit", save);
  // Choosing or starting an agent shows it where this view was.
  $("agents").addEventListener("click", closeView, true);
  $("start-form").addEventListener("submit", closeView, true);
}

// --- the picker -------------------------------------------------------------------------

function fillPicker() {
  const picker = $("assistant");
  const chosen = picker.value || DEFAULT;
  picker.replaceChildren(...view.assistants.map((assistant) => {
    const option = el("option", "", assistant.name);
    option.value = assistant.name;
    option.title = assistant.description || "";
    return option;
  }));
  picker.value = view.assistants.some((a) => a.name === chosen) ? chosen : DEFAULT;
  applyChoice();
}

/** The form's defaults become the chosen assistant's: its model, step limit and tools. */
function applyChoice() {
  const assistant = chosenAssistant();
  if (!assistant) return;
  const model = $("model");
  model.defaultValue = assistant.model;
  model.value = assistant.model;
  $("max-steps").placeholder = String(assistant.max_steps);
  for (const box of $("tools").querySelectorAll("input[type=checkbox]")) {
    box.checked = assistant.tools === null || assistant.tools.includes(box.value);
    box.dispatchEvent(new Event("change"));
  }
}

// --- the view ---------------------------------------------------------------------------

function openView() {
  if (!$("assistants-view").hidden) return;
  view.hid = ["agent-view", "agent-placeholder"].filter((id) => !$(id).hidden);
  for (const id of view.hid) $(id).hidden = true;
  $("assistants-view").hidden = false;
  renderList();
  loadAssistants(view.api);
}

function closeView() {
  if ($("assistants-view").hidden) return;
  $("assistants-view").hidden = true;
  for (const id of view.hid) $(id).hidden = false;
  view.hid = [];
  stopEditing();
}

function renderList() {
  $("assistants").replaceChildren(...view.assistants.map((assistant) => {
    const row = el("li", "assistant-row");
    row.dataset.name = assistant.name;
    row.dataset.testid = "assistant-row";
    row.tabIndex = 0;
    row.setAttribute("role", "button");
    row.setAttribute("aria-selected", String(view.shown && view.shown.name === assistant.name));
    row.append(span("name", assistant.name), span("badge", `v${assistant.version}`),
      el("p", "meta", [assistant.model, assistant.mode, assistant.description].filter(Boolean).join(" · ")));
    const open = () => showAssistant(assistant.name);
    row.addEventListener("click", open);
    row.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") { event.preventDefault(); open(); }
    });
    return row;
  }));
}

async function showAssistant(name) {
  try {
    const [assistant, { versions }] = await Promise.all([
      view.api("GET", `/api/v1/assistants/${encodeURIComponent(name)}`),
      view.api("GET", `/api/v1/assistants/${encodeURIComponent(name)}/versions`),
    ]);
    view.shown = assistant;
    showError("assistants-error", null);
    renderDetail(assistant, versions);
    renderList();
  } catch (error) {
    failed(error);
  }
}

function renderDetail(assistant, versions) {
  stopEditing();
  $("assistant-detail").hidden = false;
  $("assistant-title").textContent = `${assistant.name} · version ${assistant.version}`;
  const readOnly = assistant.name === DEFAULT;
  $("assistant-edit").hidden = readOnly;
  $("assistant-delete").hidden = readOnly;
  const fields = [["id", assistant.assistant_id], ...EDITABLE.map((name) => [name, assistant[name]])];
  if (readOnly) fields.push(["", "The default assistant follows the server's settings."]);
  $("assistant-fields").replaceChildren(...fields
    .filter(([, value]) => value !== null && value !== "" && !(Array.isArray(value) && !value.length)
      && !(typeof value === "object" && !Array.isArray(value) && !Object.keys(value).length))
    .flatMap(([name, value]) => [el("dt", "", name),
      el("dd", "", typeof value === "string" ? value : JSON.stringify(value))]));
  $("assistant-versions").replaceChildren(...versions.map((version) => {
    const item = el("li", "", `version ${version.version} · ${formatTime(version.created_at)} · ${version.model}`);
    item.dataset.testid = "assistant-version";
    return item;
  }));
}

function startEditing(assistant) {
  view.editing = assistant;
  $("assistant-detail").hidden = true;
  $("assistant-form").hidden = false;
  $("assistant-form-title").textContent = assistant
    ? `Edit ${assistant.name} (saving makes version ${assistant.version + 1}; a field deleted goes back to its default)`
    : "New assistant";
  const fields = assistant && Object.fromEntries(EDITABLE.map((name) => [name, assistant[name]]));
  $("assistant-text").value = assistant ? dump(fields) : TEMPLATE;
  showError("assistant-error", null);
  $("assistant-text").focus();
}

function stopEditing() {
  view.editing = null;
  $("assistant-form").hidden = true;
  showError("assistant-error", null);
  if (view.shown) $("assistant-detail").hidden = false;
}

async function save(event) {
  event.preventDefault();
  let data;
  try {
    data = parseText($("assistant-text").value);
  } catch (error) {
    showError("assistant-error", error.message);
    return;
  }
  const editing = view.editing;
  const body = editing ? changes(editing, data) : data;
  if (editing && !Object.keys(body).length) {
    showError("assistant-error", "Nothing changed: there is no new version to save.");
    return;
  }
  $("assistant-save").disabled = true;
  try {
    const saved = editing
      ? await view.api("PATCH", `/api/v1/assistants/${editing.assistant_id}`, body)
      : await view.api("POST", "/api/v1/assistants", body);
    await loadAssistants(view.api);
    await showAssistant(saved.name);
  } catch (error) {
    if (error.status === 401) view.onRefused();
    else showError("assistant-error", error.message);
  } finally {
    $("assistant-save").disabled = false;
  }
}

/** What the edited text changes: the fields it gives differently, and null (the default)
 * for those it no longer gives. Its read-only fields, unchanged, are left out. */
function changes(current, data) {
  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
  const patch = {};
  for (const [name, value] of Object.entries(data)) {
    if (READ_ONLY.includes(name) && same(value, current[name])) continue;
    if (!same(value, current[name])) patch[name] = value;
  }
  for (const name of EDITABLE) if (!(name in data)) patch[name] = null;
  return patch;
}

/** The text as an object: JSON when it starts with `{`, else YAML; an Error saying where not. */
function parseText(text) {
  if (!text.trim()) throw new Error("Write the assistant as JSON or YAML first.");
  let data;
  if (text.trimStart().startsWith("{")) {
    try {
      data = JSON.parse(text);
    } catch (error) {
      throw new Error(`This is not valid JSON: ${error.message}`);
    }
  } else {
    try {
      data = load(text);
    } catch (error) {
      const at = error.mark ? `line ${error.mark.line + 1}, column ${error.mark.column + 1}: ` : "";
      throw new Error(`This is not valid YAML (${at}${error.reason || error.message}).`);
    }
  }
  if (data === null || typeof data !== "object" || Array.isArray(data)) {
    throw new Error("Write an object of the assistant's fields, such as `name: researcher`.");
  }
  return data;
}

async function deleteShown() {
  const assistant = view.shown;
  if (!assistant || !window.confirm(`Delete the assistant ${assistant.name} and its versions?`)) return;
  try {
    await view.api("DELETE", `/api/v1/assistants/${assistant.assistant_id}`);
    view.shown = null;
    $("assistant-detail").hidden = true;
    await loadAssistants(view.api);
    renderList();
  } catch (error) {
    failed(error);
  }
}

function failed(error) {
  if (error.status === 401) view.onRefused();
  else showError("assistants-error", error.message);
}
