"""A sandboxed process that is stopped leaves nothing behind: killing bwrap ends its whole pid namespace
(`--die-with-parent`), and the run's token (gateway.runtime.containment) finds any child that left the group."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from gateway.testing import async_wait_until
from orchestrator.agents.sandbox import Sandbox
from orchestrator.agents.spawn import run_process

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")


def _sleepers(seconds: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")[:2] if entry.name.isdigit() else []
        except OSError:
            continue
        if argv == [b"sleep", seconds.encode()]:
            found.append(int(entry.name))
    return found


@pytest.mark.parametrize("network", ["none", "model-only"])
async def test_a_stopped_sandboxed_process_leaves_no_descendant(tmp_path: Path, network: str) -> None:
    seconds = "317" if network == "none" else "318"
    sandbox = Sandbox(tmp_path, network=network, targets=(("127.0.0.1", 9),) if network == "model-only" else ())
    stop = asyncio.Event()
    running = asyncio.ensure_future(run_process(
        ["/bin/sh", "-c", f"setsid sleep {seconds} & sleep {seconds}"], stdin=None, env={"PATH": "/usr/bin:/bin"},
        cwd=tmp_path, timeout_sec=30, max_output=1024, sandbox=sandbox, stop=stop))
    await async_wait_until(lambda: len(_sleepers(seconds)) == 2, 10)
    stop.set()  # as /stop does
    result = await running
    assert not result.timed_out
    await async_wait_until(lambda: _sleepers(seconds) == [], 10)
