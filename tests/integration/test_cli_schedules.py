"""`jarvis-agents schedules …` against a real API on PostgreSQL: add, list (the next due
time on this machine's clock), pause, resume, rm, and one-line errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import cli_env, missing
from tests.integration.test_cli_scripts import readme_block

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures", "tests.support.live_stack_fixtures"]

CLI = [sys.executable, "-m", "jarvis_agents.cli"]


@pytest.fixture
def cli(shared_api):
    api = shared_api()
    env = cli_env(JARVIS_URL=api.url, JARVIS_API_KEY=api.user(), TZ="America/New_York")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([*CLI, "schedules", *args], check=False, env=env,
                                capture_output=True, text=True, timeout=60)
        assert "Traceback" not in result.stderr, result.stderr
        return result

    return run


def test_add_list_pause_resume_and_rm(cli) -> None:
    added = cli("add", "Summarise the day", "--cron", "0 21 * * *", "--max-steps", "3")
    assert added.returncode == 0, added.stderr
    # The machine's zone is the schedule's, and 21:00 there is shown as 21:00 here.
    assert "America/New_York" in added.stdout and " 21:00:00 E" in added.stdout, added.stdout
    (made,) = json.loads(cli("list", "--json").stdout)["schedules"]
    assert (made["timezone"], made["max_steps"], made["enabled"]) == ("America/New_York", 3, True)

    listed = cli("list")
    assert made["id"] in listed.stdout and " 21:00:00 E" in listed.stdout, listed.stdout
    assert cli("pause", made["id"]).returncode == 0
    assert "paused" in cli("list").stdout
    resumed = cli("resume", made["id"])
    assert resumed.returncode == 0 and "21:00:00" in resumed.stdout, resumed.stdout
    assert cli("rm", made["id"]).returncode == 0
    assert json.loads(cli("list", "--json").stdout) == {"schedules": []}


@pytest.mark.parametrize(("args", "says"), [
    (("add", "x", "--cron", "every day"), "5 fields"),
    (("add", "x", "--cron", "0 3 * * *", "--timezone", "Mars/Olympus"), "IANA"),
    (("pause", "not-an-id"), "not a schedule's id"),
    (("rm", "8b0e6a40-3c1e-4a47-9a52-2f7a0c1d9e11"), "no schedule"),
])
def test_bad_input_is_one_line_on_stderr(cli, args, says) -> None:
    refused = cli(*args)
    assert refused.returncode != 0 and says in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr


def test_the_readme_nightly_schedule_runs_as_written(live_stack, tmp_path) -> None:
    for tool in ("jq", "curl"):
        if shutil.which(tool) is None:
            missing(tool, "the README's schedule examples use it")
    env = live_stack.client_env(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        JARVIS_API_KEY=live_stack.api.user(), TZ="Europe/Paris")
    nightly, every_five = (readme_block(start) for start in (
        "id=$(jarvis-agents schedules add", 'curl -s -H "Authorization: Bearer $JARVIS_API_KEY" -H'))
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", nightly], cwd=tmp_path, env=env,
                          check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    *listed, paused, resumed, runs = done.stdout.strip().splitlines()
    assert any("Europe/Paris" in line and "07:00:00" in line for line in listed), done.stdout
    assert paused.startswith("paused schedule ") and resumed.startswith("resumed schedule ")
    assert json.loads(runs) == {"agents": [], "next_cursor": None}
    made = subprocess.run(["bash", "-e", "-c", every_five], cwd=tmp_path, env=env, check=False,
                          capture_output=True, text=True, timeout=60)
    schedule = json.loads(made.stdout)
    assert (schedule["cron"], schedule["timezone"], schedule["overlap"]) == (
        "*/5 * * * *", "UTC", "skip"), made.stdout
