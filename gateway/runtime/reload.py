"""settings.yaml read again while the gateway runs.

What can change safely without a restart is applied: `providers`, `usage`, `transcribe`, `roles` and each
channel profile's access keys (`allow_from`, `roles`, `default_role`, `approvers`: who may do what, so that a
role taken away is taken away at once). Everything else (channels added, removed or otherwise changed,
`queue`, `plugins`, `dashboard`, ...) is read only at start: it is named in the log and in `switchyard status`
until a restart.
An edit that does not pass the checks `switchyard run` makes before it starts is not used: the last valid
settings stay, and the log and `status` say why. The gateway records what it read (the file's sha256) in
its status file, so `status` and `dead retry` can tell that it runs older settings than the file.
A reload that changes who holds which role (a profile's `roles:` lists, its `default_role:`) appends one audit
record per change (`role.granted` / `role.revoked`, by `operator:settings.yaml`), keyed by the change and the
file's digest: every host of a PostgreSQL backend reads the same edit and records it once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from gateway.audit import AuditRecord
from gateway.cli.statuscache import file_digest
from gateway.home import Home
from gateway.settings import ChannelProfile, Settings, SettingsError, load_settings
from gateway.telemetry.events import EventLog, utc_now_iso

if TYPE_CHECKING:
    import pluggy

    from gateway.stores import AuditLog

log = logging.getLogger("switchyard")

SETTINGS_CHECK_S = 2.0  # how often settings.yaml is looked at for an edit
RELOADED = ("providers", "usage", "transcribe", "roles")  # the top-level sections applied while running
ACCESS_KEYS = ("allow_from", "roles", "default_role", "approvers")  # a profile's keys applied while running
NOT_READ = ""  # the digest of no version: the first look always reads the file
SETTINGS_OPERATOR = "operator:settings.yaml"  # `by` of an audit record of a role changed by editing the file
EVERYONE_ELSE = "(everyone else admitted)"  # `who` of a `default_role:` change, as `switchyard roles` names them

Validate = Callable[[Settings, Settings], list[str]]
"""The problems of new settings (the first) that the running ones (the second) do not have."""


def run_checks(home: Home, pm: pluggy.PluginManager, source: Path) -> Validate:
    """The checks `switchyard run` makes before it starts (gateway/cli/check.py) as a Validate: only what the
    new settings bring counts (an orchestrator.yaml broken already does not hold up a fixed provider).
    New `plugins:` are loaded to check the channel types they declare."""

    def validate(new: Settings, running: Settings) -> list[str]:
        from gateway.cli.check import home_problems
        from gateway.plugin_manager import build_plugin_manager

        checking = pm if new.plugins == running.plugins else build_plugin_manager(new)
        found = home_problems(home, new, checking, source=str(source))
        if not found:
            return []
        known = set(home_problems(home, running, pm, source=str(source)))
        return [problem for problem in found if problem not in known]

    return validate


class SettingsReload:
    """Looks at settings.yaml for edits; keeps the settings the gateway runs and what `status` says of them."""

    def __init__(self, path: Path, running: Settings, validate: Validate, events: EventLog | None = None,
                 audit: AuditLog | None = None):
        self.path = path
        self._audit = audit
        self.running = running
        self._validate = validate
        self._events = events
        self.digest: str | None = NOT_READ  # of the version read last (valid or not)
        self.problem: str | None = None  # why that version is not used
        self.restart_needed: list[str] = []  # what of that version waits for a restart
        self.read_at: str | None = None

    async def watch(self, apply: Callable[[Settings], None], report: Callable[[], None]) -> None:
        """Looks at the file every SETTINGS_CHECK_S until cancelled (as `check`)."""
        while True:
            await asyncio.sleep(SETTINGS_CHECK_S)
            self.check(apply, report)

    def check(self, apply: Callable[[Settings], None], report: Callable[[], None]) -> None:
        """Reads the file when it changed: `apply` gets the new running settings when some part of them
        changed; `report` is called when what `status` says of them did."""
        before = self.running
        if self.poll():
            if self.running is not before:
                apply(self.running)
            report()

    def poll(self) -> bool:
        """Reads the file when it changed; True when it did (`running` may then be new settings)."""
        digest = file_digest(self.path)
        if digest == self.digest:
            return False
        try:
            new = self._load(digest)
        except SettingsError as exc:
            if file_digest(self.path) != digest:
                return False  # written again while it was read: the next look reads it whole
            self._reject(digest, exc)
            return True
        if file_digest(self.path) != digest:
            return False
        self._accept(digest, new)
        return True

    def status(self) -> dict[str, Any]:
        """What the gateway's status file says of its settings."""
        return {"file": str(self.path), "sha256": self.digest, "read_at": self.read_at, "problem": self.problem,
                "restart_needed": self.restart_needed}

    def _load(self, digest: str | None) -> Settings:
        """The file's settings when they are valid and bring no problem the running ones do not have."""
        if digest is None and self.digest not in (NOT_READ, None):
            raise SettingsError(f"{self.path}: file not found")
        new = load_settings(self.path)
        problems = self._validate(new, self.running)
        if problems:
            raise SettingsError.listing(problems)
        return new

    def _reject(self, digest: str | None, exc: SettingsError) -> None:
        self.digest, self.problem, self.read_at = digest, str(exc), utc_now_iso()
        log.warning("%s: the edit is not used, the gateway keeps its last valid settings: %s", self.path, exc)
        if self._events is not None:
            self._events.emit("settings.rejected", file=str(self.path), reason=str(exc))

    def _accept(self, digest: str | None, new: Settings) -> None:
        merged = reloaded(self.running, new)
        merged = self.running if merged == self.running else merged  # unchanged: nothing to hand on
        applied = changed_sections(self.running, merged)
        restart = restart_needed(merged, new)
        if self.problem is not None:
            log.info("%s is valid again", self.path)
        if applied:
            log.info("%s reloaded: %s applied", self.path, ", ".join(applied))
        if restart and restart != self.restart_needed:
            log.warning("%s: these changes need a restart of the gateway to apply: %s", self.path, "; ".join(restart))
        if self._events is not None and (applied or restart != self.restart_needed):
            self._events.emit("settings.reloaded", file=str(self.path), applied=applied, restart_needed=restart)
        self._record_roles(self.running, merged, digest)
        self.digest, self.problem, self.read_at = digest, None, utc_now_iso()
        self.running, self.restart_needed = merged, restart

    def _record_roles(self, before: Settings, after: Settings, digest: str | None) -> None:
        """Appends the audit record of each role granted or revoked by this version of the file (a failing audit
        log is logged: the settings still apply)."""
        if self._audit is None:
            return
        for record in role_changes(before, after, digest or ""):
            try:
                self._audit.append(record)
            except Exception as exc:
                log.warning("%s: the role change %r is not in the audit log: %s", self.path, record.what, exc)


def reloaded(running: Settings, new: Settings) -> Settings:
    """The running settings with what is applied while running taken from `new`: RELOADED, and the
    ACCESS_KEYS of each profile whose id and type stay."""
    fresh = {profile.id: profile for profile in new.channels}
    channels = [_with_access(profile, fresh.get(profile.id)) for profile in running.channels]
    return running.model_copy(update={**{key: getattr(new, key) for key in RELOADED}, "channels": channels})


def _access(profile: ChannelProfile) -> dict[str, Any]:
    """A profile's ACCESS_KEYS that it sets."""
    data = profile.model_dump()
    return {key: data[key] for key in ACCESS_KEYS if data.get(key) is not None}


def _with_access(profile: ChannelProfile, fresh: ChannelProfile | None) -> ChannelProfile:
    if fresh is None or fresh.type != profile.type or _access(fresh) == _access(profile):
        return profile
    data = {key: value for key, value in profile.model_dump().items() if key not in ACCESS_KEYS}
    return ChannelProfile.model_validate({**data, **_access(fresh)})


def role_holders(settings: Settings) -> set[tuple[str, str, str]]:
    """(profile, role, who) of every role a profile gives: its `roles:` members (sender ids, `group:<id>`) and
    EVERYONE_ELSE for its `default_role:` when it names one."""
    held = set()
    for profile in settings.channels:
        for role, members in (profile.option("roles") or {}).items():
            held |= {(profile.id, str(role), str(member)) for member in members}
        if profile.option("default_role"):
            held.add((profile.id, str(profile.option("default_role")), EVERYONE_ELSE))
    return held


def role_changes(before: Settings, after: Settings, digest: str) -> list[AuditRecord]:
    """One audit record per role granted or revoked from `before` to `after`, in a stable order; its id comes
    from the change and `digest` (the file version that made it), so several hosts reading that version keep
    one record, and the same grant made again by a later edit is a record of its own."""
    old, new = role_holders(before), role_holders(after)
    changes = [("role.revoked", held) for held in sorted(old - new)] + [("role.granted", held) for held in
                                                                          sorted(new - old)]
    return [AuditRecord.new(by=SETTINGS_OPERATOR, where=profile, action=action,
                            what=f"{'revoked' if action == 'role.revoked' else 'granted'} {role} "
                                 f"{'from' if action == 'role.revoked' else 'to'} {who}",
                            key=f"{digest}/{profile}/{role}/{who}", profile=profile, role=role, who=who,
                            settings_sha256=digest)
            for action, (profile, role, who) in changes]


def changed_sections(before: Settings, after: Settings) -> list[str]:
    """The reloaded parts that differ: RELOADED's sections, `channels.<id>.<key>` of ACCESS_KEYS."""
    found = [key for key in RELOADED if getattr(before, key) != getattr(after, key)]
    old = {profile.id: _access(profile) for profile in before.channels}
    return found + [f"channels.{profile.id}.{key}" for profile in after.channels for key in ACCESS_KEYS
                    if old.get(profile.id, {}).get(key) != _access(profile).get(key)]


def restart_needed(running: Settings, new: Settings) -> list[str]:
    """What the file changes that is read only at start, one entry each (`queue.poll_ms`, `channel tg added`)."""
    found: list[str] = []
    for key in Settings.model_fields:
        if key == "channels":
            found += _channel_changes(running.channels, new.channels)
        elif getattr(running, key) != getattr(new, key):
            found += _changed_keys(key, getattr(running, key), getattr(new, key))
    return found


def _changed_keys(key: str, before: Any, after: Any) -> list[str]:
    """`queue.poll_ms` for each field of a section that differs; the section's name for any other value."""
    if isinstance(before, BaseModel) and isinstance(after, BaseModel):
        old, new = before.model_dump(), after.model_dump()
        return [f"{key}.{name}" for name in {**old, **new} if old.get(name) != new.get(name)]
    return [key]


def _channel_changes(running: list[ChannelProfile], new: list[ChannelProfile]) -> list[str]:
    """A channel profile added, removed, or changed in another key than ACCESS_KEYS."""
    old = {profile.id: profile for profile in running}
    fresh = {profile.id: profile for profile in new}
    found = [f"channel {name} added" for name in fresh if name not in old]
    found += [f"channel {name} removed" for name in old if name not in fresh]
    for name in [name for name in old if name in fresh]:
        before, after = old[name].model_dump(exclude=set(ACCESS_KEYS)), fresh[name].model_dump(exclude=set(ACCESS_KEYS))
        keys = [key for key in {**before, **after} if before.get(key) != after.get(key)]
        if keys:
            found.append(f"channel {name}: {', '.join(keys)}")
    return found
