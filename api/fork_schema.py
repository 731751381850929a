"""The body of `POST /api/v1/agents/{id}/fork` (docs/api.md §8), validated strictly."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from api.schemas import GOAL_MAX_CHARS, MODEL_MAX_CHARS, NO_BLANKS, NOT_BLANK, CreateAgent
from jarvis_agents.service import ForkRequest

# The fork's own fields as a refusal names them (the others are the create's).
FORK_FIELDS = {
    "after_seq": ("`after_seq`", "a step's seq: 0 or the last seq of an iteration"),
    "mode": ("`mode`", 'one of "auto", "native" or "react"'),
}


class ForkAgent(BaseModel):
    """The body of `POST /api/v1/agents/{id}/fork`: where to fork, and what to change."""

    model_config = ConfigDict(
        extra="forbid", strict=True, title="ForkAgent", regex_engine="python-re"
    )

    after_seq: Annotated[
        int, Field(ge=0, le=2**31 - 1, description="Copy the original's steps 1..after_seq: 0, or "
                                                   "the seq of the last step of an iteration.")]
    goal: Annotated[
        str | None,
        Field(min_length=1, max_length=GOAL_MAX_CHARS, json_schema_extra={"pattern": NOT_BLANK},
              description="A new goal (default: the original's)."),
    ] = None
    model: Annotated[
        Annotated[str, Field(json_schema_extra={"pattern": NO_BLANKS})] | None,
        Field(min_length=1, max_length=MODEL_MAX_CHARS, description="Default: the original's."),
    ] = None
    max_steps: Annotated[
        int | None, Field(ge=1, le=50, description="Default: the original's.")] = None
    mode: Annotated[
        Literal["auto", "native", "react"] | None, Field(description="Default: the original's.")
    ] = None

    @field_validator("goal")
    @classmethod
    def _goal_not_blank(cls, value: str | None) -> str | None:
        return value if value is None else CreateAgent._goal_not_blank(value)

    @field_validator("model")
    @classmethod
    def _model_has_no_blanks(cls, value: str | None) -> str | None:
        return CreateAgent._model_has_no_blanks(value)

    def to_request(self) -> ForkRequest:
        return ForkRequest(after_seq=self.after_seq, goal=self.goal, model=self.model,
                           max_steps=self.max_steps, mode=self.mode)
