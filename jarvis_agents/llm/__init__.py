"""Model clients behind one small Protocol: the Ollama adapter and a scripted fake."""

from jarvis_agents.llm.base import ChatMessage, ChatModel, StopSignal

__all__ = ["ChatMessage", "ChatModel", "StopSignal"]
