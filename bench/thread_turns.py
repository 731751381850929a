"""Scenario 1's thread phase (issue 22): agents that each follow up a thread of
THREAD_TURNS earlier turns, measured one at a time as the lone agents are, so the two
per-step overheads are compared in the same run."""

from __future__ import annotations

import httpx

from bench import driver
from bench.driver import User
from bench.stack import Stack

THREAD_TURNS = 20
# The bound: a follow-up's per-step overhead ÷ a lone agent's.
THREAD_BOUND = 1.2


def build_thread(stack: Stack, user: User, turns: int, r: int) -> str:
    """A thread of `turns` COMPLETED agents, each a follow-up of the one before; its id."""
    thread_id: str | None = None
    with httpx.Client(base_url=stack.api_url, headers=user.headers, timeout=60) as http:
        for i in range(turns):
            body = {"goal": driver.goal(f"thread{r}-{i}"),
                    **({"thread_id": thread_id} if thread_id else {})}
            created = http.post("/api/v1/agents", json=body)
            created.raise_for_status()
            agent = created.json()
            thread_id = agent["thread_id"]
            done = http.get(f"/api/v1/agents/{agent['id']}", params={"wait": 30}).json()
            if done["status"] != "COMPLETED":
                raise RuntimeError(f"a thread's turn ended {done['status']}: {done.get('error')}")
    assert thread_id is not None
    return thread_id
