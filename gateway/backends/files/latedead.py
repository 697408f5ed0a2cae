"""Late dead letters on the file backend: a message answered with an ack whose run later failed permanently
goes to `queue/failed/` all the same, so every permanent failure ends in `dead list` (gateway.api.LateDeadLetter).

The worker removed the message's file when it wrote the ack, so the letter holds the message as the
run kept it (its report says `source: run`), under a name made from its identity: dead-lettering it
again (a restart before the run recorded it) finds it there. The identity leaves the answered index,
so `dead retry` puts it back into incoming/ and the worker runs it again instead of skipping it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from gateway.backends.files.answered import AnsweredIndex
from gateway.home import Home, NotRegularFile, atomic_write, fsync_dir, read_file
from gateway.models import IncomingPayload
from gateway.payloads import letter_name, message_identity, parse_payload
from gateway.spool.deadletters import REPORT_SUFFIX
from gateway.telemetry.events import utc_now_iso


class FileLateDeadLetters:
    """Dead-letters answered messages into `failed/` and forgets their answer (`bury`)."""

    def __init__(self, home: Home, answered: AnsweredIndex, *, fsync: bool, max_payload_bytes: int):
        self.home = home
        self.answered = answered
        self.fsync = fsync
        self.max_payload_bytes = max_payload_bytes  # a larger queued file is no message: not read

    def bury(self, message: IncomingPayload, reason: str, errors: list[str]) -> str | None:
        """gateway.api.LateDeadLetter: the letter's name; None while a worker still holds the message."""
        name = letter_name(message)
        target = self.home.failed / name
        if os.path.lexists(target):
            self.answered.forget(message)
            return name
        if self._queued(message):
            return None  # its ack is being written (or it is run again after a crash): asked again later
        self.answered.forget(message)  # first: interrupted after it, the next call writes the letter
        report = {"file": name, "original": name, "reason": reason, "attempts": 1, "errors": errors,
                  "conversation": message.conversation, "source": "run", "failed_at": utc_now_iso()}
        self.home.failed.mkdir(parents=True, exist_ok=True)
        atomic_write(target.with_name(name + REPORT_SUFFIX), json.dumps(report, indent=2).encode(), fsync=self.fsync)
        atomic_write(target, message.to_json(), fsync=self.fsync)  # the report first: never a letter without it
        if self.fsync:
            fsync_dir(self.home.failed)
        return name

    def _queued(self, message: IncomingPayload) -> bool:
        """Whether incoming/ or a worker's processing/ folder holds this message (not finished)."""
        identity = message_identity(message)
        paths = [*self.home.processing.glob("*/*.json"), *self.home.incoming.glob("*.json")]
        return any(_identity(path, self.max_payload_bytes) == identity for path in paths)


def _identity(path: Path, limit: int) -> str | None:
    """The identity of the message a queued file holds; None for a file that is no valid message."""
    try:
        return message_identity(parse_payload(read_file(path, limit=limit), limit))
    except (OSError, NotRegularFile, ValueError):
        return None
