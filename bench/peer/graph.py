"""The peer's side of the benchmark: the same ReACT agent as a LangGraph StateGraph.

A model node and a tool node in a loop, like `jarvis_agents.executor`: the model
node asks a fake chat model (a real `BaseChatModel`, so LangChain's callback and
message machinery runs as it would for a real model) that waits `latency_s` — read
from the run's `configurable` — and then asks for `calculate` `tool_calls` times
before it gives a final answer, exactly as the bench's Ollama script does for us.
The wait is an `asyncio.sleep`, the peer's best case: hundreds of runs share its
event loop without a thread each.
"""

from __future__ import annotations

import ast
import asyncio
import operator
from typing import Annotated, Any, TypedDict

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def calculate(expression: str) -> str:
    """Arithmetic on integers by walking the AST, as our `calculate` tool does."""

    def walk(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
            return OPERATORS[type(node.op)](walk(node.left), walk(node.right))
        raise ValueError(f"unsupported expression: {expression!r}")

    return str(walk(ast.parse(expression, mode="eval").body))


class ScriptedReactModel(BaseChatModel):
    """Replies like the bench's Ollama script: `tool_calls` calculations, then an answer."""

    latency_s: float = 0.0
    tool_calls: int = 3

    @property
    def _llm_type(self) -> str:
        return "bench-scripted-react"

    def _reply(self, messages: list[BaseMessage]) -> AIMessage:
        turn = sum(1 for m in messages if isinstance(m, ToolMessage))
        if turn < self.tool_calls:
            return AIMessage(
                content=f"THOUGHT: I need step {turn + 1}.",
                tool_calls=[
                    {
                        "name": "calculate",
                        "args": {"expression": f"{1234 + turn}*902"},
                        "id": f"call-{turn}",
                        "type": "tool_call",
                    }
                ],
            )
        return AIMessage(content=f"THOUGHT: done.\nFINAL_ANSWER: {1234 * 902}")

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        raise NotImplementedError("the peer graph is async only")

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self.latency_s > 0:
            await asyncio.sleep(self.latency_s)
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages))])


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _options(config: RunnableConfig) -> tuple[float, int]:
    configurable = config.get("configurable") or {}
    return float(configurable.get("latency_s", 0.0)), int(configurable.get("tool_calls", 3))


async def model_node(state: State, config: RunnableConfig) -> dict[str, Any]:
    latency_s, tool_calls = _options(config)
    model = ScriptedReactModel(latency_s=latency_s, tool_calls=tool_calls)
    reply = await model.ainvoke(state["messages"], config)
    return {"messages": [reply]}


async def tool_node(state: State) -> dict[str, Any]:
    last = state["messages"][-1]
    assert isinstance(last, AIMessage)
    results = [
        ToolMessage(
            content=calculate(call["args"]["expression"]),
            tool_call_id=call["id"],
            name=call["name"],
        )
        for call in last.tool_calls
    ]
    return {"messages": results}


def route(state: State) -> str:
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


builder = StateGraph(State)
builder.add_node("model", model_node)
builder.add_node("tools", tool_node)
builder.add_edge(START, "model")
builder.add_conditional_edges("model", route, {"tools": "tools", END: END})
builder.add_edge("tools", "model")
graph = builder.compile()
