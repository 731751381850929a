"""The assistants' HTTP shapes (README, Assistants): the create and PATCH bodies, validated
strictly (an unknown field is a 400), the answers as the OpenAPI document describes
them, and the operations of `/api/v1/assistants` for that document (api/openapi.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import ErrorDetails

from api.schemas import MAX_TOOLS, MODEL_MAX_CHARS, NO_BLANKS, CreateAgent, _storable
from jarvis_agents.assistants import CONFIG_FIELDS, NAME_PATTERN, AssistantConfig
from jarvis_agents.errors import RequestError

DESCRIPTION_MAX_CHARS = 2000
INSTRUCTIONS_MAX_CHARS = 16000
MAX_DELEGATES = 20
METADATA_MAX_BYTES = 16 * 1024

# Each field as a refusal names it, and what it must be.
FIELDS = {
    "name": ("`name`", "1 to 64 characters of a-z, 0-9, _ and -, such as researcher"),
    "description": ("`description`", f"text of at most {DESCRIPTION_MAX_CHARS} characters"),
    "model": ("`model`", "a model's name without spaces, such as llama3.2 or openai/gpt-4o-mini"),
    "mode": ("`mode`", "`auto`, `native` or `react`"),
    "tools": ("`tools`", 'a list of tool names, such as ["calculate"] (GET /api/v1/tools)'),
    "instructions": ("`instructions`", f"text of at most {INSTRUCTIONS_MAX_CHARS} characters"),
    "approve_tools": ("`approve_tools`", 'a list of tool names, or ["*"] for all'),
    "output_schema": ("`output_schema`", 'a JSON Schema object, such as {"type": "object"}'),
    "max_steps": ("`max_steps`", "a whole number from 1 to 50"),
    "delegates": ("`delegates`", 'a list of your assistants\' names, such as ["researcher"]'),
    "metadata": ("`metadata`", "a JSON object of your own"),
}
Name = Annotated[str, Field(min_length=1, max_length=64, pattern=NAME_PATTERN)]
ToolName = Annotated[str, Field(min_length=1, max_length=100)]


class AssistantFields(BaseModel):
    """The configuration an assistant's version holds; each field not given (or null)
    is the settings' default."""

    model_config = ConfigDict(extra="forbid", strict=True, regex_engine="python-re")

    description: Annotated[str | None, Field(
        max_length=DESCRIPTION_MAX_CHARS,
        description="What it does; the description of its `ask_<name>` tool for agents "
                    "that delegate to it.")] = None
    model: Annotated[
        Annotated[str, Field(json_schema_extra={"pattern": NO_BLANKS})] | None,
        Field(min_length=1, max_length=MODEL_MAX_CHARS, description="Default: JARVIS_MODEL."),
    ] = None
    mode: Annotated[Literal["auto", "native", "react"] | None,
                    Field(description="Default: `auto`.")] = None
    tools: Annotated[list[ToolName] | None, Field(
        max_length=MAX_TOOLS, description="The tools its agents may use (default: all).")] = None
    instructions: Annotated[str | None, Field(
        max_length=INSTRUCTIONS_MAX_CHARS,
        description="Added to its agents' system prompt, after the contract text.")] = None
    approve_tools: Annotated[list[ToolName] | None, Field(
        max_length=MAX_TOOLS,
        description='Tools whose calls wait for an approval ("*": all).')] = None
    output_schema: Annotated[dict[str, Any] | None, Field(
        description="A JSON Schema its agents' final answers must match.")] = None
    max_steps: Annotated[int | None, Field(
        ge=1, le=50, description="Default: JARVIS_MAX_STEPS.")] = None
    delegates: Annotated[list[Name] | None, Field(
        max_length=MAX_DELEGATES,
        description="Assistants its agents may call, each as a tool `ask_<name>`.")] = None
    metadata: Annotated[dict[str, Any] | None, Field(
        description="Anything of your own, kept as given (at most 16 KiB of JSON).")] = None

    @field_validator("description", "instructions")
    @classmethod
    def _text_storable(cls, value: str | None) -> str | None:
        return value if value is None else _storable(value)

    @field_validator("model")
    @classmethod
    def _model_has_no_blanks(cls, value: str | None) -> str | None:
        return CreateAgent._model_has_no_blanks(value)

    @field_validator("tools", "approve_tools")
    @classmethod
    def _tools_storable(cls, value: list[str] | None) -> list[str] | None:
        return value if value is None else [_storable(name) for name in value]

    @field_validator("output_schema")
    @classmethod
    def _output_schema_valid(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return CreateAgent._output_schema_valid(value)

    @field_validator("metadata")
    @classmethod
    def _metadata_storable(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        try:
            text = json.dumps(value, ensure_ascii=False)
            size = len(text.encode())
        except (UnicodeEncodeError, ValueError, RecursionError):
            raise ValueError("must be valid Unicode text (no lone surrogates)") from None
        if "\\u0000" in text or "\x00" in text:
            raise ValueError("must not contain NUL characters")
        if size > METADATA_MAX_BYTES:
            raise ValueError(f"is {size} bytes of JSON; at most {METADATA_MAX_BYTES} (16 KiB)")
        return value

    def given(self) -> dict[str, Any]:
        """The configuration fields the body gave (null included: a PATCH's reset)."""
        return {name: getattr(self, name) for name in CONFIG_FIELDS if name in self.model_fields_set}


class CreateAssistant(AssistantFields):
    """The body of `POST /api/v1/assistants`."""

    model_config = ConfigDict(title="CreateAssistant")

    name: Annotated[str, Field(
        min_length=1, max_length=64, pattern=NAME_PATTERN,
        description="Unique among your assistants; `agent` is the default one's.")]

    def config(self) -> AssistantConfig:
        return AssistantConfig().changed(self.given())


class PatchAssistant(AssistantFields):
    """The body of `PATCH /api/v1/assistants/{assistant}`: a new version, the current one
    with the fields given (null resets a field to the default)."""

    model_config = ConfigDict(title="PatchAssistant")


def parse(model: type[AssistantFields], body: dict[str, object]) -> Any:
    """The validated body, or a RequestError naming what is wrong in sentences."""
    try:
        return model.model_validate(body, strict=True)
    except ValidationError as exc:
        takes = ", ".join(["name", *CONFIG_FIELDS] if model is CreateAssistant else CONFIG_FIELDS)
        sentences = [_sentence(error, takes) for error in exc.errors(include_url=False)[:5]]
        raise RequestError("; ".join(sentences), code="invalid_request") from None


def _sentence(error: ErrorDetails, takes: str) -> str:
    loc, kind = error["loc"], error["type"]
    field = str(loc[0]) if loc else "body"
    if kind == "extra_forbidden":
        return f"unknown field `{field}` (an assistant takes {takes})"
    name, rule = FIELDS.get(field, (f"`{field}`", "as the API document says"))
    if kind == "missing":
        return f'{name} is missing: send a JSON object such as {{"name": "researcher"}}'
    if len(loc) > 1 and field in ("tools", "approve_tools", "delegates"):
        name = f"item #{int(loc[1]) + 1} of {name}" if isinstance(loc[1], int) else name
    if kind == "value_error":
        return f"{name} {error['msg'].removeprefix('Value error, ')}"
    shown = json.dumps(error.get("input"), ensure_ascii=False, default=str)
    return f"{name} must be {rule}, not {shown if len(shown) <= 40 else shown[:39] + '…'}"


# --- the answers, for the OpenAPI document (jarvis_agents.assistants builds them) --------


class Assistant(BaseModel):
    """An assistant as of a version: the values its agents take (the settings' where it
    says nothing)."""

    model_config = ConfigDict(title="Assistant")

    assistant_id: UUID
    name: str
    version: int = Field(ge=1, description="The current version (a PATCH adds one).")
    description: str | None
    model: str
    mode: Literal["auto", "native", "react"]
    tools: list[str] | None = Field(description="The tools its agents may use; null means all.")
    instructions: str | None
    approve_tools: list[str] | None
    output_schema: dict[str, Any] | None
    max_steps: int = Field(ge=1, le=50)
    delegates: list[str]
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime


class AssistantList(BaseModel):
    model_config = ConfigDict(title="AssistantList")

    assistants: list[Assistant] = Field(description="The default `agent` first, then yours by name.")


class AssistantVersion(BaseModel):
    """One version of an assistant, as it was made."""

    model_config = ConfigDict(title="AssistantVersion")

    assistant_id: UUID
    name: str
    version: int = Field(ge=1)
    description: str | None
    model: str
    mode: Literal["auto", "native", "react"]
    tools: list[str] | None
    instructions: str | None
    approve_tools: list[str] | None
    output_schema: dict[str, Any] | None
    max_steps: int = Field(ge=1, le=50)
    delegates: list[str]
    metadata: dict[str, Any]
    created_at: datetime


class AssistantVersionList(BaseModel):
    model_config = ConfigDict(title="AssistantVersionList")

    versions: list[AssistantVersion] = Field(description="Newest first.")


BODIES = (CreateAssistant, PatchAssistant)
ANSWERS = (Assistant, AssistantList, AssistantVersion, AssistantVersionList)


def operations(json_: Callable[..., dict[str, Any]], error: Callable[..., dict[str, Any]],
               common: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The paths of the assistants for the OpenAPI document; `json_`, `error` and `common`
    are api/openapi.py's helpers and common answers."""
    ref = {"name": "assistant", "in": "path", "required": True,
           "description": "The assistant's id or name; one that is not yours is a 404.",
           "schema": {"type": "string"}}
    def body(schema: str) -> dict[str, Any]:
        return {"required": True, "content": {"application/json": {"schema": {
            "$ref": f"#/components/schemas/{schema}"}}}}

    location = {"Location": {"description": "The assistant's URL, /api/v1/assistants/{id}.",
                             "required": True, "schema": {"type": "string"}}}
    bad = {"400": error("A malformed body (`invalid_request`), an unknown tool (`unknown_tool`) "
                        "or delegate (`unknown_delegate`); the message says which.")}
    missing = {"404": error("No assistant of yours has this id or name (`assistant_not_found`).")}
    read_only = {"409": error("The default assistant `agent` follows the settings: it cannot be "
                              "changed or deleted (`assistant_read_only`).")}
    too_big = {"413": error("The body is larger than 64 KiB.")}
    return {
        "/api/v1/assistants": {
            "post": {
                "operationId": "createAssistant", "tags": ["assistants"],
                "summary": "Save an agent configuration as an assistant (version 1).",
                "requestBody": body("CreateAssistant"),
                "responses": {
                    "201": json_("Assistant", "Created.", headers=location), **bad,
                    "409": error("You already have an assistant of this name, or it is "
                                 "`agent` (`assistant_exists`)."),
                    **too_big, **common,
                },
            },
            "get": {
                "operationId": "listAssistants", "tags": ["assistants"],
                "summary": "Your assistants: the default `agent` first, then yours by name.",
                "responses": {"200": json_("AssistantList", "The assistants."), **common},
            },
        },
        "/api/v1/assistants/{assistant}": {
            "parameters": [ref],
            "get": {
                "operationId": "getAssistant", "tags": ["assistants"],
                "summary": "One assistant, as of its current version.",
                "responses": {"200": json_("Assistant", "The assistant."), **missing, **common},
            },
            "patch": {
                "operationId": "patchAssistant", "tags": ["assistants"],
                "summary": "A new version: the fields given replace the current ones (null "
                           "resets one to the default).",
                "requestBody": body("PatchAssistant"),
                "responses": {"200": json_("Assistant", "The assistant at its new version."),
                              **bad, **missing, **read_only, **too_big, **common},
            },
            "delete": {
                "operationId": "deleteAssistant", "tags": ["assistants"],
                "summary": "Delete the assistant and its versions (its agents keep its id).",
                "responses": {"204": {"description": "Deleted."}, **missing, **read_only,
                              **common},
            },
        },
        "/api/v1/assistants/{assistant}/versions": {
            "parameters": [ref],
            "get": {
                "operationId": "listAssistantVersions", "tags": ["assistants"],
                "summary": "Every version of the assistant, newest first.",
                "responses": {"200": json_("AssistantVersionList", "The versions."), **missing,
                              **common},
            },
        },
    }
