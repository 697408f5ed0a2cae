"""A stored run that cannot be loaded (its state.json corrupt) or run (its message no longer a message)
never holds up the others: it ends failed_final with the reason, its data kept, and `runs show` says so.
Before, the corrupt one was silently left out (`runs show`: no run) and the other stopped the gateway
at start (restoring the active runs read its message)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from gateway.testing import make_incoming
from orchestrator.runs.state import RunState
from orchestrator.storage.files.runs import RunStore
from tests.e2e.conftest import Switchyard

pytestmark = pytest.mark.e2e

CORRUPT = b'{"runId": "r-1-broken", "workflowId": "chat", "state": "queu'  # cut short (a disk, a hand edit)


def _queued(store: RunStore, run_id: str, minutes_ago: int, message: dict[str, object]) -> None:
    created = (datetime.now(UTC) - timedelta(minutes=minutes_ago)).isoformat().replace("+00:00", "Z")
    store.save(RunState(runId=run_id, workflowId="chat", orchestratorId="main", createdAt=created,
                        message=message, conversation={"channel": "console", "conversationId": run_id},
                        steps={"Reply": {}}))


def test_runs_that_cannot_be_claimed_end_failed_final_and_the_others_run(switchyard: Switchyard) -> None:
    switchyard.configure()
    store = RunStore(switchyard.home, fsync=False)
    _queued(store, "r-1-broken", 30, make_incoming("lost", conversationId="r-1-broken").model_dump())
    (switchyard.home.runs / "r-1-broken" / "state.json").write_bytes(CORRUPT)
    _queued(store, "r-2-nomessage", 20, {"text": "not a message: no channel, no id"})  # a run's schema allows it
    good = make_incoming("hello good", conversationId="r-3-good", messageId="m-good").model_dump()
    _queued(store, "r-3-good", 10, good)
    switchyard.start()
    [result] = switchyard.reply_to("m-good")
    assert "write about hello good" in result["message"]
    assert switchyard.stop() == 0

    broken = switchyard.cli("runs", "show", "r-1-broken")
    assert broken.returncode == 0, broken.stderr
    assert "r-1-broken (workflow ?): failed_final" in broken.stdout
    assert "state.json is not a run" in broken.stdout
    assert "its bytes are kept in state.json.unreadable-" in broken.stdout
    [kept] = (switchyard.home.runs / "r-1-broken").glob("state.json.unreadable-*")
    assert kept.read_bytes() == CORRUPT

    unclaimable = switchyard.cli("runs", "show", "r-2-nomessage")
    assert unclaimable.returncode == 0, unclaimable.stderr
    assert "r-2-nomessage (workflow chat): failed_final" in unclaimable.stdout
    assert "error: internal error: ValidationError" in unclaimable.stdout
    assert store.load("r-2-nomessage").message == {"text": "not a message: no channel, no id"}  # type: ignore[union-attr]

    listed = {row["runId"]: row["state"] for row in json.loads(switchyard.cli("runs", "--json").stdout)}
    assert listed == {"r-1-broken": "failed_final", "r-2-nomessage": "failed_final", "r-3-good": "done"}
