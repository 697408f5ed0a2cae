"""What a database error means: the database is away (wait and try again), or it refused this one thing.

Only the first may hold up a queue. psycopg raises OperationalError for a connection refused, lost
or reset by the server (its subclasses include AdminShutdown, a pool's PoolTimeout, and the
serialization failures and deadlocks worth trying again) and InterfaceError for a connection it
can no longer use; anything else (a DataError such as UntranslatableCharacter, a constraint, text
the driver cannot encode) is about what was sent: retrying sends it again and fails again.
"""

from __future__ import annotations

import psycopg


def database_away(exc: BaseException) -> bool:
    """Whether `exc` says the database cannot be reached now (a reason to wait, never to give up); an
    error raised from such a one (Procrastinate wraps psycopg's errors in its ConnectorException) says so too."""
    cause: BaseException | None = exc
    for _ in range(8):  # a chain of causes is short; a cycle is not followed forever
        if cause is None:
            return False
        if isinstance(cause, psycopg.OperationalError | psycopg.InterfaceError):
            return True
        cause = cause.__cause__
    return False


def worth_waiting(exc: BaseException) -> bool:
    """Whether `exc` is waited out rather than failing the message: the database away, or this host's
    storage refusing (a full disk while writing a message's attachments back)."""
    return database_away(exc) or isinstance(exc, OSError)
