"""`python -m bench`: run the scenarios against a system it starts, write BENCHMARKS.md."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.processes import ROOT

SCENARIOS = (
    "overhead", "concurrency", "fanout", "webhooks", "routing", "scale", "tokens", "mcp", "peer",
)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark jarvis-agents against the real system and LangGraph's "
        "Agent Server; write the results to BENCHMARKS.md.",
    )
    parser.add_argument("--runs", type=int, default=3, help="runs per scenario (default 3)")
    parser.add_argument(
        "--scenario",
        action="append",
        choices=SCENARIOS,
        help="run only this scenario (repeatable); default: all",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes: a smoke test of the harness, not a benchmark",
    )
    parser.add_argument("--skip-peer", action="store_true", help="do not run the peer")
    parser.add_argument(
        "--output",
        type=Path,
        default=ROOT / "BENCHMARKS.md",
        help="the Markdown report (default: BENCHMARKS.md)",
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        help="also write the raw results here (default: beside the logs)",
    )
    parser.add_argument(
        "--log-dir",
        type=Path,
        default=None,
        help="where the processes' logs go (default: bench/runs/<time>)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        action="append",
        help="worker processes in scenario 1's throughput phase (repeatable; default: 1 and "
        "one per core)",
    )
    parser.add_argument(
        "--redis-url",
        default=None,
        help="use this Redis database (it is flushed!) instead of a private redis-server",
    )
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.workers and min(args.workers) < 1:
        parser.error("--workers must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    from bench import (
        concurrency,
        environment,
        fanout,
        langgraph_peer,
        overhead,
        report,
        routing,
        scale,
        tokens,
        webhooks,
    )
    from bench.stack import Stack

    wanted = [s for s in SCENARIOS if s in (args.scenario or SCENARIOS)]
    if args.skip_peer and "peer" in wanted:
        wanted.remove("peer")
    started = datetime.now(UTC)
    began = time.monotonic()
    log_dir = args.log_dir or ROOT / "bench" / "runs" / started.strftime("%Y%m%dT%H%M%S")
    log_dir.mkdir(parents=True, exist_ok=True)
    sizes: dict[str, Any] = {
        "overhead": overhead.QUICK if args.quick else overhead.OverheadSizes(),
        "concurrency": concurrency.QUICK if args.quick else concurrency.ConcurrencySizes(),
        "fanout": fanout.QUICK if args.quick else fanout.FanoutSizes(),
        "webhooks": webhooks.QUICK if args.quick else webhooks.WebhookSizes(),
        "routing": routing.QUICK if args.quick else routing.RoutingSizes(),
        "scale": scale.QUICK if args.quick else scale.ScaleSizes(),
        "tokens": tokens.QUICK if args.quick else tokens.TokenSizes(),
    }
    if args.workers:
        from dataclasses import replace

        sizes["overhead"] = replace(sizes["overhead"], workers=tuple(sorted(set(args.workers))))
    results: dict[str, Any] = {
        "meta": {
            "started": started.strftime("%Y-%m-%d %H:%M"),
            "runs": args.runs,
            "quick": args.quick,
            "command": " ".join(
                ["python -m bench", shlex.join(argv if argv is not None else sys.argv[1:])]
            ).strip(),
            "machine": environment.machine(),
            "load_before": environment.load_average(),
            "scenarios": wanted,
        }
    }
    versions = environment.versions()
    print(f"bench: {', '.join(wanted)}; {args.runs} run(s) each; logs in {log_dir}", flush=True)
    ours = [s for s in wanted if s != "peer"]
    with ExitStack() as running:
        peer = None
        if "peer" in wanted:
            # Up from the start, so each of its runs follows the matching run of ours.
            print("scenario 4: starting the peer (LangGraph Agent Server)", flush=True)
            try:
                peer = running.enter_context(
                    langgraph_peer.PeerBench(log_dir, sizes=_peer_sizes(args, sizes))
                )
            except langgraph_peer.PeerUnavailable as exc:
                print(f"bench: the peer could not run: {exc}", flush=True)
                results["peer"] = {"unavailable": str(exc)}
        if ours:
            with Stack(log_dir=log_dir, redis_url=args.redis_url) as stack:
                versions.update(stack.server_versions())
                _ours(stack, ours, args, sizes, results, peer)
        if peer is not None:
            if "overhead" not in ours:
                for r in range(args.runs):
                    peer.scenario1(r)
            if "concurrency" not in ours:
                for r in range(args.runs):
                    peer.scenario2(r)
            peer.scenario2_default()
            results["peer"] = peer.results
            versions.update(langgraph_peer.versions())
    if "peer" not in wanted and not args.quick:
        results["peer"] = {"unavailable": "skipped (--skip-peer or --scenario)"}
    meta = results["meta"]
    meta["versions"] = versions
    meta["load_after"] = environment.load_average()
    meta["duration"] = f"{(time.monotonic() - began) / 60:.1f} min"
    raw = args.json or log_dir / "results.json"
    raw.write_text(json.dumps(results, indent=1, default=str))
    previous = args.output.read_text() if args.output.exists() else None
    args.output.write_text(report.render(results, notes=report.kept_notes(previous)))
    print(f"bench: wrote {args.output} ({meta['duration']}); raw numbers in {raw}", flush=True)
    return 0


def _ours(
    stack: Any,
    ours: list[str],
    args: argparse.Namespace,
    sizes: dict[str, Any],
    results: dict[str, Any],
    peer: Any,
) -> None:
    from bench import concurrency, fanout, overhead, routing, scale, tokens, webhooks
    from bench.driver import User

    users = [User(*stack.create_user(f"bench-{i}")) for i in range(8)]
    if "overhead" in ours:
        print("scenario 1: orchestration overhead", flush=True)
        results["overhead"] = overhead.run(
            stack,
            users,
            runs=args.runs,
            sizes=sizes["overhead"],
            after_run=peer.scenario1 if peer is not None else None,
        )
        results["overhead"]["sizes"] = asdict(sizes["overhead"])
    if "concurrency" in ours:
        print("scenario 2: I/O-bound concurrency", flush=True)
        results["concurrency"] = concurrency.run(
            stack,
            users,
            runs=args.runs,
            sizes=sizes["concurrency"],
            after_run=peer.scenario2 if peer is not None else None,
        )
        results["concurrency"]["sizes"] = asdict(sizes["concurrency"])
    if "fanout" in ours:
        print("scenario 3: SSE fan-out", flush=True)
        results["fanout"] = fanout.run(stack, users[0], runs=args.runs, sizes=sizes["fanout"])
        results["fanout"]["sizes"] = asdict(sizes["fanout"])
    if "webhooks" in ours:
        print("scenario 5: webhooks", flush=True)
        results["webhooks"] = webhooks.run(stack, users, runs=args.runs, sizes=sizes["webhooks"])
        results["webhooks"]["sizes"] = asdict(sizes["webhooks"])
    if "routing" in ours:
        print("scenario 6: routing by model and per-model caps", flush=True)
        results["routing"] = routing.run(stack, users, runs=args.runs, sizes=sizes["routing"])
        results["routing"]["sizes"] = asdict(sizes["routing"])
    if "scale" in ours:
        print("scenario 7: scale on one worker process", flush=True)
        results["scale"] = scale.run(stack, users, runs=args.runs, sizes=sizes["scale"])
        results["scale"]["sizes"] = asdict(sizes["scale"])
    if "tokens" in ours:
        print("scenario 8: live tokens", flush=True)
        results["tokens"] = tokens.run(stack, users[0], runs=args.runs, sizes=sizes["tokens"])
    if "mcp" in ours:
        from bench import mcp_calls

        print("scenario 9: MCP tool calls against a built-in", flush=True)
        results["mcp"] = mcp_calls.scenario(runs=args.runs, quick=args.quick)


def _peer_sizes(args: argparse.Namespace, sizes: dict[str, Any]) -> Any:
    from bench import langgraph_peer

    o, c = sizes["overhead"], sizes["concurrency"]
    return langgraph_peer.PeerSizes(
        agents=o.agents,
        tool_calls=o.tool_calls,
        io_agents=c.agents,
        io_latency_s=c.latency_s,
        io_default_agents=min(5, c.agents),
        first_event_samples=3 if args.quick else 5,
    )
