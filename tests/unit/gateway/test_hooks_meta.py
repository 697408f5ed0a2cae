"""The hook contract: every hook documented with its signature and calling rule, and tested by name."""

from __future__ import annotations

import argparse
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway import hookimpl, hookspecs
from gateway.api import FunctionSpec, HandlerContext
from gateway.app import Gateway
from gateway.cli import build_parser
from gateway.home import Home
from gateway.plugin_manager import build_plugin_manager
from gateway.settings import QueueSettings, Settings

REPO = Path(__file__).resolve().parents[3]
FIRST = "Stops at the first non-None result."
ALL = "All implementations are called"


def _hooks() -> dict[str, Callable[..., Any]]:
    return {name: f for name, f in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("switchyard_")}


def _signature(spec: Callable[..., Any]) -> str:
    """`name(arg: Type, ...) -> Result` as written in gateway/hookspecs.py."""
    signature = inspect.signature(spec)
    params = ", ".join(f"{p.name}: {p.annotation}" for p in signature.parameters.values())
    return f"{spec.__name__}({params}) -> {signature.return_annotation}"


@pytest.mark.parametrize("name", sorted(_hooks()))
def test_plugin_hooks_are_documented(name: str) -> None:
    docs = (REPO / "docs" / "plugins.md").read_text()
    assert _signature(_hooks()[name]) in docs, f"docs/plugins.md lacks `{_signature(_hooks()[name])}`"


@pytest.mark.parametrize("name", sorted(_hooks()))
def test_the_documented_calling_rule_matches_firstresult(name: str) -> None:
    spec = _hooks()[name]
    firstresult = bool(spec.switchyard_spec["firstresult"])
    doc = " ".join((inspect.getdoc(spec) or "").split())
    assert (FIRST in doc, ALL in doc) == (firstresult, not firstresult), doc
    rule = FIRST if firstresult else ALL
    docs = " ".join((REPO / "docs" / "plugins.md").read_text().split())
    assert f"`{_signature(spec)}` {rule}" in docs, f"docs/plugins.md gives {name} another calling rule"


def test_plugin_hooks_have_tests() -> None:
    source = "\n".join(path.read_text() for path in (REPO / "tests").rglob("test_*.py"))
    named = {name for name in _hooks() if re.search(rf"def test_{name}\w*\(", source)}
    assert set(_hooks()) - named == set(), "every hook needs a test named test_<hook>_…"


class Shout:
    """A plugin declaring one function and one subcommand."""

    @hookimpl
    def switchyard_functions(self) -> list[FunctionSpec]:
        return [FunctionSpec("shout", "Upper-cases a word", {"type": "object"}, lambda arguments: "LOUD")]

    @hookimpl
    def switchyard_cli(self, commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
        hello = commands.add_parser("hello", help="says hello")
        hello.add_argument("--loud", action="store_true")
        hello.set_defaults(run=lambda args, home, settings: 7 if args.loud else 0)


class Capture:
    """Takes the handler hook first and keeps the context the gateway built."""

    def __init__(self) -> None:
        self.contexts: list[HandlerContext] = []

    @hookimpl(tryfirst=True)
    def switchyard_handler(self, context: HandlerContext) -> None:
        self.contexts.append(context)


def test_switchyard_functions_reach_the_handler_context(home: Home) -> None:
    pm = build_plugin_manager()
    capture = Capture()
    pm.register(Shout())
    pm.register(capture)
    gateway = Gateway(home, Settings(queue=QueueSettings(fsync=False)), pm)
    gateway._build_handler()
    [context] = capture.contexts
    [shout] = [f for f in context.functions if f.name == "shout"]
    assert shout.description == "Upper-cases a word"


def test_switchyard_cli_adds_a_subcommand_that_runs(home: Home) -> None:
    pm = build_plugin_manager()
    pm.register(Shout())
    args = build_parser(pm).parse_args(["hello", "--loud"])
    assert args.run(args, home, Settings()) == 7
    with pytest.raises(SystemExit):
        build_parser(build_plugin_manager()).parse_args(["hello"])
