"""Where the storage backend is chosen, once: `queue.backend` names a backend that a plugin declares
(`switchyard_backends`); the Backend it builds opens every store and the runtime of that backend.

Nothing else reads `queue.backend` or imports a backend's code: the file backend registers from
gateway/filestores.py, PostgreSQL from gateway/pgplugin.py, and a third backend is one more plugin (the
in-memory one, for tests only, is registered by a test: gateway/memory/backend.py).
A plugin's own stores (the orchestrator's runs, sessions, history) are declared per backend name with
`switchyard_stores` and opened through `Backend.store`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from gateway.plugin_manager import call_each, plugin_manager_for

if TYPE_CHECKING:
    import pluggy

    from gateway.home import Home
    from gateway.locks import Locks
    from gateway.pairing import Pairing
    from gateway.settings import Settings

BACKEND_PLUGINS: tuple[str, ...] = ("gateway.filestores", "gateway.pgplugin", "orchestrator.plugin",
                                    "orchestrator.pgplugin")
"""The built-in modules that declare backends and stores (a command opens its backend from these, the
settings' plugins and the entry points, without loading the channel plugins)."""

BackendFactory = Callable[["Home", "Settings", "Stores"], "Backend"]
StoreFactory = Callable[..., Any]
Stores = dict[str, dict[str, StoreFactory]]
"""store name -> backend name -> factory `(backend, **options) -> store`."""


class BackendUnreachable(Exception):
    """The backend's storage cannot be used (a database that is down); the message is one line, no secret."""


class Backend(Protocol):
    """What one storage backend opens for the home and settings it was built with."""

    name: str
    home: Home
    settings: Settings
    in_home: bool
    """True when the state is the home's own folders: an operator command then first checks that the home
    is one (a mistyped --home would otherwise read as "nothing here")."""
    failures: tuple[type[BaseException], ...]
    """The errors of its storage that an operator command reports as one line (and exit 2)."""

    def failure_text(self, exc: BaseException) -> str:
        """One line for an error of `failures`, without a secret."""
        ...

    def unset_variables(self) -> list[tuple[str, str, str]]:
        """(settings key, variable, what happens) for each environment variable it needs that is unset."""
        ...

    def pairing(self, *, command: bool = False) -> Pairing:
        """Pairing codes and approvals (`command`: for a one-shot CLI command, not a gateway process)."""
        ...

    def locks(self, *, holder: str | None = None, ttl_s: float = 60.0) -> Locks:
        """The coordination locks, held by `holder` (this process when None)."""
        ...

    def dead_letters(self) -> Any:
        """What `switchyard dead` lists, shows, retries and drops."""
        ...

    def wait_for_reply(self, message_id: str, timeout_s: float) -> dict[str, Any] | None:
        """The reply to `message_id` once one is written, or None after `timeout_s` (`send --wait`)."""
        ...

    def status(self, dead_shown: int) -> dict[str, Any]:
        """The backend's part of `switchyard status` (queue, dead letters, gateway processes); raises
        BackendUnreachable."""
        ...

    def print_headline(self, status: dict[str, Any]) -> None:
        """Prints the first lines of `status` for a person (whether the gateway runs, and where)."""
        ...

    def runtime(self, parts: Any) -> Any:
        """The processing and delivery half of a gateway (gateway/runtime.py's Runtime) built from `parts`
        (gateway.runtime.RuntimeParts)."""
        ...

    def store(self, name: str, **options: Any) -> Any:
        """The store `name` a plugin declared for this backend (`switchyard_stores`), opened with `options`."""
        ...


def backend_name(settings: Settings) -> str:
    """The configured backend's name: the one read of `queue.backend`."""
    return settings.queue.backend


def open_backend(home: Home, settings: Settings, pm: pluggy.PluginManager | None = None, *,
                 name: str | None = None, plugins: list[str] | None = None) -> Backend:
    """The backend `name` (the settings' `queue.backend` when None), declared by a plugin of `pm` (when None,
    by BACKEND_PLUGINS, `plugins` (the settings' when None) and the entry points). KeyError names an
    unknown one. `name` and `plugins` let `status` open it without loading the settings."""
    name = backend_name(settings) if name is None else name
    if pm is None:  # ~1 ms: the modules are imported once, the entry points scanned once per process
        pm = plugin_manager_for([*BACKEND_PLUGINS, *(settings.plugins if plugins is None else plugins)])
    factories: dict[str, BackendFactory] = {}
    for declared in call_each(pm, "switchyard_backends"):
        factories.update(declared)
    if name not in factories:
        raise KeyError(f"no installed plugin provides the backend {name!r} (queue.backend; "
                       f"available: {', '.join(sorted(factories))})")
    stores: Stores = {}
    for declared in call_each(pm, "switchyard_stores"):
        for store, by_backend in declared.items():
            stores.setdefault(store, {}).update(by_backend)
    return factories[name](home, settings, stores)


def open_store(backend: Backend, stores: Stores, name: str, **options: Any) -> Any:
    """Opens the store `name` declared for `backend` (what a Backend's `store` does); KeyError when no
    plugin declares it there."""
    try:
        factory = stores[name][backend.name]
    except KeyError:
        raise KeyError(f"no plugin declares the store {name!r} on the backend {backend.name!r}") from None
    return factory(backend, **options)
