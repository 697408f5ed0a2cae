"""The usage limits are checked before the selector (orchestrator/chat/handler.py `_decide`): a sender over their
limit who sends a message is told which limit, and the selector never runs, whether it is a provider's process or
a built-in in process; another sender of the same profile is not held back by that sender's spending."""

from __future__ import annotations

import json
import shlex
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.api import BuiltinProvider, HandlerContext
from gateway.config.usage import UsageSettings
from gateway.home import Home
from gateway.models import IncomingPayload
from gateway.outbox import FileOutbox
from gateway.settings import ProviderSettings, QueueSettings, Settings
from gateway.telemetry.events import EventLog
from gateway.testing import make_incoming
from orchestrator import Orchestrator
from orchestrator.usage.records import Payer, Spent
from tests.fakes.orchestrator import NO_CHAT_TOOLS

DECISION = json.dumps({"action": "command_invoke", "function": "list_workflows", "arguments": {}})
LIMIT_REPLY = "You have reached the daily limit of 1 turn per sender: 1 turn used; it resets at "
CONFIG = """
    selector: {provider: sel}
    diagnostics: {provider: rules}
    reply_within_sec: 30
    agents: {a: {provider: rules}}
    workflows:
      w: {description: Answers, steps: [{id: Reply, agent: a}]}
"""


class Selectors:
    """The selector `sel` two ways: a provider's process that leaves a marker file each time it runs, or a built-in
    that counts its calls; `ran()` says how often the chosen one ran."""

    def __init__(self, tmp_path: Path, kind: str):
        self.kind = kind
        self.marker = tmp_path / "selector-ran"
        self.calls = 0

    def settings(self) -> dict[str, ProviderSettings]:
        if self.kind != "process":
            return {}
        script = f"echo ran >> {shlex.quote(str(self.marker))}; echo {shlex.quote(DECISION)}"
        return {"sel": ProviderSettings(command=["sh", "-c", script])}

    def builtins(self) -> dict[str, BuiltinProvider]:
        async def counting(prompt: str, request: dict[str, Any]) -> str:
            self.calls += 1
            return DECISION

        return {"sel": counting} if self.kind == "built-in" else {}

    def ran(self) -> int:
        if self.kind == "process":
            return len(self.marker.read_text().splitlines()) if self.marker.exists() else 0
        return self.calls


@pytest.fixture(params=["process", "built-in"])
def selectors(request: pytest.FixtureRequest, tmp_path: Path) -> Selectors:
    return Selectors(tmp_path, request.param)


@pytest.fixture
async def orchestrator(home: Home, selectors: Selectors, events: EventLog, write_config: Callable[[str], Path],
                       start: Callable[[HandlerContext], Awaitable[Orchestrator]]) -> Orchestrator:
    """An Orchestrator whose senders may take one turn a day."""
    write_config(CONFIG)
    usage = UsageSettings.model_validate({"limits": [{"per": "sender", "day": {"turns": 1}}]})
    settings = Settings(chat_tools=NO_CHAT_TOOLS,
                        providers=selectors.settings(), usage=usage, queue=QueueSettings(fsync=False))
    return await start(HandlerContext(home=home, settings=settings, events=events, queue_stats=dict,
                                      outbox=FileOutbox(home, events, fsync=False),
                                      builtin_providers=selectors.builtins()))


def _from(sender: str) -> Callable[[str], IncomingPayload]:
    return lambda text: make_incoming(text, senderId=sender, conversationId=f"dm-{sender}")


async def test_a_sender_over_their_limit_is_told_so_and_the_selector_never_runs(
        orchestrator: Orchestrator, selectors: Selectors) -> None:
    ada, bob = _from("ada"), _from("bob")
    orchestrator.meter.record(Payer.of(ada("earlier")), "sel", Spent(turns=1))  # Ada's one turn of the day
    [refused] = await orchestrator.handle(ada("what now?"))
    assert selectors.ran() == 0, "the selector ran for a sender over their limit"
    assert refused.message.startswith(LIMIT_REPLY), refused.message

    await orchestrator.handle(bob("what now?"))  # Bob has spent nothing: his message reaches the selector
    assert selectors.ran() == 1
