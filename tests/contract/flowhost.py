"""The handler of a file-backend host run as a process of its own (tests/contract/flow.py): loaded by
`switchyard run` through $SWITCHYARD_PLUGINS, it answers each message as the in-process Script does and
appends each call to $FLOW_CALLS (host $FLOW_HOST, messageId, conversation, start, end on the monotonic
clock, which every process of this machine shares)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from gateway import hookimpl
from gateway.models import IncomingPayload, OutgoingPayload


class LoggedHandler:
    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def handle(self, message: IncomingPayload) -> list[OutgoingPayload]:
        start = time.monotonic()
        await asyncio.sleep(0.01)  # as the in-process Script: work that takes a moment
        record = {"host": os.environ["FLOW_HOST"], "message_id": message.messageId,
                  "conversation": message.conversation, "start": start, "end": time.monotonic(), "ok": True}
        with open(os.environ["FLOW_CALLS"], "a") as calls:
            calls.write(json.dumps(record) + "\n")
        return [OutgoingPayload.reply_to(message, f"{message.message} part 1/1", agent="script",
                                         timestamp=message.timestamp)]


@hookimpl
def switchyard_handler(context: Any) -> LoggedHandler:
    return LoggedHandler()
