"""P8 with and without the sandbox (issue 34): what `sandbox: bwrap` adds to a turn.

`python -m bench.sandbox [--turns 5] [--only claude,codex,gemini]` measures, alternating confined and unconfined
runs of the same thing so machine load hits both alike:
- a do-nothing command (`/bin/true`) through run_process: bare, in bwrap with `network: none`, and with
  `model-only` (the relay: a unix socket outside, system python3 inside, before the program starts);
- each real CLI's one-shot turn (the preset, `network: model-only` through the relay) against the scripted model
  on 127.0.0.1 (tests/fakes/acp/scripted_model.py), which answers at once;
- each real live adapter's warm turn (`transport: acp`) confined and not (the adapter starts once, in the sandbox).
The home is made under /var/tmp: codex's own sandbox, nested in ours, refuses a CODEX_HOME under /tmp.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.acplive import KEY_VARIABLE, _missing, _provider
from gateway.composition import open_backend
from gateway.home import Home
from gateway.settings import Settings
from orchestrator.agents.providers import ProviderRunner
from orchestrator.agents.request import TurnRequest
from orchestrator.agents.sandbox import Sandbox
from orchestrator.agents.spawn import run_process
from orchestrator.storage.stores import open_sessions

CLIS = ("claude", "codex", "gemini")


async def _timed(run: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await run()
    return (time.perf_counter() - started) * 1000


def _p50(values: list[float]) -> float:
    return round(statistics.median(values), 1)


async def command_cost(folder: Path, turns: int) -> dict[str, float]:
    """p50 ms of `/bin/true` bare, in bwrap (network none) and in bwrap with the model-only relay."""
    workspace = folder / "ws"
    workspace.mkdir(parents=True, exist_ok=True)
    kinds: dict[str, Sandbox | None] = {
        "bare": None, "bwrap_none": Sandbox(workspace, network="none", hidden=(folder,)),
        "bwrap_model_only": Sandbox(workspace, network="model-only", hidden=(folder,), targets=(("127.0.0.1", 9),))}
    seen: dict[str, list[float]] = {kind: [] for kind in kinds}
    for _ in range(turns + 2):
        for kind, sandbox in kinds.items():
            seen[kind].append(await _timed(lambda s=sandbox: run_process(  # type: ignore[misc]
                ["/bin/true"], stdin=None, env={"PATH": "/usr/bin:/bin"}, cwd=workspace, timeout_sec=30,
                max_output=1024, sandbox=s)))
    return {f"{kind}_p50_ms": _p50(values[2:]) for kind, values in seen.items()}


async def cli_cost(folder: Path, like: str, transport: str, turns: int) -> dict[str, Any]:
    """p50 ms of a turn of one real CLI (one-shot) or adapter (warm, acp), unconfined and confined."""
    from tests.fakes.acp.scripted_model import ScriptedModel

    home = Home(folder / f"{like}-{transport}")
    home.create()
    os.environ["HOME"] = str(home.root / "user")
    (home.root / "user").mkdir(exist_ok=True)
    workspace = home.root / "workspaces" / "main" / "conversation-bench"
    workspace.mkdir(parents=True)
    sandbox = Sandbox(workspace, network="model-only", hidden=(home.root,), state=home.root / "state")
    async with ScriptedModel() as model:
        runner = ProviderRunner(home, {"agent": _provider(like, transport, model.url)}, {},
                                sessions=open_sessions(open_backend(home, Settings())))
        seen: dict[str, list[float]] = {"unconfined": [], "sandboxed": []}
        try:
            for index in range(turns + 1):  # the first of each: starting (a live adapter) is not a warm turn
                for kind, confined in (("unconfined", None), ("sandboxed", sandbox)):
                    turn = TurnRequest(f"say ok {index}", workspace, conversation=f"conv:bench/{kind}/1",
                                       sandbox=confined)
                    seen[kind].append(await _timed(lambda t=turn: runner.run("agent", t)))  # type: ignore[misc]
        finally:
            await runner.close()
    unconfined, sandboxed = _p50(seen["unconfined"][1:]), _p50(seen["sandboxed"][1:])
    return {"unconfined_p50_ms": unconfined, "sandboxed_p50_ms": sandboxed,
            "added_p50_ms": round(sandboxed - unconfined, 1),
            "first_turn_ms": {"unconfined": round(seen["unconfined"][0]), "sandboxed": round(seen["sandboxed"][0])}}


async def measure(turns: int, only: list[str]) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="switchyard-bench-sandbox-", dir="/var/tmp"))
    home_before = os.environ.get("HOME")
    os.environ[KEY_VARIABLE] = "sk-bench-sandbox"
    try:
        results: dict[str, Any] = {"command": await command_cost(folder, turns * 4)}
        for like in only:
            missing = _missing(like)
            if missing is not None or shutil.which("bwrap") is None:
                results[like] = {"skipped": missing or "bwrap is not installed"}
                continue
            results[like] = {"oneshot": await cli_cost(folder, like, "oneshot", turns),
                             "acp_warm": await cli_cost(folder, like, "acp", turns)}
        return results
    finally:
        if home_before is not None:
            os.environ["HOME"] = home_before
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sandbox", description=__doc__)
    parser.add_argument("--turns", type=int, default=5, help="measured turns of each kind (default 5)")
    parser.add_argument("--only", default=",".join(CLIS), help="the CLIs to measure (default: all three)")
    args = parser.parse_args(argv)
    print(json.dumps(asyncio.run(measure(args.turns, [c for c in args.only.split(",") if c])), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
