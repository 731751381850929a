"""Batched DELETE against dropping a partition, on a steps table at size
(`python -m bench.partition_ab`).

Two copies of the steps table's shape in a scratch database, filled alike by SQL with
`--rows` rows of agents of 10 steps, their `created_at` spread over `--partitions` months:
`plain`, as `agent_steps` is (its primary key and unique indexes), and `parted`,
partitioned by month on `created_at` (its primary key and unique indexes must then carry
`created_at`: uniqueness holds per partition only). For each: the latency of one
iteration's 3-row INSERT, one at a time, at size; then the oldest month's rows removed —
by DELETEs of 50 agents' rows per transaction on `plain` (as the retention sweep does),
by DETACH PARTITION and DROP TABLE on `parted` — how long it took, and the table's bytes
before, after, and after a VACUUM.
"""

from __future__ import annotations

import argparse
import json
import secrets
import time
from typing import Any

from sqlalchemy import create_engine, text

from bench.environment import load_average
from bench.stack import PG_ADMIN_URL
from bench.stats import latency_summary

COLUMNS = """
    id bigserial, agent_id uuid NOT NULL, seq integer NOT NULL, step integer NOT NULL,
    type varchar(16) NOT NULL, tool varchar(100), content text NOT NULL,
    created_at timestamptz NOT NULL, duration_ms integer, attempt integer NOT NULL,
    call_id varchar(100), input_tokens integer, output_tokens integer
"""
FILL = """
INSERT INTO {table} (agent_id, seq, step, type, tool, content, created_at, duration_ms, attempt,
    call_id)
SELECT md5('{table}' || a::text)::uuid, k.seq, k.step, k.type, k.tool, k.content,
    date_trunc('month', now()) - (a % :months) * interval '1 month' + interval '1 day'
        + (a / :months) * interval '1 ms',
    5, 1, k.call_id
FROM generate_series(:low, :high - 1) AS a CROSS JOIN (VALUES
    (1, 0, 'THINK', NULL, 'I need to multiply the first pair of numbers before the next one.', NULL),
    (2, 0, 'ACT', 'calculate', '1234 * 902', 'call_0'), (3, 0, 'OBSERVE', 'calculate', '1113068', 'call_0'),
    (4, 1, 'THINK', NULL, 'Now the second product, with the same multiplier as before.', NULL),
    (5, 1, 'ACT', 'calculate', '1235 * 902', 'call_1'), (6, 1, 'OBSERVE', 'calculate', '1113970', 'call_1'),
    (7, 2, 'THINK', NULL, 'And the third one; then I can give the answer.', NULL),
    (8, 2, 'ACT', 'calculate', '1236 * 902', 'call_2'), (9, 2, 'OBSERVE', 'calculate', '1114872', 'call_2'),
    (10, 3, 'FINAL', NULL, 'The products are 1113068, 1113970 and 1114872.', NULL)
) AS k(seq, step, type, tool, content, call_id)
"""


def _create(conn: Any, months: int) -> None:
    conn.execute(text(f"CREATE TABLE plain ({COLUMNS}, PRIMARY KEY (id))"))
    conn.execute(text("CREATE UNIQUE INDEX plain_agent_seq ON plain (agent_id, seq)"))
    conn.execute(text("CREATE UNIQUE INDEX plain_agent_step ON plain "
                      "(agent_id, step, type, coalesce(call_id, ''))"))
    conn.execute(text(f"CREATE TABLE parted ({COLUMNS}, PRIMARY KEY (id, created_at)) "
                      "PARTITION BY RANGE (created_at)"))
    conn.execute(text("CREATE UNIQUE INDEX parted_agent_seq ON parted (agent_id, seq, created_at)"))
    conn.execute(text("CREATE UNIQUE INDEX parted_agent_step ON parted "
                      "(agent_id, step, type, coalesce(call_id, ''), created_at)"))
    for m in range(-1, months + 1):  # one month either side, for the one-at-a-time inserts
        conn.execute(text(
            f"CREATE TABLE parted_{m + 1} PARTITION OF parted FOR VALUES FROM "
            f"(date_trunc('month', now()) - interval '{m} month') TO "
            f"(date_trunc('month', now()) - interval '{m - 1} month')"))


def _bytes(conn: Any, table: str) -> int:
    if table == "plain":
        return conn.execute(text("SELECT pg_total_relation_size('plain')")).scalar_one()
    return conn.execute(text(
        "SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0) FROM pg_inherits "
        "WHERE inhparent = 'parted'::regclass")).scalar_one()


def _inserts(conn: Any, table: str, samples: int) -> dict[str, float]:
    """One iteration's 3 rows per transaction, one at a time, as a step write is."""
    took = []
    for i in range(samples):
        began = time.perf_counter()
        conn.execute(text(
            f"INSERT INTO {table} (agent_id, seq, step, type, tool, content, created_at, "
            "attempt, call_id) SELECT md5('new' || :i)::uuid, s, 0, t, tool, 'x', now(), 1, c "
            "FROM (VALUES (1, 'THINK', NULL, NULL), (2, 'ACT', 'calculate', 'c'), "
            "(3, 'OBSERVE', 'calculate', 'c')) AS v(s, t, tool, c)"), {"i": f"{table}{i}"})
        conn.commit()
        took.append(time.perf_counter() - began)
    return latency_summary(took)


def _delete_plain(conn: Any, months: int) -> tuple[float, int]:
    """The oldest month's rows, 50 agents' rows per transaction, the agents found first
    (untimed: the sweep finds them in the agents table's index of ends)."""
    oldest = f"date_trunc('month', now()) - interval '{months - 2} month'"
    agents = conn.execute(text(
        f"SELECT DISTINCT agent_id FROM plain WHERE created_at < {oldest}")).scalars().all()
    conn.commit()
    began = time.monotonic()
    deleted = 0
    for start in range(0, len(agents), 50):
        deleted += conn.execute(text("DELETE FROM plain WHERE agent_id = ANY(:ids)"),
                                {"ids": list(agents[start:start + 50])}).rowcount
        conn.commit()
    return time.monotonic() - began, deleted


def run(*, rows: int, months: int, samples: int, log: Any = print) -> dict[str, Any]:
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"jarvis_bench_parts_{secrets.token_hex(4)}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    engine = create_engine(PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}")
    results: dict[str, Any] = {"rows": rows, "months": months, "samples": samples}
    try:
        with engine.connect() as conn:
            _create(conn, months)
            conn.commit()
            agents = rows // 10
            for table in ("plain", "parted"):
                began = time.monotonic()
                for low in range(0, agents, 100_000):
                    conn.execute(text(FILL.format(table=table)),
                                 {"months": months, "low": low, "high": min(low + 100_000, agents)})
                    conn.commit()
                results[f"{table}_fill_s"] = time.monotonic() - began
                log(f"{table}: filled in {results[f'{table}_fill_s']:.0f} s")
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE plain"))
            conn.execute(text("VACUUM ANALYZE parted"))
        with engine.connect() as conn:
            for table in ("plain", "parted"):
                results[f"{table}_bytes"] = _bytes(conn, table)
                results[f"{table}_insert"] = _inserts(conn, table, samples)
                log(f"{table}: {results[f'{table}_insert']}")
            results["plain_delete_s"], results["plain_deleted"] = _delete_plain(conn, months)
            results["parted_dropped"] = conn.execute(
                text(f"SELECT count(*) FROM parted_{months}")).scalar_one()
            began = time.monotonic()
            conn.execute(text(f"ALTER TABLE parted DETACH PARTITION parted_{months}"))
            conn.execute(text(f"DROP TABLE parted_{months}"))
            conn.commit()
            results["parted_drop_s"] = time.monotonic() - began
            for table in ("plain", "parted"):
                results[f"{table}_bytes_after"] = _bytes(conn, table)
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM plain"))
            results["plain_bytes_after_vacuum"] = _bytes(conn, "plain")
        results["load_average"] = load_average()
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.partition_ab",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--months", type=int, default=10, help="partitions the rows spread over")
    parser.add_argument("--samples", type=int, default=2000, help="one-at-a-time inserts")
    options = parser.parse_args()
    print(json.dumps(run(rows=options.rows, months=options.months, samples=options.samples),
                     default=float, indent=2))


if __name__ == "__main__":
    main()
