"""gateway/runtime/containment.py through run_process: what a run started does not outlive the run."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from gateway.runtime.containment import TOKEN_VAR
from gateway.testing import async_wait_until
from orchestrator.agents.providers import run_process

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


WATCHED = """
import asyncio, os
from gateway.runtime.containment import supervise_children

async def main() -> None:
    codes = [await (await asyncio.create_subprocess_exec("/bin/sh", "-c", f"exit {n}")).wait() for n in (3, 4)]
    def no_pidfd(pid: int, flags: int = 0) -> int:
        raise OSError(24, "Too many open files")
    os.pidfd_open = no_pidfd  # then a thread waits for it, as Python 3.11's default does
    codes.append(await (await asyncio.create_subprocess_exec("/bin/sh", "-c", "exit 5")).wait())
    print(codes)

supervise_children()
asyncio.run(main())
"""


def test_a_gateway_s_children_report_their_exit_codes_through_a_pidfd_or_else_a_thread() -> None:
    done = subprocess.run([sys.executable, "-c", WATCHED], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[4])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[3, 4, 5]"
