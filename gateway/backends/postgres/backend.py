"""The PostgreSQL backend as the composition sees it (gateway/composition.py's Backend): every store in
the database the variable `queue.dsn_env` names, shared by the processes of every host."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import psycopg

from gateway.backends import StorageStatus
from gateway.backends.postgres.db import SharedPool, dsn_from_settings
from gateway.composition import open_store
from gateway.disk.locks import process_instance
from gateway.stores import StoreKey, Stores, StoreT

if TYPE_CHECKING:
    from gateway.backends.postgres.approvals import PgApprovals
    from gateway.backends.postgres.deadletters import DeadStore
    from gateway.backends.postgres.locks import PgLocks
    from gateway.backends.postgres.outbox import PgReplies
    from gateway.backends.postgres.pairing import PgPairingStore
    from gateway.backends.runtime import Compose, Runtime, RuntimeParts
    from gateway.home import Home
    from gateway.settings import Settings


class PostgresBackend:
    """The postgres backend: opens its stores on the DSN of `queue.dsn_env` (read when first needed), and
    owns the connection pool they share (`pool`), closed by `close`."""

    name = "postgres"
    in_home = False
    failures: tuple[type[BaseException], ...] = (psycopg.Error,)

    def __init__(self, home: Home, settings: Settings, stores: Stores):
        self.home = home
        self.settings = settings
        self._stores = stores

    @cached_property
    def dsn(self) -> str:
        """The DSN; SettingsError when its variable is unset."""
        return dsn_from_settings(self.settings.queue)

    @cached_property
    def pool(self) -> SharedPool:
        """The synchronous pool every store this backend opens shares (opened on first use)."""
        return SharedPool(self.dsn)

    def close(self) -> None:
        """Closes the backend's pool (the gateway calls it once its handler and runtime are stopped)."""
        if "pool" in self.__dict__:
            self.pool.close()

    @property
    def variables(self) -> tuple[tuple[str, str], ...]:
        return (("queue.dsn_env", self.settings.queue.dsn_env),)

    def pairing(self, *, command: bool = False) -> PgPairingStore:
        from gateway.backends.postgres.pairing import PgPairingStore

        return PgPairingStore.direct(self.dsn) if command else PgPairingStore.pooled(self.dsn, self.pool)

    def approvals(self, *, command: bool = False) -> PgApprovals:
        from gateway.backends.postgres.approvals import PgApprovals

        return PgApprovals.direct(self.dsn) if command else PgApprovals.pooled(self.dsn, self.pool)

    def locks(self, *, holder: str | None = None, ttl_s: float = 60.0) -> PgLocks:
        from gateway.backends.postgres.locks import PgLocks

        return PgLocks(self.dsn, holder=holder or process_instance(), ttl_s=ttl_s, pool=self.pool)

    def dead_letters(self) -> DeadStore:
        from gateway.backends.postgres.deadletters import DeadStore

        return DeadStore(self.dsn, self.home)

    def replies(self) -> PgReplies:
        """Replies stay in the database, never in outgoing/."""
        from gateway.backends.postgres.outbox import PgReplies

        return PgReplies(self.dsn)

    def status(self, dead_shown: int) -> StorageStatus:
        """The database, its queue and dead letters, the processes attached on every host and the channel
        owners, on a connection of its own; raises psycopg.Error."""
        from gateway.backends.postgres.status import gather

        return gather(self.settings.queue, self.dsn, dead_shown=dead_shown, home=self.home)

    def runtime(self, parts: RuntimeParts, compose: Compose) -> Runtime:
        """The one runtime on its Processing (intake, processing and delivery on the database); every event is
        also copied into switchyard_events from now on."""
        from gateway.backends.postgres.events import attach_event_sink
        from gateway.backends.postgres.processing import PgProcessing

        close_events = attach_event_sink(parts.events, self.dsn)
        return compose(PgProcessing(parts, pool=self.pool, close_events=close_events))

    def store(self, key: StoreKey[StoreT], **options: object) -> StoreT:
        return open_store(self, self._stores, key, **options)
