"""`python -m bench.tree_ab REF`: this tree's worker against REF's, agent by agent.

Each tree's worker pieces run in a process of their own (`bench/tree_ab_child.py`,
under the tree's own virtualenv), each on its own fresh PostgreSQL database, with one
private Redis and one instant bench model server between them (3 `calculate` calls,
then the answer). The two take turns, one agent at a time, the order swapped each
pair, so a machine whose speed drifts (a shared host) slows both alike; what is
reported is the median of the per-pair ratios, and the same for each half of the pairs
to show how steady it is.

It is the step overhead as the worker itself clocks it (the gap between two model
calls, wall and the agent thread's CPU), the whole run of an agent (claim to the end,
wall and process CPU), nothing of the API. `make bench`'s per-step figure also counts
the model call's own client work and the machine shared with the API and the SSE
clients; this one tells, in a few minutes and to a percent or two, where a change of
that figure comes from.

REF is checked out once into bench/.trees/<sha> with a virtualenv of its own
(`pip install -e`), kept for the next run; REF `.` runs this tree against itself.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.processes import ROOT, Process, StartupError, free_port
from bench.stack import PG_ADMIN_URL

TREES = ROOT / "bench" / ".trees"
CHILD = Path(__file__).resolve().parent / "tree_ab_child.py"


@dataclass
class Side:
    name: str
    root: Path
    python: Path
    database_url: str = ""
    proc: subprocess.Popen[str] | None = None
    profile: Path | None = None  # where its child writes its cProfile stats
    agents: list[dict[str, Any]] = field(default_factory=list)  # what the child measured


def checkout(ref: str) -> Side:
    """REF's tree and virtualenv under bench/.trees, made the first time; `.` is this
    tree again (an A/A run: what the machine's noise alone gives)."""
    if ref == ".":
        return Side("this tree again", ROOT, Path(sys.executable))
    found = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                           cwd=ROOT, check=False, capture_output=True, text=True)
    if found.returncode != 0:
        raise RuntimeError(f"no commit {ref!r} in this repository")
    sha = found.stdout.strip()
    tree = TREES / sha[:12]
    if not (tree / ".git").exists():
        TREES.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "worktree", "add", "--detach", "--force", str(tree), sha],
                       cwd=ROOT, check=True, capture_output=True)
    python = tree / ".venv" / "bin" / "python"
    if not (tree / ".venv" / ".ab-installed").exists():
        print(f"installing {ref} ({sha[:12]}) into {tree / '.venv'}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(tree / ".venv")], check=True)
        # As the Makefile does: an old pip cannot resolve some trees' requirements.
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"],
                       check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "-e", str(tree)],
                       check=True)
        (tree / ".venv" / ".ab-installed").touch()
    return Side(f"{ref} ({sha[:12]})", tree, python)


def ratio_line(label: str, mine: Sequence[float], theirs: Sequence[float], *,
               shown: str = ",.0f") -> str:
    """A report's row: each side's median (formatted `shown`), and the median of the
    per-pair ratios, whole and for each half of the pairs."""
    ratios = [a / b for a, b in zip(mine, theirs, strict=True) if b > 0]
    half = len(ratios) // 2 or 1
    return (f"| {label} | {statistics.median(mine):{shown}} | {statistics.median(theirs):{shown}} | "
            f"**{statistics.median(ratios):.3f}** | {statistics.median(ratios[:half]):.3f} / "
            f"{statistics.median(ratios[half:] or ratios):.3f} |")


def main_of(prog: str, measure: Callable[[Path], str]) -> int:
    """Run `measure` with a fresh log directory under bench/runs and print its report;
    a failure is one line on stderr and exit code 1."""
    log_dir = ROOT / "bench" / "runs" / f"{prog}-{secrets.token_hex(3)}"
    log_dir.mkdir(parents=True)
    try:
        print(measure(log_dir))
    except (RuntimeError, StartupError, subprocess.CalledProcessError) as exc:
        print(f"bench.{prog.replace('-', '_')}: {exc} (logs in {log_dir})", file=sys.stderr)
        return 1
    return 0


def run(ref: str, pairs: int, log_dir: Path, *, profile: bool = False) -> str:
    from sqlalchemy import create_engine, text

    this = Side("this tree", ROOT, Path(sys.executable))
    other = checkout(ref)
    sides = (this, other)
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    redis_port, model_port = free_port(), free_port()
    services = [
        Process("redis", ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1",
                          "--save", "", "--appendonly", "no", "--dir", str(log_dir)],
                env=dict(os.environ), log_dir=log_dir),
        Process("model", [sys.executable, "-m", "bench.model_server", "--port", str(model_port),
                          "--latency", "0", "--tool-calls", "3"],
                env=dict(os.environ), log_dir=log_dir),
    ]
    try:
        services[0].wait_for("Ready to accept connections", timeout_s=20)
        services[1].wait_for("bench model listening", timeout_s=30)
        for side in sides:
            name = f"jarvis_ab_{secrets.token_hex(4)}"
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
            side.database_url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
            env = dict(os.environ, PYTHONPATH=str(side.root), DATABASE_URL=side.database_url)
            migrated = subprocess.run([str(side.python.parent / "jarvis-agents"), "db", "upgrade"],
                                      check=False, env=env, cwd=side.root, capture_output=True,
                                      text=True)
            if migrated.returncode != 0:
                raise RuntimeError(f"{side.name}: db upgrade failed: {migrated.stderr.strip()}")
            child_env = dict(os.environ, PYTHONPATH=str(side.root))
            if profile:
                side.profile = log_dir / f"{name}.prof"
                child_env["JARVIS_AB_PROFILE"] = str(side.profile)
            side.proc = subprocess.Popen(
                [str(side.python), str(CHILD), side.database_url,
                 f"redis://127.0.0.1:{redis_port}/0", f"http://127.0.0.1:{model_port}",
                 str(log_dir / f"data-{name}")],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                env=child_env, cwd=side.root,
            )
            if (side.proc.stdout.readline().strip()) != "READY":
                raise RuntimeError(f"{side.name}'s worker did not start")
        for pair in range(pairs):
            for side in (sides if pair % 2 == 0 else sides[::-1]):
                side.proc.stdin.write("run\n")
                side.proc.stdin.flush()
                line = side.proc.stdout.readline()
                if not line:
                    raise RuntimeError(f"{side.name}'s worker stopped (its error is above)")
                measured = json.loads(line)
                if measured["status"] != "COMPLETED":
                    raise RuntimeError(f"{side.name}: an agent ended {measured['status']}")
                side.agents.append(measured)
            if (pair + 1) % 100 == 0:
                print(f"  {pair + 1} of {pairs} pairs", flush=True)
        for side in sides:  # a child writes its profile, if asked for one, and ends
            side.proc.stdin.write("stop\n")
            side.proc.stdin.flush()
            side.proc.wait(timeout=60)
    finally:
        for side in sides:
            if side.proc is not None:
                side.proc.kill()
                side.proc.wait()
        for service in services:
            service.stop()
        with admin.connect() as conn:
            for side in sides:
                if side.database_url:
                    name = side.database_url.rsplit("/", 1)[1]
                    conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    measured = report(this, other, pairs)
    if profile:
        measured += "\n\n" + compare_profiles(this, other, pairs)
    return measured


def _functions(side: Side, pairs: int) -> dict[tuple[str, str], tuple[float, float]]:
    """A side's profile by function (its path from the tree or site-packages, and name):
    calls and own time in µs, per agent."""
    import pstats

    found: dict[tuple[str, str], tuple[float, float]] = {}
    for (path, _line, name), (_prim, calls, own, _cum, _callers) in pstats.Stats(
            str(side.profile)).stats.items():
        where = path.split("site-packages/")[-1].removeprefix(str(side.root) + "/")
        before = found.get((where, name), (0.0, 0.0))
        found[(where, name)] = (before[0] + calls / pairs, before[1] + own * 1e6 / pairs)
    return found


def compare_profiles(this: Side, other: Side, pairs: int, top: int = 40) -> str:
    """Function by function, under cProfile: where this tree's agent spends calls and
    own time that the other's does not."""
    mine, theirs = _functions(this, pairs), _functions(other, pairs)
    total = [sum(v[i] for v in side.values()) for side in (mine, theirs) for i in (0, 1)]
    lines = [
        (f"Under cProfile, per agent: {total[0]:,.0f} calls and {total[1]:,.0f} µs own time "
        f"in this tree, {total[2]:,.0f} and {total[3]:,.0f} in the other. The {top} functions "
        "whose own time grew most:"),
        "",
        "| function | calls, this / other | own µs, this / other |",
        "|---|---|---|",
    ]
    grown = sorted(set(mine) | set(theirs), key=lambda key: -(
        mine.get(key, (0, 0))[1] - theirs.get(key, (0, 0))[1]))
    for key in grown[:top]:
        a, b = mine.get(key, (0.0, 0.0)), theirs.get(key, (0.0, 0.0))
        lines.append(f"| {key[0]}:{key[1]} | {a[0]:.1f} / {b[0]:.1f} | {a[1]:.0f} / {b[1]:.0f} |")
    return "\n".join(lines)


def report(this: Side, other: Side, pairs: int) -> str:
    def gap(side: Side, index: int) -> list[float]:
        return [statistics.mean(g[index] for g in agent["gaps"]) for agent in side.agents]

    def whole(side: Side, key: str) -> list[float]:
        return [agent[key] for agent in side.agents]

    def spent(side: Side, call: str, index: int) -> list[float]:
        return [agent["spent"].get(call, [0.0, 0.0, 0])[index] for agent in side.agents]

    calls = sorted(set(this.agents[0]["spent"]) & set(other.agents[0]["spent"]),
                   key=lambda call: -statistics.median(spent(this, call, 0)))
    lines = [
        (f"{pairs} pairs, this tree against {other.name}; µs, medians; ratio = the median of "
         "the per-pair ratios (first half / second half)"),
        "",
        "| figure | this tree | " + other.name + " | ratio | halves |",
        "|---|---|---|---|---|",
        ratio_line("step gap, wall (mean of an agent's 3)", gap(this, 0), gap(other, 0)),
        ratio_line("step gap, agent thread CPU", gap(this, 1), gap(other, 1)),
        ratio_line("agent run, wall", whole(this, "wall"), whole(other, "wall")),
        ratio_line("agent run, process CPU", whole(this, "cpu"), whole(other, "cpu")),
        "",
        "Per agent, the executor's calls of its collaborators (calls: this tree / the other):",
        "",
        "| call | calls | wall, this tree | wall, other | CPU, this tree | CPU, other |",
        "|---|---|---|---|---|---|",
    ]
    for call in calls:
        counts = f"{statistics.median(spent(this, call, 2)):g} / {statistics.median(spent(other, call, 2)):g}"
        lines.append(f"| {call} | {counts} | " + " | ".join(
            f"{statistics.median(values):,.0f}" for values in (
                spent(this, call, 0), spent(other, call, 0),
                spent(this, call, 1), spent(other, call, 1))) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tree_ab", description=__doc__.split("\n\n")[0])
    parser.add_argument("ref", help="the git commit (branch, tag) to measure this tree against; "
                                    "'.' for this tree again")
    parser.add_argument("--pairs", type=int, default=300, help="agents per side (default 300)")
    parser.add_argument("--profile", action="store_true",
                        help="also run the agents under cProfile and compare the two, "
                             "function by function (slows both sides alike)")
    args = parser.parse_args(argv)
    if shutil.which("redis-server") is None:
        print("redis-server is not installed", file=sys.stderr)
        return 2
    return main_of("tree-ab", lambda log_dir: run(args.ref, args.pairs, log_dir,
                                                  profile=args.profile))


if __name__ == "__main__":
    sys.exit(main())
