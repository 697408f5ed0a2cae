"""The console channel: chat with Switchyard on stdin/stdout (the reference channel implementation)."""

from __future__ import annotations

import asyncio
import getpass
import logging
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

from pydantic import BaseModel

from gateway import (
    INTAKE_FAILED_REPLY,
    ChannelContext,
    ChannelOptions,
    ChannelProfile,
    DeliveryRecord,
    IncomingPayload,
    OutgoingPayload,
    Sink,
    hookimpl,
    now_ms,
)

CHANNEL_TYPE = "console"


class ConsoleProfileOptions(ChannelOptions):
    """The keys of a console profile."""

    sender: str | None = None
    conversation_id: str = "console"

log = logging.getLogger("switchyard.console")


class ConsoleChannel:
    """Reads one message per line from stdin and prints replies to stdout.

    stdin is read on a daemon thread (a blocking read must not hold the event loop, and a regular
    file or closed stdin has no async reader); lines are handed to the loop thread-safely. End of
    input stops intake only: queued work still completes and replies are still printed.
    """

    name = CHANNEL_TYPE

    def __init__(self, profile: ChannelProfile, *, stdin: TextIO | None = None, stdout: TextIO | None = None):
        self.profile_id = profile.id
        self._stdin = stdin or sys.stdin
        self._stdout = stdout or sys.stdout
        self._user = profile.option("sender") or _login_name()
        self._conversation = profile.option("conversation_id", "console")
        self._sink: Sink | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: set[asyncio.Future[Path]] = set()

    async def start(self, sink: Sink) -> None:
        self._sink = sink
        self._loop = asyncio.get_running_loop()
        print("Switchyard console: type a message and press Enter (Ctrl-C to quit).", file=sys.stderr)
        threading.Thread(target=self._read_lines, name=f"console:{self.profile_id}", daemon=True).start()

    def _read_lines(self) -> None:
        assert self._loop is not None
        try:
            for line in self._stdin:
                text = line.rstrip("\n")
                if text.strip():
                    self._loop.call_soon_threadsafe(self._submit, text)
        except (RuntimeError, ValueError, OSError):
            return  # the loop or stdin has closed: the gateway is shutting down
        finally:
            if self._stdin is not sys.stdin:
                self._stdin.close()

    def _submit(self, text: str) -> None:
        assert self._sink is not None
        payload = IncomingPayload(
            channel=CHANNEL_TYPE, channelProfileId=self.profile_id, sender=self._user, senderId=self._user,
            message=text, timestamp=now_ms(), messageId=f"console-{time.time_ns()}",
            conversationId=self._conversation,
        )
        future = asyncio.ensure_future(self._sink(payload))
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)
        future.add_done_callback(self._tell_if_refused)

    def _tell_if_refused(self, future: asyncio.Future[Path]) -> None:
        if future.cancelled() or future.exception() is None:
            return
        log.error("console: could not queue the message: %s", future.exception())
        self._stdout.write(f"[switchyard] {INTAKE_FAILED_REPLY}\n")
        self._stdout.flush()

    async def send(self, outgoing: OutgoingPayload) -> DeliveryRecord:
        lines = [f"[{outgoing.agent or 'switchyard'}] {outgoing.message}"]
        lines += [f"  (file: {path})" for path in outgoing.files]
        self._stdout.write("\n".join(lines) + "\n")
        self._stdout.flush()
        return DeliveryRecord(platform_ids=[outgoing.messageId])

    async def stop(self) -> None:
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)


def _login_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "console"


@hookimpl
def switchyard_channel_options() -> dict[str, type[BaseModel]]:
    """Declares the keys a `type: console` profile may carry."""
    return {CHANNEL_TYPE: ConsoleProfileOptions}


@hookimpl
def switchyard_channel_types() -> list[str]:
    return [CHANNEL_TYPE]


@hookimpl
def switchyard_channels(profile: ChannelProfile, context: ChannelContext) -> ConsoleChannel | None:
    return ConsoleChannel(profile) if profile.type == CHANNEL_TYPE else None
