"""A host that stops dead at a named step of the message path, for tests/contract/test_crash.py.

The steps, in the order a message takes them: taken in (the channel's sink returned: the message is in the
host's spool, queue/incoming/), in store (memory and postgres: moved from the spool into the shared store, the
spool's file not yet removed; on files the spool is the store), claimed, handler answered, reply stored, answer
recorded, message completed, reply delivered. A CrashHost is the plugin of one
host: a "crash" channel that sends its messages once the gateway has started and appends what it delivers to
a log, a handler that appends each call to the same log, and a `Stop` that, the first time the host reaches
its step, writes a mark file and blocks the host's thread, so that nothing after that step happens: the test
then kills the process (or drops the in-process host) while it stands there.

Where the step is seen: taken in, right after the sink returned (the channel's own code); handler answered,
inside the handler with its answer made (nothing of it stored yet); claimed, completed and delivered at their
events (`message.claimed`, `job.succeeded`, `outgoing.sent`, each emitted once the step is stored, through the
`switchyard_event` hook); reply stored and answer recorded after the outbox's `write` and the answered index's
`record` returned (`stop_after`: only the file and memory backends have them as steps of their own); in store
when the spool's FileQueue is asked to `complete` the file it moved into the store.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

from gateway import hookimpl
from gateway.api import DeliveryRecord
from gateway.home import atomic_write
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.settings import ChannelProfile
from gateway.testing import make_incoming

STEPS = ("taken_in", "in_store", "claimed", "answered", "reply_stored", "answer_recorded", "completed", "delivered")
EVENT_STEPS = {"message.claimed": "claimed", "job.succeeded": "completed", "outgoing.sent": "delivered"}
PROFILE = "c1"
CONVERSATION = "room"


class HostKilled(BaseException):
    """Raised where a dropped in-process host stood once the test lets its thread go: not an Exception, so
    no handler of the gateway takes it for a failure of the message and stores anything."""


class Stop:
    """Stops the host at `step` (None: never): writes `mark`, then blocks its thread until `released`
    (a process: never, it is killed there; an in-process host: at the end of the test, then HostKilled)."""

    def __init__(self, step: str | None, mark: Path):
        assert step is None or step in STEPS, step
        self.step = step
        self.mark = mark
        self.released = threading.Event()
        self._fired = False

    def reached(self, step: str) -> None:
        if step != self.step or self._fired:
            return
        self._fired = True
        atomic_write(self.mark, step.encode(), fsync=False)
        self.released.wait()
        raise HostKilled(step)


def stop_after(owner: Any, name: str, step: str, stop: Stop, *, before: bool = False) -> None:
    """Makes `owner.name` (a class's method, or one instance's) stop the host once it has returned (or,
    `before`, when it is called)."""
    original = getattr(owner, name)

    def stopping(*args: Any, **kwargs: Any) -> Any:
        if before:
            stop.reached(step)
        result = original(*args, **kwargs)
        if not before:
            stop.reached(step)
        return result

    setattr(owner, name, stopping)


def append(log: Path, record: dict[str, str]) -> None:
    """One line of the host's log (a handler call, a delivery); O_APPEND keeps the hosts' lines whole."""
    with open(log, "a") as file:
        file.write(json.dumps(record) + "\n")


def read_log(log: Path, kind: str) -> list[dict[str, str]]:
    lines = log.read_text().splitlines() if log.exists() else []
    return [record for line in lines if (record := json.loads(line))["kind"] == kind]


class CrashChannel:
    """The platform of the test: sends the host's messages when asked, and logs each reply it is handed."""

    name = "crash"
    takes_receipts = False  # a "queued" receipt would be one more delivery to count

    def __init__(self, host: CrashHost, profile_id: str):
        self.host = host
        self.profile_id = profile_id
        self.sink: Any = None

    async def start(self, sink: Any) -> None:
        self.sink = sink
        self.host.ready()

    async def send(self, outgoing: OutgoingPayload) -> DeliveryRecord:
        append(self.host.log, {"kind": "sent", "host": self.host.name, "messageId": outgoing.messageId,
                               "message": outgoing.message})
        return DeliveryRecord(platform_ids=[f"{self.host.name}-{outgoing.messageId}"])

    async def typing(self, conversation: str) -> None: ...

    async def stop(self) -> None: ...


class CrashHost:
    """The plugin of one host: its channel, its handler, and where it stops (`halt`)."""

    def __init__(self, name: str, log: Path, halt: Stop, sends: list[str], *, send_when_started: bool = True):
        self.name = name
        self.send_when_started = send_when_started  # else when `go()` is called
        self.log = log
        self.halt = halt
        self.sends = sends
        self.channel: CrashChannel | None = None
        self._started = False
        self._sending: asyncio.Task[None] | None = None

    @hookimpl
    def switchyard_channels(self, profile: ChannelProfile, context: Any) -> CrashChannel | None:
        if profile.type != "crash":
            return None
        self.channel = CrashChannel(self, profile.id)
        return self.channel

    @hookimpl
    def switchyard_channel_types(self) -> list[str]:
        return ["crash"]

    @hookimpl
    def switchyard_handler(self, context: Any) -> CrashHost:
        return self

    @hookimpl
    def switchyard_event(self, event: dict[str, Any]) -> None:
        if event["event"] == "gateway.started" and self.send_when_started:
            self.go()
        elif event["event"] in EVENT_STEPS:
            self.halt.reached(EVENT_STEPS[event["event"]])

    def go(self) -> None:
        """The gateway has started: the messages may be sent (on the loop's thread)."""
        self._started = True
        self.ready()

    def ready(self) -> None:
        """Sends the messages once the gateway has started and the channel runs (a channel whose lease
        another process held starts later), on the loop's thread."""
        if self._started and self.channel is not None and self.channel.sink is not None and self._sending is None:
            self._sending = asyncio.get_running_loop().create_task(self._send_all())

    async def _send_all(self) -> None:
        assert self.channel is not None
        for message_id in self.sends:
            await self.channel.sink(make_incoming(message_id, channel="crash", channelProfileId=PROFILE,
                                                  conversationId=CONVERSATION, senderId="u1", messageId=message_id))
            try:
                self.halt.reached("taken_in")
            except HostKilled:  # a dropped in-process host let go at the end of its test: nothing more to send
                return

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def handle(self, message: IncomingPayload) -> list[OutgoingPayload]:
        append(self.log, {"kind": "call", "host": self.name, "messageId": message.messageId})
        replies = [OutgoingPayload.reply_to(message, f"{message.message} answered", agent="crash",
                                            timestamp=message.timestamp)]
        self.halt.reached("answered")
        return replies
