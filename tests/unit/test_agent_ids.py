"""Agent ids (jarvis_agents/lifecycle.py, `new_agent_id`): UUIDv7, in creation order, and
distinct across the processes gunicorn and Celery fork."""

from __future__ import annotations

import os
import time
import uuid

from jarvis_agents.lifecycle import Agent, new_agent_id


def test_ids_are_version_7_in_the_order_they_were_made_and_carry_the_time() -> None:
    before_ms = time.time_ns() // 1_000_000
    ids = [new_agent_id() for _ in range(2000)]
    after_ms = time.time_ns() // 1_000_000
    assert {i.version for i in ids} == {7} and len(set(ids)) == len(ids)
    assert ids == sorted(ids)  # the indexes they lead grow at their right edge
    assert before_ms <= ids[0].int >> 80 <= ids[-1].int >> 80 <= after_ms
    agent = Agent.new(user_id=uuid.uuid4(), goal="g", model="m", max_steps=3)
    assert agent.id.version == 7 and agent.thread_id == agent.id


def test_a_forked_process_makes_ids_of_its_own() -> None:
    """A generator copied into a child by fork, and not reseeded, repeats its parent's ids
    (within one millisecond; in the next, the same random bits after a new time)."""
    new_agent_id()  # the generator is made before the fork, as in a preloaded parent
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its ids, then out without running the parent's cleanup
        try:
            os.write(write, b"".join(new_agent_id().bytes for _ in range(50)))
        finally:
            os._exit(0)
    os.close(write)
    mine = [new_agent_id() for _ in range(50)]
    data = b""
    while chunk := os.read(read, 4096):
        data += chunk
    os.close(read)
    os.waitpid(pid, 0)
    theirs = [uuid.UUID(bytes=data[i:i + 16]) for i in range(0, len(data), 16)]
    assert len(theirs) == 50

    def random_bits(ids: list[uuid.UUID]) -> set[int]:
        return {i.int & ((1 << 62) - 1) for i in ids}  # after the time and version bits

    assert not random_bits(mine) & random_bits(theirs)
