"""orchestrator/agents/acp/agent.py: `AgentProcess.kill()`, what `/stop` does to a live agent whose turn ignores
the cancel (orchestrator/agents/acp/pool.py), SIGKILLs the adapter's whole process group, not only its leader.

The adapter here is `sh -c 'sleep 60 & wait'` started as AgentProcess.start starts one (its own session, piped
stdio), without the protocol's handshake that kill() does not need: the child holds the adapter's pipes, as the
native binary codex's node launcher starts does, and it must be gone with the adapter.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from gateway.testing import async_wait_until
from orchestrator.agents.acp.agent import AgentProcess

GONE_WITHIN_S = 1.0  # SIGKILL cannot be ignored: the group is gone at once


def _group(pgid: int) -> list[int]:
    """The processes of a process group that have not exited (zombies waiting to be reaped count as exited)."""
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


async def test_kill_ends_the_adapter_and_the_child_holding_its_pipes(tmp_path: Path) -> None:
    agent = AgentProcess(["sh", "-c", "sleep 60 & wait"], dict(os.environ), tmp_path)
    agent.process = await asyncio.create_subprocess_exec(
        *agent.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=agent.env, cwd=agent.cwd, start_new_session=True)
    leader = agent.process.pid
    try:
        await async_wait_until(lambda: len(_group(leader)) == 2, timeout_s=10)  # the shell and its child
        agent.kill()
        try:
            await async_wait_until(lambda: not _group(leader), timeout_s=GONE_WITHIN_S)
        except AssertionError:
            raise AssertionError(f"left running in the adapter's group: {_group(leader)}") from None
    finally:
        for pid in _group(leader):  # a failing test leaves nothing running either
            os.kill(pid, signal.SIGKILL)
        await agent.stop()
