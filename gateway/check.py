"""Validates a home without starting it: settings.yaml, its channel profiles, every plugin's own files.

`switchyard run` calls `require_valid_home` before any channel starts; `switchyard check` prints the
same problems, one `file: key: reason` line each.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

from gateway.home import Home
from gateway.plugin_manager import call_each, check_channel_options
from gateway.settings import Settings, SettingsError

if TYPE_CHECKING:
    from gateway.cli import Invocation


def home_problems(home: Home, settings: Settings, pm: pluggy.PluginManager, *, source: str) -> list[str]:
    """Every problem of the channel profiles and of the files plugins check (`switchyard_check`)."""
    problems: list[str] = []
    try:
        check_channel_options(settings, pm, source=source)
    except SettingsError as exc:
        problems += exc.problems
    providers = sorted({name for declared in call_each(pm, "switchyard_providers") for name in declared})
    for found in call_each(pm, "switchyard_check", home=home, settings=settings, providers=providers):
        problems += found
    return problems


def require_valid_home(home: Home, settings: Settings, pm: pluggy.PluginManager, *, source: str) -> None:
    """Raises SettingsError naming every problem (file, key, reason); `switchyard run` exits 2 on it."""
    problems = home_problems(home, settings, pm, source=source)
    if len(problems) == 1:
        raise SettingsError(problems[0], problems)
    if problems:
        raise SettingsError(f"{len(problems)} problems:\n  " + "\n  ".join(problems), problems)


def cmd_check(args: argparse.Namespace, run: Invocation) -> int:
    """Prints each problem of the home's configuration and exits 2, or a short summary and exits 0."""
    source = run.settings_path
    try:
        settings: Settings | None = run.settings
    except SettingsError as exc:
        settings, problems = None, exc.problems or [str(exc)]
    if settings is not None:
        problems = home_problems(run.home, settings, run.pm, source=str(source))
    summary = _summary(run.home, settings, source) if settings is not None else {}
    if args.json:
        print(json.dumps({"ok": not problems, "problems": problems, **summary}, indent=2))
    elif problems:
        for problem in problems:
            print(problem)
        print(f"{len(problems)} problem{'s' if len(problems) > 1 else ''} found")
    else:
        orchestrators = ", ".join(f"{name} ({path})" for name, path in summary["orchestrators"].items())
        print(f"ok: {summary['settings']}: {len(summary['channels'])} channel profile(s), "
              f"{len(summary['providers'])} provider(s); orchestrators: {orchestrators}")
    return 2 if problems else 0


def _summary(home: Home, settings: Settings, source: Path) -> dict[str, Any]:
    return {"settings": str(source) if source.exists() else f"{source} (absent: the embedded default)",
            "channels": [profile.id for profile in settings.channels],
            "providers": sorted(settings.providers),
            "orchestrators": {name: str(home.resolve(ref.workspace)) for name, ref in settings.orchestrators.items()}}
