"""Each user's open streams and long-polls in one API process, up to a limit."""

from __future__ import annotations

import uuid

import pytest

from api.stream_slots import StreamSlots
from jarvis_agents.errors import RateLimited


def test_a_user_past_the_limit_is_refused_until_one_of_theirs_ends() -> None:
    slots = StreamSlots(3)
    alice, bob = uuid.uuid4(), uuid.uuid4()
    held = [slots.take(alice) for _ in range(3)]
    with pytest.raises(RateLimited) as refused:
        slots.take(alice)
    assert refused.value.code == "too_many_streams" and refused.value.status == 429
    assert refused.value.retry_after_s >= 1 and "3" in str(refused.value)
    with slots.take(bob):  # someone else's slots are their own
        assert slots.held(bob) == 1
    assert slots.held(bob) == 0
    held[0].release()
    held[0].release()  # a stream's end may be reported twice (HEAD): it frees one slot
    assert slots.held(alice) == 2
    held.append(slots.take(alice))
    with pytest.raises(RateLimited):
        slots.take(alice)
