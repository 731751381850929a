"""JARVIS_RETENTION end to end (README, Deleting and retention): a real worker's sweep
deletes an agent that ended longer ago than the setting, the API's /metrics counts it,
and a bad setting stops the process at startup with a sentence."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT, cli_env
from tests.support.api_server import wait_until

pytestmark = pytest.mark.integration
pytest_plugins = ["tests.support.api_fixtures"]  # api_env, start_api


def deleted_agents(text: str) -> float:
    found = re.search(r'^jarvis_retention_deleted_total\{kind="agent"\} (\S+)$', text, re.MULTILINE)
    return float(found[1]) if found else 0.0


def test_a_worker_deletes_what_ended_longer_ago_than_the_retention(
    api_env, start_api, start_worker, fake_ollama,
):
    env = {**api_env, "JARVIS_RETENTION": "2s", "JARVIS_HEARTBEAT_INTERVAL": "1"}
    api = start_api(env)
    start_worker(env)
    with api.client(api.user()) as http:
        agent = http.post("/api/v1/agents", json={"goal": "What is 6 * 7?"}).json()
        done = http.get(f"/api/v1/agents/{agent['id']}", params={"wait": 30}).json()
        assert done["status"] == "COMPLETED", done
        # Deleted within twice the retention or 2 minutes of its end, whichever is longer.
        wait_until(lambda: http.get(f"/api/v1/agents/{agent['id']}").status_code == 404,
                   timeout_s=120)
        assert http.get(f"/api/v1/agents/{agent['id']}/steps").status_code == 404
        metrics = wait_until(lambda: (t := http.get("/metrics").text) and deleted_agents(t) >= 1 and t,
                             timeout_s=60)
        assert re.search(r'^jarvis_retention_deleted_total\{kind="step"\} [1-9]', metrics, re.MULTILINE)
        assert "jarvis_retention_oldest_ended_age_seconds" in metrics


def test_a_retention_that_is_not_a_duration_stops_the_worker_with_a_sentence(pg_url):
    env = cli_env(DATABASE_URL=pg_url, JARVIS_RETENTION="ninety days")
    ran = subprocess.run([sys.executable, "-m", "jarvis_agents.cli", "worker"], check=False,
                         env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode != 0
    assert "JARVIS_RETENTION must be a positive duration such as 90d" in ran.stderr
    assert "Traceback" not in ran.stderr
