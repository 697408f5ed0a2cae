"""The storage backends: files (the default), postgres (many hosts), memory (tests). Each supplies stores
(gateway/stores.py) and never policy; none imports another.

Here: the Backend, what one opens for a home: its stores, its runtime, facts about its storage. What a backend
gives the one runtime it runs under, and what the Gateway hands that runtime, is gateway/backends/runtime.py.
Only annotations name other modules' types, so importing a backend's package stays light."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from gateway.backends.runtime import Compose, Runtime, RuntimeParts
    from gateway.channelkit.pairing import Pairing
    from gateway.home import Home
    from gateway.settings import Settings
    from gateway.spool.deadletters import DeadLetter
    from gateway.stores import Approvals, DeadLetterStore, Locks, ReplyStore, StoreKey, Stores, StoreT

__all__ = ["Backend", "BackendFactory", "StorageStatus"]


@dataclass(frozen=True)
class StorageStatus:
    """What a backend's storage holds, as facts without wording: gateway/cli/backends.py words them for
    `switchyard status`. `database` is None when the state is this home's own (files) or this process's
    (memory); a backend whose state is a database shared by hosts names it (its DSN masked), and, once
    its schema is there, the processes attached on every host and the channel owners."""

    queue: dict[str, int]
    dead_letter_count: int
    dead_letters: list[DeadLetter]
    """The newest dead letters, as many as asked for."""
    database: dict[str, Any] | None = None
    processes: list[dict[str, Any]] | None = None
    leases: list[dict[str, Any]] | None = None


class Backend(Protocol):
    """What one storage backend opens for the home and settings it was built with: its stores, its runtime,
    and facts about its storage. What the CLI shows of a backend is gateway/cli/backends.py's."""

    name: str
    home: Home
    settings: Settings
    in_home: bool
    """True when the state is the home's own folders: an operator command then first checks that the home
    is one (a mistyped --home would otherwise read as "nothing here")."""
    failures: tuple[type[BaseException], ...]
    """The errors of its storage that an operator command reports as one line (and exit 2)."""
    @property
    def variables(self) -> tuple[tuple[str, str], ...]:
        """(settings key, environment variable) of each variable it reads to reach its storage."""
        ...

    @property
    def dsn(self) -> str | None:
        """The connection string of the database that holds the state (None: no database); it may hold a
        password, so it is shown only masked (gateway.telemetry.redaction)."""
        ...

    def pairing(self, *, command: bool = False) -> Pairing:
        """Pairing codes and approvals (`command`: for a one-shot CLI command, not a gateway process)."""
        ...

    def approvals(self, *, command: bool = False) -> Approvals:
        """Tool approvals asked in chat (`command`: for a one-shot CLI command, not a gateway process)."""
        ...

    def locks(self, *, holder: str | None = None, ttl_s: float = 60.0) -> Locks:
        """The coordination locks, held by `holder` (this process when None)."""
        ...

    def dead_letters(self) -> DeadLetterStore:
        """What `switchyard dead` lists, shows, retries and drops."""
        ...

    def replies(self) -> ReplyStore:
        """Where the replies it stored are looked up (`send --wait`)."""
        ...

    def status(self, dead_shown: int) -> StorageStatus:
        """What its storage holds for `switchyard status` (the newest `dead_shown` dead letters); an error of
        `failures` when the storage cannot be reached."""
        ...

    def runtime(self, parts: RuntimeParts, compose: Compose) -> Runtime:
        """The processing and delivery half of a gateway (gateway.backends.runtime.Runtime) built from `parts`
        (gateway.backends.runtime.RuntimeParts); `compose` makes it of the backend's Processing."""
        ...

    def store(self, key: StoreKey[StoreT], **options: object) -> StoreT:
        """The store a plugin declared for this backend under `key.name` (`switchyard_stores`), opened with
        `options`; KeyError when no plugin declares it here."""
        ...

    def close(self) -> None:
        """Releases what the backend holds open for its stores (a database's pool); after its runtime's."""
        ...


BackendFactory = Callable[["Home", "Settings", "Stores"], Backend]
