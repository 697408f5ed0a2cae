"""The home directory: where every folder lives, and what `status` and `send` read from the layout.

How files are written into it, read, locked and swept is gateway/disk/; the names are re-exported here, the
path the code imports them from."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from gateway.disk.locks import FOLDER_LOCK_ATTEMPTS, FOLDER_LOCK_PAUSE_S, lock_if_unheld, take_folder_lock
from gateway.disk.names import safe_name
from gateway.disk.reads import NotRegularFile, is_within, read_file
from gateway.disk.sweep import STALE_TMP_S, remove_old_files, remove_stale_tmp, scan_mtimes
from gateway.disk.writes import SPARE_PREFIX, SpareFiles, atomic_write, fsync_dir, write_all

__all__ = [
    "FOLDER_LOCK_ATTEMPTS", "FOLDER_LOCK_PAUSE_S", "SPARE_PREFIX", "STALE_TMP_S", "Home", "NotRegularFile",
    "SpareFiles", "atomic_write", "fsync_dir", "is_within", "lock_if_unheld", "queue_depths", "read_file",
    "remove_old_files", "remove_stale_tmp", "resolve_home", "safe_name", "scan_mtimes", "stored_reply",
    "take_folder_lock", "write_all",
]


def resolve_home(cli_home: str | os.PathLike[str] | None = None) -> Path:
    """Chooses the home: `--home`, else `$SWITCHYARD_HOME`, else `~/.switchyard`."""
    chosen = cli_home or os.environ.get("SWITCHYARD_HOME") or Path.home() / ".switchyard"
    return Path(chosen).expanduser().resolve()


@dataclass(frozen=True)
class Home:
    """The paths of one Switchyard home directory (each computed once: they sit on the hot path)."""

    root: Path

    @cached_property
    def settings_file(self) -> Path:
        return self.root / "settings.yaml"

    @cached_property
    def queue(self) -> Path:
        return self.root / "queue"

    @cached_property
    def incoming(self) -> Path:
        return self.queue / "incoming"

    @cached_property
    def processing(self) -> Path:
        return self.queue / "processing"

    @cached_property
    def outgoing(self) -> Path:
        return self.queue / "outgoing"

    @cached_property
    def failed(self) -> Path:
        return self.queue / "failed"

    @cached_property
    def sent(self) -> Path:
        return self.queue / "sent"

    @cached_property
    def state(self) -> Path:
        """Bookkeeping kept beside the queue: attempt counts, answered ids, delivery records."""
        return self.queue / "state"

    @cached_property
    def files(self) -> Path:
        return self.root / "files"

    @cached_property
    def select_incoming(self) -> Path:
        return self.root / "orchestrator" / "select" / "incoming"

    @cached_property
    def select_results(self) -> Path:
        return self.root / "orchestrator" / "select" / "results"

    @cached_property
    def orchestrators(self) -> Path:
        return self.root / "orchestrators"

    @cached_property
    def runs(self) -> Path:
        return self.root / "runs"

    @cached_property
    def coordination(self) -> Path:
        return self.root / "coordination"

    @cached_property
    def logs(self) -> Path:
        return self.root / "logs"

    @cached_property
    def events_file(self) -> Path:
        return self.logs / "events.jsonl"

    def resolve(self, configured: str | os.PathLike[str]) -> Path:
        """Resolves a path from settings: absolute as given, relative against the home."""
        path = Path(configured).expanduser()
        return path if path.is_absolute() else self.root / path

    def create(self) -> None:
        """Creates every folder of the layout (idempotent)."""
        for folder in (
            self.incoming, self.processing, self.outgoing, self.failed, self.sent, self.state,
            self.files, self.select_incoming, self.select_results, self.orchestrators,
            self.runs, self.coordination, self.logs,
        ):
            folder.mkdir(parents=True, exist_ok=True)


def queue_depths(home: Home) -> dict[str, int]:
    """Counts payload files per queue folder (for `status` and /metrics; here, so that
    `status` need not import the queue)."""
    depths = {}
    for name, folder in (("incoming", home.incoming), ("outgoing", home.outgoing),
                         ("failed", home.failed), ("sent", home.sent)):
        try:
            depths[name] = sum(
                1 for e in os.scandir(folder)
                if e.name.endswith(".json") and not e.name.endswith(".error.json")
            )
        except FileNotFoundError:
            depths[name] = 0
    processing = 0
    if home.processing.exists():
        for _dirpath, _dirs, files in os.walk(home.processing):
            processing += sum(1 for f in files if f.endswith(".json"))
    depths["processing"] = processing
    return depths


def stored_reply(home: Home, message_id: str, since_ms: int) -> dict[str, Any] | None:
    """The reply to `message_id` in outgoing/ or sent/ stamped at `since_ms` or later, as the home's outbox
    wrote it (the file and memory backends); a progress note or a streamed answer's draft is not the reply."""
    for folder in (home.outgoing, home.sent):
        with os.scandir(folder) as entries:  # closed when a reply returns from inside the loop
            for entry in entries:
                if entry.name.endswith(".json") and message_id in entry.name:
                    try:
                        reply: dict[str, Any] = json.loads(Path(entry.path).read_bytes())
                    except (OSError, ValueError):
                        continue
                    if (reply.get("messageId") == message_id and "progressKey" not in reply
                            and isinstance(reply.get("timestamp"), int) and reply["timestamp"] >= since_ms):
                        return reply
    return None
