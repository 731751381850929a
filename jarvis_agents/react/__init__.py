"""The ReACT contract with the model: the prompt it is given and the parser of its replies."""

from jarvis_agents.react.parser import LABEL_AT_LINE_START, Action, FinalAnswer, parse_reply
from jarvis_agents.react.prompt import STOP_SEQUENCES, build_messages, render_system_prompt

__all__ = [
    "LABEL_AT_LINE_START",
    "STOP_SEQUENCES",
    "Action",
    "FinalAnswer",
    "build_messages",
    "parse_reply",
    "render_system_prompt",
]
