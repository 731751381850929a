"""Model clients behind one small Protocol: Ollama, OpenAI-compatible servers, a router
over both, and a scripted fake."""

from jarvis_agents.llm.base import (
    Capabilities,
    ChatMessage,
    ChatModel,
    ChatReply,
    ChatRequest,
    OnDelta,
    StopSignal,
    ToolCall,
    ToolSpec,
    Usage,
)

__all__ = [
    "Capabilities", "ChatMessage", "ChatModel", "ChatReply", "ChatRequest", "OnDelta",
    "StopSignal", "ToolCall", "ToolSpec", "Usage",
]
