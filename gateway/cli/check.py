"""Validates a home without starting it: settings.yaml, its channel profiles, every plugin's own files.

`switchyard run` calls `require_valid_home` before any channel starts; `switchyard check` prints the
same problems, one `file: key: reason` line each, then what `run` would not refuse but answer by disabling
a part (an unset variable, a channel library not installed, a plugin that does not import), then the
warnings: what `run` goes on with that may not be what was meant (a default file it would write).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

from gateway.cli.backends import unset_variables as backend_variables
from gateway.composition import open_backend
from gateway.home import Home
from gateway.plugin_manager import call_each, check_channel_options, import_plugin, listed_plugins
from gateway.settings import ChannelOptions, Settings, SettingsError, parse_yaml_file

if TYPE_CHECKING:
    from pydantic import BaseModel

    from gateway.cli import Invocation


def home_problems(home: Home, settings: Settings, pm: pluggy.PluginManager, *, source: str,
                  channels: bool = True, plugins: bool = True) -> list[str]:
    """Every problem of the channel profiles and of the files plugins check (`switchyard_check`); either
    part may be left out (`check` on settings that are only partly valid)."""
    problems: list[str] = []
    if channels:
        try:
            check_channel_options(settings, pm, source=source)
        except SettingsError as exc:
            problems += exc.problems
    if channels:
        from gateway.roles import RoleBook

        problems += [f"{source}: {problem}" for problem in RoleBook(settings).problems()]
    if plugins:
        for found in call_each(pm, "switchyard_check", home=home, settings=settings, providers=_providers(pm)):
            problems += found
    return problems


def _providers(pm: pluggy.PluginManager) -> list[str]:
    """The in-process providers every plugin declares."""
    return sorted({name for declared in call_each(pm, "switchyard_providers") for name in declared})


def home_warnings(home: Home, settings: Settings, pm: pluggy.PluginManager) -> list[str]:
    """What every plugin warns of (`switchyard_check_warnings`): `run` goes on with it, `check` still says ok."""
    from gateway.roles import RoleBook

    found = call_each(pm, "switchyard_check_warnings", home=home, settings=settings, providers=_providers(pm))
    roles = [f"{home.settings_file}: {warning}" for warning in RoleBook(settings).warnings()]
    return roles + [warning for warnings in found for warning in warnings]


def disabled_parts(home: Home, settings: Settings, pm: pluggy.PluginManager, *, source: str) -> list[str]:
    """What `run` would start without: a plugin module that does not import, a channel profile whose variable
    is unset or whose library is not installed, and the settings `run` would refuse for an unset variable."""
    problems = [f"{source}: {key}: cannot import plugin {name!r} ({reason}); run would go on without it"
                for key, name in listed_plugins(settings) if isinstance(reason := import_plugin(name), str)]
    return problems + missing_libraries(settings, pm, source=source) + unset_variables(home, settings, pm,
                                                                                        source=source)


def missing_libraries(settings: Settings, pm: pluggy.PluginManager, *, source: str) -> list[str]:
    """A problem for each channel profile whose type's library is not installed (`ChannelOptions.unavailable`;
    `run` would disable that profile)."""
    models: dict[str, type[BaseModel]] = {}
    for declared in call_each(pm, "switchyard_channel_options"):
        models.update(declared)
    unavailable = {kind: model.unavailable() for kind, model in models.items()
                   if issubclass(model, ChannelOptions) and any(p.type == kind for p in settings.channels)}
    return [f"{source}: channels.{index} ({profile.id}): type: {reason} (run would disable this profile)"
            for index, profile in enumerate(settings.channels) if (reason := unavailable.get(profile.type))]


def unset_variables(home: Home, settings: Settings, pm: pluggy.PluginManager, *, source: str) -> list[str]:
    """A problem for each variable a `*_env` key names that is unset or empty: a channel profile's (`run`
    would start with that profile disabled), the dashboard's token and the postgres DSN (`run` would refuse
    to start). `check` reports them; `run` itself keeps going with the other profiles."""
    missing = []
    for index, profile in enumerate(settings.channels):
        for key, name in (profile.model_extra or {}).items():
            if key.endswith("_env") and isinstance(name, str) and not os.environ.get(name, "").strip():
                missing.append((f"channels.{index} ({profile.id}): {key}", name, "run would disable this profile"))
    token_env = settings.dashboard.token_env if settings.dashboard.port is not None else None
    if token_env and not os.environ.get(token_env, "").strip():
        missing.append(("dashboard.token_env", token_env, "run would not start"))
    missing += backend_variables(open_backend(home, settings, pm))
    return [f"{source}: {key}: the environment variable {name} is not set ({effect})"
            for key, name, effect in missing]


def salvage(path: Path) -> tuple[Settings, set[str]] | None:
    """The sections of an invalid settings file that are valid on their own (the others at their defaults),
    and the names of those that are not; None when the file cannot be read. Lets `check` report channel
    and orchestrator problems in the same pass as the top-level ones."""
    from pydantic import TypeAdapter, ValidationError

    try:
        data = parse_yaml_file(path)
    except SettingsError:
        return None
    valid: dict[str, Any] = {}
    invalid: set[str] = set()
    for key, value in data.items():
        field = Settings.model_fields.get(key) if isinstance(key, str) else None
        if field is None or field.annotation is None or value is None:
            continue
        try:
            valid[key] = TypeAdapter(field.annotation).validate_python(value)
        except ValidationError:
            invalid.add(key)
    return Settings.model_construct(**valid), invalid


def require_valid_home(home: Home, settings: Settings, pm: pluggy.PluginManager, *, source: str) -> None:
    """Raises SettingsError naming every problem (file, key, reason); `switchyard run` exits 2 on it."""
    problems = home_problems(home, settings, pm, source=source)
    if problems:
        raise SettingsError.listing(problems)


def cmd_check(args: argparse.Namespace, run: Invocation) -> int:
    """Prints each problem of the home's configuration and exits 2, or a short summary and exits 0."""
    source = run.settings_path
    try:
        settings: Settings | None = run.settings
        problems = home_problems(run.home, run.settings, run.pm, source=str(source))
        problems += disabled_parts(run.home, run.settings, run.pm, source=str(source))
        warnings = home_warnings(run.home, run.settings, run.pm)
    except SettingsError as exc:
        settings, problems = None, exc.problems or [str(exc)]
        more, warnings = _partly_valid_findings(run, source)
        problems += [problem for problem in more if problem not in problems]
    summary = _summary(run.home, settings, source) if settings is not None else {}
    if args.json:
        print(json.dumps({"ok": not problems, "problems": problems, "warnings": warnings, **summary}, indent=2))
    else:
        _print_findings(problems, warnings, summary)
    return 2 if problems else 0


def _print_findings(problems: list[str], warnings: list[str], summary: dict[str, Any]) -> None:
    """One line per problem, then per warning, then the count, or the `ok: …` summary when no problem."""
    for line in [*problems, *(f"warning: {warning}" for warning in warnings)]:
        print(line)
    counted = _count(len(warnings), "warning") if warnings else ""
    if problems:
        print(f"{_count(len(problems), 'problem')} found" + (f", {counted}" if counted else ""))
        return
    orchestrators = ", ".join(f"{name} ({path})" for name, path in summary["orchestrators"].items())
    print(f"ok: {summary['settings']}: {len(summary['channels'])} channel profile(s), "
          f"{len(summary['providers'])} provider(s); orchestrators: {orchestrators}"
          + (f"; {counted}" if counted else ""))


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'s' if number > 1 else ''}"


def _partly_valid_findings(run: Invocation, source: Path) -> tuple[list[str], list[str]]:
    """The channel and orchestrator problems, and the warnings, of settings with top-level problems, from the
    sections that are valid (a check that depends on an invalid section is left out: it would only repeat it)."""
    found = salvage(source)
    if found is None:
        return [], []
    partial, invalid = found
    plugins = not invalid & {"providers", "orchestrators", "default_orchestrator"}
    problems = home_problems(run.home, partial, run.pm, source=str(source), channels="channels" not in invalid,
                             plugins=plugins)
    warnings = home_warnings(run.home, partial, run.pm) if plugins else []
    return problems + disabled_parts(run.home, partial, run.pm, source=str(source)), warnings


def _summary(home: Home, settings: Settings, source: Path) -> dict[str, Any]:
    return {"settings": str(source) if source.exists() else f"{source} (absent: the embedded default)",
            "channels": [profile.id for profile in settings.channels],
            "providers": sorted(settings.providers),
            "orchestrators": {name: str(home.resolve(ref.workspace)) for name, ref in settings.orchestrators.items()}}
