// The API's JSON calls, and small DOM helpers (textContent only: agent output is never HTML).

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** A JSON call with the user's key; an error answer is thrown as an ApiError. */
export async function callApi(apiKey, method, path, body) {
  const headers = { Authorization: `Bearer ${apiKey}`, Accept: "application/json" };
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

export const $ = (id) => document.getElementById(id);

export function el(tag, className, content) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (content !== undefined && content !== null) node.textContent = content;
  return node;
}

export function span(className, content) {
  return el("span", className, content);
}

export function text(content) {
  return document.createTextNode(content === null || content === undefined ? "" : String(content));
}

export function showError(id, message) {
  const node = $(id);
  node.hidden = !message;
  node.textContent = message || "";
}

export function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

export function formatTime(iso) {
  if (!iso) return "";
  const when = new Date(iso);
  const sameDay = when.toDateString() === new Date().toDateString();
  return sameDay ? when.toLocaleTimeString() : when.toLocaleString();
}
