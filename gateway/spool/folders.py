"""The queue as the home's folders show it: each folder's depth and oldest age, and the dead letters in failed/
(the dashboard's gateway.backends.runtime.QueueView on the file and memory backends; the postgres one adds its rows)."""

from __future__ import annotations

import os
import time
from typing import Any

from gateway.home import Home
from gateway.spool import deadletters

QUEUE_FOLDERS = ("incoming", "processing", "outgoing", "failed")


class FolderView:
    """The file backend's queue: the home's folders and the dead letters in failed/."""

    def __init__(self, home: Home):
        self.home = home

    def live(self) -> dict[str, Any]:
        queue, processing = queue_folders(self.home)
        return {"queue": queue, "processing": processing}

    def read(self, shown: int) -> dict[str, Any]:
        letters = deadletters.list_dead(self.home, read_payloads=False)  # each refresh: metadata only
        return {**self.live(), "dead_total": len(letters),
                "dead_letters": [{k: v for k, v in letter.to_json().items() if k != "path"}
                                 for letter in letters[:shown]]}

    def retry(self, names: list[str]) -> list[str]:
        """Puts dead letters back into the queue (KeyError naming any that is not one)."""
        return deadletters.retry(self.home, names)


def queue_folders(home: Home) -> tuple[list[dict[str, Any]], set[str]]:
    """Depth and age of the oldest file of each queue folder (plus `sent/`'s depth), and the names of
    the files in `processing/`."""
    now = time.time()
    folders = []
    processing: set[str] = set()
    for name in QUEUE_FOLDERS:
        root = getattr(home, name)
        entries = _payload_entries(root, recursive=name == "processing")
        if name == "processing":
            processing = {entry.name for entry in entries}
        mtimes = [mtime for mtime in (_mtime(entry) for entry in entries) if mtime is not None]
        folders.append({"folder": name, "depth": len(entries),
                        "oldest_age_s": round(now - min(mtimes), 1) if mtimes else None})
    folders.append({"folder": "sent", "depth": len(_payload_entries(home.sent, recursive=False)),
                    "oldest_age_s": None})
    return folders, processing


def _payload_entries(folder: str | os.PathLike[str], *, recursive: bool) -> list[os.DirEntry[str]]:
    found: list[os.DirEntry[str]] = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if recursive and entry.is_dir(follow_symlinks=False):
                    found.extend(_payload_entries(entry.path, recursive=False))
                elif entry.name.endswith(".json") and not entry.name.endswith(".error.json"):
                    found.append(entry)
    except (FileNotFoundError, NotADirectoryError):
        pass
    return found


def _mtime(entry: os.DirEntry[str]) -> float | None:
    try:
        return entry.stat(follow_symlinks=False).st_mtime
    except OSError:
        return None
