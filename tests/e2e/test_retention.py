"""Runs retention through the CLI: `coordination clean` and a running gateway remove old finished runs; `status`
shows every retention."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gateway.testing import wait_until
from tests.e2e.conftest import Switchyard

pytestmark = pytest.mark.e2e


def _runs(switchyard: Switchyard) -> dict[str, dict]:
    result = switchyard.cli("runs", "--json")
    assert result.returncode == 0, result.stderr
    return {run["runId"]: run for run in json.loads(result.stdout)}


def _age(switchyard: Switchyard, run_id: str, days: float) -> None:
    """Makes a finished run look as if it ended `days` ago."""
    path = switchyard.home.runs / run_id / "state.json"
    state = json.loads(path.read_text())
    ended = (datetime.now(UTC) - timedelta(days=days)).isoformat()
    state["updatedAt"] = ended
    state.setdefault("job", {})["finished_at"] = ended
    path.write_text(json.dumps(state))


def _long(text: str) -> str:
    """A message whose echoed answer is kept as a file (over 4 KB): its run stays a folder, removed run by run.
    A settled chat run without files is a line of runs/.archive/, removed a whole day at a time
    (tests/unit/orchestrator/storage/test_runarchive.py)."""
    return text + " " + "x" * 5000


def _checkpoint(switchyard: Switchyard, run_id: str) -> Path:
    return switchyard.home.coordination / "checkpoints" / run_id


def test_finished_runs_past_the_retention_are_removed_by_clean_and_by_the_gateway(switchyard: Switchyard) -> None:
    switchyard.configure({"queue": {"runs_retention_days": 10, "fsync": False}})
    switchyard.start()
    for conversation in ("a", "b", "c"):
        switchyard.send(_long(f"hello {conversation}"), messageId=conversation, conversationId=conversation)
        switchyard.reply_to(conversation)
    assert switchyard.stop() == 0
    runs = _runs(switchyard)
    assert len(runs) == 3 and {run["state"] for run in runs.values()} == {"done"}
    old, recent, later = sorted(runs)
    # a one-step chat run writes no checkpoint (its completion report holds the result): give the old run
    # the checkpoint a multi-step run leaves, so its removal with the run is seen
    _checkpoint(switchyard, old).mkdir(parents=True)
    (_checkpoint(switchyard, old) / "step-1.json").write_text("{}")
    _age(switchyard, old, 11)
    _age(switchyard, recent, 9)

    status = switchyard.cli("status").stdout
    assert "retention: sent 7 d, selector_files 7 d, coordination_archive 30 d, checkpoints 7 d, runs 10 d" \
        in status
    result = switchyard.cli("coordination", "clean")
    assert result.returncode == 0, result.stderr
    assert "finished runs removed: 1" in result.stdout
    assert sorted(_runs(switchyard)) == [recent, later]
    assert not (switchyard.home.runs / old).exists() and not _checkpoint(switchyard, old).exists()

    _age(switchyard, recent, 12)
    switchyard.start()  # its maintenance applies the retention at start, then hourly
    wait_until(lambda: not (switchyard.home.runs / recent).exists(), 20)
    assert sorted(_runs(switchyard)) == [later]


def test_zero_keeps_runs_forever(switchyard: Switchyard) -> None:
    switchyard.configure({"queue": {"runs_retention_days": 0, "fsync": False}})
    switchyard.start()
    switchyard.send(_long("hello"), messageId="m1")
    switchyard.reply_to("m1")
    assert switchyard.stop() == 0
    [run_id] = _runs(switchyard)
    _age(switchyard, run_id, 3650)
    assert "finished runs removed: 0" in switchyard.cli("coordination", "clean").stdout
    assert "runs forever" in switchyard.cli("status").stdout
    assert list(_runs(switchyard)) == [run_id]
