"""Providers that hang, flood stdout or fork children: killed at the timeout, capped, the gateway unaffected."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.testing import wait_until
from tests.faults.harness import FAST_ORCHESTRATOR, GatewayRun, message
from tests.process import pid_alive

SCRIPT = str(Path(__file__).with_name("misbehaving_provider.py"))
CAP = 65536



@pytest.fixture
def run(tmp_path: Path) -> Any:
    pids = tmp_path / "pids"
    gateway = GatewayRun(tmp_path / "home", env={"SWITCHYARD_PLUGINS": "tests.faults.nullchannel",
                                                 "FAULT_PIDS": str(pids)})
    orchestrators = {name: {"workspace": f"orchestrators/{name}"} for name in ("main", "hang", "flood")}
    gateway.configure(
        queue={"max_attempts": 2, "fsync": False},
        providers={"hang": {"command": [sys.executable, SCRIPT, "hang"], "timeout_sec": 1},
                   "flood": {"command": [sys.executable, SCRIPT, "flood"], "timeout_sec": 10,
                             "max_output_bytes": CAP}},
        orchestrators=orchestrators,
        channels=[{"id": "good", "type": "nullch"}, {"id": "hang", "type": "nullch", "orchestrator": "hang"},
                  {"id": "flood", "type": "nullch", "orchestrator": "flood"}])
    for name in ("hang", "flood"):
        workspace = gateway.home.orchestrators / name
        workspace.mkdir(parents=True, exist_ok=True)
        config = {**FAST_ORCHESTRATOR, "selector": {"provider": name}}
        (workspace / "orchestrator.yaml").write_text(json.dumps(config))
    gateway.start()
    yield gateway
    if gateway.alive():
        gateway.kill()


def _on(profile: str, seq: int, conversation: str) -> Any:
    return message(seq, conversation, channel="nullch", channelProfileId=profile)


def _answered(run: GatewayRun) -> dict[str, str]:
    return {reply["messageId"]: reply["message"] for reply in run.replies()}


def test_a_hanging_provider_and_its_child_are_killed_at_the_timeout_while_others_are_answered(
        run: GatewayRun, tmp_path: Path) -> None:
    stuck = _on("hang", 0, "stuck")
    run.drop(stuck)
    wait_until(lambda: (tmp_path / "pids").exists(), 10)
    others = [_on("good", seq, f"other{seq}") for seq in range(5)]
    for other in others:
        run.drop(other)
    wait_until(lambda: {o.messageId for o in others} <= set(_answered(run)), 5)
    assert stuck.messageId not in _answered(run), "the others did not wait for the hanging provider"
    wait_until(lambda: "could not process your message" in _answered(run).get(stuck.messageId, ""), 20)
    report = json.loads(next(run.home.failed.glob("*.error.json")).read_text())
    assert "timed out after 1.0s" in report["reason"] and report["attempts"] == 2
    pids = [int(line) for line in (tmp_path / "pids").read_text().split()]
    assert len(pids) == 4, "each of the two attempts started a provider and a child"
    wait_until(lambda: not any(pid_alive(pid) for pid in pids), 5)
    assert run.alive()


def test_a_flooding_provider_is_capped_and_gets_a_clear_reply(run: GatewayRun) -> None:
    flood = _on("flood", 0, "flood")
    run.drop(flood)
    reply = wait_until(lambda: _answered(run).get(flood.messageId), 20)
    assert "could not understand the selector's answer" in reply
    [result_file] = wait_until(lambda: list(run.home.select_results.glob("*.json")), 5)
    result = json.loads(result_file.read_text())
    assert len(result["raw"]) <= CAP and result["decision"] is None
    good = _on("good", 1, "fine")
    run.drop(good)
    wait_until(lambda: good.messageId in _answered(run), 5)
    assert run.alive()
