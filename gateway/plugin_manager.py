"""Builds the plugin manager: built-in plugins, entry points, and modules named in settings."""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Iterable
from importlib.metadata import entry_points

import pluggy

from gateway import hookspecs
from gateway.settings import Settings

log = logging.getLogger("switchyard.plugins")

ENTRY_POINT_GROUP = "switchyard.plugins"
DEFAULT_PLUGINS: tuple[str, ...] = (
    "plugins.console",
    "plugins.heartbeat",
    "plugins.telegram",
    "plugins.discord",
    "plugins.slack",
    "plugins.whatsapp",
    "plugins.inbox",
    "orchestrator.plugin",
)


def build_plugin_manager(
    settings: Settings | None = None, *, extra: Iterable[object] = ()
) -> pluggy.PluginManager:
    """A fresh plugin manager: built-ins, `switchyard.plugins` entry points, `settings.plugins`,
    `$SWITCHYARD_PLUGINS` (comma-separated module names) and `extra` objects.

    A plugin that fails to import is logged and skipped; the gateway keeps running without it.
    """
    pm = pluggy.PluginManager("switchyard")
    pm.add_hookspecs(hookspecs)
    modules = [*DEFAULT_PLUGINS, *(settings.plugins if settings else [])]
    modules += [m.strip() for m in os.environ.get("SWITCHYARD_PLUGINS", "").split(",") if m.strip()]
    for name in dict.fromkeys(modules):
        _register_module(pm, name)
    for entry_point in entry_points(group=ENTRY_POINT_GROUP):
        if pm.has_plugin(entry_point.name):
            continue
        try:
            pm.register(entry_point.load(), name=entry_point.name)
        except Exception as exc:
            log.error("plugin %s (entry point) failed to load and is disabled: %s", entry_point.name, exc)
    for plugin in extra:
        pm.register(plugin)
    return pm


def _register_module(pm: pluggy.PluginManager, name: str) -> None:
    try:
        module = importlib.import_module(name)
    except Exception as exc:
        log.error("plugin %s failed to import and is disabled: %s", name, exc)
        return
    if not pm.is_registered(module):
        pm.register(module, name=name)
