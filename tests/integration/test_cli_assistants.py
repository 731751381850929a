"""`jarvis-agents assistants …` and `run --assistant` against a real API on PostgreSQL:
what a person sees, YAML and JSON files, $EDITOR on a terminal, and one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import cli_env

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures"]  # shared_api

CLI = [sys.executable, "-m", "jarvis_agents.cli"]
RESEARCHER = textwrap.dedent("""\
    name: researcher
    description: Finds things out and cites them.
    model: qwen3
    mode: react
    tools: [calculate]
    max_steps: 12
    instructions: |
      Cite your sources.
      Say when you are not sure.
    metadata:
      team: docs
""")
# An editor that a test scripts: it replaces the file with what EDIT_TO says, or leaves it.
EDITOR = textwrap.dedent("""\
    import os, sys
    if os.environ.get("EDIT_TO") is not None:
        with open(sys.argv[1], "w") as f:
            f.write(os.environ["EDIT_TO"])
    with open(os.environ["EDIT_SEEN"], "w") as seen, open(sys.argv[1]) as f:
        seen.write(f.read())
""")


class Cli:
    def __init__(self, url: str, key: str, tmp_path: Path) -> None:
        self.env = cli_env(JARVIS_URL=url, JARVIS_API_KEY=key)
        self.tmp_path = tmp_path

    def __call__(self, *args: str, stdin: str | int | None = None,
                 **env: str) -> subprocess.CompletedProcess[str]:
        given = {"input": stdin} if isinstance(stdin, str) else {"stdin": stdin}
        result = subprocess.run([*CLI, *args], check=False, env={**self.env, **env},
                                capture_output=True, text=True, timeout=60, **given)
        assert "Traceback" not in result.stderr, result.stderr
        return result

    def file(self, name: str, text: str) -> str:
        path = self.tmp_path / name
        path.write_text(text)
        return str(path)


@pytest.fixture
def cli(shared_api, tmp_path: Path) -> Cli:
    api = shared_api()
    return Cli(api.url, api.user(), tmp_path)


def one_line_error(result: subprocess.CompletedProcess[str], text: str) -> None:
    assert result.returncode != 0, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert text in lines[0], result.stderr


def shown(cli: Cli, ref: str) -> dict:
    result = cli("assistants", "show", ref, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_create_from_yaml_list_show_and_rm(cli: Cli) -> None:
    created = cli("assistants", "create", cli.file("researcher.yaml", RESEARCHER))
    assert created.returncode == 0, created.stderr
    assert created.stdout.startswith("created assistant researcher (") and "version 1" in created.stdout
    listed = cli("assistants", "list").stdout.splitlines()
    assert listed[0].split() == ["NAME", "VERSION", "MODEL", "MODE", "TOOLS", "DESCRIPTION"]
    assert listed[1].split()[:2] == ["agent", "1"]
    assert listed[2].split()[:5] == ["researcher", "1", "qwen3", "react", "calculate"]
    details = cli("assistants", "show", "researcher").stdout
    assert "instructions:  Cite your sources.\n               Say when you are not sure." in details
    assert 'metadata:      {"team": "docs"}' in details
    made = shown(cli, "researcher")
    assert made["instructions"] == "Cite your sources.\nSay when you are not sure.\n"
    assert shown(cli, made["assistant_id"]) == made
    # JSON on standard input, too.
    piped = cli("assistants", "create", "-", "--json", stdin='{"name": "writer", "max_steps": 3}')
    assert piped.returncode == 0 and json.loads(piped.stdout)["max_steps"] == 3
    removed = cli("assistants", "rm", "researcher")
    assert removed.returncode == 0 and removed.stdout.strip() == "deleted assistant researcher"
    one_line_error(cli("assistants", "show", "researcher"), "you have no assistant 'researcher'")


def test_edit_from_a_file_makes_a_new_version_of_what_changed(cli: Cli) -> None:
    cli("assistants", "create", cli.file("r.yaml", RESEARCHER))
    edited = cli("assistants", "edit", "researcher", cli.file("patch.yaml", "max_steps: 20\nmodel: qwen3\n"))
    assert edited.returncode == 0, edited.stderr
    assert edited.stdout.strip() == "assistant researcher is at version 2 (changed: max_steps)"
    # What `show --json` printed goes back unchanged: nothing to do.
    same = cli("assistants", "edit", "researcher", "-", stdin=json.dumps(shown(cli, "researcher")))
    assert same.returncode == 0 and "no changes; assistant researcher stays at version 2" in same.stderr
    assert shown(cli, "researcher")["version"] == 2


def test_edit_without_a_file_opens_the_editor_on_a_terminal(cli: Cli, tmp_path: Path) -> None:
    cli("assistants", "create", cli.file("r.yaml", RESEARCHER))
    editor = cli.file("editor.py", EDITOR)
    seen = tmp_path / "seen.yaml"
    leader, follower = os.openpty()  # `edit` opens the editor only on a terminal
    try:
        env = {"EDITOR": f"{sys.executable} {editor}", "EDIT_SEEN": str(seen)}
        untouched = cli("assistants", "edit", "researcher", stdin=follower, **env)
        assert untouched.returncode == 0, untouched.stderr
        assert "no changes" in untouched.stderr
        text = seen.read_text()
        assert text.startswith("# Assistant researcher, version 1: save to make version 2.")
        assert "instructions: |\n  Cite your sources.\n  Say when you are not sure.\n" in text
        # Change the model, delete max_steps (back to the default), keep the rest.
        changed = text.replace("model: qwen3", "model: llama3.3").replace("max_steps: 12\n", "")
        edited = cli("assistants", "edit", "researcher", stdin=follower, EDIT_TO=changed, **env)
        assert edited.returncode == 0, edited.stderr
        assert edited.stdout.strip() == "assistant researcher is at version 2 (changed: max_steps, model)"
        now = shown(cli, "researcher")
        default = shown(cli, "agent")
        assert (now["model"], now["max_steps"], now["tools"]) == ("llama3.3", default["max_steps"],
                                                                  ["calculate"])
        broken = cli("assistants", "edit", "researcher", stdin=follower, EDIT_TO="model: [x\n", **env)
        one_line_error(broken, "the edited text is not valid YAML (line 2, column 1")
    finally:
        os.close(leader)
        os.close(follower)
    one_line_error(cli("assistants", "edit", "researcher", stdin=subprocess.DEVNULL),
                   "give a FILE (or - for standard input)")


def test_run_with_an_assistant_makes_an_agent_of_it(cli: Cli) -> None:
    cli("assistants", "create", cli.file("r.yaml", RESEARCHER))
    made = shown(cli, "researcher")
    started = cli("run", "--detach", "--json", "--assistant", "researcher", "--max-steps", "4",
                  "Why is the sky blue?")
    assert started.returncode == 0, started.stderr
    agent = json.loads(started.stdout)
    assert (agent["assistant_id"], agent["assistant_version"], agent["model"], agent["max_steps"]) == (
        made["assistant_id"], 1, "qwen3", 4)
    one_line_error(cli("run", "--detach", "--assistant", "nobody", "x"), "no assistant 'nobody'")


@pytest.mark.parametrize(("args", "stdin", "says"), [
    (("assistants", "create", "-"), "name: [oops\n", "is not valid YAML (line 2, column 1"),
    (("assistants", "create", "-"), '{"name": ', "<stdin> is not valid JSON (line 1, column 10"),
    (("assistants", "create", "-"), "- just\n- a list\n", "must hold an object of an assistant's fields"),
    (("assistants", "create", "-"), "", "must hold an object of an assistant's fields, such as `name: researcher`, not nothing"),
    (("assistants", "create", "-"), "name: r\ntools: [teleport]\n", "unknown tool(s): teleport"),
    (("assistants", "create", "-"), "name: agent\n", "default assistant's name"),
    (("assistants", "create", "/nonexistent/r.yaml"), None, "No such file or directory"),
    (("assistants", "show", "nobody"), None, "you have no assistant 'nobody'"),
    (("assistants", "show", "no/such"), None, "'no/such' is not an assistant's id or name"),
    (("assistants", "rm", "agent"), None, "cannot be deleted; create an assistant of your own"),
    (("assistants", "edit", "agent", "-"), "model: x\n", "cannot be changed"),
])
def test_every_mistake_is_one_line(cli: Cli, args, stdin, says) -> None:
    one_line_error(cli(*args, stdin=stdin if stdin is not None else subprocess.DEVNULL), says)
