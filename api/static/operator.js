// The operator page: totals, queues, workers and failures from /metrics, and two charts of
// the figures' changes since the page opened. Read every POLL_MS; nothing needs a key.

import { $, el, formatTime } from "./page.js";
import { byLabel, named, parseMetrics, total } from "./metrics.js";

const POLL_MS = 5000;
const HISTORY_S = 600; // what the charts keep
const STATUSES = ["PENDING", "RUNNING", "WAITING", "COMPLETED", "FAILED", "CANCELLED"];
const FINISHED = ["COMPLETED", "FAILED", "CANCELLED"];

// The charts (the vendored uPlot): x in seconds since the epoch, uPlot's unit for time
// scales, over a window of at least MIN_WINDOW_S ending at the last reading (with one
// reading, uPlot would stretch the range over a day or years); y labels with the decimals their step
// needs, so that small figures (0.0002 s) never show two ticks alike. Each chart says its
// ticks in its aria-label (a canvas has no text).
const MIN_WINDOW_S = 60;
const TIME = { hour: "2-digit", minute: "2-digit", second: "2-digit" };

/** Tick labels with as many decimals as the step between ticks needs. */
function numberLabels(splits) {
  const step = splits.length > 1 ? Math.abs(splits[1] - splits[0]) : 1;
  const decimals = Math.min(10, Math.max(0, -Math.floor(Math.log10(step) + 1e-9)));
  return splits.map((value) => value.toFixed(decimals));
}

/** Tick labels of a time axis: the time of day, to the second. */
function timeLabels(splits) {
  return splits.map((seconds) => new Date(seconds * 1000).toLocaleTimeString([], TIME));
}

/** [from, to] of the x scale: the readings `times`, over at least MIN_WINDOW_S ending at
 * the last one (now before the first). Read from the data: with one reading, uPlot gives
 * the range function that reading and a day after it. */
function timeWindow(times) {
  const to = times.length ? times[times.length - 1] : Date.now() / 1000;
  return [Math.min(times.length ? times[0] : to, to - MIN_WINDOW_S), to];
}

/** A line chart of one figure over time in `target`; `floor` is the least top of its y
 * scale, so that a figure at 0 still has a sensible one. */
function timeChart(target, { title, unit, stroke, floor }) {
  const ticks = { x: [], y: [] };
  const describe = () => target.setAttribute(
    "aria-label", `${title}: ${unit} ${ticks.y.join(", ")} at ${ticks.x.join(", ")}`);
  return new window.uPlot(
    {
      width: Math.max(target.clientWidth, 240), height: 180, legend: { show: false },
      scales: {
        x: { time: true, range: (plot) => timeWindow(plot.data[0]) },
        y: { range: (_, min, max) => [0, Math.max(max ?? 0, floor) * 1.15] },
      },
      series: [{}, { label: unit, stroke, width: 2, fill: `${stroke}22`, points: { show: false } }],
      axes: [
        { space: 80, values: (_, splits) => (ticks.x = timeLabels(splits)) },
        { size: 60, values: (_, splits) => (ticks.y = numberLabels(splits)) },
      ],
      hooks: { draw: [describe] },
    },
    [[], []],
    target,
  );
}

const history = { t: [], rate: [], latency: [] };
let last = null; // the previous reading: {at (s), finished, callsSum, callsCount}
let charts = null;

function row(cells) {
  const tr = el("tr");
  for (const cell of cells) tr.append(el("td", null, cell));
  return tr;
}

function fill(tbody, rows, emptyText) {
  tbody.replaceChildren(...(rows.length ? rows.map(row) : [emptyRow(emptyText)]));
}

function emptyRow(message) {
  const tr = el("tr");
  const td = el("td", "empty", message);
  td.colSpan = 3;
  tr.append(td);
  return tr;
}

function seconds(value) {
  if (value < 1) return "–";
  if (value < 120) return `${Math.round(value)} s`;
  return `${Math.round(value / 60)} min`;
}

function showTotals(samples) {
  const alive = total(samples, "jarvis_workers_alive");
  $("workers-alive").textContent = alive === null ? "–" : String(alive);
  const statuses = byLabel(samples, "jarvis_agents", "status");
  for (const status of STATUSES) $(`status-${status}`).textContent = String(statuses[status] || 0);
}

function showTables(samples) {
  const depth = byLabel(samples, "jarvis_queue_depth", "model");
  const age = byLabel(samples, "jarvis_oldest_pending_age_seconds", "model");
  const models = [...new Set([...Object.keys(depth), ...Object.keys(age)])].sort();
  fill($("queues"), models.map((m) => [m || "(any)", String(depth[m] || 0), seconds(age[m] || 0)]),
    "Nothing queued.");
  const workers = named(samples, "jarvis_worker_running").map((s) => [
    s.labels.worker, s.labels.models || "every model", String(s.value),
  ]);
  fill($("workers"), workers.sort(), "No worker has reported.");
  const failures = Object.entries(byLabel(samples, "jarvis_agents_failed", "stop_reason"))
    .filter(([, n]) => n > 0).sort((a, b) => b[1] - a[1]).map(([reason, n]) => [reason, String(n)]);
  fill($("failures"), failures, "No failures.");
}

function record(samples) {
  const now = Date.now() / 1000;
  const statuses = byLabel(samples, "jarvis_agents", "status");
  const reading = {
    at: now,
    finished: FINISHED.reduce((sum, s) => sum + (statuses[s] || 0), 0),
    callsSum: total(samples, "jarvis_planning_seconds_sum") || 0,
    callsCount: total(samples, "jarvis_planning_seconds_count") || 0,
  };
  if (last !== null && reading.at > last.at) {
    const calls = reading.callsCount - last.callsCount;
    history.t.push(now);
    history.rate.push(Math.max(0, reading.finished - last.finished) / (reading.at - last.at));
    history.latency.push(calls > 0 ? (reading.callsSum - last.callsSum) / calls : null);
    while (history.t.length && history.t[0] < now - HISTORY_S) {
      for (const series of Object.values(history)) series.shift();
    }
  }
  last = reading;
  charts ||= {
    rate: timeChart($("rate-chart"), {
      title: "Agents finished per second", unit: "agents/s", stroke: "#2f5bea", floor: 0.1 }),
    latency: timeChart($("latency-chart"), {
      title: "Model call latency", unit: "seconds", stroke: "#7c3aed", floor: 0.01 }),
  };
  charts.rate.setData([history.t, history.rate]);
  charts.latency.setData([history.t, history.latency]);
}

async function readiness() {
  try {
    const body = await (await fetch("/readyz", { cache: "no-store" })).json();
    const warnings = body.warnings || [];
    $("readiness").textContent = warnings.length ? warnings.join(" ") : "";
  } catch (_) {
    $("readiness").textContent = "";
  }
}

async function poll() {
  try {
    const response = await fetch("/metrics", { cache: "no-store" });
    if (!response.ok) throw new Error(`/metrics answered ${response.status}`);
    const samples = parseMetrics(await response.text());
    showTotals(samples);
    showTables(samples);
    record(samples);
    $("metrics-error").hidden = true;
    $("updated").textContent = formatTime(new Date().toISOString());
  } catch (error) {
    $("metrics-error").hidden = false;
    $("metrics-error").textContent = `Cannot read the figures: ${error.message}`;
  }
  await readiness();
}

// Each chart follows its card's width (a phone turned, a window resized).
const resized = new ResizeObserver(() => {
  if (!charts) return;
  for (const [name, plot] of Object.entries(charts)) {
    plot.setSize({ width: Math.max($(`${name}-chart`).clientWidth, 240), height: 180 });
  }
});
resized.observe($("rate-chart"));
resized.observe($("latency-chart"));

poll();
setInterval(poll, POLL_MS);
