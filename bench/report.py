"""BENCHMARKS.md from a run's results: targets first, then method and every number.

The scenarios' sections are written beside their scenarios (`webhooks`, `routing`,
`scale`, `tokens`) or in `report_<scenario>` modules (overhead, concurrency, fan-out,
the peer); this module puts the document together.

Each figure is the median over the runs, with the runs' own values in brackets. The
file is rewritten on every run except for the hand-written notes between the
`notes:begin` and `notes:end` markers, which are carried over.
"""

from __future__ import annotations

import re
from typing import Any

from bench import (
    mcp_calls,
    report_concurrency,
    report_fanout,
    report_overhead,
    report_peer,
    routing,
    scale,
    tokens,
    webhooks,
)
from bench.targets import targets

NOTES_BEGIN = "<!-- notes:begin -->"
NOTES_END = "<!-- notes:end -->"
DEFAULT_NOTES = "(Nothing yet: profiles and proposed fixes go here; this part is kept.)"


def kept_notes(previous: str | None) -> str:
    if previous:
        found = re.search(
            re.escape(NOTES_BEGIN) + r"\n(.*?)\n?" + re.escape(NOTES_END), previous, re.DOTALL
        )
        if found and found.group(1).strip():
            return found.group(1).rstrip()
    return DEFAULT_NOTES


# --- the document ----------------------------------------------------------------------------


def render(results: dict[str, Any], *, notes: str) -> str:
    meta = results["meta"]
    out: list[str] = [
        "# Benchmarks",
        "",
        (
            "Written by `python -m bench` (`make bench`), the harness of issue 7: it starts the "
            "real system — PostgreSQL, Redis, `jarvis-agents api`, `jarvis-agents worker`, an "
            "Ollama-protocol model server of a chosen latency — and the peer, runs every scenario "
            "and rewrites this file. Only the notes at the end are written by hand."
        ),
        "",
        f"This run: {meta['started']} UTC, `{meta['command']}`, {meta['duration']}. "
        f"Each figure is the **median of {meta['runs']} runs** with each run's value in "
        "brackets; ratios compare numbers measured in the same invocation."
        + (
            " **Quick mode: tiny sizes, for a smoke test only — not a benchmark.**"
            if meta["quick"]
            else ""
        ),
        "",
        "## Targets (issue 7)",
        "",
        "| target | measured | |",
        "|---|---|---|",
        *[f"| {t} | {m} | {v} |" for t, m, v in targets(results)],
        "",
        "## Machine",
        "",
        *[f"- {k}: {v}" for k, v in meta["machine"].items()],
        (
            f"- load average (1/5/15 min) before: {meta['load_before']}, after: {meta['load_after']}."
            " The machine is shared with other work (test suites, browsers); a load average near "
            "or above the core count means the numbers carry that noise."
        ),
        "",
        "## Versions",
        "",
        "| component | version |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in meta["versions"].items()],
        "",
    ]
    out += _method(meta)
    if results.get("overhead"):
        out += report_overhead.section(results["overhead"])
    if results.get("concurrency"):
        out += report_concurrency.section(results["concurrency"])
    if results.get("fanout"):
        out += report_fanout.section(results["fanout"])
    if results.get("webhooks"):
        out += webhooks.section(results["webhooks"])
    if results.get("routing"):
        out += routing.section(results["routing"])
    if results.get("scale"):
        out += scale.section(results["scale"])
    if results.get("tokens"):
        out += tokens.section(results["tokens"])
    if results.get("mcp"):
        out += mcp_calls.section(results["mcp"])
    if results.get("peer"):
        out += report_peer.section(results)
    out += ["## Notes: profiles, causes, proposed fixes", "", NOTES_BEGIN, notes, NOTES_END, ""]
    return "\n".join(out)


def _method(meta: dict[str, Any]) -> list[str]:
    return [
        "## Method",
        "",
        (
            "- **System under test**: a fresh database `jarvis_bench_<random>` on the local "
            "PostgreSQL (dropped afterwards), a private `redis-server` on a free port (so the test "
            "suite's `FLUSHDB`s on the shared Redis cannot touch it), `jarvis-agents db upgrade`, "
            "one `jarvis-agents api` (gunicorn, one gevent worker), `jarvis-agents worker` "
            "processes, and `python -m bench.model_server` — a real HTTP/1.1 server speaking "
            "Ollama's `/api/chat` (streamed and not, keep-alive) on one asyncio loop, so that "
            "the stand-in for a model server costs little of the cores it shares, answering 3 "
            "`calculate` actions then a FINAL_ANSWER (scenario 1) or 1 then the answer "
            "(scenario 2) after a fixed latency. `JARVIS_MAX_ACTIVE_PER_USER` and "
            "`JARVIS_MAX_STREAMS_PER_USER` are raised to 1,000,000 (the defaults, 20 and 100, "
            "would answer the bursts and the fan-out with 429s); everything else is default "
            "unless a row says otherwise."
        ),
        (
            "- **Clients**: every concurrent HTTP client is its own process (spawned), with one "
            "keep-alive `http.client` connection; 8 of them, one user each, released together "
            "by a barrier. SSE subscribers are raw asyncio sockets (an `asyncio.Protocol` each), "
            "250 per process in 4 processes. All clients share the machine's cores with the "
            "system under test."
        ),
        (
            "- **Timestamps** are wall-clock (`time.time()`, `completed_at` in the database) "
            "on one machine, so they compare across processes."
        ),
        "",
    ]
