"""gateway/containment.py through run_process: what a run started does not outlive the run."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from gateway.containment import TOKEN_VAR
from gateway.testing import async_wait_until
from orchestrator.providers import run_process

CHILD = "import subprocess, sys; print(subprocess.Popen(['sleep', '1000'], stdout=subprocess.DEVNULL, " \
        "stderr=subprocess.DEVNULL).pid)"


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


async def test_a_child_left_in_the_group_by_a_provider_that_exited_zero_is_killed(tmp_path: Path) -> None:
    result = await run_process([sys.executable, "-c", CHILD], stdin=None, env=dict(os.environ), cwd=tmp_path,
                               timeout_sec=30, max_output=4096)
    assert result.exit_code == 0 and not result.timed_out
    child = int(result.stdout)
    await async_wait_until(lambda: _gone(child), timeout_s=5)


async def test_each_run_gets_its_own_token(tmp_path: Path) -> None:
    show = f"import os; print(os.environ[{TOKEN_VAR!r}])"
    runs = [run_process([sys.executable, "-c", show], stdin=None, env=dict(os.environ), cwd=tmp_path,
                        timeout_sec=30, max_output=4096) for _ in range(2)]
    first, second = await asyncio.gather(*runs)
    assert first.stdout.strip() and first.stdout != second.stdout
