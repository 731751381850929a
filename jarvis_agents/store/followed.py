"""An agent and its steps after a seq, in one statement: what a follower reads when it
joins an agent and again once the agent has ended (events/follow.py).

Two reads (the agent, then its steps) were two round trips each time, on every stream
and every blocking call. One UNION ALL brings both: the agent's row first (part 0),
then its steps in order (part 1), each part's other columns NULL, so that a long
backlog does not repeat the agent's columns on every step.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import bindparam, literal_column, null, select, type_coerce, union_all
from sqlalchemy.sql.expression import ColumnElement, Select

from jarvis_agents.lifecycle import Agent, Step
from jarvis_agents.store.compiled import Prebuilt
from jarvis_agents.store.connections import Connections
from jarvis_agents.store.models import AgentRow, StepRow
from jarvis_agents.store.rows import AGENT_READ, STEP_COLUMNS, agent_from_row, step_from_row

agents = AgentRow.__table__
steps_table = StepRow.__table__
# A step's columns under names of their own: the agent has a created_at and tokens too.
STEP_PREFIX = "step_"


def _agent_with_steps(*, of_user: bool) -> Prebuilt:
    step_columns = [steps_table.c[name] for name in STEP_COLUMNS]
    where: list[ColumnElement[bool]] = [agents.c.id == bindparam("id")]
    if of_user:
        where.append(agents.c.user_id == bindparam("user_id"))
    # The first part gives the union its columns' names and types (the NULLs typed).
    agent_part: Select[Any] = select(
        literal_column("0").label("part"), *AGENT_READ,
        *(type_coerce(null(), c.type).label(STEP_PREFIX + c.name) for c in step_columns),
    ).where(*where)
    steps_part: Select[Any] = select(
        literal_column("1"), *(null() for _ in AGENT_READ), *step_columns,
    ).where(steps_table.c.agent_id == bindparam("id"), steps_table.c.seq > bindparam("seq"))
    return Prebuilt(union_all(agent_part, steps_part).order_by("part", STEP_PREFIX + "seq"))


_ANY = _agent_with_steps(of_user=False)
_OF_USER = _agent_with_steps(of_user=True)


def agent_with_steps(connections: Connections, agent_id: uuid.UUID, *, after: int,
                     user_id: uuid.UUID | None) -> tuple[Agent | None, list[Step]]:
    """The agent (of `user_id`, if given) and its steps after seq `after`; (None, [])
    when there is no such agent."""
    values: dict[str, Any] = {"id": agent_id, "seq": after}
    if user_id is not None:
        values["user_id"] = user_id
    rows = connections.rows(_ANY if user_id is None else _OF_USER, values)
    if not rows or rows[0]["part"] != 0:
        return None, []
    steps = [step_from_row({name: row[STEP_PREFIX + name] for name in STEP_COLUMNS})
             for row in rows[1:]]
    return agent_from_row(rows[0]), steps
