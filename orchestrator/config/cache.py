"""Each orchestrator's configuration loaded once and reloaded when its orchestrator.yaml changes."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from gateway.home import Home
from gateway.settings import Settings, SettingsError
from gateway.telemetry.events import EventLog
from orchestrator.config.loading import LoadedConfig, load_orchestrator_config
from orchestrator.config.models import CONFIG_FILE

log = logging.getLogger("switchyard.orchestrator")


class ConfigCache:
    """Loads each orchestrator's configuration once, reloading when orchestrator.yaml changes.

    An edit that does not validate is reported (a warning, an `orchestrator.config_rejected` event)
    and the last valid configuration stays in use; the next valid edit is loaded and said so, and
    `on_reload` is called (the scheduler looks at the schedules again)."""

    def __init__(self, home: Home, settings: Settings, known_providers: set[str], *, events: EventLog | None = None,
                 on_reload: Callable[[], None] | None = None):
        self._home = home
        self._settings = settings
        self._known = known_providers
        self._events = events
        self._on_reload = on_reload
        self._cache: dict[str, tuple[tuple[int, int] | None, LoadedConfig]] = {}
        self._rejected: dict[str, tuple[int, int] | None] = {}  # the file version found invalid, per id
        self._stale: set[str] = set()  # ids to validate again though their file is unchanged (new providers)

    def workspace(self, orchestrator_id: str) -> Path:
        """The private workspace of an orchestrator id, resolved against the home."""
        ref = self._settings.orchestrators.get(orchestrator_id)
        if ref is None:
            raise SettingsError(f"unknown orchestrator {orchestrator_id!r}")
        return self._home.resolve(ref.workspace)

    def get(self, orchestrator_id: str) -> LoadedConfig:
        """The current configuration of an orchestrator: the file as it is if it validates, else the
        last valid one; raises SettingsError when it never validated."""
        workspace = self.workspace(orchestrator_id)
        stamp = _stamp(workspace / CONFIG_FILE)
        cached = self._cache.get(orchestrator_id)
        unchanged = cached is not None and (stamp == cached[0] or self._rejected.get(orchestrator_id, ()) == stamp)
        if cached is not None and unchanged and orchestrator_id not in self._stale:
            return cached[1]  # unchanged, or the same invalid version already reported
        self._stale.discard(orchestrator_id)
        try:
            loaded = LoadedConfig(orchestrator_id, workspace, load_orchestrator_config(workspace, self._known))
        except SettingsError as exc:
            if cached is None:
                raise
            self._reject(orchestrator_id, stamp, exc)
            return cached[1]
        if cached is not None and (stamp != cached[0] or orchestrator_id in self._rejected):
            self._accept(orchestrator_id, workspace / CONFIG_FILE)  # not when only the providers were new
        self._cache[orchestrator_id] = (stamp, loaded)
        return loaded

    def reconfigure(self, known_providers: set[str]) -> None:
        """Validates each orchestrator.yaml again, at its next read, against the provider names of
        settings.yaml reloaded while running."""
        if known_providers == self._known:
            return
        self._known = known_providers
        self._stale = set(self._cache)

    def refresh(self) -> None:
        """Reads again every orchestrator.yaml that changed since it was loaded (a broken edit is reported)."""
        for orchestrator_id in self._settings.orchestrators:
            with suppress(SettingsError):  # never valid: reported when a message needs it
                self.get(orchestrator_id)

    def _reject(self, orchestrator_id: str, stamp: tuple[int, int] | None, exc: SettingsError) -> None:
        self._rejected[orchestrator_id] = stamp
        log.warning("orchestrator %s: the edited %s is invalid, the last valid configuration stays in use: %s",
                    orchestrator_id, CONFIG_FILE, exc)
        if self._events is not None:
            self._events.emit("orchestrator.config_rejected", orchestrator=orchestrator_id, reason=str(exc))

    def _accept(self, orchestrator_id: str, path: Path) -> None:
        again = " (valid again)" if self._rejected.pop(orchestrator_id, ()) != () else ""
        log.info("orchestrator %s: %s reloaded%s", orchestrator_id, path, again)
        if self._events is not None:
            self._events.emit("orchestrator.config_reloaded", orchestrator=orchestrator_id, file=str(path))
        if self._on_reload is not None:
            self._on_reload()


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_mtime_ns, stat.st_size
