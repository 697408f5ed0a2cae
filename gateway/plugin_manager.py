"""Builds the plugin manager: built-in plugins, entry points, and modules named in settings."""

from __future__ import annotations

import functools
import importlib
import logging
import os
import sys
from collections.abc import Iterable
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pluggy

from gateway import hookspecs

if TYPE_CHECKING:  # imported on use: the CLI builds a plugin manager before it needs pydantic
    from pydantic import BaseModel

    from gateway.settings import Settings
    from gateway.telemetry.events import EventLog

log = logging.getLogger("switchyard.plugins")

ENTRY_POINT_GROUP = "switchyard.plugins"
DEFAULT_PLUGINS: tuple[str, ...] = (
    "gateway.backends.files.backend",
    "gateway.backends.postgres.plugin",
    "plugins.console",
    "plugins.heartbeat",
    "plugins.telegram",
    "plugins.discord",
    "plugins.slack",
    "plugins.whatsapp",
    "plugins.inbox",
    "plugins.web",
    "orchestrator.cli",
    "orchestrator.plugin",
    "orchestrator.storage.postgres.plugin",
)


def build_plugin_manager(
    settings: Settings | None = None, *, extra: Iterable[object] = ()
) -> pluggy.PluginManager:
    """A fresh plugin manager: built-ins, `switchyard.plugins` entry points, `settings.plugins`,
    `$SWITCHYARD_PLUGINS` (comma-separated module names) and `extra` objects.

    A plugin that fails to import is logged and skipped; the gateway keeps running without it.
    """
    return plugin_manager_for([*DEFAULT_PLUGINS, *(settings.plugins if settings else [])], extra=extra)


def plugin_manager_for(modules: Iterable[str], *, extra: Iterable[object] = ()) -> pluggy.PluginManager:
    """A plugin manager with these modules, `$SWITCHYARD_PLUGINS`, the entry points and `extra` objects
    (the CLI builds one with only its light modules to parse a command line)."""
    pm = pluggy.PluginManager("switchyard")
    pm.add_hookspecs(hookspecs)
    modules = [*modules, *_env_plugins()]
    for name in dict.fromkeys(modules):
        _register_module(pm, name)
    for entry_point in _entry_points(tuple(sys.path)):
        if pm.has_plugin(entry_point.name):
            continue
        try:
            pm.register(entry_point.load(), name=entry_point.name)
        except Exception as exc:
            log.error("plugin %s (entry point) failed to load and is disabled: %s", entry_point.name, exc)
    for plugin in extra:
        pm.register(plugin)
    return pm


@functools.lru_cache(maxsize=8)
def _entry_points(path: tuple[str, ...]) -> tuple[EntryPoint, ...]:
    """The `switchyard.plugins` entry points installed on `path`, scanned once per path (a command builds
    more than one plugin manager: the scan of every installed distribution is the costly part)."""
    return tuple(entry_points(group=ENTRY_POINT_GROUP))


def _register_module(pm: pluggy.PluginManager, name: str) -> None:
    module = import_plugin(name)
    if isinstance(module, str):
        log.error("plugin %s failed to import and is disabled: %s", name, module)
    elif not pm.is_registered(module):
        pm.register(module, name=name)


def import_plugin(name: str) -> ModuleType | str:
    """The plugin module `name`, or why it cannot be imported (the plugin manager then logs it and goes on
    without it; `switchyard check` names it)."""
    try:
        return importlib.import_module(name)
    except Exception as exc:
        return str(exc) or type(exc).__name__


def listed_plugins(settings: Settings) -> list[tuple[str, str]]:
    """(where it is listed, module name) of each plugin module the user names: `plugins:` in the settings and
    `$SWITCHYARD_PLUGINS`."""
    listed = [(f"plugins.{index}", name) for index, name in enumerate(settings.plugins)]
    return listed + [("$SWITCHYARD_PLUGINS", name) for name in _env_plugins()]


def _env_plugins() -> list[str]:
    """The modules `$SWITCHYARD_PLUGINS` names (comma-separated)."""
    return [name.strip() for name in os.environ.get("SWITCHYARD_PLUGINS", "").split(",") if name.strip()]


def call_each(pm: pluggy.PluginManager, hook: str, *, events: EventLog | None = None, **kwargs: Any) -> list[Any]:
    """Calls every implementation of an all-results hook in pluggy's order; one that raises is logged
    (and written as a `plugin.failed` event) naming the plugin, and skipped. None results are left out."""
    results = []
    for impl in reversed(getattr(pm.hook, hook).get_hookimpls()):
        if impl.hookwrapper or impl.wrapper:
            continue
        try:
            result = impl.function(*(kwargs[name] for name in impl.argnames))
        except Exception as exc:
            plugin = plugin_name(pm, impl.plugin)
            log.error("plugin %s failed in %s and is skipped: %s", plugin, hook, exc)
            log.debug("plugin %s failed in %s", plugin, hook, exc_info=exc)
            if events is not None:
                events.emit("plugin.failed", plugin=plugin, hook=hook, reason=str(exc) or type(exc).__name__)
            continue
        if result is not None:
            results.append(result)
    return results


def plugin_name(pm: pluggy.PluginManager, plugin: object) -> str:
    """A plugin's name for a person: its module or registered name, else its class name."""
    if isinstance(plugin, ModuleType):
        return plugin.__name__
    name = pm.get_name(plugin)
    return name if name and not name.isdigit() else type(plugin).__qualname__


def check_channel_options(settings: Settings, pm: pluggy.PluginManager, *, source: str) -> None:
    """Checks every channel profile against the options model its plugin declares; an unknown
    `type` or key raises SettingsError naming `source`, the profile and the key."""
    from gateway.settings import validate_channel_options

    models: dict[str, type[BaseModel]] = {}
    for declared in call_each(pm, "switchyard_channel_options"):
        models.update(declared)
    known = {t for types in call_each(pm, "switchyard_channel_types") for t in types} | set(models)
    validate_channel_options(settings, models, known, source=source)
