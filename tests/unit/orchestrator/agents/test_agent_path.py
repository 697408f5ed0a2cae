"""The agent path passes one value down (issue 33): from `ProviderRunner.run` to the built-in, the argv process, the
one-shot preset or the live ACP session, no function takes more than six parameters, and the choice between them
is made in one place (`ProviderRunner`), not inside the one-shot CLI runner. Read from the source with `ast`."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
AGENT_PATH = ("orchestrator/agents/providers.py", "orchestrator/agents/request.py",
              "orchestrator/agents/clis/runner.py", "orchestrator/agents/acp/route.py",
              "orchestrator/agents/acp/pool.py", "orchestrator/agents/acp/session.py")
ON_THE_SIDE = {("orchestrator/agents/providers.py", "run_command"),  # command steps' path: no agent turn
               ("orchestrator/agents/providers.py", "__init__")}  # built once, its parts keyword-only: no turn's call
MAX_PARAMETERS = 6


def _functions(path: str) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse((ROOT / path).read_text(), path)
    return [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = function.args
    names = [arg.arg for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
    return len(names) - (names[:1] in (["self"], ["cls"])) + (args.vararg is not None) + (args.kwarg is not None)


def test_no_function_on_the_agent_path_takes_more_than_six_parameters() -> None:
    wide = [f"{path}:{function.lineno} {function.name} ({_parameters(function)})"
            for path in AGENT_PATH for function in _functions(path)
            if _parameters(function) > MAX_PARAMETERS and (path, function.name) not in ON_THE_SIDE]
    assert wide == []


def test_only_the_provider_runner_knows_the_live_route() -> None:
    """The one-shot CLI runner neither imports nor is handed the ACP route."""
    source = (ROOT / "orchestrator/agents/clis/runner.py").read_text()
    assert "acp" not in source.lower()
