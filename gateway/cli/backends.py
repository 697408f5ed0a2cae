"""What the CLI shows of a backend: its part of `switchyard status` (the record and its first lines), the
one line for an error of its storage, the variables `check` misses, and `send --wait`'s wait.

A backend supplies only facts (gateway/stores.py: `StorageStatus`, `failures`, `dsn`, `variables`, a
`ReplyStore`); the words are here, written once. The CLI picks them by those facts, never by the backend's
name or module: a backend whose state is a database (`StorageStatus.database`, `Backend.dsn`) is shown as
one, with the processes attached on every host; any other as the home's own state, whose gateway is this
host's process. So the CLI imports no backend, and a new backend is shown by the facts it reports.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from gateway.cli.tables import print_table

if TYPE_CHECKING:
    from gateway.backends import Backend, StorageStatus
    from gateway.models import IncomingPayload
    from gateway.stores import Duplicate, ReplyStore

REPLY_LOOK_INTERVAL_S = 0.05


def status_record(backend: Backend, storage: StorageStatus, gateway: dict[str, Any]) -> dict[str, Any]:
    """The backend's part of `status --json`, with `gateway` (this host's gateway process, from its
    state/gateway.json): on a database, the gateway counts as running when any process attached on any
    host is live, and `local` says whether this host's is."""
    if storage.database is None:
        return {"queue": storage.queue, "gateway": gateway, "dead_letter_count": storage.dead_letter_count,
                "dead_letters": [{"file": letter.name, **letter.to_json()} for letter in storage.dead_letters]}
    record: dict[str, Any] = {"backend": backend.name, "database": storage.database, "queue": storage.queue}
    if storage.processes is not None:
        record["processes"] = storage.processes
    if storage.leases is not None:
        record["leases"] = storage.leases
    live = [process for process in storage.processes or [] if not process["stale"]]
    return {**record, "dead_letter_count": storage.dead_letter_count,
            "dead_letters": [letter.to_json() | {"file": letter.name} for letter in storage.dead_letters],
            "gateway": {**gateway, "running": bool(live), "local": gateway.get("running", False),
                        "processes_live": len(live)}}


def print_headline(status: dict[str, Any]) -> None:
    """Prints the first lines of `status` for a person: whether the gateway runs, and where (on a database,
    the database, the processes attached and the channel owners)."""
    gateway = status["gateway"]
    if "database" not in status:
        if gateway.get("running"):
            print(f"gateway: running, pid {gateway.get('pid')}, since {gateway.get('started_at', '?')}")
        else:
            print("gateway: not running" + (f" (last pid {gateway['pid']})" if gateway.get("pid") else ""))
        return
    print(f"gateway: {gateway['processes_live']} live process(es) attached to the database"
          if gateway.get("running") else "gateway: no live process attached to the database")
    _print_database(status)


def _print_database(status: dict[str, Any]) -> None:
    """Prints the database, the processes attached and the channel owners."""
    database = status["database"]
    if database.get("schema_current"):
        print(f"database: {database['dsn']} (schema current)")
    else:
        absent = database["missing_migrations"]
        shown = ", ".join(absent[:3]) + (f" and {len(absent) - 3} more" if len(absent) > 3 else "")
        print(f"database: {database['dsn']} (schema behind: missing {shown}; run `switchyard db migrate`)")
    processes = status.get("processes") or []
    if processes:
        print()
        print_table(["role", "host", "pid", "last seen", "state", "detail"],
                    [[p["role"], p["host"], str(p["pid"]), f"{p['last_seen']} ({p['seen_ago_s']:g} s ago)",
                      "STALE" if p["stale"] else "ok", _detail(p["detail"])] for p in processes],
                    title="processes")
    else:
        print("\nprocesses: none attached")
    leases = status.get("leases") or []
    if leases:
        print()
        print_table(["lease", "owner", "until"],
                    [[lease["name"], lease["holder"], f"{lease['expires_at']}{' EXPIRED' if lease['expired'] else ''}"]
                     for lease in leases], title="channel owners")


def _detail(detail: dict[str, Any]) -> str:
    return ", ".join(f"{key}: {value}" for key, value in detail.items()) or "-"


def failure_text(backend: Backend, exc: BaseException) -> str:
    """One line for an error of `backend.failures`, without a secret (the DSN's password masked)."""
    dsn = backend.dsn
    if dsn is None:
        return str(exc)
    from gateway.telemetry.redaction import database_error

    return database_error(exc, dsn)


def unset_variables(backend: Backend) -> list[tuple[str, str, str]]:
    """(settings key, variable, what happens) for each variable the backend reads that is unset or empty:
    without the way to its storage, `run` would not start."""
    return [(key, variable, "run would not start") for key, variable in backend.variables
            if not os.environ.get(variable, "").strip()]


def wait_for_reply(replies: ReplyStore, message: IncomingPayload, job: str,
                   timeout_s: float) -> dict[str, Any] | Duplicate | None:
    """Looks for the reply to `message` (queued as `job`) every REPLY_LOOK_INTERVAL_S until it is there,
    the gateway skipped it as a duplicate, or `timeout_s` passes (None)."""
    deadline = time.monotonic() + timeout_s
    try:
        while (found := replies.find(message, job)) is None and time.monotonic() < deadline:
            time.sleep(REPLY_LOOK_INTERVAL_S)
        return found
    finally:
        replies.close()
