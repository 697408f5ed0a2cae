"""Where the database is: the DSN from the variable `queue.dsn_env` names, never from a file."""

from __future__ import annotations

import os

from gateway.settings import QueueSettings, SettingsError


def dsn_from_settings(settings: QueueSettings) -> str:
    """The DSN held by the environment variable `settings.dsn_env`; SettingsError when it is unset."""
    dsn = os.environ.get(settings.dsn_env, "").strip()
    if not dsn:
        raise SettingsError(f"queue.dsn_env: the environment variable {settings.dsn_env} is not set; "
                            f"it must hold the PostgreSQL DSN (e.g. postgresql://user@host:5432/db)")
    return dsn


def redacted(dsn: str) -> str:
    """The DSN without its password, fit for a log line or `status`."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        parts = conninfo_to_dict(dsn)
    except Exception:
        return "<unparsable DSN>"
    if "password" in parts:
        parts["password"] = "***"
    return make_conninfo("", **{k: v for k, v in parts.items() if v is not None})


def process_holder() -> str:
    """This process's name in the database (leases, process list): `<host>:<pid>:<start ns>`, unique
    even when a pid is reused."""
    global _HOLDER
    if _HOLDER is None:
        import socket
        import time

        _HOLDER = f"{socket.gethostname()}:{os.getpid()}:{time.time_ns()}"
    return _HOLDER


_HOLDER: str | None = None
