// Schedules (README, Schedules): the sidebar's list of the user's schedules, each with its
// next run (on this browser's clock), its last agent (a click opens it) and how many due
// times it skipped. Read again every REFRESH_MS: a schedule's runs come on its own clock.

import { $, el, formatTime, span } from "./page.js";

const REFRESH_MS = 15000;
const view = { api: null, open: () => {}, timer: null };

/** Show the user's schedules, and keep them fresh; `open(id)` shows an agent. */
export function startSchedules(api, open) {
  view.api = api;
  view.open = open;
  clearInterval(view.timer);
  view.timer = setInterval(loadSchedules, REFRESH_MS);
  loadSchedules();
}

async function loadSchedules() {
  let schedules;
  try {
    ({ schedules } = await view.api("GET", "/api/v1/schedules"));
  } catch (error) {
    if (error.status === 401) stop(); // signed out: the next sign-in starts again
    return; // the agents' list says what is wrong with the connection
  }
  $("schedules-card").hidden = schedules.length === 0;
  $("schedules").replaceChildren(...schedules.map(row));
}

function stop() {
  clearInterval(view.timer);
  view.timer = null;
  $("schedules-card").hidden = true;
  $("schedules").replaceChildren();
}

function row(schedule) {
  const item = el("li", "schedule-row");
  item.dataset.testid = "schedule-row";
  item.dataset.id = schedule.id;
  const next = schedule.enabled ? `next ${formatTime(schedule.next_run_at)}` : "paused";
  item.append(el("p", "goal", schedule.goal),
    el("p", "meta", `${schedule.cron} (${schedule.timezone}) · ${next}`));
  const facts = el("p", "meta");
  facts.dataset.testid = "schedule-facts";
  if (schedule.last_agent_id) {
    const last = el("button", "link-button", "last agent");
    last.type = "button";
    last.dataset.testid = "schedule-last-agent";
    last.addEventListener("click", () => view.open(schedule.last_agent_id));
    facts.append(last, " · ");
  }
  facts.append(span("skipped", `skipped ${schedule.skipped}`));
  item.append(facts);
  return item;
}
