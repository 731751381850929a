"""How soon a call ends once it must: the figures the functional tests no longer time.

    python -m bench.cut_latency [--rounds 30] [--json]

The tests prove that a cancel, a stop, a timeout or the step deadline ends a call (the
thing it waits on takes an hour); this measures how long after the moment it must end
the call returns, in one process, against the package's model server
(`jarvis_agents.demo.server`) on 127.0.0.1:

- a model call (the Ollama adapter) cancelled mid-reply or while the model is silent,
  by a StopSignal woken as the runner's cancel listener does, or by a plain callable
  the watchdog polls (every 100 ms: `jarvis_agents.llm.interrupts.POLL_S`);
- a model call at its step deadline: silent, and a reply that keeps trickling in
  (a word every 100 ms, so that only the deadline's watch can end it);
- a tool call (the registry) at its timeout, and stopped by a woken StopSignal;
- the calculator's refusal of each hostile input its tests feed it (no server).

From "must end" (the cancel set, the deadline, the timeout) to the call's return:
p50, p90 and the largest of `--rounds` rounds, in ms; the refusals in µs (the median
of 200 runs each). A loaded machine shows in the tails: read them with the load.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from jarvis_agents.config import Settings
from jarvis_agents.demo.server import Admission, ModelServer
from jarvis_agents.errors import Cancelled, StepTimeout, ToolError
from jarvis_agents.llm.base import ChatMessage, ChatRequest, StopSignal
from jarvis_agents.llm.ollama import OllamaChatModel
from jarvis_agents.tools.base import ToolContext
from jarvis_agents.tools.builtin.calculate import evaluate
from jarvis_agents.tools.registry import ToolRegistry

HOUR = 3600.0
WORDS = " ".join(["word"] * 50)
TRICKLE = " ".join(["word"] * 36_000)  # an hour, a word every 100 ms
CONVERSATION = [ChatMessage("user", "2+2? [bench cut latency]")]
# The hostile inputs of tests/unit/test_tools_calculate.py.
HOSTILE = ["9 ** 9 ** 9 ** 9", "10 ** 100000", "2 ** 2 ** 2 ** 2 ** 2 ** 2",
           "10 ** 9999 * 10 ** 9999", "(10 ** 9999) ** 2", "1" * 10_000,
           "(" * 240 + "1" + ")" * 240, "-" * 450 + "1"]


class Server(ModelServer):
    """The model server, telling when a request arrived and when a piece went out."""

    def __init__(self) -> None:
        super().__init__(responder=lambda request: WORDS)
        self.asked = threading.Event()
        self.wrote = threading.Event()

    def admit(self, request: dict[str, Any], endpoint: str) -> Admission:
        self.asked.set()
        return None, None

    def count(self, *, connection: bool = False, hangup: bool = False, chunk: bool = False,
              listing: str | None = None) -> None:
        if chunk:
            self.wrote.set()

    def script(self, *, reply: str = WORDS, latency_s: float = 0.0, chunk_delay_s: float = 0.0) -> None:
        self.responder = lambda request: reply
        self.latency_s, self.chunk_delay_s = latency_s, chunk_delay_s
        self.asked.clear()
        self.wrote.clear()


def _ask(model: OllamaChatModel, *, timeout_s: float, should_stop: Callable[[], bool]) -> None:
    model.complete(ChatRequest(CONVERSATION, model="llama3.2", stop=()),
                   deadline=time.monotonic() + timeout_s, should_stop=should_stop)


def _cancelled(server: Server, model: OllamaChatModel, *, when: threading.Event,
               woken: bool) -> float:
    """Seconds from the cancel, made once `when` is set, to the call's Cancelled."""
    flag = threading.Event()
    signal = StopSignal(flag.is_set) if woken else None
    cancelled_at: list[float] = []

    def cancel() -> None:
        when.wait(30)
        cancelled_at.append(time.monotonic())
        flag.set()
        if signal is not None:
            signal.wake()

    threading.Thread(target=cancel, daemon=True).start()
    try:
        _ask(model, timeout_s=HOUR, should_stop=signal if signal is not None else flag.is_set)
    except Cancelled:
        return time.monotonic() - cancelled_at[0]
    raise AssertionError("the call was not cancelled")


def _timed_out(model: OllamaChatModel, *, timeout_s: float) -> float:
    """Seconds from the step deadline to the call's StepTimeout."""
    deadline = time.monotonic() + timeout_s
    try:
        _ask(model, timeout_s=timeout_s, should_stop=lambda: False)
    except StepTimeout:
        return time.monotonic() - deadline
    raise AssertionError("the call did not time out")


def model_cases(rounds: int) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {}
    with Server() as server, OllamaChatModel(host=server.url, retries=1) as model:
        cases: list[tuple[str, Mapping[str, Any], Callable[[], float]]] = [
            ("model: woken cancel, mid-reply", {"chunk_delay_s": HOUR},
             lambda: _cancelled(server, model, when=server.wrote, woken=True)),
            ("model: polled cancel, mid-reply", {"chunk_delay_s": HOUR},
             lambda: _cancelled(server, model, when=server.wrote, woken=False)),
            ("model: woken cancel, silent model", {"latency_s": HOUR},
             lambda: _cancelled(server, model, when=server.asked, woken=True)),
            ("model: polled cancel, silent model", {"latency_s": HOUR},
             lambda: _cancelled(server, model, when=server.asked, woken=False)),
            ("model: step deadline, silent model (0.3 s)", {"latency_s": HOUR},
             lambda: _timed_out(model, timeout_s=0.3)),
            ("model: step deadline, trickling reply (1 s)",
             {"reply": TRICKLE, "chunk_delay_s": 0.1}, lambda: _timed_out(model, timeout_s=1.0)),
        ]
        for name, script, measure in cases:
            found[name] = []
            for _ in range(rounds):
                server.script(**script)
                found[name].append(measure())
    return found


class Hang:
    """A text tool that hangs until `release` is set."""

    name, description, input_hint = "hang", "waits until released", "anything"

    def __init__(self, release: threading.Event) -> None:
        self.release, self.running = release, threading.Event()

    def run(self, tool_input: str, *, context: ToolContext) -> str:
        self.running.set()
        return str(self.release.wait(HOUR))


def tool_cases(rounds: int) -> dict[str, list[float]]:
    release = threading.Event()
    settings = Settings.from_env({"JARVIS_DATA_DIR": tempfile.mkdtemp()})
    timing_out = ToolRegistry([Hang(release)], settings=settings.with_overrides(tool_timeout_s=0.3))
    hang = Hang(release)
    stopping = ToolRegistry([hang], settings=settings.with_overrides(tool_timeout_s=HOUR))
    found: dict[str, list[float]] = {"tool: timeout (0.3 s)": [], "tool: woken stop": []}
    try:
        for _ in range(rounds):
            began = time.monotonic()
            timing_out.call_text("hang", "")
            found["tool: timeout (0.3 s)"].append(time.monotonic() - began - 0.3)

            hang.running.clear()
            flag = threading.Event()
            signal = StopSignal(flag.is_set)
            stopped_at: list[float] = []

            def stop(signal: StopSignal = signal, flag: threading.Event = flag,
                     stopped_at: list[float] = stopped_at) -> None:
                hang.running.wait(30)
                stopped_at.append(time.monotonic())
                flag.set()
                signal.wake()

            threading.Thread(target=stop, daemon=True).start()
            try:
                stopping.call_text("hang", "", should_stop=signal)
            except Cancelled:
                found["tool: woken stop"].append(time.monotonic() - stopped_at[0])
    finally:
        release.set()
        timing_out.close()
        stopping.close()
    return found


def refusals() -> dict[str, float]:
    """The median µs of 200 refusals of each hostile input."""
    found = {}
    for expression in HOSTILE:
        times = []
        for _ in range(200):
            began = time.perf_counter()
            try:
                evaluate(expression)
            except ToolError:
                pass
            times.append(time.perf_counter() - began)
        found[expression if len(expression) <= 30 else f"{expression[:24]}… ({len(expression)} chars)"] = (
            statistics.median(times) * 1e6)
    return found


def _summary(seconds: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in seconds)
    return {"p50": statistics.median(ms), "p90": ms[int(0.9 * (len(ms) - 1))], "max": ms[-1]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    logging.getLogger("jarvis_agents").setLevel(logging.ERROR)  # a warning per timed-out call
    cuts = {name: _summary(times) for name, times in
            {**model_cases(args.rounds), **tool_cases(args.rounds)}.items()}
    refused = refusals()
    if args.json:
        print(json.dumps({"cuts_ms": cuts, "refusals_us": refused}, indent=2))
        return
    print(f"{'from must-end to return, ms':48} {'p50':>8} {'p90':>8} {'max':>8}")
    for name, figures in cuts.items():
        print(f"{name:48} {figures['p50']:8.1f} {figures['p90']:8.1f} {figures['max']:8.1f}")
    print(f"\n{'calculate refuses, median µs':48}")
    for expression, micros in refused.items():
        print(f"{expression:48} {micros:8.1f}")


if __name__ == "__main__":
    main()
