"""The CLI as the README shows programs using it, run as written against a real stack:
the approvals script (bash and jq over `show --json`, `approve`, `watch --json`) and
paging through `list` with the cursor it prints."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, missing
from tests.integration.test_cli import UUID, jarvis
from tests.support.live_stack import LiveStack

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures", "tests.support.live_stack_fixtures"]


def readme_block(starting: str) -> str:
    """The README's code block whose first line starts with `starting`."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    found = [block for block in blocks if block.startswith(starting)]
    assert len(found) == 1, f"no single README block starts with {starting!r}"
    return found[0]


def test_the_readme_approval_script_approves_and_follows_the_agent(
    live_stack: LiveStack, tmp_path: Path
) -> None:
    if shutil.which("jq") is None:
        missing("jq", "the README's script reads JSON with jq (apt-get install -y jq)")
    script = readme_block("id=$(jarvis-agents run --detach --approve-tool")
    # `jarvis-agents` on the PATH, as an installed package puts it.
    env = live_stack.client_env(PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=env, check=False,
                          capture_output=True, text=True, timeout=120)

    assert done.returncode == 0, done.stdout + done.stderr
    waiting_for, approved = done.stdout.splitlines()
    assert json.loads(waiting_for)["tool"] == "calculate"
    agent_id = UUID.search(approved).group(0)  # type: ignore[union-attr]
    assert approved.startswith("approved calculate(") and approved.endswith(agent_id)
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert events[-1] == {"event": "done", "agent_id": agent_id, "status": "COMPLETED",
                          "stop_reason": "final_answer"}
    assert "observe" in [e["event"] for e in events]


def test_list_says_how_to_get_the_next_page_and_that_command_gets_it(live_stack: LiveStack) -> None:
    key = live_stack.api.user()  # a user of its own: its list holds only these
    older, newer = (jarvis(live_stack, "run", "--detach", f"page {n}: what is 1234 * 902?",
                           JARVIS_API_KEY=key).stdout.strip() for n in (1, 2))
    first = jarvis(live_stack, "list", "--limit", "1", JARVIS_API_KEY=key)
    assert first.returncode == 0, first.stderr
    assert [row.split()[0] for row in first.stdout.splitlines()[1:]] == [newer]
    more = re.fullmatch(r"more: (jarvis-agents list --cursor \S+)\n", first.stderr)
    assert more, first.stderr
    # The command it says, as said (with the same page size).
    _, *args = more.group(1).split()
    second = jarvis(live_stack, *args, "--limit", "1", JARVIS_API_KEY=key)
    assert second.returncode == 0, second.stderr
    assert [row.split()[0] for row in second.stdout.splitlines()[1:]] == [older]
    page = json.loads(jarvis(live_stack, "list", "--json", "--limit", "1", JARVIS_API_KEY=key).stdout)
    assert [a["id"] for a in page["agents"]] == [newer] and page["next_cursor"] == args[-1]
