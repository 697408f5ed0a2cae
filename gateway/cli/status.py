"""`switchyard status`: what it gathers (gateway process, channels, queue, dead letters, plugin sections)
and how it shows it (tables for a person, JSON for a script). Exits 3 when the gateway is down.

The backend (gateway/composition.py) reports what its storage holds (the queue, the dead letters; on a database
the database, the processes attached on every host and the channel owners too); gateway/cli/backends.py words
it (on a database the gateway counts as running when any process is live; an unreachable one is one line
and exit 2)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from gateway.cli import EXIT_NO_HOME, EXIT_USAGE, not_a_home
from gateway.cli.backends import failure_text, print_headline, status_record
from gateway.cli.statuscache import LazySettings, StatusFileCache, file_digest
from gateway.cli.tables import print_table, printable
from gateway.composition import backend_name, open_backend
from gateway.home import Home
from gateway.plugin_manager import DEFAULT_PLUGINS, call_each, plugin_manager_for
from gateway.stores import BackendUnreachable

if TYPE_CHECKING:
    import pluggy

    from gateway.backends import Backend
    from gateway.cli import Invocation
    from gateway.settings import Settings

EXIT_DATABASE = 2  # the PostgreSQL backend's database is unreachable (as `switchyard db`)
EXIT_NOT_RUNNING = 3  # as `systemctl status` and LSB init scripts say "program is not running"
DEAD_LETTERS_SHOWN = 5
PID_START_SLACK_S = 5.0  # the gateway writes started_at just after its process starts; btime has 1 s steps


def cmd_status(args: argparse.Namespace, run: Invocation) -> int:
    """Prints the status; the exit code says whether the gateway is running (0) or not (3). What it derives
    from the configuration comes from the status cache while the files are unchanged: the settings are then
    neither loaded nor validated. Invalid settings exit 2, as for every command, after the status of what
    their valid sections name (a running gateway keeps its last valid settings). A backend whose storage is
    unreachable (the postgres database) is one line on stderr and exit 2."""
    cache = StatusFileCache.load(run.home, run.settings_path)
    problem = cache.remember("settings_problem", lambda: _settings_problem(run))
    plugins = cache.remember("plugins", lambda: list(readable_settings(run).plugins))
    name = cache.remember("backend", lambda: backend_name(readable_settings(run)))
    settings = cast("Settings", LazySettings(lambda: readable_settings(run)))
    pm = plugin_manager_for([*DEFAULT_PLUGINS, *plugins])
    backend = open_backend(run.home, settings, pm, name=name)
    if backend.in_home and not_a_home(run.home):  # else a mistyped --home would show an empty queue
        return EXIT_NO_HOME
    unreachable: tuple[type[BaseException], ...] = (BackendUnreachable, *backend.failures)
    try:
        status = gather_status(run.home, settings, pm, cache, backend)
    except unreachable as exc:
        said = str(exc) if isinstance(exc, BackendUnreachable) else failure_text(backend, exc)
        if args.json:
            print(json.dumps({"home": str(run.home.root), "database": {"reachable": False, "error": said}}))
        print(f"switchyard: {said}", file=sys.stderr)
        return EXIT_DATABASE
    status["settings"] = {"file": str(run.settings_path), "problem": problem,
                          "notes": settings_notes(status["gateway"])}
    cache.save()
    if args.json:
        print(json.dumps(status, indent=2, default=str))
    else:
        print_status(status)
    if problem is not None:  # shown in full above; the exit code is every command's for invalid settings
        print(f"switchyard: invalid settings: {problem}", file=sys.stderr)
        return EXIT_USAGE
    return 0 if status["gateway"]["running"] else EXIT_NOT_RUNNING


def _settings_problem(run: Invocation) -> str | None:
    """Why the settings file does not validate (None when it does)."""
    from gateway.settings import SettingsError

    try:
        run.settings  # noqa: B018 - loading is the check
    except SettingsError as exc:
        return str(exc)
    return None


def readable_settings(run: Invocation) -> Settings:
    """The settings; when they do not validate, the sections that do (the others at their defaults), so
    `status` still shows the running gateway, which keeps its last valid settings. Raises SettingsError
    when the file cannot be read, or its `queue` or `plugins` (which say where the state is) are invalid."""
    from gateway.settings import SettingsError

    try:
        return run.settings
    except SettingsError as exc:
        from gateway.cli.check import salvage

        found = salvage(run.settings_path)
        if found is not None and not found[1] & {"queue", "plugins"}:
            return found[0]
        gateway = gateway_process(run.home)
        if not gateway["running"]:
            raise
        raise SettingsError(f"{exc}\n(the running gateway, pid {gateway['pid']}, keeps its last valid settings)",
                            exc.problems) from exc


def settings_notes(gateway: dict[str, Any]) -> list[str]:
    """What `status` and `dead retry` say of the settings this host's running gateway uses (its status file
    `gateway`), against its settings file as it is now: an edit it has not read yet, one it refused, changes
    waiting for a restart."""
    seen = gateway.get("settings")
    if not gateway.get("local", gateway.get("running")) or not isinstance(seen, dict):
        return []
    notes = []
    if not read_as_it_is(seen):
        notes.append(f"settings: {seen.get('file')} changed since the running gateway read it "
                     "(it looks every 2 s)")
    elif seen.get("problem"):
        notes.append(f"settings: the running gateway keeps its last valid settings: {seen['problem']}")
    if seen.get("restart_needed"):
        notes.append("settings: restart the gateway to apply: " + "; ".join(seen["restart_needed"]))
    return notes


def read_as_it_is(seen: dict[str, Any]) -> bool:
    """Whether a gateway's record of its settings file (`settings` of its status file) is of the file as it is."""
    return bool(seen.get("file")) and seen.get("sha256") == file_digest(str(seen["file"]))


def gather_status(home: Home, settings: Settings, pm: pluggy.PluginManager, cache: StatusFileCache,
                  backend: Backend) -> dict[str, Any]:
    """Everything `status` shows: the backend's part (gateway process, queue depths, dead letters; on
    postgres the database and the processes of every host), then the plugin sections (`cache` keeps what
    those derive from configuration files)."""
    storage = backend.status(DEAD_LETTERS_SHOWN)
    status: dict[str, Any] = {"home": str(home.root), **status_record(backend, storage, gateway_process(home))}
    for section in call_each(pm, "switchyard_status", home=home, settings=settings, cache=cache):
        status.update(section)
    return status


def gateway_process(home: Home) -> dict[str, Any]:
    """The gateway's own report (state/gateway.json) and whether its process is alive; the channel
    states of a gateway that is not running are marked unknown, not repeated as if current."""
    try:
        info: dict[str, Any] = json.loads((home.state / "gateway.json").read_bytes())
    except (OSError, ValueError):
        return {"running": False}
    try:
        os.kill(int(info["pid"]), 0)
        info["running"] = True
    except PermissionError:  # alive, under another user
        info["running"] = True
    except (OSError, KeyError, ValueError, TypeError):
        info["running"] = False
    if info["running"] and _started_after(int(info["pid"]), str(info.get("started_at", ""))):
        info["running"] = False  # the pid was reused (after a reboot, say) by a process that is not it
    if not info["running"]:
        info["channels"] = {profile: _stale(channel) for profile, channel in (info.get("channels") or {}).items()}
    return info


def _started_after(pid: int, started_at: str) -> bool:
    """Tells whether process `pid` started well after `started_at` (Linux /proc; False when unknown)."""
    try:
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        claimed = datetime.fromisoformat(started_at.replace("Z", "+00:00")).timestamp()
    except (OSError, ValueError, IndexError, StopIteration):
        return False
    return boot + ticks / os.sysconf("SC_CLK_TCK") > claimed + PID_START_SLACK_S


def _stale(channel: dict[str, Any]) -> dict[str, Any]:
    last = channel.get("state")
    return {**channel, "state": "unknown", "stale": True, "last_reported": last,
            "reason": f"gateway not running (last reported {last})"}


def print_status(status: dict[str, Any]) -> None:
    """Prints the status for a person: the backend's headline, then one table per section that has rows."""
    gateway = status["gateway"]
    print(f"home: {status['home']}")
    print_headline(status)
    _section(["channel", "type", "state", "detail"],
             [[name, str(info.get("type") or "-"), str(info.get("state")), str(info.get("reason") or "")]
              for name, info in (gateway.get("channels") or {}).items()])
    if status["queue"]:
        _section(list(status["queue"]), [[str(count) for count in status["queue"].values()]], title="queue")
    if status["dead_letter_count"]:
        print(f"\ndead letters: {status['dead_letter_count']} (`switchyard dead list`)")
    _section(["dead letter", "attempts", "failed at", "reason"],
             [[str(d["file"]), str(d["attempts"]), str(d["failed_at"]), str(d["reason"])]
              for d in status["dead_letters"]])
    for problem in [*_settings_lines(status), *status.get("providers", []), *status.get("config", [])]:
        print(printable(problem))
    if status.get("retention"):
        print("retention: " + ", ".join(f"{name} {'forever' if days is None else f'{days:g} d'}"
                                        for name, days in status["retention"].items()))
    runs = status.get("runs") or []
    _section(["run", "workflow", "state", "step", "retries", "updated"],
             [[str(r.get("runId")), str(r.get("workflowId")), str(r.get("state")), str(r.get("currentStep") or "-"),
               str(r.get("retries", 0)), str(r.get("updatedAt", ""))] for r in runs])
    if not runs:
        print("\nruns: none active")
    beats = status.get("heartbeats", [])
    _section(["profile", "state", "last answer", "round trip ms"],
             [[str(b.get("profile")), "MISSED" if b.get("missed") else "ok", str(b.get("last_answer_at") or "never"),
               str(b.get("last_rtt_ms", "-"))] for b in beats])
    for beat in beats:
        if beat.get("problem"):
            print(printable(f"heartbeat {beat.get('profile')}: {beat['problem']}"))


def _settings_lines(status: dict[str, Any]) -> list[str]:
    """The settings file's own problem (unless the running gateway's note says it), then the notes."""
    settings = status.get("settings") or {}
    notes = list(settings.get("notes") or [])
    if settings.get("problem") and not any("keeps its last valid" in note for note in notes):
        running = " (the running gateway keeps its last valid settings)" if status["gateway"].get("running") else ""
        notes.insert(0, f"settings: {settings['problem']}{running}")
    return notes


def _section(headers: list[str], rows: list[list[str]], *, title: str | None = None) -> None:
    if rows:
        print()
        print_table(headers, rows, title=title)
