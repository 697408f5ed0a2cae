"""P3 provider overhead: a do-nothing provider through ProviderRunner against a bare spawn of its argv."""

from __future__ import annotations

import asyncio
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from gateway.composition import open_backend
from gateway.home import Home
from gateway.settings import ProviderSettings, Settings
from orchestrator.agents.providers import ProviderRunner
from orchestrator.agents.request import TurnRequest
from orchestrator.storage.stores import open_sessions


async def _bare(argv: list[str]) -> float:
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                   stdout=asyncio.subprocess.DEVNULL,
                                                   stderr=asyncio.subprocess.DEVNULL)
    await process.wait()
    return (time.perf_counter() - started) * 1000


async def _runner(runner: ProviderRunner, home: Home, index: int) -> float:
    started = time.perf_counter()
    await runner.run("noop", TurnRequest("a prompt", home.orchestrators / "main", request={"requestId": str(index)},
                                         request_file=home.select_incoming / f"p3-{index}.json"))
    return (time.perf_counter() - started) * 1000


def _stats(values: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(values), 3), "mean_ms": round(statistics.fmean(values), 3),
            "min_ms": round(min(values), 3)}


async def p3(scratch: Path, *, calls: int, argv: list[str] | None = None) -> dict[str, Any]:
    """Alternates bare spawns and ProviderRunner calls of the same argv; the overhead is the difference."""
    argv = argv or [shutil.which("true") or "/bin/true"]
    home = Home(scratch / "p3")
    home.create()
    runner = ProviderRunner(home, {"noop": ProviderSettings(command=argv, timeout_sec=30)}, {},
                            sessions=open_sessions(open_backend(home, Settings())))
    for _ in range(5):  # warm-up: page cache, first fork
        await _bare(argv)
        await _runner(runner, home, -1)
    bare: list[float] = []
    through: list[float] = []
    for index in range(calls):
        bare.append(await _bare(argv))
        through.append(await _runner(runner, home, index))
    shutil.rmtree(home.root, ignore_errors=True)
    overhead = statistics.median(through) - statistics.median(bare)
    return {"argv": argv, "calls": calls, "bare": _stats(bare), "runner": _stats(through),
            "overhead_ms": round(overhead, 3)}
