"""A provider's child that left the process group with setsid() does not outlive its run (nor another's)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.testing import wait_until
from tests.faults.harness import FAST_ORCHESTRATOR, GatewayRun, message

SCRIPT = str(Path(__file__).with_name("misbehaving_provider.py"))


def _gone(pid: int) -> bool:
    """No process, not even a zombie, has this pid any more."""
    return not Path(f"/proc/{pid}").exists()


@pytest.fixture
def run(tmp_path: Path) -> Any:
    gateway = GatewayRun(tmp_path / "home", env={"SWITCHYARD_PLUGINS": "tests.faults.nullchannel"})
    escape = [sys.executable, SCRIPT, "escape"]
    providers = {"quits": {"command": [*escape, str(tmp_path / "quits.pid")]},
                 "hangs": {"command": [*escape, str(tmp_path / "hangs.pid"), "hang"], "timeout_sec": 1},
                 "holds": {"command": [*escape, str(tmp_path / "holds.pid"), str(tmp_path / "release")]}}
    gateway.configure(
        queue={"max_attempts": 1, "fsync": False}, providers=providers,
        orchestrators={name: {"workspace": f"orchestrators/{name}"} for name in ("main", *providers)},
        channels=[{"id": name, "type": "nullch", "orchestrator": name} for name in providers])
    for name in providers:
        workspace = gateway.home.orchestrators / name
        workspace.mkdir(parents=True, exist_ok=True)
        config = {**FAST_ORCHESTRATOR, "selector": {"provider": name}}
        (workspace / "orchestrator.yaml").write_text(json.dumps(config))
    gateway.start()
    yield gateway
    if gateway.alive():
        gateway.kill()
    (tmp_path / "release").touch()
    for pid_file in tmp_path.glob("*.pid"):  # what a failed test left behind
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def _drop(run: GatewayRun, profile: str) -> str:
    payload = message(0, profile, channel="nullch", channelProfileId=profile)
    run.drop(payload)
    return payload.messageId


def _replied(run: GatewayRun, message_id: str) -> bool:
    return any(reply["messageId"] == message_id for reply in run.replies())


def _pid(path: Path) -> int:
    return int(wait_until(lambda: path.exists() and path.read_text(), 10))


def test_an_escaped_child_of_a_provider_that_answered_is_killed_when_the_run_ends(
        run: GatewayRun, tmp_path: Path) -> None:
    answered = _drop(run, "quits")
    escaped = _pid(tmp_path / "quits.pid")
    wait_until(lambda: _replied(run, answered), 15)
    wait_until(lambda: _gone(escaped), 5)


def test_an_escaped_child_of_a_provider_that_timed_out_is_killed(run: GatewayRun, tmp_path: Path) -> None:
    stuck = _drop(run, "hangs")
    escaped = _pid(tmp_path / "hangs.pid")
    wait_until(lambda: _replied(run, stuck), 15)
    wait_until(lambda: _gone(escaped), 5)


def test_one_runs_clean_up_leaves_a_concurrent_runs_escaped_child_alone(run: GatewayRun, tmp_path: Path) -> None:
    holding = _drop(run, "holds")
    held = _pid(tmp_path / "holds.pid")
    answered = _drop(run, "quits")
    escaped = _pid(tmp_path / "quits.pid")
    wait_until(lambda: _replied(run, answered), 15)
    wait_until(lambda: _gone(escaped), 5)
    assert not _gone(held) and not _replied(run, holding), "the other run is still going"
    (tmp_path / "release").touch()
    wait_until(lambda: _replied(run, holding), 15)
    wait_until(lambda: _gone(held), 5)
