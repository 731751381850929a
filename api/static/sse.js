// Server-sent events over fetch(): EventSource cannot send an Authorization header, so
// the streams are read with fetch() and a small SSE parser. A dropped stream reconnects
// with backoff, sending Last-Event-ID = the last seq received; steps are keyed by seq,
// so a replayed step is never shown twice and none is lost.

const BACKOFF_MS = [500, 1000, 2000, 4000, 8000, 15000];
// The server sends a keepalive at least every 15 s: longer silence is a dead link.
const IDLE_TIMEOUT_MS = 45000;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** One SSE stream that reconnects until closed or until onEvent returns true. */
export class SseConnection {
  constructor(path, { headers, onEvent, onOpen, onState, onFatal, lastEventId }) {
    this.path = path;
    this.headers = headers;
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
        const headers = { ...this.headers(), Accept: "text/event-stream" };
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
