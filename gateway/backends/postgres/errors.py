"""What a database error means: the database is away (wait and try again), or it refused this one thing.

Only the first may hold up a queue. psycopg raises OperationalError for a connection refused, lost
or reset by the server (its subclasses include AdminShutdown, a pool's PoolTimeout, and the
serialization failures and deadlocks worth trying again) and InterfaceError for a connection it
can no longer use; a server that takes no writes for now (ReadOnlySqlTransaction: a primary demoted in
a failover, a maintenance window) or ended the session (IdleInTransactionSessionTimeout) raises an
InternalError that is not about what was sent either. Anything else (a DataError such as
UntranslatableCharacter, a constraint, text the driver cannot encode) is about what was sent: retrying
sends it again and fails again.
"""

from __future__ import annotations

import psycopg
from psycopg import errors

# InternalErrors that say the server, not what was sent, is the problem: waited out like a lost connection
_SERVER_STATES = errors.ReadOnlySqlTransaction | errors.IdleInTransactionSessionTimeout


def database_away(exc: BaseException) -> bool:
    """Whether `exc` says the database cannot be reached now (a reason to wait, never to give up); an
    error raised from such a one (Procrastinate wraps psycopg's errors in its ConnectorException) says so too."""
    cause: BaseException | None = exc
    for _ in range(8):  # a chain of causes is short; a cycle is not followed forever
        if cause is None:
            return False
        if isinstance(cause, psycopg.OperationalError | psycopg.InterfaceError | _SERVER_STATES):
            return True
        cause = cause.__cause__
    return False


def worth_waiting(exc: BaseException) -> bool:
    """Whether `exc` is waited out rather than failing the message: the database away, or this host's
    storage refusing (a full disk while writing a message's attachments back)."""
    return database_away(exc) or isinstance(exc, OSError)
