"""The tables of LangGraph's threads and runs that are not agents (README, LangGraph SDK).

A thread made by `threads.create` exists before its first run: its row holds its id and
metadata. A run is an agent, but two kinds of run are not one yet, or not their own: a
run enqueued behind the thread's active one (`kind` "queued": its agent is made, with
the run's id, when its turn comes), and a run that answers an interrupt (`kind`
"resume": it goes on as the interrupted agent, `agent_id`, from step `after_seq`).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, ForeignKey, Index, Integer, String, Text, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from jarvis_agents.store.models import Base


class LangGraphThreadRow(Base):
    __tablename__ = "langgraph_threads"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (Index("ix_langgraph_threads_user", "user_id", "created_at"),)


class LangGraphRunRow(Base):
    __tablename__ = "langgraph_runs"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True)
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    thread_id: Mapped[uuid.UUID] = mapped_column(Uuid)
    kind: Mapped[str] = mapped_column(String(16))
    agent_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    goal: Mapped[str | None] = mapped_column(Text)
    assistant: Mapped[str | None] = mapped_column(String(64))
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSON)
    multitask_strategy: Mapped[str] = mapped_column(String(16))
    after_seq: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        Index("ix_langgraph_runs_thread", "thread_id", "created_at"),
        Index("ix_langgraph_runs_kind", "kind", "created_at"),
    )
