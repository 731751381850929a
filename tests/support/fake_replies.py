"""What a scripted test model says: `jarvis_agents.demo.replies`, under the names the
tests use (`FakeToolCall` is its `ToolCall`)."""

from jarvis_agents.demo.replies import ScriptExhausted, Turn, as_turn, cut_at_stop, pieces, thirds
from jarvis_agents.demo.replies import ToolCall as FakeToolCall

__all__ = ["FakeToolCall", "ScriptExhausted", "Turn", "as_turn", "cut_at_stop", "pieces", "thirds"]
