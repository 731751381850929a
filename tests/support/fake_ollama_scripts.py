"""Built-in scripts for FakeOllama, and its command line for benchmarks and demos.

    python -m tests.support.fake_ollama --port 11555 --latency 2.0 --script calc
    python -m tests.support.fake_ollama --port 0 --latency 0.5 --latency-max 1.5 --script weather

Each script answers in the ReACT format of docs/api.md §5 and works out its turn from
the conversation itself, so any number of concurrent or resumed agents can share it.
"""

from __future__ import annotations

import argparse
import functools
import random
import re
import signal
import sys
import time
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from tests.support.fake_ollama import DEFAULT_MODELS, FakeOllama, Latency, Responder

CALC_PRODUCT = 1234 * 902


def observations(request: dict[str, Any]) -> list[str]:
    """The first line of the message after each assistant message: its tool's observation."""
    found = []
    for before, after in pairwise(request.get("messages", [])):
        if before.get("role") == "assistant":
            text = re.sub(r"^\s*OBSERVATION:\s*", "", str(after.get("content", "")))
            found.append(text.strip().splitlines()[0] if text.strip() else "")
    return found


def weather_script(request: dict[str, Any]) -> str:
    """Three tool calls (two cities' weather, one local time), then an answer quoting them."""
    steps = [("getWeather", "Paris"), ("getWeather", "Tokyo"), ("getTime", "Tokyo")]
    seen = observations(request)
    if len(seen) < len(steps):
        tool, arg = steps[len(seen)]
        return f"THOUGHT: I still need {tool} for {arg}.\nACTION: {tool}\nINPUT: {arg}"
    paris, tokyo, time_in_tokyo = seen[:3]
    return (
        "THOUGHT: I have everything I need.\n"
        f"FINAL_ANSWER: Paris: {paris}. Tokyo: {tokyo}. Local time in Tokyo: {time_in_tokyo}."
    )


SCRIPTS: dict[str, Responder] = {
    "calc": FakeOllama.by_turn([
        "THOUGHT: I need to multiply 1234 by 902.\nACTION: calculate\nINPUT: 1234*902",
        f"THOUGHT: The calculator gave the product.\nFINAL_ANSWER: 1234 * 902 = {CALC_PRODUCT}",
    ]),
    "weather": weather_script,
    "answer": lambda request: "THOUGHT: Nothing to look up.\nFINAL_ANSWER: 42",
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.fake_ollama", description="An Ollama look-alike server."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=11555, help="0 picks a free port")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before the first chunk")
    parser.add_argument(
        "--latency-max", type=float, default=None,
        help="if given, each latency is drawn uniformly from [--latency, --latency-max]",
    )
    parser.add_argument("--chunk-delay", type=float, default=0.0, help="seconds between chunks")
    parser.add_argument("--script", choices=sorted(SCRIPTS), default="calc")
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    args = parser.parse_args(argv)
    latency: Latency = args.latency
    if args.latency_max is not None:
        latency = functools.partial(random.uniform, args.latency, args.latency_max)

    fake = FakeOllama(
        host=args.host, port=args.port, responder=SCRIPTS[args.script], models=args.models,
        latency_s=latency, chunk_delay_s=args.chunk_delay,
    )
    signal.signal(signal.SIGTERM, _raise_interrupt)  # `kill` stops it as cleanly as Ctrl-C
    with fake:
        print(f"FakeOllama listening on {fake.url} (script: {args.script})", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
