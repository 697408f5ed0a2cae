"""Where the storage backend is chosen, once: `queue.backend` names a backend that a plugin declares
(`switchyard_backends`); the Backend it builds opens every store and the runtime of that backend.

Nothing else reads `queue.backend` or imports a backend's code: the file backend registers from
gateway/backends/files/backend.py, PostgreSQL from gateway/backends/postgres/plugin.py, and a third backend is one
more plugin (the
in-memory one, for tests only, is registered by a test: gateway/backends/memory/backend.py).
A plugin's own stores (the orchestrator's runs, sessions, history) are declared per backend name with
`switchyard_stores` and opened through `Backend.store`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from gateway.plugin_manager import call_each, plugin_manager_for

if TYPE_CHECKING:
    import pluggy

    from gateway.backends import Backend, BackendFactory
    from gateway.home import Home
    from gateway.settings import Settings
    from gateway.stores import StoreKey, Stores, StoreT

BACKEND_PLUGINS: tuple[str, ...] = ("gateway.backends.files.backend", "gateway.backends.postgres.plugin",
                                    "orchestrator.plugin",
                                    "orchestrator.storage.postgres.plugin")
"""The built-in modules that declare backends and stores (a command opens its backend from these, the
settings' plugins and the entry points, without loading the channel plugins)."""

def backend_name(settings: Settings) -> str:
    """The configured backend's name: the one read of `queue.backend`."""
    return settings.queue.backend


def open_backend(home: Home, settings: Settings, pm: pluggy.PluginManager | None = None, *,
                 name: str | None = None, plugins: list[str] | None = None) -> Backend:
    """The backend `name` (the settings' `queue.backend` when None), declared by a plugin of `pm` (when None,
    by BACKEND_PLUGINS, `plugins` (the settings' when None) and the entry points); an unknown one raises
    UnknownBackend (a SettingsError). `name` and `plugins` let `status` open it without loading the settings."""
    name = backend_name(settings) if name is None else name
    if pm is None:  # ~1 ms: the modules are imported once, the entry points scanned once per process
        pm = plugin_manager_for([*BACKEND_PLUGINS, *(settings.plugins if plugins is None else plugins)])
    factories: dict[str, BackendFactory] = {}
    for declared in call_each(pm, "switchyard_backends"):
        factories.update(declared)
    if name not in factories:
        from gateway.settings import UnknownBackend

        raise UnknownBackend(f"queue.backend: no installed plugin provides the backend {name!r} (available: "
                             f"{', '.join(sorted(factories))}; a plugin declares one with switchyard_backends)")
    stores: Stores = {}
    for declared in call_each(pm, "switchyard_stores"):
        for store, by_backend in declared.items():
            stores.setdefault(store, {}).update(by_backend)
    return factories[name](home, settings, stores)


def open_store(backend: Backend, stores: Stores, key: StoreKey[StoreT], **options: object) -> StoreT:
    """Opens the store `key` names declared for `backend` (what a Backend's `store` does); KeyError when no
    plugin declares it there."""
    try:
        factory = stores[key.name][backend.name]
    except KeyError:
        raise KeyError(f"no plugin declares the store {key.name!r} on the backend {backend.name!r}") from None
    return cast("StoreT", factory(backend, **options))  # the declaring plugin's factory makes what its key says
