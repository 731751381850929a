"""The store at size, and a retention sweep under load (`python -m bench.retention`).

Scenario 1's two figures — the per-step overhead of agents run one at a time, and
agents/s of a burst created at once — three times on one stack: with the steps table
empty; once it holds `--rows` generated rows (agents of 10 steps each, as scenario 1's,
written by SQL in minutes, not by running agents for hours); and while a worker's
retention sweep (JARVIS_RETENTION=90d) deletes the `--old-rows` of them that ended 100
days ago. Also: the sweep's deletion rate, the steps table's bytes per row (table and
indexes) before and after the sweep and after a VACUUM, and how long migration 0020's
two indexes take to build over the generated agents.
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import text

from bench import driver
from bench.clients import stream_one
from bench.driver import StatusListener, User
from bench.environment import load_average
from bench.stack import ModelServer, Stack
from bench.stats import latency_summary
from bench.step_overheads import step_overheads

STEPS_PER_AGENT = 10  # THINK, ACT, OBSERVE three times, then FINAL: scenario 1's agents
OLD_DAYS = 100
RETENTION = "90d"
TOOL_CALLS = 3

# Agents that ended over the last 30 days (`old`: 100 days ago), one thread each. Their
# ids are made as the product makes them (`time`: UUIDv7, the ms of `t` first, then random
# bits) or as it did before (`random`).
AGENTS_SQL = """
INSERT INTO agents (id, user_id, goal, status, model, max_steps, step_count, final_answer,
    stop_reason, created_at, updated_at, started_at, completed_at, attempt, mode, thread_id,
    input_tokens, output_tokens, model_calls)
SELECT id, :user_id, 'What is ' || g || ' * 902, then ' || (g + 1) || ' * 902?', 'COMPLETED',
    'llama3.2', 10, 4, ((g + 3) * 902)::text, 'final_answer', t - interval '3 s', t,
    t - interval '3 s', t, 1, 'react', id, 1200, 160, 4
FROM (SELECT g, t, CASE WHEN :time_ids THEN overlay(overlay(overlay(bits
                  PLACING lpad(to_hex((extract(epoch FROM t - interval '3 s') * 1000)::bigint), 12, '0')
                  FROM 1 FOR 12) PLACING '7' FROM 13 FOR 1) PLACING '8' FROM 17 FOR 1)::uuid
             ELSE bits::uuid END AS id
      FROM (SELECT g, md5(CAST(:salt AS text) || g::text) AS bits,
                   CASE WHEN g <= :old THEN now() - interval '{old_days} days' - g * interval '1 ms'
                        ELSE now() - (g % 2592000) * interval '1 s' END AS t
            FROM generate_series(1, :agents) AS g) AS drawn) AS made
"""
STEPS_SQL = """
INSERT INTO agent_steps (agent_id, seq, step, type, tool, content, created_at, duration_ms,
    attempt, call_id, input_tokens, output_tokens)
SELECT a.id, k.seq, k.step, k.type, k.tool, k.content, a.started_at + k.seq * interval '200 ms',
    k.ms, 1, k.call_id, k.input_tokens, k.output_tokens
FROM agents AS a CROSS JOIN (VALUES
    (1, 0, 'THINK', NULL, 'I need to multiply the first pair of numbers before the next one.', 900, NULL, 300, 40),
    (2, 0, 'ACT', 'calculate', '1234 * 902', 0, 'call_0', NULL, NULL),
    (3, 0, 'OBSERVE', 'calculate', '1113068', 1, 'call_0', NULL, NULL),
    (4, 1, 'THINK', NULL, 'Now the second product, with the same multiplier as before.', 850, NULL, 300, 40),
    (5, 1, 'ACT', 'calculate', '1235 * 902', 0, 'call_1', NULL, NULL),
    (6, 1, 'OBSERVE', 'calculate', '1113970', 1, 'call_1', NULL, NULL),
    (7, 2, 'THINK', NULL, 'And the third one; then I can give the answer.', 800, NULL, 300, 40),
    (8, 2, 'ACT', 'calculate', '1236 * 902', 0, 'call_2', NULL, NULL),
    (9, 2, 'OBSERVE', 'calculate', '1114872', 1, 'call_2', NULL, NULL),
    (10, 3, 'FINAL', NULL, 'The products are 1113068, 1113970 and 1114872.', 700, NULL, 300, 40)
) AS k(seq, step, type, tool, content, ms, call_id, input_tokens, output_tokens)
WHERE a.user_id = :user_id AND a.id >= :low AND a.id < :high
"""
NTH_ID_SQL = "SELECT id FROM agents WHERE user_id = :user_id ORDER BY id OFFSET :n LIMIT 1"
STEPS_BYTES_SQL = "SELECT pg_total_relation_size('agent_steps'), (SELECT count(*) FROM agent_steps)"
INDEXES_0020 = (
    "CREATE INDEX ix_agents_ended ON agents (completed_at, id) WHERE completed_at IS NOT NULL",
    "CREATE INDEX ix_agents_forked_from ON agents (forked_from_id) WHERE forked_from_id IS NOT NULL",
)


def fill(stack: Stack, *, rows: int, old_rows: int, time_ids: bool = True,
         log: Any = print) -> dict[str, float]:
    """Generate `rows` steps (agents of STEPS_PER_AGENT), `old_rows` of them ended
    OLD_DAYS ago; then ANALYZE. The foreign keys' triggers are off for the load (every
    row refers to an agent made just before), the indexes are kept up as they always are."""
    user_id, _ = stack.create_user("bench-history")
    agents, old = rows // STEPS_PER_AGENT, old_rows // STEPS_PER_AGENT
    began = time.monotonic()
    with stack.engine.connect() as conn:
        conn.execute(text("SET session_replication_role = replica"))
        conn.execute(text(AGENTS_SQL.format(old_days=OLD_DAYS)),
                     {"user_id": user_id, "salt": uuid.uuid4().hex, "old": old, "agents": agents,
                      "time_ids": time_ids})
        conn.commit()
        log(f"  {agents:,} agents in {time.monotonic() - began:.0f} s")
        slices = 16  # by id: a commit and a progress line every 1/16th of the agents
        bounds = [conn.execute(text(NTH_ID_SQL), {"user_id": user_id, "n": i * agents // slices})
                  .scalar_one() for i in range(slices)] + [uuid.UUID(int=(1 << 128) - 1)]
        for low, high in itertools.pairwise(bounds):
            conn.execute(text(STEPS_SQL), {"user_id": user_id, "low": low, "high": high})
            conn.commit()
            log(f"  steps up to {high}: {time.monotonic() - began:.0f} s")
        conn.execute(text("SET session_replication_role = origin"))
    filled_s = time.monotonic() - began
    with stack.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE agents"))
        conn.execute(text("VACUUM ANALYZE agent_steps"))
        index_s = _rebuild_0020(conn)
    return {"fill_s": filled_s, "agents": agents, "index_0020_s": index_s, **steps_bytes(stack)}


def _rebuild_0020(conn: Any) -> float:
    """Migration 0020's indexes, dropped and built again over the generated agents."""
    conn.execute(text("DROP INDEX ix_agents_ended"))
    conn.execute(text("DROP INDEX ix_agents_forked_from"))
    began = time.monotonic()
    for statement in INDEXES_0020:
        conn.execute(text(statement))
    return time.monotonic() - began


def steps_bytes(stack: Stack) -> dict[str, float]:
    with stack.engine.connect() as conn:
        size, count = conn.execute(text(STEPS_BYTES_SQL)).one()
    return {"steps_bytes": size, "steps_rows": count,
            "bytes_per_step": size / count if count else float("nan")}


def old_steps(stack: Stack) -> int:
    """The old agents' steps still stored (each generated agent has STEPS_PER_AGENT)."""
    with stack.engine.connect() as conn:
        return STEPS_PER_AGENT * conn.execute(text(
            f"SELECT count(*) FROM agents WHERE completed_at < now() - interval '{OLD_DAYS - 5} days'"
        )).scalar_one()


def measure(stack: Stack, model: ModelServer, users: list[User], listener: StatusListener,
            *, samples: int, agents: int, tag: str) -> dict[str, float]:
    """Per-step overhead one at a time (`samples` streamed agents), then agents/s of
    `agents` created at once, as scenario 1 measures them."""
    model.calls(clear=True)
    timings = [stream_one(stack.api_url, users[0].api_key, driver.goal(f"{tag}1-{i}"))
               for i in range(samples)]
    ids = [uuid.UUID(t.agent_id) for t in timings]
    time.sleep(0.2)  # the last COMPLETED publish reaches the listener
    one = step_overheads(driver.agent_rows(stack, ids), driver.step_rows(stack, ids),
                         model.calls(clear=True), listener, TOOL_CALLS)
    one_at_a_time = latency_summary(one["samples"])
    replies = driver.create_agents(stack, users, [f"{tag}n-{i}" for i in range(agents)])
    burst = driver.accepted_ids(replies)
    started = min(reply.sent_at for reply in replies)
    driver.wait_terminal(stack, burst, timeout_s=600, listener=listener)
    rows = driver.agent_rows(stack, burst)
    ended = max(row.completed_at.timestamp() for row in rows if row.completed_at)
    completed = sum(1 for row in rows if row.status == "COMPLETED")
    model.calls(clear=True)
    return {"overhead_p50_ms": one_at_a_time["p50_ms"], "overhead_p99_ms": one_at_a_time["p99_ms"],
            "agents_per_s": completed / (ended - started), "completed": completed,
            "load_average": load_average()}


def run(*, rows: int, old_rows: int, samples: int, agents: int, time_ids: bool = True,
        log: Any = print) -> dict[str, Any]:
    results: dict[str, Any] = {"rows": rows, "old_rows": old_rows, "samples": samples,
                               "agents": agents, "ids": "time" if time_ids else "random"}
    with tempfile.TemporaryDirectory() as logs, Stack(log_dir=Path(logs)) as stack:
        model = stack.start_model(latency_s=0.0, tool_calls=TOOL_CALLS)
        users = [User(*stack.create_user(f"bench-{i}")) for i in range(8)]
        listener = StatusListener(stack.redis)
        worker = stack.start_worker(model, name="worker")
        try:
            results["empty"] = measure(stack, model, users, listener, samples=samples,
                                       agents=agents, tag="e")
            log(f"empty: {results['empty']}")
            results["fill"] = fill(stack, rows=rows, old_rows=old_rows, time_ids=time_ids, log=log)
            log(f"filled: {results['fill']}")
            results["full"] = measure(stack, model, users, listener, samples=samples,
                                      agents=agents, tag="f")
            log(f"{rows:,} rows: {results['full']}")
            stack.stop(worker)
            before = old_steps(stack)
            began = time.monotonic()
            worker = stack.start_workers(model, names=["sweeping"],
                                         extra_env={"JARVIS_RETENTION": RETENTION})[0]
            results["sweeping"] = measure(stack, model, users, listener, samples=samples,
                                          agents=agents, tag="s")
            results["sweeping"]["old_steps_left_after"] = old_steps(stack)
            log(f"while sweeping: {results['sweeping']}")
            seen = [(time.monotonic(), results["sweeping"]["old_steps_left_after"])]
            while seen[-1][1] > 0 and time.monotonic() - began < 3600:
                time.sleep(1)
                seen.append((time.monotonic(), old_steps(stack)))
            results["sweep"] = {"old_steps": before, "left": seen[-1][1],
                                "seconds": seen[-1][0] - began,
                                "steps_per_s": (before - seen[-1][1]) / (seen[-1][0] - began),
                                # Once the measurements are over: the sweep alone.
                                "steps_per_s_alone": (seen[0][1] - seen[-1][1])
                                / max(seen[-1][0] - seen[0][0], 1e-9) if len(seen) > 1 else None,
                                **steps_bytes(stack)}
            with stack.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("VACUUM agent_steps"))
            results["after_vacuum"] = steps_bytes(stack)
            log(f"sweep: {results['sweep']}; after VACUUM: {results['after_vacuum']}")
        finally:
            listener.close()
            stack.stop(worker)
    results["load_average_end"] = load_average()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.retention",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--old-rows", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=30, help="agents run one at a time")
    parser.add_argument("--agents", type=int, default=500, help="agents created at once")
    parser.add_argument("--ids", choices=["time", "random"], default="time",
                        help="the generated agents' ids: UUIDv7 as agents get them, or random (v4)")
    parser.add_argument("--json", type=Path, help="write the results here too")
    options = parser.parse_args()
    results = run(rows=options.rows, old_rows=options.old_rows, samples=options.samples,
                  agents=options.agents, time_ids=options.ids == "time")
    print(json.dumps(results, indent=2))
    if options.json:
        options.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
