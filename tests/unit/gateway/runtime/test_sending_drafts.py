"""Drafts of a streamed answer in the delivery loop (gateway/runtime/sending.py): none for a channel that cannot
edit, only the newest waiting one of a key, none once the final answer waits, and a channel's edits spaced."""

from __future__ import annotations

import asyncio
import io
import time
from typing import Any

from gateway.backends.files.backend import FileBackend
from gateway.cli.backends import wait_for_reply
from gateway.home import Home
from gateway.models import OutgoingPayload
from gateway.outbox import FileOutbox
from gateway.runtime.dispatcher import Dispatcher
from gateway.settings import ChannelProfile, QueueSettings, Settings
from gateway.telemetry.events import EventLog, read_events
from gateway.testing import FakeChannel, async_wait_until, make_incoming
from plugins.console.channel import ConsoleChannel

SETTINGS = QueueSettings(backoff_initial_ms=5, backoff_max_ms=20, max_attempts=3, fsync=False)
KEY = "answer:m1"


def _reply(text: str, **extra: Any) -> OutgoingPayload:
    incoming = make_incoming(text, channel="fake", channelProfileId="fake", conversationId="c1", messageId="m1")
    return OutgoingPayload.reply_to(incoming, text, agent="a", timestamp=incoming.timestamp, **extra)


def draft(text: str, key: str = KEY) -> OutgoingPayload:
    return _reply(text, progressKey=key, draft=True)


def final(text: str, key: str = KEY) -> OutgoingPayload:
    return _reply(text, streamKey=key, runState="done")


def editing(interval: float = 0.0) -> FakeChannel:
    """A fake channel that declares it edits progress notes in place."""
    channel = FakeChannel()
    channel.edits_progress = True  # type: ignore[attr-defined]
    channel.edit_interval_sec = interval  # type: ignore[attr-defined]
    return channel


class Rig:
    """A file Dispatcher with one channel and its outbox; `hold_next` holds the channel's next send (`held`
    is set then) until `release` is set."""

    def __init__(self, home: Home, channel: FakeChannel):
        self.home = home
        self.channel = channel
        events = EventLog(home.events_file)
        self.dispatcher = Dispatcher(home, [channel], events, SETTINGS)
        self.outbox = FileOutbox(home, events, fsync=False, on_written=self.dispatcher.schedule)
        self.hold_next = False
        self.held = asyncio.Event()
        self.release = asyncio.Event()
        self.times: list[float] = []
        channel.on_send = self._on_send

    async def _on_send(self, payload: OutgoingPayload) -> None:
        self.times.append(time.monotonic())
        if self.hold_next:
            self.hold_next = False
            self.held.set()
            await self.release.wait()

    def sent(self) -> list[str]:
        return [p.message for p in self.channel.sent]

    def skipped(self) -> list[str]:
        return [str(e["reason"]) for e in read_events(self.home.events_file) if e["event"] == "outgoing.skipped"]


async def test_a_channel_that_cannot_edit_gets_the_final_answer_only(home: Home) -> None:
    rig = Rig(home, FakeChannel())
    for text in ("The", "The quick", "The quick brown"):
        rig.outbox.write(draft(text))
    rig.outbox.write(final("The quick brown fox."))
    await async_wait_until(lambda: rig.sent() == ["The quick brown fox."] and len(list(home.sent.iterdir())) == 4)
    assert list(home.outgoing.glob("*.json")) == []  # every draft is recorded as delivered, none left waiting
    assert len(rig.skipped()) == 3 and all("cannot edit" in reason for reason in rig.skipped())


async def test_the_console_prints_the_final_answer_only(home: Home) -> None:
    stdout = io.StringIO()
    console = ConsoleChannel(ChannelProfile(id="console", type="console"), stdin=io.StringIO(), stdout=stdout)
    events = EventLog(home.events_file)
    dispatcher = Dispatcher(home, [console], events, SETTINGS)  # type: ignore[list-item]
    outbox = FileOutbox(home, events, fsync=False, on_written=dispatcher.schedule)
    for payload in (draft("The"), draft("The quick"), final("The quick brown fox.")):
        outbox.write(payload.model_copy(update={"channel": "console", "channelProfileId": "console",
                                                "conversationId": "console"}))
    await async_wait_until(lambda: len(list(home.sent.iterdir())) == 3)
    assert [line.split("] ", 1)[1] for line in stdout.getvalue().splitlines()] == ["The quick brown fox."]


async def test_waiting_drafts_of_one_key_are_coalesced_to_the_newest(home: Home) -> None:
    rig = Rig(home, editing())
    rig.hold_next = True
    rig.outbox.write(_reply("an earlier answer"))
    await rig.held.wait()  # the conversation's head is being sent: the drafts below wait behind it
    for text in ("The", "The quick", "The quick brown"):
        rig.outbox.write(draft(text))
    rig.release.set()
    await async_wait_until(lambda: rig.sent() == ["an earlier answer", "The quick brown"]
                           and len(list(home.sent.iterdir())) == 4)
    assert rig.skipped() == ["a draft superseded by a later one or by the final answer"] * 2


async def test_the_final_answer_supersedes_the_drafts_waiting_before_it(home: Home) -> None:
    rig = Rig(home, editing())
    rig.hold_next = True
    rig.outbox.write(draft("The"))
    await rig.held.wait()
    rig.outbox.write(draft("The quick"))
    rig.outbox.write(draft("The quick brown"))
    rig.outbox.write(final("The quick brown fox."))
    rig.release.set()
    await async_wait_until(lambda: rig.sent() == ["The", "The quick brown fox."]
                           and len(list(home.sent.iterdir())) == 4)


async def test_a_draft_of_another_key_is_not_superseded(home: Home) -> None:
    rig = Rig(home, editing())
    rig.hold_next = True
    rig.outbox.write(_reply("hold"))
    await rig.held.wait()
    rig.outbox.write(draft("first answer", key="answer:m1"))
    rig.outbox.write(draft("second answer", key="answer:m2"))
    rig.release.set()
    await async_wait_until(lambda: rig.sent() == ["hold", "first answer", "second answer"])


async def test_edits_of_one_stream_are_spaced_by_the_channels_interval(home: Home) -> None:
    rig = Rig(home, editing(interval=0.3))
    rig.outbox.write(draft("The"))
    await async_wait_until(lambda: rig.sent() == ["The"])
    rig.outbox.write(draft("The quick"))
    await async_wait_until(lambda: rig.sent() == ["The", "The quick"])
    rig.outbox.write(final("The quick brown fox."))
    await async_wait_until(lambda: len(rig.sent()) == 3)
    gaps = [later - earlier for earlier, later in zip(rig.times, rig.times[1:], strict=False)]
    assert all(gap >= 0.29 for gap in gaps), gaps


def test_send_wait_shows_the_answer_not_a_draft(home: Home) -> None:
    outbox = FileOutbox(home, EventLog(home.events_file), fsync=False)
    outbox.write(draft("The quick"))
    outbox.write(final("The quick brown fox."))
    backend = FileBackend(home, Settings(), stores=None)  # type: ignore[arg-type]
    reply = wait_for_reply(backend.replies(), make_incoming("asked", messageId="m1", timestamp=0), "gone.json", 1.0)
    assert reply is not None and reply["message"] == "The quick brown fox."


async def test_a_channel_may_space_edits_per_chat(home: Home) -> None:
    channel = editing(interval=0.0)
    channel.edit_interval_for = lambda conversation: 0.3 if conversation == "c1" else 0.0  # type: ignore[attr-defined]
    rig = Rig(home, channel)
    rig.outbox.write(draft("The"))
    await async_wait_until(lambda: rig.sent() == ["The"])
    rig.outbox.write(draft("The quick"))
    await async_wait_until(lambda: rig.sent() == ["The", "The quick"])
    assert rig.times[1] - rig.times[0] >= 0.29
