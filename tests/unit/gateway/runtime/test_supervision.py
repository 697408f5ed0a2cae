"""Channel supervision (gateway/runtime/supervision.py): one policy for both backends' channel start-ups."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway import hookimpl
from gateway.api import ChannelContext, PermanentError, Sink
from gateway.app import Gateway
from gateway.home import Home
from gateway.outbox import FileOutbox
from gateway.plugin_manager import build_plugin_manager
from gateway.runtime.supervision import RETRY_MAX_S, ChannelSupervisor
from gateway.settings import ChannelProfile, Settings
from gateway.telemetry.events import EventLog, read_events
from gateway.testing import FakeChannel, async_wait_until


def _supervisor(home: Home, written: list[dict[str, Any]]) -> ChannelSupervisor:
    async def start(profile: ChannelProfile) -> Any:
        raise AssertionError("not started here")

    supervisor = ChannelSupervisor(start, EventLog(home.events_file), spawn=lambda work, name: None,
                                   on_change=lambda: written.append(dict(supervisor.status)))
    return supervisor


def test_a_configuration_problem_disables_the_profile_and_an_outage_is_retried_within_five_minutes(home: Home) -> None:
    written: list[dict[str, Any]] = []
    supervisor = _supervisor(home, written)
    profile = ChannelProfile(id="p", type="x")
    assert supervisor.failed(profile, PermanentError("bad token"), attempt=1) is None
    assert supervisor.status["p"] == {"type": "x", "state": "disabled", "reason": "bad token"}
    waits = [supervisor.failed(profile, OSError("platform down"), attempt=attempt) for attempt in (1, 30)]
    assert waits[0] is not None and 0.5 <= waits[0] <= 1.0  # 1 s, jittered down to half
    assert waits[1] is not None and RETRY_MAX_S / 2 <= waits[1] <= RETRY_MAX_S == 300.0  # the same cap on every backend
    assert supervisor.status["p"]["state"] == "retrying" and len(written) == 2  # written when it changed
    events = [(e["event"], e["attempt"]) for e in read_events(home.events_file)]
    assert events == [("channel.disabled", 1), ("channel.retrying", 1), ("channel.retrying", 30)]


async def test_a_task_a_plugin_runs_through_its_context_is_started_again_after_each_failure(home: Home) -> None:
    events = EventLog(home.events_file)
    profile = ChannelProfile(id="coop", type="pigeon")
    context = ChannelContext(home=home, settings=Settings(channels=[profile]), profile=profile, events=events,
                             outbox=FileOutbox(home, events, fsync=False))
    runs: list[int] = []

    async def intake() -> None:
        runs.append(len(runs))
        if len(runs) < 3:
            raise ConnectionError("the platform closed the stream")
        await asyncio.Event().wait()  # the third run keeps receiving until it is cancelled

    task = context.supervise(intake, "intake", retry_s=(0.05, 0.2))
    assert task.get_name() == "coop:intake"
    await async_wait_until(lambda: len(runs) == 3)
    failed = [(e["profile"], e["task"], e["attempt"], e["reason"])
              for e in read_events(home.events_file) if e["event"] == "channel.task_failed"]
    assert failed == [("coop", "intake", n, "ConnectionError: the platform closed the stream") for n in (1, 2)]
    assert not task.done()
    await context.stop_tasks()
    assert task.cancelled() and not context.tasks


class _NotingChannel(FakeChannel):
    """A channel that notes where it listens while it starts, as the web chat does."""

    def __init__(self, context: ChannelContext):
        super().__init__("fake", context.profile.id)
        self.context = context

    async def start(self, sink: Sink) -> None:
        await super().start(sink)
        self.context.note("chat at http://127.0.0.1:8787/")


class _NotingPlugin:
    @hookimpl
    def switchyard_channels(self, profile: ChannelProfile, context: ChannelContext) -> FakeChannel | None:
        return _NotingChannel(context) if profile.type == "fake" else None


async def test_a_note_a_channel_makes_while_it_starts_survives_its_being_counted_running(home: Home) -> None:
    home.create()
    settings = Settings.model_validate({"queue": {"fsync": False}, "chat_tools": {"enabled": False},
                                        "channels": [{"id": "chat", "type": "fake"}]})
    gateway = Gateway(home, settings, build_plugin_manager(settings, extra=[_NotingPlugin()]))
    await gateway.start()
    try:
        assert gateway.channel_status["chat"] == {"type": "fake", "state": "running",
                                                  "reason": "chat at http://127.0.0.1:8787/"}
    finally:
        await gateway.stop()
