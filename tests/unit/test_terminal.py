"""How the CLI shows things on a terminal: times in the machine's zone, named; the live
view of an agent (its spinner, a cut reply, a cancel); an agent's details."""

from __future__ import annotations

import io
import re
import time
from collections.abc import Iterator

import pytest
from rich.console import Console
from rich.text import Text

from jarvis_agents.cli.terminal import LiveRenderer, agent_details, local_time


@pytest.fixture
def zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize(("tz", "shown"), [
    ("Asia/Tokyo", "2026-01-02 12:04:05 JST"),
    ("Europe/Paris", "2026-01-02 04:04:05 CET"),
    ("UTC", "2026-01-02 03:04:05 UTC"),
])
def test_api_times_are_shown_in_the_local_zone_with_its_name(
    zone: None, monkeypatch: pytest.MonkeyPatch, tz: str, shown: str
) -> None:
    monkeypatch.setenv("TZ", tz)
    time.tzset()
    assert local_time("2026-01-02T03:04:05.678Z") == shown
    assert local_time("2026-01-02T03:04:05+00:00") == shown


def test_no_time_is_blank_and_a_foreign_one_is_shown_as_it_came() -> None:
    assert local_time(None) == "" and local_time("") == ""
    assert local_time("yesterday") == "yesterday"


# --- the live view of `run` and `watch` --------------------------------------------------


def terminal(*, tty: bool = True) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=tty, width=100, highlight=False), out


def frames_after(output: str, printed: str) -> list[str]:
    """The spinner's labels drawn after the last line containing `printed`."""
    tail = output[output.rindex(printed):]
    return re.findall(r"[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏](?:\x1b\[[0-9;]*m)* ([^\r\n\x1b]+)", tail)


RUNNING_GETTIME = ("act", {"tool": "getTime", "content": "Tokyo"})  # "running getTime…"
THINKING = ("think", {"content": "I may"})  # "thinking…"


@pytest.mark.parametrize(("before", "name", "data", "printed", "label"), [
    (RUNNING_GETTIME, "think", {"content": "I need to compute"}, "to compute", "thinking…"),
    (THINKING, "act", {"tool": "calculate", "content": "6*7"}, "(6*7)", "running calculate…"),
    (RUNNING_GETTIME, "observe", {"tool": "getTime", "content": "09:00"}, "09:00", "thinking…"),
    (THINKING, "waiting", {"tool": "calculate", "input": "6*7"}, "needs an approval",
     "waiting for approval…"),
])
def test_the_spinner_says_what_follows_the_latest_event_from_the_moment_it_is_shown(
    before: tuple[str, dict], name: str, data: dict, printed: str, label: str
) -> None:
    console, out = terminal()
    renderer = LiveRenderer(console)
    try:
        renderer.event(*before)  # another label than the one expected next
        renderer.event(name, data)
        frames = frames_after(out.getvalue(), printed)
    finally:
        renderer.stop()
    # Every frame drawn since the event was printed, the first one included, says it.
    assert frames and set(frames) == {label}, frames


def test_no_spinner_after_the_answer_or_a_cancel() -> None:
    for name in ("final", "cancelled"):
        console, _ = terminal()
        renderer = LiveRenderer(console)
        try:
            renderer.event("think", {"content": "go"})
            renderer.event(name, {"content": "42"})
            spinning = renderer.status is not None
        finally:
            renderer.stop()
        assert not spinning, name


def test_a_cancel_is_its_label_and_a_space_then_what_happened() -> None:
    console, out = terminal()
    LiveRenderer(console).event("cancelled", {})
    assert "CANCELLED the agent was cancelled" in Text.from_ansi(out.getvalue()).plain


def test_a_reply_cut_by_ctrl_c_keeps_its_text_and_gets_its_line_ended() -> None:
    for console, out in (terminal(), terminal(tty=False)):
        renderer = LiveRenderer(console)
        renderer.token("THOUGHT: I need to mul")
        renderer.close()
        plain = Text.from_ansi(out.getvalue()).plain
        assert plain.endswith("THOUGHT: I need to mul\n"), repr(out.getvalue())


@pytest.mark.parametrize(("turns", "said"), [(1, "1 earlier turn of its thread"),
                                             (3, "3 earlier turns of its thread")])
def test_show_counts_the_earlier_turns_in_words(turns: int, said: str) -> None:
    console, out = terminal()
    agent_details(console, {"id": "a", "status": "COMPLETED", "goal": "g", "thread_id": "t",
                            "context": {"turns": turns, "left_out": 0}})
    assert re.search(rf"context:\s+{said}$", Text.from_ansi(out.getvalue()).plain, re.MULTILINE)
