"""The plugin of a `switchyard run` process in tests/contract/test_schedule_crash.py, loaded through
$SWITCHYARD_PLUGINS and configured only by its environment: SCHED_LOG (the log of handler calls and
deliveries), SCHED_AT (`claimed`: stop once an occurrence was claimed; `enqueued`: once its message was written
to incoming/; unset: never) and SCHED_MARK (the file naming the stopped occurrence's messageId). Stopping
blocks the process where it is, for the test to kill it with SIGKILL. No product code reads these."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from gateway import hookimpl
from gateway.api import DeliveryRecord
from gateway.home import atomic_write, safe_name
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.spool.queue import FileQueue
from orchestrator.chat.handler import Orchestrator
from orchestrator.storage.files.schedules import FileScheduleRecords
from tests.contract.crashhost import append

LOG = Path(os.environ["SCHED_LOG"])
AT = os.environ.get("SCHED_AT") or None
MARK = Path(os.environ.get("SCHED_MARK", "/nonexistent"))
_stopped = threading.Event()


def _stop_here(message_id: str) -> None:
    """Marks the occurrence and blocks this thread for good (the test kills the process)."""
    if _stopped.is_set():
        return
    _stopped.set()
    atomic_write(MARK, json.dumps({"messageId": message_id}).encode(), fsync=False)
    threading.Event().wait()


def _stopping_claim(original: Any) -> Any:
    def claim(self: Any, schedule: str, occurrence: Any, holder: str, now: Any) -> bool:
        won: bool = original(self, schedule, occurrence, holder, now)
        if won:
            _stop_here(f"schedule-{safe_name(schedule)}-{int(occurrence.timestamp() * 1000)}")
        return won
    return claim


def _stopping_enqueue(original: Any) -> Any:
    def enqueue(self: Any, data: bytes, *, hint: str = "msg") -> Path:
        path: Path = original(self, data, hint=hint)
        _stop_here(json.loads(data)["messageId"])
        return path
    return enqueue


def _logging_handle(original: Any) -> Any:
    async def handle(self: Any, message: IncomingPayload) -> list[OutgoingPayload]:
        append(LOG, {"kind": "call", "messageId": message.messageId})
        result: list[OutgoingPayload] = await original(self, message)
        return result
    return handle


if AT == "claimed":
    from orchestrator.storage.postgres.schedules import PgScheduleRecords

    for records in (FileScheduleRecords, PgScheduleRecords):
        records.claim = _stopping_claim(records.claim)  # type: ignore[method-assign]
elif AT == "enqueued":  # only the scheduler enqueues here: the channel sends nothing
    FileQueue.enqueue = _stopping_enqueue(FileQueue.enqueue)  # type: ignore[method-assign]
Orchestrator.handle = _logging_handle(Orchestrator.handle)  # type: ignore[method-assign]


class LogChannel:
    """The conversation scheduled prompts are delivered to: logs each reply it is handed."""

    name = "schedlog"
    takes_receipts = False

    def __init__(self, profile_id: str):
        self.profile_id = profile_id

    async def start(self, sink: Any) -> None: ...

    async def send(self, outgoing: OutgoingPayload) -> DeliveryRecord:
        if outgoing.progress_key is None:
            append(LOG, {"kind": "sent", "messageId": outgoing.messageId, "message": outgoing.message})
        return DeliveryRecord()

    async def stop(self) -> None: ...


@hookimpl
def switchyard_channels(profile: Any, context: Any) -> LogChannel | None:
    return LogChannel(profile.id) if profile.type == "schedlog" else None


@hookimpl
def switchyard_channel_types() -> list[str]:
    return ["schedlog"]
