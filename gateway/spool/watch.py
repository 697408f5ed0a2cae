"""Wake-ups when files arrive in a folder: inotify where the kernel has it, polling otherwise."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from gateway.home import scan_mtimes

log = logging.getLogger("switchyard.watch")

OnName = Callable[[str], None]
OnRescan = Callable[[], None]

try:
    from inotify_simple import INotify
    from inotify_simple import flags as inotify_flags
except ImportError:  # pragma: no cover - inotify-simple is a dependency; Linux only
    INotify = None


class FolderWatch:
    """Calls `on_name(name)` for each file renamed or written into `folder` (never for `.tmp` files).

    Uses inotify through the event loop's reader, so a wake-up costs well under a millisecond;
    falls back to listing the folder every `poll_ms` when inotify is unavailable. On an inotify
    queue overflow it calls `on_rescan()` so the caller can list the folder again.
    """

    def __init__(self, folder: Path, on_name: OnName, on_rescan: OnRescan, *, poll_ms: int = 500):
        self.folder = folder
        self._on_name = on_name
        self._on_rescan = on_rescan
        self._poll_s = poll_ms / 1000
        self._inotify: INotify | None = None
        self._poll_task: asyncio.Task[None] | None = None
        self.mode = "stopped"

    def start(self, *, force_polling: bool = False) -> None:
        """Starts watching; the caller should list the folder once afterwards to catch earlier files."""
        loop = asyncio.get_running_loop()
        if INotify is not None and not force_polling:
            try:
                self._inotify = INotify(nonblocking=True)
                mask = inotify_flags.MOVED_TO | inotify_flags.CLOSE_WRITE
                self._inotify.add_watch(str(self.folder), mask)
                loop.add_reader(self._inotify.fileno(), self._read_events)
                self.mode = "inotify"
                return
            except OSError as exc:
                log.warning("inotify unavailable for %s (%s); polling every %.0f ms",
                            self.folder, exc, self._poll_s * 1000)
                self._close_inotify()
        self._poll_task = loop.create_task(self._poll(), name=f"poll:{self.folder.name}")
        self.mode = "polling"

    def _read_events(self) -> None:
        assert self._inotify is not None
        try:
            events = self._inotify.read(timeout=0)
        except BlockingIOError:
            return
        for event in events:
            if event.mask & inotify_flags.Q_OVERFLOW:
                self._on_rescan()
            elif event.name and not event.name.endswith(".tmp"):
                self._on_name(event.name)

    async def _poll(self) -> None:
        """Reports the names each listing finds new, oldest mtime first (a listing cannot tell more of the
        order they arrived in; inotify reports each as it comes)."""
        known: set[str] = set()
        while True:
            try:
                found = dict(scan_mtimes(self.folder, lambda name: not name.endswith(".tmp")))
            except OSError as exc:
                log.warning("cannot list %s: %s", self.folder, exc)
                found = dict.fromkeys(known, 0)
            for name in sorted(found.keys() - known, key=lambda name: (found[name], name)):
                self._on_name(name)
            known = set(found)
            await asyncio.sleep(self._poll_s)

    def _close_inotify(self) -> None:
        if self._inotify is not None:
            with contextlib.suppress(RuntimeError, ValueError):
                asyncio.get_running_loop().remove_reader(self._inotify.fileno())
            self._inotify.close()
            self._inotify = None

    def stop(self) -> None:
        self._close_inotify()
        if self._poll_task is not None:
            self._poll_task.cancel()
            self._poll_task = None
        self.mode = "stopped"
