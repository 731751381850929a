"""How agents, steps and events look on a terminal (the CLI's output; no click here).

On a terminal: colours and a spinner while the model thinks. Anywhere else (a pipe,
a file, CI logs): plain lines, no control codes, no wrapping.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.status import Status
from rich.table import Table
from rich.text import Text

LABEL_WIDTH = 9
STEP_STYLES = {
    "THINK": ("THINK", "cyan"),
    "ACT": ("ACT", "bold magenta"),
    "OBSERVE": ("OBSERVE", "blue"),
    "FINAL": ("FINAL", "bold green"),
    "ERROR": ("ERROR", "bold red"),
}
STATUS_STYLES = {
    "PENDING": "yellow",
    "RUNNING": "cyan",
    "WAITING": "magenta",
    "COMPLETED": "green",
    "FAILED": "red",
    "CANCELLED": "yellow",
}


def make_console(*, stderr: bool = False) -> Console:
    """A console that styles a terminal and writes plain, unwrapped lines anywhere else."""
    console = Console(stderr=stderr, highlight=False, soft_wrap=True)
    if not console.is_terminal:
        # A pipe is read by programs: never cut or wrap a line at a made-up width.
        console = Console(stderr=stderr, highlight=False, soft_wrap=True, width=100_000)
    return console


def print_json(console: Console, value: Any) -> None:
    """One JSON document on one line (JSON Lines), unstyled."""
    console.out(json.dumps(value, ensure_ascii=False), highlight=False)


def step_text(kind: str, content: str, tool: str | None = None, *, seq: int | None = None) -> Text:
    """`ACT      calculate(1234 * 902)`: a label, then the content, continuation lines indented."""
    label, style = STEP_STYLES.get(kind.upper(), (kind.upper(), "bold"))
    text = Text()
    if seq is not None:
        text.append(f"{seq:>3} ", style="dim")
    text.append(_label(label), style=style)
    if kind.upper() == "ACT" and tool:
        text.append(tool, style="bold")
        body = f"({content})"
    elif kind.upper() == "OBSERVE" and tool:
        text.append(f"{tool} → ", style="dim")
        body = content
    else:
        body = content
    indent = "\n" + " " * (LABEL_WIDTH + (4 if seq is not None else 0))
    text.append(body.rstrip("\n").replace("\n", indent), style="bold green" if kind.upper() == "FINAL" else "")
    return text


def _label(name: str) -> str:
    """A step's label padded to its column, and never glued to what follows (CANCELLED)."""
    return name.ljust(LABEL_WIDTH - 1) + " "


def activity(kind: str, data: dict[str, Any]) -> str | None:
    """What the agent does after an event of `kind`, as the spinner says it; None once it
    has nothing more to do (or the person must act)."""
    if kind == "ACT" and data.get("tool"):
        return f"running {data['tool']}…"
    if kind in ("THINK", "ACT", "OBSERVE", "ERROR"):
        return "thinking…"
    if kind == "WAITING":
        return "waiting on the agents it called…" if data.get("agent_ids") else "waiting for approval…"
    return None  # FINAL, CANCELLED, done


class LiveRenderer:
    """Prints an agent's events as they arrive, with a spinner in between on a terminal."""

    def __init__(self, console: Console, *, started: float | None = None) -> None:
        """`started`: when the command started the agent (time.monotonic()); None when
        watching an agent started elsewhere, whose own duration is then reported."""
        self.console = console
        self.started = started
        self.status: Status | None = None
        self.shown_errors: set[str] = set()
        self.final_answer: str | None = None
        self.spinning = console.is_terminal and not console.is_dumb_terminal
        self.writing = ""  # the live text of the reply being written (token events)
        self._spin("waiting for a worker…")

    def header(self, text: str) -> None:
        self.console.print(Text(text, style="dim"))

    def event(self, name: str, data: dict[str, Any]) -> None:
        kind = name.upper()
        if kind == "TOKEN":
            self.token(str(data.get("delta") or ""))
            return
        self._end_writing()
        # The spinner says what follows this event; it is set first because printing the
        # event redraws it: set after, the event would be shown beside the previous label.
        doing = activity(kind, data)
        if doing is None:
            self.stop()
        else:
            self._spin(doing)
        if kind in STEP_STYLES:
            content = str(data.get("content") or "")
            self.console.print(step_text(kind, content, data.get("tool")))
            if kind == "ERROR":
                self.shown_errors.add(content.strip())
            if kind == "FINAL":
                self.final_answer = content
        elif kind == "WAITING" and data.get("agent_ids"):
            self.console.print(Text(_label("WAITING") + "on the agents it called: "
                                    + ", ".join(data["agent_ids"]), style="magenta"))
        elif kind == "WAITING":
            call = f"{data.get('tool')}({json.dumps(data.get('input'), ensure_ascii=False)})"
            self.console.print(Text(_label("WAITING") + f"{call} needs an approval",
                                    style="bold magenta"))
        elif kind == "CANCELLED":
            self.console.print(Text(_label("CANCELLED") + "the agent was cancelled", style="yellow"))

    def finish(self, status: str, stop_reason: str | None, agent: dict[str, Any] | None) -> None:
        """The last lines: the outcome, why, and the elapsed time."""
        self._end_writing()
        self.stop()
        if self.started is not None:
            elapsed_s: float | None = time.monotonic() - self.started
        elif agent is not None and agent.get("duration_ms") is not None:
            elapsed_s = agent["duration_ms"] / 1000
        else:
            elapsed_s = None
        line = Text()
        line.append(status, style=f"bold {STATUS_STYLES.get(status, '')}".strip())
        if stop_reason and stop_reason != "final_answer":
            line.append(f" ({stop_reason})")
        if elapsed_s is not None:
            line.append(f" in {elapsed_s:.1f} s")
        if agent is not None:
            count = agent.get("step_count") or 0
            line.append(f", {count} step{'' if count == 1 else 's'}", style="dim")
        self.console.print(line)
        error = (agent or {}).get("error")
        if status == "FAILED" and error and error.strip() not in self.shown_errors:
            self.console.print(Text(f"error: {error}", style="red"))

    def token(self, delta: str) -> None:
        """A piece of the reply being written: shown dim, in place of the spinner."""
        if not delta:
            return
        self.stop()
        self.writing += delta  # first: a Ctrl-C during the print still finds the line open
        self.console.print(Text(delta, style="dim"), end="", soft_wrap=True)

    def _end_writing(self) -> None:
        """The reply is written and its steps follow: on a terminal its live text is
        erased (the steps say it again, laid out); elsewhere the line is ended."""
        if not self.writing:
            return
        if self.console.is_terminal and not self.console.is_dumb_terminal:
            width = max(self.console.width, 1)
            rows = sum(max(1, -(-cell_len(line) // width)) for line in self.writing.split("\n"))
            up = f"\x1b[{rows - 1}A" if rows > 1 else ""
            self.console.file.write(f"\r{up}\x1b[J")
            self.console.file.flush()
        else:
            self.console.out("")
        self.writing = ""

    def close(self) -> None:
        """Stop, wherever the agent was (Ctrl-C): a reply cut mid-way keeps its text, and
        its line is ended, so that what is printed next starts on a line of its own."""
        self.stop()
        if self.writing:
            self.console.out("")
            self.writing = ""

    def stop(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None

    def _spin(self, text: str) -> None:
        if not self.spinning or self.writing:
            return
        if self.status is None:
            self.status = self.console.status(text, spinner="dots")
            self.status.start()
        else:
            self.status.update(text)


def agents_table(console: Console, agents: Sequence[dict[str, Any]]) -> None:
    rows = [
        (a["id"], a["status"], str(a.get("step_count", 0)), local_time(a.get("created_at")), _one_line(a["goal"], 60))
        for a in agents
    ]
    _table(console, ("ID", "STATUS", "STEPS", "CREATED", "GOAL"), rows, styles={1: STATUS_STYLES})


def users_table(console: Console, users: Sequence[dict[str, Any]]) -> None:
    rows = [
        (u["name"], local_time(u["created_at"]),
         f"yes, {local_time(u['revoked_at'])}" if u.get("revoked_at") else "no")
        for u in users
    ]
    _table(console, ("NAME", "CREATED", "REVOKED"), rows)


def tools_table(console: Console, tools: Sequence[dict[str, Any]]) -> None:
    rows = [(t["name"], t.get("source") or "", _one_line(t.get("description") or "")) for t in tools]
    _table(console, ("NAME", "SOURCE", "DESCRIPTION"), rows)


def assistants_table(console: Console, assistants: Sequence[dict[str, Any]]) -> None:
    rows = [(a["name"], str(a["version"]), a["model"], a["mode"],
             ", ".join(a["tools"]) if a.get("tools") is not None else "all",
             _one_line(a.get("description") or "")) for a in assistants]
    _table(console, ("NAME", "VERSION", "MODEL", "MODE", "TOOLS", "DESCRIPTION"), rows)


def schedules_table(console: Console, schedules: Sequence[dict[str, Any]]) -> None:
    """`schedules list`: `next_run_at` as the caller wants it shown."""
    rows = [(s["id"], s["cron"], s["timezone"], s["next_run_at"], s.get("last_agent_id") or "",
             str(s["skipped"]), _one_line(s["goal"])) for s in schedules]
    _table(console, ("ID", "CRON", "TIMEZONE", "NEXT RUN", "LAST AGENT", "SKIPPED", "GOAL"), rows)


def agent_details(console: Console, agent: dict[str, Any], *,
                  children: Sequence[dict[str, Any]] = ()) -> None:
    """`show ID`: one `field: value` line each, the answer or the error last; its caller
    and the `children` it called (README, Agents that call agents)."""
    fields = [
        ("id", agent["id"]),
        ("status", agent["status"]),
        ("stop_reason", agent.get("stop_reason")),
        ("goal", agent["goal"]),
        ("model", agent.get("model")),
        ("max_steps", agent.get("max_steps")),
        ("step_count", agent.get("step_count")),
        ("tools", ", ".join(agent["tools"]) if agent.get("tools") else None),
        ("mode", agent.get("mode")),
        ("usage", _usage(agent.get("usage"))),
        # A thread of its own and no fork: nothing worth a line.
        ("thread", agent.get("thread_id") if agent.get("thread_id") != agent["id"] else None),
        ("parent", agent.get("parent_id")),
        ("forked_from", f"{agent['forked_from']['agent_id']} after step {agent['forked_from']['seq']}"
         if agent.get("forked_from") else None),
        ("context", _context(agent.get("context"))),
        ("caller", agent.get("caller_id")),
        ("children", "\n".join(f"{c['id']} {c['status']} {c['goal'][:60]!r}" for c in children)),
        ("usage_total", _usage(agent.get("usage_total")) if children else None),
        ("created_at", local_time(agent.get("created_at"))),
        ("started_at", local_time(agent.get("started_at"))),
        ("completed_at", local_time(agent.get("completed_at"))),
        ("duration", f"{agent['duration_ms'] / 1000:.1f} s" if agent.get("duration_ms") is not None else None),
        ("final_answer", agent.get("final_answer")),
        ("error", agent.get("error")),
    ]
    waiting = agent.get("waiting_for")
    if waiting and waiting.get("kind") == "agents":
        since = local_time(waiting.get("since"))
        fields.insert(2, ("waiting_for", f"{len(waiting['agent_ids'])} agent(s) it called, since {since}"))
    elif waiting and waiting.get("kind") == "remote":  # a call of a remote delegate
        since = local_time(waiting.get("since"))
        task = f"the remote agent {waiting.get('agent')}'s task {waiting.get('task_id')}"
        fields.insert(2, ("waiting_for", f"{task}, since {since}"))
    elif waiting:
        call = f"{waiting.get('tool')}({json.dumps(waiting.get('input'), ensure_ascii=False)})"
        hint = f"jarvis-agents approve {agent['id']} [--deny]"
        fields.insert(2, ("waiting_for", f"{call} since {local_time(waiting.get('since'))}: {hint}"))
    for name, value in fields:
        if value is None or value == "":
            continue
        line = Text(f"{name + ':':<14}", style="bold")
        style = STATUS_STYLES.get(str(value), "") if name == "status" else ""
        line.append(str(value).replace("\n", "\n" + " " * 14), style=style)
        console.print(line)


def _usage(usage: dict[str, Any] | None) -> str | None:
    if not usage or not usage.get("model_calls"):
        return None
    return (f"{usage['input_tokens']} tokens in, {usage['output_tokens']} out, "
            f"{usage['model_calls']} model call{'' if usage['model_calls'] == 1 else 's'}")


def _context(context: dict[str, Any] | None) -> str | None:
    if not context:
        return None
    left_out = f", {context['left_out']} oldest left out (JARVIS_CONTEXT_CHARS)" if context["left_out"] else ""
    turns = context["turns"]
    return f"{turns} earlier turn{'' if turns == 1 else 's'} of its thread{left_out}"


def steps_list(console: Console, steps: Iterable[dict[str, Any]]) -> None:
    for step in steps:
        console.print(step_text(step["type"], str(step.get("content") or ""), step.get("tool"), seq=step["seq"]))


def _table(
    console: Console,
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    styles: dict[int, dict[str, str]] | None = None,
) -> None:
    styles = styles or {}
    if console.is_terminal:
        table = Table(box=None, pad_edge=False, header_style="bold")
        # Only the last column (the goal, the description) gives way to a narrow terminal.
        for i, name in enumerate(header):
            if i == len(header) - 1:
                table.add_column(name, overflow="ellipsis", no_wrap=True, ratio=1)
            else:
                width = max(len(str(r[i])) for r in [header, *rows])
                table.add_column(name, no_wrap=True, min_width=width)
        for row in rows:
            table.add_row(*(Text(cell, style=styles.get(i, {}).get(cell, "")) for i, cell in enumerate(row)))
        console.print(table)
        return
    # Plain aligned columns for programs: no box characters, no trailing spaces.
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        console.out("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def local_time(iso: str | None) -> str:
    """`2026-01-02T03:04:05.678Z` → `2026-01-02 04:04:05 CET`: the API's UTC in this
    machine's time zone, which is named (TZ, else the system's)."""
    if not iso:
        return ""
    try:
        when = datetime.fromisoformat(iso)
    except ValueError:
        return iso  # not ours to interpret: shown as it came
    return when.replace(tzinfo=when.tzinfo or UTC).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def _one_line(text: str, limit: int | None = None) -> str:
    flat = " ".join(text.split())
    return flat if limit is None or len(flat) <= limit else flat[: limit - 1] + "…"
