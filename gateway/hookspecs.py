"""Every hook of the `switchyard` plugin contract.

Hooks are synchronous and cheap: they declare things (channels, functions, providers, the handler)
or observe events. Runtime I/O lives on the objects they return, e.g. a Channel's `async send`.
Call hooks with keyword arguments only. The gateway and the CLI call the all-results hooks through
`gateway.plugin_manager.call_each`: an implementation that raises is logged (and written as a
`plugin.failed` event) naming its plugin, and skipped; the other plugins' results are kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:  # annotations only: `switchyard --help` loads this module and must not pay for pydantic
    import argparse

    from pydantic import BaseModel

    from gateway.api import BuiltinProvider, Channel, ChannelContext, FunctionSpec, Handler, HandlerContext, StatusCache
    from gateway.backends import Backend, BackendFactory
    from gateway.home import Home
    from gateway.settings import ChannelProfile, Settings
    from gateway.stores import StoreFactory

hookspec = pluggy.HookspecMarker("switchyard")
hookimpl = pluggy.HookimplMarker("switchyard")


# --- startup ---------------------------------------------------------------------------------


@hookspec
def switchyard_init(home: Home, settings: Settings) -> list[str] | None:
    """Writes this plugin's starter files into a new home (never overwriting); returns the paths written.

    Called by `switchyard init` and before `switchyard run` starts. All implementations are called;
    one that raises is logged and skipped.
    """


@hookspec(firstresult=True)
def switchyard_channels(profile: ChannelProfile, context: ChannelContext) -> Channel | None:
    """Builds the Channel for a configured profile whose `type` this plugin owns.

    Return None for profiles of other types. Raise to disable just this profile (the reason is
    logged and shown by `switchyard status`).
    Stops at the first non-None result.
    """


@hookspec
def switchyard_channel_types() -> list[str]:  # type: ignore[empty-body]
    """Names the channel types this plugin can build (shown by `status` and checked at start).

    All implementations are called.
    """


@hookspec
def switchyard_reply_named_by_message_id() -> list[str]:  # type: ignore[empty-body]
    """Names the channel types this plugin builds whose replies are `outgoing/<messageId>.json` (spec 002's
    heartbeat name; a later reply to the same message replaces an earlier one) instead of
    `<channel>_<messageId>_<timestamp>.json`.

    The name belongs to the payload's channel type, whether or not a profile of it runs (a payload
    dropped into incoming/, a `switchyard worker` without channels). All implementations are called;
    the lists are joined.
    """


@hookspec
def switchyard_file_limits() -> dict[str, int]:  # type: ignore[empty-body]
    """Declares, per channel type this plugin builds, the largest file (in bytes) a bot may send there; the
    chat tools' `send_file` refuses a larger one with a tool error before anything is sent. A type not named
    has no limit of its own. Holds whether or not a profile of the type runs (a `switchyard worker` without
    channels). All implementations are called; the dicts are joined.
    """


@hookspec
def switchyard_channel_options() -> dict[str, type[BaseModel]]:  # type: ignore[empty-body]
    """Declares, per channel type this plugin builds, the pydantic model of its profile's type-specific keys.

    Extend `gateway.settings.ChannelOptions` (it forbids unknown keys and declares the keys every profile
    may carry). `switchyard run` checks each profile against its type's model before it starts and
    exits 2 naming the file, the profile and the key; a type no plugin names is the same error.
    All implementations are called; the mappings are merged.
    """


@hookspec
def switchyard_check(home: Home, settings: Settings, providers: list[str]) -> list[str] | None:
    """Validates this plugin's own configuration files in a home (e.g. each orchestrator.yaml) without
    starting anything; returns one `file: key: reason` line per problem.

    `providers` names the in-process providers every plugin declares (`switchyard_providers`).
    `switchyard run` calls it before any channel starts and exits 2 on a problem; `switchyard check`
    prints them. All implementations are called; the lists are joined.
    """


@hookspec
def switchyard_check_warnings(home: Home, settings: Settings, providers: list[str]) -> list[str] | None:
    """Names what `switchyard run` would go on with but may not be what was meant (a workspace or default
    file it would create, a template placeholder no value fills); one `file: key: reason` line each.

    `switchyard check` prints them as warnings and still exits 0 on warnings alone; `run` does not refuse
    them. All implementations are called; the lists are joined.
    """


@hookspec
def switchyard_backends() -> dict[str, BackendFactory]:  # type: ignore[empty-body]
    """Declares storage backends by the name `queue.backend` selects: a factory `(home, settings, stores) ->
    Backend` (gateway/composition.py says what a Backend opens; pass `stores` to `composition.open_store`).

    Import a backend's libraries inside its factory: every command builds the plugin manager. All
    implementations are called; the mappings are merged.
    """


@hookspec
def switchyard_stores() -> dict[str, dict[str, StoreFactory]]:  # type: ignore[empty-body]
    """Declares this plugin's own stores on each backend: `{store name: {backend name: factory}}`, the
    factory called as `(backend, **options)` by `Backend.store(StoreKey(name), **options)` (gateway.stores.StoreKey,
    typed with what the factory makes: the orchestrator declares `runs`, `sessions`, `history`, `schedules` and
    `usage` so, and opens them by its keys RUNS, SESSIONS, …). All implementations are called; the mappings
    are merged.
    """


@hookspec
def switchyard_migrations() -> dict[str, list[str]]:  # type: ignore[empty-body]
    """Declares the schema migrations of this plugin's stores on each backend that keeps a schema:
    `{backend name: [package]}`, each package holding `migrations/*.sql` (the orchestrator declares its
    runs and memory tables so). `switchyard db migrate` applies every plugin's once each, all in name order
    (a name is unique across plugins). All implementations are called; the mappings are joined.
    """


@hookspec(firstresult=True)
def switchyard_handler(context: HandlerContext) -> Handler | None:
    """Builds the handler that answers claimed messages (the orchestrator provides it).

    Stops at the first non-None result.
    """


@hookspec
def switchyard_functions() -> list[FunctionSpec]:  # type: ignore[empty-body]
    """Declares functions the selector may call through `command_invoke`.

    All implementations are called; the lists are merged (a later duplicate name is ignored).
    """


@hookspec
def switchyard_providers() -> dict[str, BuiltinProvider]:  # type: ignore[empty-body]
    """Declares in-process providers by name: `async (prompt, request) -> answer`.

    All implementations are called; a provider in settings.yaml with the same name wins.
    """


@hookspec
def switchyard_cli(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Adds subcommands to the `switchyard` CLI (e.g. `switchyard runs`).

    Add a parser with `commands.add_parser(...)` and `set_defaults(run=callable)`; the callable
    gets `(args, home, settings)` and returns the exit code. All implementations are called.
    """


@hookspec
def switchyard_status(home: Home, settings: Settings, cache: StatusCache) -> dict[str, Any] | None:
    """Adds sections to `switchyard status` (e.g. the orchestrator's active runs), read from disk.

    Called by the CLI, also when no gateway is running. `settings` are loaded (and pydantic imported)
    when first read; what a section derives from configuration files belongs in
    `cache.remember(key, compute, files)`, so status on an unchanged home validates nothing.
    All implementations are called; the returned mappings are merged.
    """


@hookspec
def switchyard_recent_runs(home: Home, limit: int, settings: Settings,  # type: ignore[empty-body]
                           backend: Backend) -> list[dict[str, Any]]:
    """Lists up to `limit` most recent workflow runs, newest first, from the run store `settings` select
    (for the dashboard), opened from the gateway's `backend` (gateway/composition.py: its stores share
    what it holds open, a database's pool).

    Each run is a mapping with `runId`, `workflowId`, `state`, `currentStep`, `updatedAt`, `conversation`
    and `steps` (a list of `{id, status, durationMs}`). All implementations are called; the lists are merged.
    """


@hookspec
def switchyard_schedules(home: Home, settings: Settings,  # type: ignore[empty-body]
                         backend: Backend) -> list[dict[str, Any]]:
    """Lists the scheduled prompts a plugin fires (for the dashboard), with their state read from the gateway's
    `backend`.

    Each is a mapping with `schedule`, `when`, `deliver`, `next`, `last`, `outcome` and `detail` (None where
    unknown). All implementations are called; the lists are merged.
    """


# --- observation -------------------------------------------------------------------------------


@hookspec
def switchyard_event(event: dict[str, Any]) -> None:
    """Observes every event written to `logs/events.jsonl` (must not block or raise).

    All implementations are called.
    """
