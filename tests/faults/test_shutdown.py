"""Stopping is bounded: a channel that swallows cancellation, a second signal, a hanging handler."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gateway.testing import wait_until
from tests.faults.harness import FAST_ORCHESTRATOR, GatewayRun, message

SCRIPT = str(Path(__file__).with_name("misbehaving_provider.py"))
STOP_BOUND_S = 30.0  # well past the worst case of Gateway.stop's bounded steps (gateway/app.py)


def _stuck_run(tmp_path: Path, swallow: str) -> GatewayRun:
    run = GatewayRun(tmp_path / "home", env={"SWITCHYARD_PLUGINS": "tests.faults.stuckchannel"})
    run.configure(channels=[{"id": "dc", "type": "stuckch", "swallow": swallow}])
    run.start()
    wait_until(lambda: run.count("stuckch.login"), 20)  # the retry is inside the hanging login
    return run


def _terminate(run: GatewayRun, within: float) -> int:
    """SIGTERM, then the exit code; fails when the process is still alive after `within` seconds."""
    assert run.process is not None
    run.process.send_signal(signal.SIGTERM)
    try:
        return run.process.wait(within)
    except subprocess.TimeoutExpired:
        pytest.fail(f"switchyard run still alive {within:g}s after SIGTERM:\n{run.output()[-2000:]}")


@pytest.mark.parametrize("swallow", ["once", "always"])
def test_sigterm_ends_a_gateway_whose_channel_retry_swallows_cancellation(tmp_path: Path, swallow: str) -> None:
    run = _stuck_run(tmp_path, swallow)
    assert _terminate(run, STOP_BOUND_S) == 0
    stopped = run.events("gateway.stop_incomplete")
    if swallow == "once":  # the cancellation became an error: the stop flag ends the retry loop
        assert stopped == [] and run.count("gateway.stopped") == 1
    else:  # the start never ends: the stop gives up on it and says so
        assert stopped and stopped[0]["unfinished"] == ["channel-retry:dc"]
        assert "gave up waiting for channel-retry:dc" in run.output()


def _kill_recorded(pids: Path) -> None:
    for pid in map(int, pids.read_text().split() if pids.exists() else []):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_a_second_sigterm_exits_at_once_and_the_message_is_recovered_at_the_next_start(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    run = GatewayRun(tmp_path / "home", env={"FAULT_PIDS": str(pids)})
    run.configure(providers={"hang": {"command": [sys.executable, SCRIPT, "hang"], "timeout_sec": 300}},
                  orchestrator={**FAST_ORCHESTRATOR, "selector": {"provider": "hang"}})
    try:
        run.start()
        stuck = message(0, "stuck")
        run.drop(stuck)
        wait_until(pids.exists, 20)  # the handler is running the hanging provider
        assert run.process is not None
        run.process.send_signal(signal.SIGTERM)
        wait_until(lambda: "SIGTERM: stopping" in run.output(), 10)  # the stop now waits for the handler
        assert _terminate(run, 5) == 128 + signal.SIGTERM
        assert not run.replies() and run.queued_files() == 1, "the message stays claimed, not lost"
    finally:
        _kill_recorded(pids)
    (run.home.orchestrators / "main" / "orchestrator.yaml").write_text(yaml.safe_dump(FAST_ORCHESTRATOR))
    run.start()
    wait_until(lambda: run.replies(stuck.messageId), 20)
    assert run.count("queue.recovered") >= 1
    assert run.stop() == 0
