"""Replies as the home's files, for a runtime whose backend keeps no replies of its own (the file and memory
backends; PostgreSQL keeps them in its database): the FileOutbox writes them into queue/outgoing/, the
Dispatcher sends each through the channel this process runs for it, and sent ones go to sent/."""

from __future__ import annotations

import asyncio
from contextlib import suppress
from typing import TYPE_CHECKING

from gateway.channelkit.attachments import extra_file_roots
from gateway.outbox import BaseOutbox, FileOutbox
from gateway.runtime.dispatcher import Dispatcher

if TYPE_CHECKING:
    from gateway.api import Channel
    from gateway.backends.runtime import RuntimeParts


class OutgoingFolder:
    """gateway.backends.runtime.Outgoing of the home's files: the outbox of queue/outgoing/ and, in a `run`, the
    channels and the Dispatcher that deliver it; the Worker sends the queued receipts."""

    sends_receipts = False

    def __init__(self, parts: RuntimeParts):
        self.parts = parts
        home, settings = parts.home, parts.settings
        self.outbox: BaseOutbox = FileOutbox(home, parts.events, extra_roots=extra_file_roots(home, settings),
                                             fsync=settings.queue.fsync, named_by_message_id=parts.named_by_message_id,
                                             on_written=parts.on_written)
        self.dispatcher: Dispatcher | None = None

    async def start_channels(self) -> None:
        """Starts the channels under supervision (a `run`; a `worker` runs none)."""
        if self.parts.role == "run":
            await self.parts.supervisor.start_each(self.parts.settings.channels, self._started_late)

    def start_delivery(self) -> Dispatcher | None:
        """The Dispatcher of outgoing/ through the running channels (a `run`; None for a `worker`)."""
        parts = self.parts
        if parts.role == "run":
            self.dispatcher = Dispatcher(parts.home, parts.supervisor.channels, parts.events, parts.settings.queue,
                                         extra_roots=extra_file_roots(parts.home, parts.settings))
        return self.dispatcher

    def tasks(self) -> list[asyncio.Task[None]]:
        return []  # the Dispatcher drains each conversation in a task of its own, as replies come

    async def stop(self) -> None:
        """Nothing to stop before processing: the Dispatcher stops with the Gateway's delivery."""

    async def release(self) -> None:
        """Nothing held for the channels."""

    def _started_late(self, channel: Channel) -> None:
        """A channel that started on a retry gets its replies too."""
        if self.dispatcher is not None:
            self.dispatcher.add_channel(channel)

    async def prune(self) -> None:
        """Removes the sent replies kept past their retention."""
        if self.dispatcher is not None:
            with suppress(OSError):
                self.dispatcher.prune_sent()
