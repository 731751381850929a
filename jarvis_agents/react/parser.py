"""Turn a model's reply into the one thing it decided: an Action or a FinalAnswer.

The contract (docs/api.md §5) asks for

    THOUGHT: …
    ACTION: <tool name>
    INPUT: <tool input>

or `THOUGHT: …` followed by `FINAL_ANSWER: …`. Real models bend it — bold or
lowercase labels, code fences, chatter, a hallucinated OBSERVATION — so the parser
is tolerant about form and strict about one thing: a label counts only at the start
of a line. `ACTION:` in the middle of an input, an answer or a quoted goal never
splits a section, and every other byte of a section's text reaches the tool or the
user unchanged (only its outer whitespace is trimmed).

The parser never fails: a reply it cannot read is a final answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

__all__ = ["LABEL_AT_LINE_START", "Action", "FinalAnswer", "parse_reply"]


@dataclass(frozen=True)
class Action:
    """The model wants `tool` run on `tool_input` and to see the observation."""

    thought: str
    tool: str
    tool_input: str


@dataclass(frozen=True)
class FinalAnswer:
    """The model is done; `answer` is what the user gets."""

    thought: str
    answer: str


class _Label(Enum):
    THOUGHT = "THOUGHT"
    ACTION = "ACTION"
    INPUT = "INPUT"
    FINAL_ANSWER = "FINAL_ANSWER"
    OBSERVATION = "OBSERVATION"


# A label: at a line start (indentation allowed), in any case, optionally wrapped in
# markdown emphasis as models write it — `**ACTION:**`, `**Action**:`, `*Thought:*`,
# or an unclosed `**Action: …`. Only `*` counts as markup: `_` starts real words
# and identifiers too often. `ACTION INPUT` is listed before `ACTION` so the longer
# label wins. The closing markup after the colon must touch it, so the `**` of an
# answer that starts in bold (`FINAL_ANSWER: **42**`) stays in the answer.
LABEL_AT_LINE_START: re.Pattern[str] = re.compile(
    r"""
    ^[ \t]*
    (?P<open>\*{1,3})?
    [ \t]*
    (?P<label>
        THOUGHTS?
      | ACTION[ _-]?INPUT
      | ACTION
      | INPUT
      | FINAL[ _-]?ANSWER
      | OBSERVATION
    )
    (?(open)
        (?: [ \t]*(?P=open)[ \t]*: | [ \t]*:(?P=open)? )
      | [ \t]*:
    )
    """,
    re.MULTILINE | re.IGNORECASE | re.VERBOSE,
)

# A markdown code-fence line (``` or ```json …), used to drop a stray closing fence.
_FENCE_LINE = re.compile(r"^[ \t]*```")
_BARE_FENCE_LINE = re.compile(r"^[ \t]*```[ \t]*$")

# Characters a model puts around a tool name that are never part of it.
_TOOL_NAME_WRAPPING = " \t`'\"*“”‘’"


def _label_of(spelling: str) -> _Label:
    word = re.sub(r"[ _-]", "", spelling.upper())
    if word.startswith("THOUGHT"):
        return _Label.THOUGHT
    if word == "ACTIONINPUT" or word == "INPUT":
        return _Label.INPUT
    if word == "ACTION":
        return _Label.ACTION
    if word == "FINALANSWER":
        return _Label.FINAL_ANSWER
    return _Label.OBSERVATION


@dataclass(frozen=True)
class _Section:
    label: _Label
    content: str


def _split(text: str) -> tuple[str, list[_Section]]:
    """Split `text` into the chatter before the first label and the labelled sections.

    Sections end at the next line-start label. From a line-start OBSERVATION on,
    everything is dropped: the observation is ours to write, so whatever the model
    wrote there (and after it) is invented. An OBSERVATION before any other label is
    just part of the preamble.
    """
    matches = list(LABEL_AT_LINE_START.finditer(text))
    sections: list[_Section] = []
    preamble_end = len(text)
    for index, match in enumerate(matches):
        label = _label_of(match.group("label"))
        if label is _Label.OBSERVATION:
            if sections:
                break
            continue
        if not sections:
            preamble_end = match.start()
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        sections.append(_Section(label, text[match.end() : end]))
    return text[:preamble_end], sections


def _drop_stray_closing_fence(content: str) -> str:
    """Remove a last-line ``` that closes nothing inside `content`.

    It is the end of a fence the model opened around its whole reply (or a stray
    one); a balanced code block inside an input is left as written.
    """
    lines = content.rstrip().split("\n")
    fences = sum(1 for line in lines if _FENCE_LINE.match(line))
    if fences % 2 == 1 and _BARE_FENCE_LINE.match(lines[-1]):
        return "\n".join(lines[:-1])
    return content


def _tool_name(content: str) -> str:
    # The name is one token on the ACTION line; extra lines are chatter.
    first_line = next((line for line in content.strip().split("\n") if line.strip()), "")
    return first_line.strip(_TOOL_NAME_WRAPPING)


def _preamble_thought(preamble: str) -> str:
    # Chatter before ACTION stands in for a missing THOUGHT; an opening fence is markup.
    lines = [line for line in preamble.split("\n") if not _FENCE_LINE.match(line)]
    return "\n".join(lines).strip()


def parse_reply(text: str) -> Action | FinalAnswer:
    """Read a model reply as an Action or a FinalAnswer; never raises.

    Rules, in order:

    - Line endings are normalised (CRLF and CR become LF). Labels are recognised only
      at a line start (see LABEL_AT_LINE_START); each section runs to the next label
      and is trimmed of outer whitespace only.
    - Everything from a line-start OBSERVATION label on is dropped.
    - A trailing ``` that closes no fence inside the last section is dropped, so a
      reply wrapped in a code fence reads like an unwrapped one.
    - **ACTION and FINAL_ANSWER in one reply: whichever label comes first wins.** A
      model that answered and then kept going has answered; a model that acted first
      has not seen the observation yet, so a FINAL_ANSWER after its ACTION is a
      guess and is dropped.
    - An Action's input is the first INPUT (or ACTION INPUT) section after its
      ACTION and before any later ACTION/FINAL_ANSWER; without one it is "". The tool
      name is the first line of the ACTION section without surrounding backticks,
      quotes, asterisks and whitespace; its case is kept (the registry matches
      case-insensitively).
    - The thought is the THOUGHT sections before the deciding label, joined by
      newlines; with no THOUGHT, the chatter before the first label (fence lines
      removed).
    - No ACTION and no FINAL_ANSWER: the THOUGHT text becomes the answer (with an
      empty thought); with no THOUGHT either, the whole reply, stripped, is the
      answer. An empty reply is FinalAnswer(thought="", answer="").
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    preamble, sections = _split(text)
    if sections:
        last = sections[-1]
        sections[-1] = _Section(last.label, _drop_stray_closing_fence(last.content))

    decisive = next(
        (
            index
            for index, section in enumerate(sections)
            if section.label in (_Label.ACTION, _Label.FINAL_ANSWER)
        ),
        None,
    )
    thoughts = [
        section.content.strip()
        for section in sections[: decisive if decisive is not None else len(sections)]
        if section.label is _Label.THOUGHT
    ]
    thought = "\n".join(thoughts) if thoughts else _preamble_thought(preamble)

    if decisive is None:
        if thoughts:
            return FinalAnswer(thought="", answer="\n".join(thoughts))
        return FinalAnswer(thought="", answer=text.strip())

    chosen = sections[decisive]
    if chosen.label is _Label.FINAL_ANSWER:
        return FinalAnswer(thought=thought, answer=chosen.content.strip())

    tool_input = ""
    for section in sections[decisive + 1 :]:
        if section.label in (_Label.ACTION, _Label.FINAL_ANSWER):
            break
        if section.label is _Label.INPUT:
            tool_input = section.content.strip()
            break
    return Action(thought=thought, tool=_tool_name(chosen.content), tool_input=tool_input)
