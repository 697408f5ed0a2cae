"""The dead-letter store: what is in `queue/failed/`, and putting it back (retry) or removing it (drop).

A dead letter is a payload file in `failed/` (the original bytes) beside its `<name>.error.json`
report, which names its conversation (reports written before it did: read from the payload, unless
the reader asks for metadata only, as the dashboard does on every refresh). It is either an incoming
message the worker gave up on (retried into `incoming/`) or a reply the dispatcher could not deliver
(report `source: outgoing`, retried into `outgoing/`).

What counts as dead is the payload file, never the report: a report whose payload is gone (moved
back by hand, or a retry interrupted between its two steps) is ignored by `list_dead`, and removed
by it once older than STALE_REPORT_S (the dead-lettering writer renames the payload in beside its
report within milliseconds, so a younger orphan may be one being written).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gateway.home import Home, NotRegularFile, atomic_write, fsync_dir, read_file
from gateway.storable import made_safe
from gateway.telemetry.events import utc_now_iso

REPORT_SUFFIX = ".error.json"
STALE_REPORT_S = 60.0

Kind = Literal["message", "reply"]


@dataclass(frozen=True)
class DeadLetter:
    """One dead letter: its file name in `failed/`, what it is, and why it is there."""

    name: str
    kind: Kind
    reason: str
    attempts: int
    failed_at: str | None
    conversation: str | None
    path: Path

    def to_json(self) -> dict[str, Any]:
        """The fields as plain JSON values (for `--json` output)."""
        return {"name": self.name, "kind": self.kind, "reason": self.reason, "attempts": self.attempts,
                "failed_at": self.failed_at, "conversation": self.conversation, "path": str(self.path)}


def _is_payload(name: str) -> bool:
    return not (name.endswith(REPORT_SUFFIX) or name.endswith(".tmp") or name.startswith("."))


def _report_path(home: Home, name: str) -> Path:
    return home.failed / f"{name}{REPORT_SUFFIX}"


def _read_report(home: Home, name: str) -> dict[str, Any]:
    try:
        report = json.loads(read_file(_report_path(home, name)))
    except (OSError, ValueError):
        return {}
    return report if isinstance(report, dict) else {}


def _conversation(data: bytes) -> str | None:
    """The payload's conversationId, else its senderId; None when it is not a JSON object."""
    try:
        payload = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(payload, dict):
        return None
    found = payload.get("conversationId") or payload.get("senderId")
    return made_safe(str(found)) if found else None  # shown: a NUL or lone surrogate (invalid input) as U+FFFD


def _payload_bytes(path: Path) -> bytes:
    """The dead letter's bytes; empty for what must never be read (a FIFO, a link...)."""
    try:
        return read_file(path)
    except NotRegularFile:
        return b""


def _letter(home: Home, name: str, *, read_payload: bool = True) -> DeadLetter:
    path = home.failed / name
    report = _read_report(home, name)
    kind: Kind = "reply" if report.get("source") == "outgoing" else "message"
    try:
        attempts = int(report.get("attempts") or 0)
    except (TypeError, ValueError):
        attempts = 0
    named = report.get("conversation")
    try:
        if named or not read_payload:
            os.lstat(path)  # still dead (not retried or dropped meanwhile)
            conversation = str(named) if named else None
        else:
            conversation = _conversation(_payload_bytes(path))
    except OSError:
        raise KeyError(name) from None
    return DeadLetter(name, kind, str(report.get("reason") or "no error report (put in failed/ by hand?)"),
                      attempts, report.get("failed_at"), conversation, path)


def _payload_names(home: Home) -> set[str]:
    try:
        return {entry.name for entry in os.scandir(home.failed) if _is_payload(entry.name)}
    except FileNotFoundError:
        return set()


def _remove_stale_orphans(home: Home, payloads: set[str]) -> None:
    """Removes reports without their payload, older than STALE_REPORT_S (see the module docstring)."""
    cutoff = time.time() - STALE_REPORT_S
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(home.failed):
            if entry.name.endswith(REPORT_SUFFIX) and entry.name.removesuffix(REPORT_SUFFIX) not in payloads:
                with contextlib.suppress(FileNotFoundError):
                    if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                        os.unlink(entry.path)


def _sort_key(letter: DeadLetter) -> float:
    for path in (_report_path_of(letter), letter.path):
        with contextlib.suppress(OSError):
            return os.lstat(path).st_mtime
    return 0.0


def _report_path_of(letter: DeadLetter) -> Path:
    return letter.path.with_name(letter.path.name + REPORT_SUFFIX)


def list_dead(home: Home, *, read_payloads: bool = True) -> list[DeadLetter]:
    """Every dead letter, newest first; without `read_payloads` from the reports alone (no payload is
    read: a letter whose report names no conversation shows none)."""
    names = _payload_names(home)
    _remove_stale_orphans(home, names)
    letters = []
    for name in names:
        with contextlib.suppress(KeyError):  # retried or dropped meanwhile by another process
            letters.append(_letter(home, name, read_payload=read_payloads))
    return sorted(letters, key=lambda letter: (_sort_key(letter), letter.name), reverse=True)


def show(home: Home, name: str) -> tuple[DeadLetter, bytes]:
    """One dead letter and its original payload bytes; KeyError when there is no such dead letter."""
    if name not in _payload_names(home):
        raise KeyError(name)
    letter = _letter(home, name)
    try:
        return letter, _payload_bytes(letter.path)
    except FileNotFoundError:
        raise KeyError(name) from None


def _known(home: Home, names: list[str]) -> list[str]:
    """`names` without repeats, after checking every one is a dead letter (KeyError naming the others)."""
    present = _payload_names(home)
    unknown = [name for name in names if name not in present]
    if unknown:
        raise KeyError(", ".join(unknown))
    return list(dict.fromkeys(names))


def retry(home: Home, names: list[str]) -> list[str]:
    """Puts dead letters back where they came from, with a fresh attempt count; returns the names put back.

    Nothing moves unless every name is a dead letter (else KeyError listing the unknown ones).
    """
    return [name for name in _known(home, names) if _put_back(home, name)]


def retry_all(home: Home) -> list[str]:
    """Puts every dead letter back; returns the names put back."""
    return [name for name in sorted(_payload_names(home)) if _put_back(home, name)]


def drop(home: Home, names: list[str]) -> list[str]:
    """Deletes dead letters and their reports; returns the names deleted (KeyError as for `retry`).

    The payload goes first: interrupted, the report is left alone, an orphan `list_dead` ignores.
    """
    dropped = []
    for name in _known(home, names):
        path = home.failed / name
        with contextlib.suppress(FileNotFoundError):
            if path.is_dir() and not path.is_symlink():  # a directory dropped into incoming/, quarantined
                shutil.rmtree(path)
            else:
                os.unlink(path)
            dropped.append(name)
        _report_path(home, name).unlink(missing_ok=True)
    return dropped


def _put_back(home: Home, name: str) -> bool:
    """Moves one dead letter back into `incoming/` or `outgoing/`; False if it was gone meanwhile.

    The order makes every interruption harmless: (1) the attempt record of the name it returns
    under is removed (the worker's count starts again from zero; interrupted here, the letter is
    still dead and nothing else changed); (2) one rename puts the original bytes back, so the
    message is never lost nor in two places, and from that instant it is no longer dead (dead means
    a payload in failed/); (3) the report is removed (interrupted before, it is an orphan report,
    ignored by `list_dead` and `status`, removed by a later `list_dead`).
    """
    report = _read_report(home, name)
    folder = home.outgoing if report.get("source") == "outgoing" else home.incoming
    target = folder / _free_name(folder, str(report.get("original") or name))
    (home.state / "attempts" / f"{target.name}.json").unlink(missing_ok=True)
    try:
        os.rename(home.failed / name, target)
    except FileNotFoundError:
        return False  # retried or dropped by another process meanwhile
    fsync_dir(folder)
    _report_path(home, name).unlink(missing_ok=True)
    return True


def _free_name(folder: Path, name: str) -> str:
    """`name`, or a variant keeping its leading stamp (its place in the claim order) when taken."""
    if not os.path.lexists(folder / name):
        return name
    stem, dot, suffix = name.rpartition(".")
    base = stem if dot else name
    return f"{base}.retried-{time.time_ns()}" + (f".{suffix}" if dot else "")


def move_to_failed(home: Home, source: Path, /, *, fsync: bool, **report: Any) -> Path:
    """Moves a file to failed/ under its own name (prefixed if taken) beside `<name>.error.json`,
    which holds `report` plus the file name, the name it had before (a retry puts it back under
    that name) and the time; the report is written first, so a dead letter is never without its
    reason. Returns the new path."""
    target = home.failed / source.name
    if os.path.lexists(target):
        target = home.failed / f"{time.time_ns()}-{source.name}"
    body = {"file": target.name, "original": source.name, **report, "failed_at": utc_now_iso()}
    atomic_write(target.with_name(target.name + ".error.json"), json.dumps(body, indent=2).encode(), fsync=fsync)
    os.rename(source, target)
    if fsync:
        fsync_dir(home.failed)
    return target
