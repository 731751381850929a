"""The dashboard in a real headless Chromium (Debian's, driven by Playwright) against a real
API, worker, PostgreSQL, Redis and FakeOllama: sign in, start an agent and watch its
steps arrive live, follow agents started elsewhere, survive an API restart without
losing or repeating a step, cancel, and stay usable on a 375 px wide phone."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT
from tests.support.api_server import CALC_SCRIPT
from tests.support.browser import TIMEOUT_MS, expect
from tests.support.live_stack import KNOWN_MODEL, LiveStack

pytestmark = pytest.mark.integration
pytest_plugins = [
    "tests.support.api_fixtures", "tests.support.live_stack_fixtures",  # the live_stack fixture
    "tests.support.browser_fixtures",  # the browser and page fixtures
]

ARTIFACTS = ROOT / "test-artifacts"


def sign_in(page: Any, key: str) -> None:
    page.goto("/")
    expect(page.locator("#sign-in-view")).to_be_visible()
    page.fill("#api-key", key)
    page.click("#sign-in")
    expect(page.locator("#app-view")).to_be_visible()


def start(page: Any, goal: str, *, max_steps: int | None = None) -> str:
    """Start an agent from the form; returns its id once the page has selected it."""
    page.fill("#goal", goal)
    if max_steps is not None:
        page.fill("#max-steps", str(max_steps))
    page.click("#start")
    expect(page.locator("#agent-goal")).to_have_text(goal)
    row = page.locator(".agent-row", has_text=goal).first
    return str(row.get_attribute("data-id"))


def step_seqs(page: Any, count: int) -> list[int]:
    """The seqs of the steps shown, once `count` are (a duplicate would show as one more)."""
    steps = page.locator(".step[data-seq]")
    expect(steps).to_have_count(count)
    return [int(s) for s in steps.evaluate_all("els => els.map(e => e.dataset.seq)")]


def test_sign_in_start_watch_live_follow_reconnect_and_cancel(page: Any, live_stack: LiveStack) -> None:
    ARTIFACTS.mkdir(exist_ok=True)

    # A refused key is said so, and nothing is kept.
    page.goto("/")
    page.fill("#api-key", "jrv_not-a-key")
    page.click("#sign-in")
    expect(page.locator("#sign-in-error")).to_contain_text("refused")
    assert page.evaluate("localStorage.getItem('jarvis.apiKey')") is None
    sign_in(page, live_stack.api_key)
    expect(page.locator("#connection")).to_have_attribute("data-state", "connected")

    # Start an agent and see its steps arrive while it runs (each model turn takes 2 s).
    agent_id = start(page, "slow: what is 1234 * 902?", max_steps=5)
    expect(page.locator(".step[data-type='THINK'][data-seq='1']")).to_be_visible()
    expect(page.locator("#agent-status")).to_have_attribute("data-status", "RUNNING")
    expect(page.locator(".step[data-type='FINAL']")).to_have_count(0)  # live, not at the end
    act = page.locator(".step[data-type='ACT']")
    expect(act.locator(".step-tool")).to_have_text("calculate")
    expect(act.locator(".step-input")).to_have_text("1234 * 902")
    expect(page.locator(".step[data-type='OBSERVE']")).to_contain_text("1113068")
    # The step count goes up while it runs, in the header and in the list.
    expect(page.locator("#agent-meta")).to_contain_text(re.compile(r"· 1 step( ·|$)"))
    expect(page.locator(f".agent-row[data-id='{agent_id}'] .meta")).to_contain_text("1 step ·")
    expect(page.locator(".step[data-type='FINAL']")).to_contain_text("1113068")
    expect(page.locator("#agent-status")).to_have_attribute("data-status", "COMPLETED")
    expect(page.locator(f".agent-row[data-id='{agent_id}']")).to_have_attribute("data-status", "COMPLETED")
    expect(page.locator(f".agent-row[data-id='{agent_id}'] .meta")).to_contain_text("2 steps ·")
    expect(page.locator("#agent-final")).to_contain_text("1113068")
    expect(page.locator("#cancel")).to_be_hidden()
    assert [page.locator(f".step[data-seq='{n}']").get_attribute("data-type") for n in range(1, 6)] == [
        "THINK", "ACT", "OBSERVE", "THINK", "FINAL",
    ]

    # An agent started elsewhere appears in the list and its status changes live.
    with httpx.Client(base_url=live_stack.url, headers={"Authorization": f"Bearer {live_stack.api_key}"}) as http:
        elsewhere = http.post("/api/v1/agents", json={"goal": "slow: started from a script"}).json()["id"]
        row = page.locator(f".agent-row[data-id='{elsewhere}']")
        expect(row).to_be_visible()
        expect(row).to_have_attribute("data-status", re.compile("PENDING|RUNNING"))
        expect(row).to_have_attribute("data-status", "COMPLETED")

    # The API restarts mid-run: both streams reconnect, the agent's with Last-Event-ID,
    # and every step is shown exactly once.
    resumed_from: list[str] = []
    page.on("request", lambda request: resumed_from.append(request.headers.get("last-event-id", ""))
            if "/events" in request.url and "/agents/" in request.url else None)
    restarted = start(page, "slow: survive a restart")
    expect(page.locator(".step[data-type='OBSERVE']")).to_be_visible(timeout=TIMEOUT_MS)
    live_stack.restart_api()
    expect(page.locator(".step[data-type='FINAL']")).to_contain_text("1113068", timeout=30_000)
    expect(page.locator("#agent-status")).to_have_attribute("data-status", "COMPLETED")
    assert step_seqs(page, 5) == [1, 2, 3, 4, 5]
    assert len(resumed_from) >= 2 and resumed_from[0] == "" and int(resumed_from[-1]) >= 3, resumed_from
    expect(page.locator("#connection")).to_have_attribute("data-state", "connected")
    expect(page.locator(f".agent-row[data-id='{restarted}']")).to_have_attribute("data-status", "COMPLETED")

    # Cancel a slow one while it runs.
    cancelled = start(page, "slow: cancel me")
    expect(page.locator("#cancel")).to_be_visible()
    page.click("#cancel")
    expect(page.locator("#agent-status")).to_have_attribute("data-status", "CANCELLED")
    expect(page.locator(f".agent-row[data-id='{cancelled}']")).to_have_attribute("data-status", "CANCELLED")
    expect(page.locator(".step[data-type='CANCELLED']")).to_be_visible()
    expect(page.locator("#cancel")).to_be_hidden()

    page.click(f".agent-row[data-id='{agent_id}']")
    expect(page.locator(".step[data-type='FINAL']")).to_contain_text("1113068")
    page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True, animations="disabled")

    # A reload keeps the key and the selected agent; signing out forgets the key.
    page.reload()
    expect(page.locator("#agent-goal")).to_have_text("slow: what is 1234 * 902?")
    assert step_seqs(page, 5) == [1, 2, 3, 4, 5]
    page.click("#sign-out")
    expect(page.locator("#sign-in-view")).to_be_visible()
    assert page.evaluate("localStorage.getItem('jarvis.apiKey')") is None


def test_the_form_chooses_the_model_and_the_tools(page: Any, live_stack: LiveStack) -> None:
    sign_in(page, live_stack.api_key)
    expect(page.locator("#model")).to_have_value(KNOWN_MODEL)  # the server's default, filled in
    page.click("#tools-summary")
    boxes = page.locator("#tools input[type=checkbox]")
    expect(boxes).to_have_count(4)
    for name in ("getTime", "getWeather", "search"):
        page.uncheck(f"#tools input[value='{name}']")
    expect(page.locator("#tools-summary")).to_have_text("Tools: 1 of 4")
    page.fill("#model", "llama3.2")
    agent_id = start(page, "What is 1234 * 902, on another model?")
    expect(page.locator(".step[data-type='FINAL']")).to_contain_text("1113068")
    expect(page.locator("#agent-meta")).to_contain_text("llama3.2")
    with live_stack.api.client(live_stack.api_key) as http:
        agent = http.get(f"/api/v1/agents/{agent_id}").json()
    assert (agent["model"], agent["tools"]) == ("llama3.2", ["calculate"])


def test_a_failed_agents_error_is_shown_once(page: Any, live_stack: LiveStack) -> None:
    sign_in(page, live_stack.api_key)
    start(page, "What is 1234 * 902, in one step?", max_steps=1)  # the answer needs two
    expect(page.locator("#agent-status")).to_have_attribute("data-status", "FAILED")
    error = page.locator(".step[data-type='ERROR'] .step-body")
    expect(error).to_contain_text("step")
    expect(page.locator("#agent-meta")).to_contain_text(re.compile(r"max steps · [0-9.]+ s$"))  # re-read
    assert page.locator("#agent-view").inner_text().count(error.inner_text()) == 1
    expect(page.locator("#agent-failure")).to_be_hidden()


def test_a_status_change_during_the_rows_fetch_is_not_lost(page: Any, live_stack: LiveStack) -> None:
    sign_in(page, live_stack.api_key)
    with live_stack.api.client(live_stack.api_key) as http:
        marker = http.post("/api/v1/agents", json={"goal": "slow: a marker"}).json()["id"]
        expect(page.locator(f".agent-row[data-id='{marker}']")).to_be_visible()
        # From now on the page's read of an agent it does not know yet answers late: with
        # the agent as it was when created, after every change of it has been announced.
        held: list[Any] = []
        page.route(re.compile(r"/api/v1/agents/[0-9a-f-]{36}$"), lambda route: held.append(route))
        created = http.post("/api/v1/agents", json={"goal": "What is 1234 * 902, quickly?"}).json()
        assert http.get(f"/api/v1/agents/{created['id']}", params={"wait": 30}).json()["status"] == "COMPLETED"
        # Announced after the other's changes: once the page shows it, it has seen them all.
        assert http.delete(f"/api/v1/agents/{marker}").status_code == 200
        expect(page.locator(f".agent-row[data-id='{marker}']")).to_have_attribute("data-status", "CANCELLED")
    assert len(held) == 1 and held[0].request.url.endswith(created["id"])
    held[0].fulfill(status=200, content_type="application/json", body=json.dumps(created))
    row = page.locator(f".agent-row[data-id='{created['id']}']")
    expect(row).to_have_attribute("data-status", "COMPLETED")  # not the PENDING it was read as
    expect(row.locator(".meta")).to_contain_text("2 steps")


def test_a_phone_sized_screen_shows_one_column_without_sideways_scrolling(
    browser: Any, live_stack: LiveStack
) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    context = browser.new_context(viewport={"width": 375, "height": 740}, base_url=live_stack.url,
                                  is_mobile=True, has_touch=True, device_scale_factor=2)
    context.set_default_timeout(TIMEOUT_MS)
    try:
        page = context.new_page()
        sign_in(page, live_stack.api_key)
        start(page, "What is 1234 * 902, from my phone?")
        expect(page.locator(".step[data-type='FINAL']")).to_contain_text("1113068")
        expect(page.locator("#start-form")).to_be_hidden()  # one thing at a time
        assert page.evaluate("document.documentElement.scrollWidth") <= 375
        page.screenshot(path=str(ARTIFACTS / "dashboard-phone.png"), full_page=True, animations="disabled")
        page.click("#back")
        expect(page.locator("#start-form")).to_be_visible()
        expect(page.locator(".agent-row").first).to_be_visible()
        assert page.evaluate("document.documentElement.scrollWidth") <= 375
    finally:
        context.close()


def test_the_page_and_its_assets_need_no_key_and_forbid_foreign_scripts(live_stack: LiveStack) -> None:
    with httpx.Client(base_url=live_stack.url) as http:
        index = http.get("/")
        assert index.status_code == 200 and index.headers["Content-Type"].startswith("text/html")
        assert 'id="api-key"' in index.text
        for asset, media_type in (("dashboard.js", "javascript"), ("dashboard.css", "text/css")):
            response = http.get(f"/static/{asset}")
            assert response.status_code == 200 and media_type in response.headers["Content-Type"]
        assert http.get("/api/v1/agents").status_code == 401  # the data still needs the key


def test_waiting_agents_come_first_and_are_approved_edited_or_denied(page: Any, live_stack: LiveStack) -> None:
    key = live_stack.api.user()
    gated = {"goal": "What is 1234 * 902?", "approve_tools": ["calculate"]}
    with httpx.Client(base_url=live_stack.url, headers={"Authorization": f"Bearer {key}"}) as http:
        first = http.post("/api/v1/agents", json={**gated, "goal": "gated: edit me"}).json()["id"]
        sign_in(page, key)
        newest = http.post("/api/v1/agents", json={"goal": "not gated"}).json()["id"]
        expect(page.locator(f".agent-row[data-id='{newest}']")).to_have_attribute("data-status", "COMPLETED")
        # One that starts to wait while the page is open shows up live, first.
        second = http.post("/api/v1/agents", json={**gated, "goal": "gated: deny me"}).json()["id"]
        expect(page.locator(f".agent-row[data-id='{second}']")).to_have_attribute("data-status", "WAITING")
        expect(page.locator(f".agent-row[data-id='{first}']")).to_have_attribute("data-status", "WAITING")
        rows = page.locator(".agent-row").evaluate_all("els => els.map(e => e.dataset.id)")
        assert rows == [second, first, newest]

        page.click(f".agent-row[data-id='{first}']")
        expect(page.locator("#agent-status")).to_have_attribute("data-status", "WAITING")
        expect(page.locator("#approval-call")).to_have_text('calculate("1234 * 902")')
        expect(page.locator("#agent-waiting")).to_contain_text("Waiting for your approval")
        page.click("#edit")
        page.fill("#approval-input", "2*3")
        page.click("#approve")
        expect(page.locator("#approval")).to_be_hidden()
        expect(page.locator(".step[data-type='OBSERVE']")).to_contain_text("6")
        expect(page.locator("#agent-status")).to_have_attribute("data-status", "COMPLETED")

        page.click(f".agent-row[data-id='{second}']")
        expect(page.locator("#approval")).to_be_visible()
        page.click("#deny")
        expect(page.locator(".step[data-type='OBSERVE']")).to_contain_text("denied: denied from the dashboard")
        expect(page.locator("#agent-status")).to_have_attribute("data-status", "COMPLETED")
        rows = page.locator(".agent-row").evaluate_all("els => els.map(e => e.dataset.id)")
        assert rows == [second, newest, first]  # newest first once none waits


def test_a_follow_up_joins_the_thread_and_a_step_re_runs_from_there(page: Any, live_stack: LiveStack) -> None:
    sign_in(page, live_stack.api_key)
    first = start(page, "Thread: what is 1234 * 902?")
    expect(page.locator("#agent-status")).to_have_attribute("data-status", "COMPLETED")
    expect(page.locator("#thread")).to_be_hidden()  # a thread of one

    page.fill("#follow-up-goal", "And what was that again?")
    page.click("#ask")
    expect(page.locator("#agent-goal")).to_have_text("And what was that again?")
    expect(page.locator("#agent-status")).to_have_attribute("data-status", "COMPLETED")
    thread = page.locator(".thread-agent")
    expect(thread).to_have_count(2)
    expect(thread.nth(0)).to_contain_text("Thread: what is 1234 * 902?")
    expect(thread.nth(0).locator(".thread-answer")).to_have_text("1113068")
    expect(thread.nth(1)).to_have_attribute("aria-current", "true")

    thread.nth(0).locator(".goal").click()
    expect(page.locator("#agent-goal")).to_have_text("Thread: what is 1234 * 902?")
    rerun = page.locator(".step[data-seq='3'] [data-testid='rerun']")
    expect(rerun).to_be_visible()
    expect(page.locator(".step[data-seq='1'] [data-testid='rerun']")).to_have_count(0)
    rerun.click()
    expect(page.locator("#agent-origin")).to_contain_text(f"Re-run of {first[:8]} from step #3")
    expect(page.locator("#agent-status")).to_have_attribute("data-status", "COMPLETED")
    assert step_seqs(page, 5) == [1, 2, 3, 4, 5]
    expect(page.locator(".step[data-type='OBSERVE']")).to_contain_text("1113068")


def record_live_text(page: Any) -> None:
    """From now on, every text the live reply shows goes to `window.written`, as it
    changes (a poll could miss the last ones)."""
    page.evaluate("""() => {
      window.written = [];
      new MutationObserver(() => {
        const body = document.querySelector('[data-testid="writing"] .step-body');
        if (body) window.written.push(body.textContent);
      }).observe(document.getElementById("steps"),
                 { childList: true, subtree: true, characterData: true });
    }""")


def test_a_reply_asked_for_again_after_its_stream_broke_is_shown_once(
    page: Any, live_stack: LiveStack
) -> None:
    live_stack.fake.latency_s = 1.0  # the page's stream is open before the first reply starts
    live_stack.fake.chunk_delay_s = 0.1
    live_stack.fake.drop_next(1, after_chunks=6)  # then that reply breaks mid-way
    try:
        sign_in(page, live_stack.api_key)
        record_live_text(page)
        start(page, "What is 1234 * 902?")
        # Three replies with a backoff between the first two: more than the usual wait.
        expect(page.locator(".step[data-seq]")).to_have_count(5, timeout=30_000)
        assert step_seqs(page, 5) == [1, 2, 3, 4, 5]
        shown = [text for text in page.evaluate("window.written") if text]
        first, second = CALC_SCRIPT
        assert first in shown, shown
        # Never the start of the reply twice: every text shown is the start of one reply.
        assert all(first.startswith(t) or second.startswith(t) for t in shown), shown
    finally:
        live_stack.fake.latency_s = live_stack.fake.chunk_delay_s = 0.0


def test_the_reply_appears_live_while_the_model_writes_it(page: Any, live_stack: LiveStack) -> None:
    live_stack.fake.chunk_delay_s = 0.15  # a word every 150 ms: a second or more a reply
    try:
        sign_in(page, live_stack.api_key)
        record_live_text(page)
        start(page, "What is 1234 * 902?")
        writing = page.locator('[data-testid="writing"]')
        expect(writing).to_contain_text("THOUGHT: ")  # before any step of that reply
        assert step_seqs(page, 5) == [1, 2, 3, 4, 5]
        expect(writing).to_have_count(0)  # the steps replaced it
        shown = page.evaluate("window.written")
        # The page may have joined during the first reply (its stream opens after the
        # create): the second one it sees whole, word by word.
        whole = "THOUGHT: done\nFINAL_ANSWER: 1113068"
        grew = {text for text in shown if text and whole.startswith(text)}
        assert whole in shown and len(grew) >= 3, shown
    finally:
        live_stack.fake.chunk_delay_s = 0.0


def test_an_ended_agent_is_deleted_from_its_view_once_asked(page: Any, live_stack: LiveStack) -> None:
    sign_in(page, live_stack.api_key)
    agent_id = start(page, "What is 1234 * 902, in one step?", max_steps=1)
    expect(page.locator("#agent-status")).to_have_attribute("data-status", "FAILED")
    expect(page.locator("#cancel")).to_be_hidden()
    page.once("dialog", lambda dialog: dialog.dismiss())  # asked, and said no: nothing happens
    page.click("#delete")
    expect(page.locator(f".agent-row[data-id='{agent_id}']")).to_be_visible()
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#delete")
    expect(page.locator(f".agent-row[data-id='{agent_id}']")).to_have_count(0)
    expect(page.locator("#agent-view")).to_be_hidden()
    with live_stack.api.client(live_stack.api_key) as http:
        assert http.get(f"/api/v1/agents/{agent_id}").status_code == 404
