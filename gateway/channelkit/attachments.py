"""Which files a reply may carry, and the one way an attachment is opened for upload.

A conversation gets only its own files: the attachments its messages brought
(`files/<profile>/<conversation folder>/`, `in_own_folder`: also the only files its voice notes are
transcribed from, orchestrator/agents/transcribe.py), the files of its own runs (`runs/<runId>/`, where
`state.json` names the conversation), and the operator's `files.extra_roots`. The orchestrator
workspace is shared by every conversation, so nothing in it is sent.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

from gateway.home import Home, read_file, safe_name
from gateway.models import OutgoingPayload
from gateway.settings import Settings
from gateway.telemetry.events import EventLog

_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_READ_CHUNK = 1 << 20
REFUSED_NOTE = "[file not sent: {path} is outside the allowed folders or does not exist]"


class AttachmentRefused(Exception):
    """A file that must not be uploaded: outside the conversation's folders, a link, not a regular file."""


def extra_file_roots(home: Home, settings: Settings) -> list[Path]:
    """The folders an operator opened to every conversation (`files.extra_roots`); beyond them a reply
    carries only its own conversation's files."""
    return [home.resolve(extra) for extra in settings.files.extra_roots]


def attachment_folder(home: Home, profile: str, conversation: str) -> Path:
    """Where one conversation's downloaded attachments live: `files/<profile>/<conversation>-<hash>/`.

    The hash keeps two conversations whose ids clean up to the same name apart.
    """
    digest = hashlib.sha256(f"{profile}\0{conversation}".encode()).hexdigest()[:16]
    return home.files / safe_name(profile) / f"{safe_name(conversation)[:40]}-{digest}"


def in_own_folder(home: Home, real: str, profile: str, conversation: str) -> bool:
    """Whether `real` (a path without links or `..`) is inside the conversation's own attachment folder."""
    return bool(conversation) and _inside(real, os.path.realpath(attachment_folder(home, profile, conversation)))


def reply_conversation(payload: OutgoingPayload) -> str:
    """The conversation a reply goes to (its conversationId, else its sender id); empty when unknown."""
    return payload.conversationId or payload.senderId or ""


class AttachmentPolicy:
    """Tells whether a file may go to a reply's conversation (see the module docstring)."""

    def __init__(self, home: Home, extra_roots: Sequence[str | os.PathLike[str]] = ()):
        self.home = home
        self._runs = os.path.realpath(home.runs)
        self._extra = [os.path.realpath(root) for root in extra_roots]

    def allows(self, real: str, payload: OutgoingPayload) -> bool:
        """Whether the file at `real` (a path without links or `..`) may be sent with `payload`."""
        if any(_inside(real, root) for root in self._extra):
            return True
        conversation = reply_conversation(payload)
        if not conversation:
            return False
        return (in_own_folder(self.home, real, payload.profile, conversation)
                or self._in_own_run(real, payload, conversation))

    def _in_own_run(self, real: str, payload: OutgoingPayload, conversation: str) -> bool:
        if not _inside(real, self._runs):
            return False
        run_id, _, rest = real[len(self._runs) + 1:].partition(os.sep)
        if not rest:
            return False  # a file of runs/ itself (active.json), no run's
        try:
            owner = json.loads(read_file(os.path.join(self._runs, run_id, "state.json")))["conversation"]
            return bool(owner["channel"] == payload.channel
                        and (owner.get("channelProfileId") or owner["channel"]) == payload.profile
                        and (owner.get("conversationId") or owner.get("senderId")) == conversation)
        except (OSError, ValueError, KeyError, TypeError):
            return False


def _inside(path: str, root: str) -> bool:
    return path.startswith(root.rstrip(os.sep) + os.sep)


def open_attachment(path: str, allowed: Callable[[str], bool]) -> BinaryIO:
    """Opens a file for upload; raises AttachmentRefused for a path with a link or `..` in it, a
    missing or non-regular file (a FIFO never blocks), or a file `allowed` refuses.

    The checks apply to the file actually opened (O_NOFOLLOW, fstat, the kernel's name of the open
    descriptor), so swapping the path for a link after the check cannot change what is read.
    """
    if not os.path.isabs(path) or os.path.realpath(path) != path:
        raise AttachmentRefused(f"{path}: not a plain absolute path (a symbolic link or '..' in it)")
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise AttachmentRefused(f"{path}: cannot be opened ({exc.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise AttachmentRefused(f"{path}: not a regular file")
        if _opened_path(fd, path) != path or not allowed(path):
            raise AttachmentRefused(f"{path}: outside the folders this conversation may receive files from")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _opened_path(fd: int, path: str) -> str:
    """The path of the file open on `fd` as the kernel names it (Linux), else `path` if it is still that file."""
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/self/fd/{fd}")
    opened, named = os.fstat(fd), os.stat(path, follow_symlinks=False)
    return path if (opened.st_dev, opened.st_ino) == (named.st_dev, named.st_ino) else ""


def read_all(handle: BinaryIO) -> bytes:
    """Every byte of an open attachment, from its start (positioned reads: it may be read again)."""
    fd, offset, chunks = handle.fileno(), 0, []
    while chunk := os.pread(fd, _READ_CHUNK, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def open_files(payload: OutgoingPayload, policy: AttachmentPolicy) -> tuple[OutgoingPayload, list[tuple[str, str]]]:
    """Opens each of the payload's files for upload: a copy holding the open files (for
    `read_attachment`), and the (path, reason) of each one refused."""
    handles: dict[str, BinaryIO] = {}
    refused: list[tuple[str, str]] = []
    for raw in payload.files:
        try:
            handles[raw] = open_attachment(raw, lambda real: policy.allows(real, payload))
        except AttachmentRefused as exc:
            refused.append((raw, str(exc)))
    return payload.holding(handles), refused


def _without(payload: OutgoingPayload, path: str) -> OutgoingPayload:
    note = REFUSED_NOTE.format(path=path)
    message = f"{payload.message}\n{note}" if payload.message else note
    return payload.model_copy(update={"files": [f for f in payload.files if f != path], "message": message})


def note_refusals(payload: OutgoingPayload, refused: list[tuple[str, str]], events: EventLog,
                  stage: str) -> OutgoingPayload:
    """The payload without the refused files, each named in a note in its text and in an event."""
    for path, reason in refused:
        events.emit("outgoing.file_refused", reason=reason, path=path, stage=stage, channel=payload.channel,
                    conversation=payload.conversationId)
        payload = _without(payload, path)
    return payload


async def read_attachment(outgoing: OutgoingPayload, path: str | os.PathLike[str],
                          policy: AttachmentPolicy) -> bytes:
    """The bytes to upload for one of `outgoing`'s files: from the file the dispatcher opened and
    checked, else opened and checked now; raises AttachmentRefused."""
    import asyncio  # here: importing this module (as `switchyard status` does) must not load asyncio

    key = os.fspath(path)
    handle = outgoing.opened_file(key)
    if handle is not None:
        return await asyncio.to_thread(read_all, handle)

    def load() -> bytes:
        with open_attachment(key, lambda real: policy.allows(real, outgoing)) as opened:
            return read_all(opened)

    return await asyncio.to_thread(load)
