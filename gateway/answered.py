"""Remembers which messages were answered, so a repeated delivery of one is skipped, not answered twice."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from gateway.home import atomic_write
from gateway.models import IncomingPayload


def message_identity(message: IncomingPayload) -> str:
    """(channel, channelProfileId, messageId) as one string."""
    return f"{message.channel}\x1f{message.profile}\x1f{message.messageId}"


class AnsweredIndex:
    """An append-only file of answered message identities, kept for `window_sec`.

    Only answers are recorded (never claims), so a message that is retried or recovered after a
    crash is not mistaken for a duplicate of itself; one whose answer was already written is.
    """

    def __init__(self, path: Path, *, window_sec: float, fsync: bool = True):
        self.path = path
        self.window_sec = window_sec
        self.fsync = fsync
        self._seen: dict[str, float] = {}
        self._fd = -1

    def open(self) -> None:
        """Loads the identities still inside the window and compacts the file."""
        cutoff = time.time() - self.window_sec
        try:
            lines = self.path.read_bytes().splitlines()
        except FileNotFoundError:
            lines = []
        for line in lines:
            try:
                record = json.loads(line)
                if record.get("forget"):
                    self._seen.pop(record["k"], None)
                elif record["t"] >= cutoff:
                    self._seen[record["k"]] = record["t"]
            except (ValueError, KeyError, TypeError):
                continue
        if len(self._seen) < len(lines):
            body = "".join(json.dumps({"k": k, "t": t}) + "\n" for k, t in self._seen.items())
            atomic_write(self.path, body.encode(), fsync=self.fsync)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def contains(self, message: IncomingPayload) -> bool:
        stamp = self._seen.get(message_identity(message))
        return stamp is not None and stamp >= time.time() - self.window_sec

    def record(self, message: IncomingPayload) -> None:
        """Records that `message` was answered (its replies are already on disk)."""
        key, stamp = message_identity(message), time.time()
        self._seen[key] = stamp
        os.write(self._fd, (json.dumps({"k": key, "t": stamp}) + "\n").encode())
        if self.fsync:
            os.fdatasync(self._fd)

    def forget(self, message: IncomingPayload) -> None:
        """Counts `message` as unanswered again (its answer was an ack and its work then failed: it is a
        dead letter now, which `dead retry` must run, not skip as a duplicate)."""
        key = message_identity(message)
        if self._seen.pop(key, None) is None:
            return
        os.write(self._fd, (json.dumps({"k": key, "t": time.time(), "forget": True}) + "\n").encode())
        if self.fsync:
            os.fdatasync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
