"""A tool approval answered by number on a channel without buttons: the message that started the run is done
as soon as its agent asks (the question is its answer for now; it does not hold the conversation for
`reply_within_sec`), so the numbered answer is read at once, and the run's result is pushed."""

from __future__ import annotations

import copy
import time
from pathlib import Path

import pytest

from gateway.testing import wait_until
from tests.e2e.conftest import ORCHESTRATOR, Switchyard, live_agent_providers

pytestmark = pytest.mark.e2e

PROMPT_WITHIN_S = 10.0  # far less than the run's reply_within_sec below


def test_a_numbered_answer_is_read_while_the_run_waits_for_it(switchyard: Switchyard, agents: Path) -> None:
    orchestrator = copy.deepcopy(ORCHESTRATOR) | {"reply_within_sec": 120}
    switchyard.configure({"channels": [  # the profile whose approvers may answer (make_incoming's sender is u1)
        {"id": "console", "type": "inbox", "poll_ms": 50, "settle_ms": 0, "approvers": ["u1"]}],
        "providers": live_agent_providers(agents)}, orchestrator)
    switchyard.start()
    first = switchyard.send("please [run=make deploy]", conversationId="c1")
    started = time.monotonic()
    [question] = switchyard.reply_to(first["messageId"], timeout=PROMPT_WITHIN_S)
    assert "make deploy" in question["message"] and [b["label"] for b in question["buttons"]][1] == "Allow"
    wait_until(lambda: not switchyard.unfinished(), PROMPT_WITHIN_S)  # done: the question is its answer for now
    assert time.monotonic() - started < PROMPT_WITHIN_S, "the starting message did not hold the conversation"

    answer = switchyard.send("2", conversationId="c1")  # Allow (once)
    [allowed] = switchyard.reply_to(answer["messageId"], timeout=PROMPT_WITHIN_S)
    assert allowed["message"].startswith("Allowed"), allowed["message"]
    pushed = wait_until(lambda: [r for r in switchyard.replies(first["messageId"])
                                 if "ran make deploy" in r["message"]], 30)
    assert len(pushed) == 1, "the run's result is pushed once"
    switchyard.stop()
