"""Attachments across hosts on the PostgreSQL backend.

A channel saves a downloaded file under its host's home (`files/<profile>/<conversation>-<hash>/…`,
see gateway/channelkit/attachments.py) and names its absolute path in the payload; the worker that processes the
message may run on another host. So, at take-in, `store` keeps each attachment under the home's
`files/` in `switchyard_files`, in the transaction that stores the message: its bytes when it is at
most `queue.db_files_max_bytes`, else a copy under `files.shared_dir` (a folder every host mounts),
else it refuses the message (AttachmentTooLarge, with the reason to give). On the worker's host,
`materialize` writes each file back under that host's own home at the same relative path, and returns
the payload naming the local paths. Paths outside the home's `files/` are left as they are.

Writing back is safe: the relative path must stay inside `files/` (no `..`, no absolute path, no
link on the way out), and a file already there is kept only when it has the same bytes, never
overwritten (FileConflict).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

import psycopg

from gateway.home import Home
from gateway.settings import Settings

FILES_PREFIX = "files"
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)

P = TypeVar("P")


class AttachmentTooLarge(Exception):
    """An attachment over queue.db_files_max_bytes with no files.shared_dir to carry it."""


class FileConflict(Exception):
    """A file to write back is unsafe: its path leaves files/, or a different file is already there."""


@dataclass(frozen=True)
class _Limits:
    max_bytes: int
    shared_dir: Path | None


def _limits(settings: Settings | None, home: Home) -> _Limits:
    if settings is None:
        return _Limits(Settings().queue.db_files_max_bytes, None)
    shared = settings.files.shared_dir
    return _Limits(settings.queue.db_files_max_bytes, home.resolve(shared) if shared else None)


def _paths(payload: Any) -> tuple[dict[str, Any] | None, list[str]]:
    """The payload as a JSON object (None when it is not one) and every attachment path it names."""
    if hasattr(payload, "file_paths"):
        return None, list(payload.file_paths())
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError, TypeError):
        return None, []
    if not isinstance(data, dict):
        return None, []
    files = [str(f) for f in data.get("files") or [] if isinstance(f, str)]
    message = data.get("message")
    tagged = [m.strip() for m in re.findall(r"\[file:\s*([^\]]+)\]", message)] if isinstance(message, str) else []
    return data, list(dict.fromkeys([*files, *tagged]))


def _relative(path: str, files_root: str) -> str | None:
    """`path` relative to the home (`files/…`), or None when it is not a file under the home's files/."""
    if not os.path.isabs(path):
        return None
    real = os.path.realpath(path)
    if not real.startswith(files_root + os.sep):
        return None
    return PurePosixPath(FILES_PREFIX, *Path(os.path.relpath(real, files_root)).parts).as_posix()


def _open_regular(path: str) -> tuple[int, int]:
    """(size, open descriptor) of a regular file, opened without following a final link; OSError otherwise."""
    fd = os.open(path, _OPEN)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{path}: not a regular file")
        return info.st_size, fd
    except BaseException:
        os.close(fd)
        raise


def store(conn: psycopg.Connection[Any], message_name: str, payload: Any, home: Home, *,
          settings: Settings | None = None) -> list[str]:
    """Keeps the attachments of one message taken in (an IncomingPayload or its bytes) for any host;
    returns their paths relative to the home. Call it in the transaction that inserts the message.
    Raises AttachmentTooLarge (its text is the reason to give the sender / the dead letter)."""
    limits = _limits(settings, home)
    files_root = os.path.realpath(home.files)
    stored: list[str] = []
    for original in _paths(payload)[1]:
        relative = _relative(original, files_root)
        if relative is None:
            continue
        try:
            size, fd = _open_regular(os.path.realpath(original))
        except OSError:
            continue  # gone or not a file: the handler says so, as on the file backend
        with os.fdopen(fd, "rb") as handle:
            if size <= limits.max_bytes:
                content: bytes = handle.read()
                digest, data = hashlib.sha256(content).hexdigest(), content
            elif limits.shared_dir is not None:
                digest, data = _copy_to_shared(handle, limits.shared_dir / relative), None
            else:
                raise AttachmentTooLarge(
                    f"attachment {os.path.basename(relative)} is {size} bytes, over queue.db_files_max_bytes "
                    f"({limits.max_bytes}); set files.shared_dir to a folder every host mounts to carry it")
        conn.execute("INSERT INTO switchyard_files (message_name, path, original, size, sha256, data) "
                     "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (message_name, path) DO NOTHING",
                     (message_name, relative, original, size, digest, data))
        stored.append(relative)
    return stored


def _copy_to_shared(handle: Any, target: Path) -> str:
    """Copies an open file to `target` in the shared folder (through a temporary name, never over a
    different file: FileConflict); returns its sha256."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    digest = hashlib.sha256()
    try:
        with temporary.open("wb") as out:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
        try:
            os.link(temporary, target)
        except FileExistsError:
            _same_or_conflict(target, digest.hexdigest())
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
    return digest.hexdigest()


def unused_shared(conn: psycopg.Connection[Any], relatives: list[str]) -> list[str]:
    """Which of `relatives` (shared copies) no stored message names any more."""
    named = {row[0] for row in conn.execute("SELECT DISTINCT path FROM switchyard_files WHERE data IS NULL "
                                            "AND path = ANY(%s)", (relatives,))}
    return [relative for relative in relatives if relative not in named]


def materialize(conn: psycopg.Connection[Any], message_name: str, payload: P, home: Home, *,
                settings: Settings | None = None) -> P:
    """Writes the message's stored attachments under this host's home (see the module docstring) and
    returns the payload naming them there (the same object when nothing moved). Raises FileConflict."""
    rows = conn.execute("SELECT path, original, sha256, data FROM switchyard_files WHERE message_name = %s "
                        "ORDER BY path", (message_name,)).fetchall()
    limits = _limits(settings, home)
    moved: dict[str, str] = {}
    for relative, original, digest, data in rows:
        target = _safe_target(home, relative)
        if data is None:
            if limits.shared_dir is None:
                raise FileConflict(f"{relative} is held under files.shared_dir, which this host does not set")
            data = (limits.shared_dir / relative).read_bytes()
        _write_once(target, bytes(data), digest)
        if str(target) != original:
            moved[original] = str(target)
    return _renamed(payload, moved) if moved else payload


def _safe_target(home: Home, relative: str) -> Path:
    """The absolute path of `relative` under the home's files/, refusing any way out of it."""
    parts = PurePosixPath(relative).parts
    if (PurePosixPath(relative).is_absolute() or len(parts) < 2 or parts[0] != FILES_PREFIX
            or any(part in ("", ".", "..") for part in parts)):
        raise FileConflict(f"{relative}: not a path under files/")
    files_root = os.path.realpath(home.files)
    target = Path(files_root, *parts[1:])
    folder = os.path.realpath(target.parent)  # checked before creating anything
    if folder != files_root and not folder.startswith(files_root + os.sep):
        raise FileConflict(f"{relative}: a link leads out of files/")
    target.parent.mkdir(parents=True, exist_ok=True)
    return target


def _write_once(target: Path, data: bytes, digest: str) -> None:
    """Writes `data` at `target` unless the same bytes are there; never replaces a different file."""
    if hashlib.sha256(data).hexdigest() != digest:
        raise FileConflict(f"{target.name}: the stored bytes do not match their checksum")
    if os.path.lexists(target):
        _same_or_conflict(target, digest)
        return
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    temporary.write_bytes(data)
    try:
        os.link(temporary, target)  # fails when the name is taken meanwhile: never overwrites
    except FileExistsError:
        _same_or_conflict(target, digest)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


def _same_or_conflict(target: Path, digest: str) -> None:
    try:
        _, fd = _open_regular(str(target))
    except OSError:
        raise FileConflict(f"{target}: already there and not a regular file") from None
    with os.fdopen(fd, "rb") as handle:
        current = hashlib.file_digest(handle, "sha256").hexdigest()
    if current != digest:
        raise FileConflict(f"{target}: a different file is already there; not overwritten")


def _renamed(payload: Any, moved: dict[str, str]) -> Any:
    """The payload with every moved path (in `files` and in `[file: …]` tags) replaced."""
    def text(value: str) -> str:
        for old, new in moved.items():
            value = value.replace(old, new)
        return value

    if hasattr(payload, "model_copy"):
        return payload.model_copy(update={"files": [moved.get(f, f) for f in payload.files],
                                          "message": text(payload.message)})
    data, _ = _paths(payload)
    if data is None:
        return payload
    if isinstance(data.get("files"), list):
        data["files"] = [moved.get(f, f) if isinstance(f, str) else f for f in data["files"]]
    if isinstance(data.get("message"), str):
        data["message"] = text(data["message"])
    return json.dumps(data, ensure_ascii=False).encode()

