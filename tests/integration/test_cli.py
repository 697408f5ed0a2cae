"""The `switchyard` parser: every subcommand and option explained, the public API loaded lazily, and
`--help` and `status` kept off the heavy imports (the process-level behaviour is in tests/e2e/test_cli.py)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import gateway
from gateway.cli import build_parser
from gateway.plugin_manager import build_plugin_manager
from orchestrator.runs.listing import parse_since, parse_states


def _parsers(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helped = {choice.dest for choice in action._choices_actions if choice.help}
            for name, sub in action.choices.items():
                assert name in helped, f"`{path} {name}` has no help line"
                yield from _parsers(sub, f"{path} {name}")


def test_every_subcommand_and_option_has_a_help_line() -> None:
    parser = build_parser(build_plugin_manager())
    walked = dict(_parsers(parser, "switchyard"))
    assert {"switchyard runs", "switchyard runs show", "switchyard pair approve", "switchyard doctor"} <= set(walked)
    missing = [f"{path}: {action.option_strings or action.dest}" for path, sub in walked.items()
               for action in sub._actions
               if not isinstance(action, argparse._SubParsersAction) and not (action.help or "").strip()]
    assert not missing, f"options without a help line: {missing}"


def test_every_public_name_of_the_gateway_package_resolves() -> None:
    for name in gateway.__all__:
        assert getattr(gateway, name) is not None, name
    with pytest.raises(AttributeError):
        gateway.NoSuchThing  # noqa: B018


def test_help_does_not_import_pydantic_or_the_runtime() -> None:
    """`switchyard --help` must stay quick: pydantic, asyncio and the orchestrator load only when a
    command needs them (bench/ measures the time; this keeps the imports from creeping back)."""
    code = ("import sys\nfrom gateway.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('pydantic', 'asyncio', 'orchestrator.chat.handler', 'gateway.app', 'rich')"
            " if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "runs" in result.stdout  # the orchestrator's subcommands are listed all the same
    assert result.stdout.strip().splitlines()[-1] == "[]"


STATUS_SETTINGS = """\
channels:
  - {id: console, type: console}
  - {id: beat, type: heartbeat, interval_sec: 60, notify: {profile: pager}}
  - {id: inbox, type: inbox}
  - {id: tg, type: telegram, token_env: TG_TOKEN}
  - {id: sl, type: slack, bot_token_env: SL_BOT, app_token_env: SL_APP}
"""


def test_status_does_not_import_asyncio_the_queue_or_any_channel(tmp_path: Path) -> None:
    """`switchyard status` must stay quick: it reads files and validates the configuration, so it loads
    neither asyncio nor the queue, the selector or any channel implementation (the hook modules of the
    channel plugins are light; bench/ measures the time)."""
    from gateway.cli import main

    home = tmp_path / "home"
    assert main(["--home", str(home), "init"]) == 0
    (home / "settings.yaml").write_text(STATUS_SETTINGS)
    heavy = ("asyncio", "aiofiles", "gateway.spool.queue", "gateway.app", "orchestrator.chat.selector",
             "orchestrator.chat.handler",
             "plugins.console.channel", "plugins.heartbeat.channel", "plugins.inbox.channel",
             "plugins.telegram.channel", "plugins.slack.channel", "telegram", "slack_bolt")
    code = ("import sys\nfrom gateway.cli import main\n"
            f"code = main(['--home', {str(home)!r}, 'status'])\n"
            f"print('status exit', code, sorted(m for m in {heavy!r} if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "notify profile 'pager' is not configured" in result.stdout  # the heartbeat section is all there
    assert "retention: sent 7 d" in result.stdout and "runs: none active" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "status exit 3 []"


def test_status_on_an_unchanged_home_does_not_import_pydantic(tmp_path: Path) -> None:
    """The second `switchyard status` on a home whose configuration did not change answers from the status
    cache: the same output, without importing pydantic, the settings or orchestrator models, or the run store."""
    from gateway.cli import main

    home = tmp_path / "home"
    assert main(["--home", str(home), "init"]) == 0
    (home / "settings.yaml").write_text(STATUS_SETTINGS)
    heavy = ("pydantic", "gateway.settings", "gateway.api", "orchestrator.config.models",
             "orchestrator.storage.files.runs")
    code = ("import sys\nfrom gateway.cli import main\n"
            f"code = main(['--home', {str(home)!r}, 'status'])\n"
            f"print('status exit', code, sorted(m for m in {heavy!r} if m in sys.modules))")
    cold, warm = (subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
                  for _ in range(2))
    assert cold.returncode == 0 and warm.returncode == 0, cold.stderr + warm.stderr
    assert "'pydantic'" in cold.stdout.splitlines()[-1]  # the first one validated
    assert warm.stdout.strip().splitlines()[-1] == "status exit 3 []"
    assert warm.stdout.splitlines()[:-1] == cold.stdout.splitlines()[:-1]
    assert "notify profile 'pager' is not configured" in warm.stdout


def test_since_takes_a_duration_or_an_iso_date() -> None:
    now = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
    assert parse_since("2h", now) == now - timedelta(hours=2)
    assert parse_since("3d", now) == now - timedelta(days=3)
    assert parse_since("90m", now) == now - timedelta(minutes=90)
    assert parse_since("2026-11-01T10:00:00Z") == datetime(2026, 11, 1, 10, tzinfo=UTC)
    assert parse_since("2026-11-01").tzinfo is not None  # a bare date is local midnight
    with pytest.raises(ValueError, match="neither a duration"):
        parse_since("yesterday")


def test_states_are_repeated_or_comma_separated_and_checked() -> None:
    assert parse_states(["done,failed", "running"]) == {"done", "failed", "running"}
    with pytest.raises(ValueError, match="unknown state finished"):
        parse_states(["done,finished"])
